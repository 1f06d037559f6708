//! Recordings: what the live source saw, written so it can be replayed later, elsewhere.
//!
//! A recording is self-describing and checked:
//!
//! ```text
//! magic "PPSCOPE\x01" | u32 LE format version | frame | frame | ...
//! frame = u32 LE payload length | u32 LE CRC-32 of the payload | payload (JSON)
//! ```
//!
//! The first frame is the [`Header`] (kernel, hooks, coverage, drop-reason names); every
//! other frame is one [`Frame`]: the cumulative counters of every pool and site at one
//! instant. Readers refuse a file that is not a recording, a newer format, a checksum
//! mismatch or a cut-off frame with one sentence each, and never panic on any input.
//!
//! No kernel address is written ([`Aliases`]): a recording is made to be sent to someone.
use std::{
    collections::HashMap,
    fs::File,
    io::{BufReader, BufWriter, Read, Write},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use ppscope_common::{
    DeviceIdentity, DropKey, NapiCounters, PoolCounters, PoolIdentity, PoolState, PoolTeardown,
    SiteStats,
};
use serde::{Deserialize, Serialize};

use crate::{
    host::system,
    model::{ByAddr, Coverage, PoolIds, ProgramRuntime, RawPool, RawSample, SourceFacts},
    snapshot::{Detail, HookStatus},
};

pub const MAGIC: &[u8; 8] = b"PPSCOPE\x01";
pub const FORMAT_VERSION: u32 = 1;
/// No frame is larger than this; a bigger length field means a corrupt file.
const MAX_FRAME: u32 = 256 << 20;

/// What the recording was made on and with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub ppscope_version: String,
    pub kernel: String,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    pub interval_ns: u64,
    pub coverage: Coverage,
    pub hooks: Vec<HookStatus>,
    pub drop_reasons: HashMap<u32, String>,
    /// Bytes per page on the recorded host. Absent from files of ppscope before it carried it:
    /// those are read with this host's page size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u64>,
    /// `--detail` of the recording (files from before the choice are `full`).
    #[serde(default)]
    pub detail: Detail,
}

impl Header {
    /// The header of a recording of `facts`, started now.
    pub fn new(facts: &SourceFacts, interval: Duration) -> Self {
        Self {
            ppscope_version: env!("CARGO_PKG_VERSION").into(),
            kernel: facts.kernel.clone(),
            started_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            interval_ns: interval.as_nanos() as u64,
            coverage: facts.coverage,
            hooks: facts.hooks.clone(),
            drop_reasons: facts.drop_reasons.clone(),
            page_size: Some(facts.page_size),
            detail: facts.detail,
        }
    }

    /// What the recorded source knew of its kernel, for the pipeline.
    pub fn facts(&self) -> SourceFacts {
        SourceFacts {
            kernel: self.kernel.clone(),
            page_size: self.page_size.unwrap_or_else(system::page_size),
            coverage: self.coverage,
            hooks: self.hooks.clone(),
            drop_reasons: self.drop_reasons.clone(),
            detail: self.detail,
            // How the recorded programs read memory is not a figure a replay shows.
            cast_reads: false,
            // A recording holds none (`Aliases`).
            show_addresses: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedPool {
    pub pool: u64,
    pub counters: PoolCounters,
    pub identity: Option<PoolIdentity>,
    pub gve_queue: Option<u32>,
    pub state: Option<PoolState>,
}

/// The kernel addresses a recording would hold (of pools, devices, NAPI instances) as numbers
/// of its own, from 1 in the order first written, the same in every frame: the joins a replay
/// makes (a pool's device, a NAPI instance's, a drop's) hold, and the file hands nobody the
/// kernel's layout. 0, an unknown device, stays 0. Recordings from before this hold the
/// addresses themselves, and replay the same.
#[derive(Debug, Default)]
pub struct Aliases {
    of: ByAddr<u64, u64>,
}

impl Aliases {
    pub fn of(&mut self, addr: u64) -> u64 {
        if addr == 0 {
            return 0;
        }
        let next = self.of.len() as u64 + 1;
        *self.of.entry(addr).or_insert(next)
    }
}

/// One sample: cumulative counters at `t_ns` after the recording started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frame {
    pub t_ns: u64,
    pub pools: Vec<RecordedPool>,
    pub sites: Vec<SiteStats>,
    pub gve_poll: Vec<(u32, SiteStats)>,
    pub napi: Vec<(u64, NapiCounters)>,
    pub napi_devices: Vec<(u64, u64)>,
    pub devices: Vec<(u64, DeviceIdentity)>,
    pub drops: Vec<(DropKey, u64)>,
    pub runtime: Option<(u64, u64)>,
    /// Pools being destroyed; absent from recordings made before the `pool_release` hook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teardowns: Vec<(u64, PoolTeardown)>,
}

impl Frame {
    /// The sample as written, its addresses through `aliases` (taken in address order, so
    /// the same samples are written the same).
    pub fn from_sample(s: &RawSample, start: Instant, aliases: &mut Aliases) -> Self {
        fn sorted<K: Ord + Copy, V: Copy>(m: &ByAddr<K, V>) -> Vec<(K, V)> {
            let mut v: Vec<(K, V)> = m.iter().map(|(k, v)| (*k, *v)).collect();
            v.sort_unstable_by_key(|(k, _)| *k);
            v
        }
        let mut pools: Vec<RecordedPool> = s
            .pools
            .iter()
            .map(|(addr, p)| RecordedPool {
                pool: *addr,
                counters: p.full_counters(),
                identity: p.identity,
                gve_queue: p.gve_queue,
                state: p.state,
            })
            .collect();
        pools.sort_by_key(|p| p.pool);
        for p in &mut pools {
            p.pool = aliases.of(p.pool);
            if let Some(id) = &mut p.identity {
                id.netdev = aliases.of(id.netdev);
            }
        }
        let mut devices = sorted(&s.devices);
        for (netdev, d) in &mut devices {
            *netdev = aliases.of(*netdev);
            d.netdev = aliases.of(d.netdev);
        }
        Self {
            t_ns: s.at.saturating_duration_since(start).as_nanos() as u64,
            pools,
            sites: s.sites.to_vec(),
            gve_poll: sorted(&s.gve_poll),
            napi: sorted(&s.napi)
                .into_iter()
                .map(|(napi, c)| (aliases.of(napi), c))
                .collect(),
            napi_devices: sorted(&s.napi_devices)
                .into_iter()
                .map(|(napi, netdev)| (aliases.of(napi), aliases.of(netdev)))
                .collect(),
            devices,
            drops: {
                let mut drops: Vec<(DropKey, u64)> =
                    s.drops.iter().map(|(k, n)| (*k, *n)).collect();
                drops.sort_unstable_by_key(|(k, _)| (k.netdev, k.reason));
                for (k, _) in &mut drops {
                    k.netdev = aliases.of(k.netdev);
                }
                drops
            },
            runtime: s.runtime.map(|r| (r.run_ns, r.runs)),
            teardowns: sorted(&s.teardowns)
                .into_iter()
                .map(|(pool, t)| (aliases.of(pool), t))
                .collect(),
        }
    }

    /// The sample again, placed at `base + t_ns` on this process's clock.
    pub fn to_sample(&self, base: Instant) -> RawSample {
        let mut s = RawSample::empty(base + Duration::from_nanos(self.t_ns));
        for p in &self.pools {
            s.pools.insert(
                p.pool,
                RawPool {
                    identity: p.identity,
                    gve_queue: p.gve_queue,
                    state: p.state,
                    ..RawPool::from_counters(p.counters)
                },
            );
        }
        for (slot, v) in s.sites.iter_mut().zip(&self.sites) {
            *slot = *v;
        }
        s.gve_poll = self.gve_poll.iter().copied().collect();
        s.napi = self.napi.iter().copied().collect();
        s.napi_devices = self.napi_devices.iter().copied().collect();
        s.devices = self.devices.iter().copied().collect();
        s.drops = self.drops.iter().copied().collect();
        s.teardowns = self.teardowns.iter().copied().collect();
        s.runtime = self
            .runtime
            .map(|(run_ns, runs)| ProgramRuntime { run_ns, runs });
        s
    }
}

/// Writes a recording frame by frame, flushing each so a crash loses at most one frame.
pub struct Writer {
    out: BufWriter<File>,
    aliases: Aliases,
}

fn write_frame(out: &mut impl Write, payload: &[u8]) -> Result<()> {
    let len = u32::try_from(payload.len()).context("frame too large")?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&crc32fast::hash(payload).to_le_bytes())?;
    out.write_all(payload)?;
    Ok(())
}

impl Writer {
    pub fn create(path: &Path, header: &Header) -> Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = BufWriter::new(file);
        out.write_all(MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        write_frame(&mut out, &serde_json::to_vec(header)?)?;
        out.flush()?;
        Ok(Self {
            out,
            aliases: Aliases::default(),
        })
    }

    /// Writes the sample `s`, taken `s.at - start` after the recording started.
    pub fn append(&mut self, s: &RawSample, start: Instant) -> Result<()> {
        let frame = Frame::from_sample(s, start, &mut self.aliases);
        write_frame(&mut self.out, &serde_json::to_vec(&frame)?)?;
        self.out.flush().context("cannot write the recording")?;
        Ok(())
    }
}

/// A recording read back.
#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub frames: Vec<Frame>,
}

impl Recording {
    pub fn read(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut bytes = Vec::new();
        BufReader::new(file)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&bytes).with_context(|| format!("{} is not a usable recording", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            bail!("not a ppscope recording (no PPSCOPE magic at the start)");
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version > FORMAT_VERSION {
            bail!(
                "written by a newer ppscope (format v{version}); this one reads up to v{FORMAT_VERSION}"
            );
        }
        if version == 0 {
            bail!("corrupt: format version 0");
        }
        let mut rest = &bytes[12..];
        let mut payloads = Vec::new();
        let mut index = 0usize;
        while !rest.is_empty() {
            if rest.len() < 8 {
                bail!("truncated: frame {index} is cut off in its length/checksum");
            }
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
            let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
            if len > MAX_FRAME {
                bail!("corrupt: frame {index} claims {len} bytes");
            }
            let body = rest.get(8..8 + len as usize).with_context(|| {
                format!(
                    "truncated: frame {index} is cut off ({len} bytes announced, {} left)",
                    rest.len() - 8
                )
            })?;
            if crc32fast::hash(body) != crc {
                bail!("corrupt: frame {index} fails its checksum");
            }
            payloads.push(body);
            rest = &rest[8 + len as usize..];
            index += 1;
        }
        let (first, frames) = payloads
            .split_first()
            .context("truncated: no header frame")?;
        let header: Header =
            serde_json::from_slice(first).context("corrupt: the header frame does not parse")?;
        let frames = frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                serde_json::from_slice(f)
                    .with_context(|| format!("corrupt: frame {} does not parse", i + 1))
            })
            .collect::<Result<Vec<Frame>>>()?;
        if frames.len() < 2 {
            bail!(
                "the recording holds {} sample(s); a window needs at least 2",
                frames.len()
            );
        }
        Ok(Self { header, frames })
    }

    /// The recording's samples on this process's clock, first to last, their pools named as
    /// a live source names them.
    pub fn samples(&self) -> Vec<RawSample> {
        let base = Instant::now();
        let mut ids = PoolIds::default();
        self.frames
            .iter()
            .map(|f| {
                let mut s = f.to_sample(base);
                ids.name(&mut s.pools);
                s
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            ppscope_version: "test".into(),
            kernel: "7.2.13".into(),
            started_unix_ms: 1,
            interval_ns: 10_000_000,
            coverage: Coverage::default(),
            hooks: Vec::new(),
            drop_reasons: HashMap::from([(2, "NOT_SPECIFIED".into())]),
            page_size: Some(4096),
            detail: Detail::Light,
        }
    }

    const POOL: u64 = 0xffff_8880_1234_0000;
    const NETDEV: u64 = 0xffff_8880_0567_8000;

    fn sample(t: Instant, allocs: u64) -> RawSample {
        let mut s = RawSample::empty(t);
        let mut id = PoolIdentity::EMPTY;
        id.ifname[..5].copy_from_slice(b"vnet1");
        id.known = PoolIdentity::KNOWN_IFNAME;
        id.netdev = NETDEV;
        s.pools.insert(
            POOL,
            RawPool {
                counters: crate::model::PoolCounts {
                    alloc_calls: allocs,
                    ..Default::default()
                },
                identity: Some(id),
                ..Default::default()
            },
        );
        s.drops.insert(
            DropKey {
                netdev: NETDEV,
                reason: 2,
                _pad: 0,
            },
            allocs / 10,
        );
        s
    }

    fn recording_bytes(dir: &Path) -> Vec<u8> {
        let path = dir.join("r.ppscope");
        let t0 = Instant::now();
        let mut w = Writer::create(&path, &header()).unwrap();
        for i in 0..3u64 {
            w.append(&sample(t0 + Duration::from_millis(10 * i), 100 * i), t0)
                .unwrap();
        }
        drop(w);
        std::fs::read(&path).unwrap()
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ppscope-rec-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip_keeps_every_sample() {
        let bytes = recording_bytes(&tempdir());
        let rec = Recording::parse(&bytes).unwrap();
        assert_eq!(rec.header, header());
        assert_eq!(rec.frames.len(), 3);
        let samples = rec.samples();
        // The pool under its alias, named as a live source names it.
        let pool = &samples[2].pools[&1];
        assert_eq!((pool.counters.alloc_calls, pool.id), (200, 1));
        assert_eq!(
            samples[2].at.duration_since(samples[0].at),
            Duration::from_millis(20)
        );
        assert_eq!(samples[1].drops.values().sum::<u64>(), 10);
    }

    /// A recording is made to be sent: no kernel address is in it, and what the addresses
    /// joined (a pool and the drops of its device) still joins.
    #[test]
    fn no_kernel_address_is_written() {
        let bytes = recording_bytes(&tempdir());
        let text = String::from_utf8_lossy(&bytes);
        for addr in [POOL, NETDEV] {
            assert!(!text.contains(&addr.to_string()), "{text}");
        }
        let last = Recording::parse(&bytes).unwrap().samples().pop().unwrap();
        let netdev = last.pools[&1].identity.unwrap().netdev;
        assert_eq!(netdev, 2);
        assert_eq!(last.drops.keys().next().unwrap().netdev, netdev);
    }

    #[test]
    fn bad_input_gets_one_sentence_never_a_panic() {
        let good = recording_bytes(&tempdir());
        let err = |b: &[u8]| format!("{:#}", Recording::parse(b).unwrap_err());
        assert!(err(b"hello world, not a recording").contains("not a ppscope recording"));
        let mut future = good.clone();
        future[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(
            err(&future).contains("newer ppscope (format v2)"),
            "{}",
            err(&future)
        );
        let mut flipped = good.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        assert!(err(&flipped).contains("checksum"), "{}", err(&flipped));
        assert!(err(&good[..good.len() - 5]).contains("truncated"));
        // Every prefix and many corruptions: an error or a recording, never a panic.
        for cut in 0..good.len() {
            let _ = Recording::parse(&good[..cut]);
        }
        let mut state = 0x9e37_79b9_u32;
        for _ in 0..2000 {
            let mut b = good.clone();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let i = state as usize % b.len();
                b[i] = (state >> 8) as u8;
            }
            let _ = Recording::parse(&b);
        }
    }

    #[test]
    fn a_lone_sample_is_not_a_window() {
        let dir = tempdir();
        let path = dir.join("one.ppscope");
        let t0 = Instant::now();
        let mut w = Writer::create(&path, &header()).unwrap();
        w.append(&sample(t0, 1), t0).unwrap();
        drop(w);
        let e = format!("{:#}", Recording::read(&path).unwrap_err());
        assert!(e.contains("needs at least 2"), "{e}");
    }

    /// A recording made on a host with 64 KiB pages: its pool's 10 inflight pages pin 640 KiB
    /// whatever the page size of the host that replays it.
    #[test]
    fn a_recording_replays_to_the_recorded_hosts_page_size() {
        let dir = tempdir();
        let path = dir.join("64k.ppscope");
        let mut h = header();
        h.page_size = Some(64 << 10);
        let t0 = Instant::now();
        let mut w = Writer::create(&path, &h).unwrap();
        for i in 0..3u64 {
            let mut s = sample(t0 + Duration::from_millis(10 * i), 100 * i);
            for p in s.pools.values_mut() {
                p.state = Some(PoolState {
                    stamp_ns: 0,
                    ring_fill: 0,
                    inflight: 10,
                    known: 2,
                    _pad: 0,
                });
            }
            w.append(&s, t0).unwrap();
        }
        drop(w);
        let rec = Recording::read(&path).unwrap();
        assert_eq!(rec.header.facts().page_size, 64 << 10);
        let samples = rec.samples();
        let snap = crate::pipeline::assemble(&crate::pipeline::Window::over(
            &rec.header.facts(),
            &samples,
        ));
        assert_eq!(snap.pools[0].inflight_pages, Some(10));
        assert_eq!(snap.pools[0].inflight_bytes, Some(10 * (64 << 10)));
    }

    /// Files written before the header carried the page size still read, with this host's.
    #[test]
    fn a_header_without_a_page_size_reads_with_this_hosts() {
        let mut json = serde_json::to_value(header()).unwrap();
        json.as_object_mut().unwrap().remove("page_size");
        let h: Header = serde_json::from_value(json).unwrap();
        assert_eq!(h.page_size, None);
        assert_eq!(h.facts().page_size, system::page_size());
    }
}

//! Recordings: what the live source saw, written so it can be replayed later, elsewhere.
//!
//! A recording is self-describing and checked:
//!
//! ```text
//! magic "PPSCOPE\x01" | u32 LE format version | frame | frame | ...
//! frame = u32 LE payload length | u32 LE CRC-32 of the payload | payload
//! ```
//!
//! The first frame is the [`Header`] (kernel, hooks, coverage, drop-reason names) as JSON;
//! every other frame is one [`Frame`]: the cumulative counters of every pool and site at one
//! instant. Versions 2 and 3 write a frame as what changed since the one before ([`packed`]:
//! tens of bytes per busy pool); version 1 wrote each as JSON (about a kilobyte per pool) and
//! still reads.
//! [`Reader`] takes one frame at a time, never the whole file. Readers refuse a file that is
//! not a recording, a newer format or a checksum mismatch with one sentence each, and never
//! panic on any input. A file whose last frame is cut off ([`CutOff`]: what a `record`
//! stopped mid-write leaves, killed or out of disk) reads up to that frame, and says so.
//!
//! No kernel address is written ([`Aliases`]): a recording is made to be sent to someone.
mod packed;

use std::{
    collections::HashMap,
    fs::File,
    io::{BufReader, BufWriter, ErrorKind, Read, Write},
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
    model::{BpfStats, ByAddr, Coverage, PoolIds, ProgramRuntime, RawPool, RawSample, SourceFacts},
    snapshot::{Detail, HookStatus},
};

pub use packed::BYTES_PER_POOL_FRAME;

pub const MAGIC: &[u8; 8] = b"PPSCOPE\x01";
/// The version written: 3, frames packed ([`packed`]), a pool's counts ending with
/// `release_full`. 2: the same without it (read as 3: a frame names a word by its index, so
/// the count reads as 0). 1: frames as JSON (read still). A version is raised for an added
/// word too, so that an older ppscope refuses the file as newer rather than as corrupt.
pub const FORMAT_VERSION: u32 = 3;
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

/// The hooks as attached, without what they missed so far (a live run's count: a header
/// written, or read from a file made otherwise, carries none).
fn without_missed(hooks: &[HookStatus]) -> Vec<HookStatus> {
    hooks
        .iter()
        .map(|h| HookStatus {
            missed: None,
            ..h.clone()
        })
        .collect()
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
            // What the hooks missed so far is not carried: a replay would show the start's
            // counts as the run's.
            hooks: without_missed(&facts.hooks),
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
            hooks: without_missed(&self.hooks),
            drop_reasons: self.drop_reasons.clone(),
            detail: self.detail,
            // How the recorded programs read memory is not a figure a replay shows.
            cast_reads: false,
            // A recording holds none (`Aliases`).
            show_addresses: false,
            // Whether the recorder was timed shows in its samples' run times, if any.
            bpf_stats: BpfStats::Off,
            // The recorder's kernel's, not this one's: what it skipped is in no recording.
            skipped_runs_counted: Default::default(),
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

/// One sample: cumulative counters at `t_ns` after the recording started. The default is the
/// state before the first frame: nothing counted yet.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    packer: packed::Packer,
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
            packer: packed::Packer::default(),
        })
    }

    /// Writes the sample `s`, taken `s.at - start` after the recording started; returns the
    /// bytes it took.
    pub fn append(&mut self, s: &RawSample, start: Instant) -> Result<usize> {
        let frame = Frame::from_sample(s, start, &mut self.aliases);
        let payload = self.packer.pack(frame)?;
        write_frame(&mut self.out, &payload)?;
        self.out.flush().context("cannot write the recording")?;
        Ok(8 + payload.len())
    }
}

/// Reads a recording one frame at a time: the memory it holds is one frame (and, from
/// version 2, the frame before it), whatever the length of the file.
pub struct Reader<R> {
    input: R,
    version: u32,
    /// Frames read so far, the header included (frame 0), for the error sentences.
    index: usize,
    unpacker: packed::Unpacker,
    /// A frame failed: those after it cannot be decoded (each is what changed since the one
    /// before), so the reader stops there.
    failed: bool,
    /// The largest frame read so far (the header included), in bytes: a frame the end of the
    /// file cuts off that claims far more is a damaged length, not a cut.
    largest: u32,
}

impl Reader<BufReader<File>> {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<(Header, Self)> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        Self::new(BufReader::new(file))
            .with_context(|| format!("{} is not a usable recording", path.display()))
    }
}

impl<R: Read> Reader<R> {
    /// Reads the magic, the version and the header from `input`.
    pub fn new(mut input: R) -> Result<(Header, Self)> {
        let mut start = [0u8; 12];
        let got = read_full(&mut input, &mut start)?;
        if got < 12 || &start[..8] != MAGIC {
            bail!("not a ppscope recording (no PPSCOPE magic at the start)");
        }
        let version = u32::from_le_bytes(start[8..12].try_into().expect("4 bytes"));
        if version > FORMAT_VERSION {
            bail!(
                "written by a newer ppscope (format v{version}); this one reads up to v{FORMAT_VERSION}"
            );
        }
        if version == 0 {
            bail!("corrupt: format version 0");
        }
        let mut reader = Self {
            input,
            version,
            index: 0,
            unpacker: packed::Unpacker::default(),
            failed: false,
            largest: 0,
        };
        let first = reader.payload()?.context("truncated: no header frame")?;
        let header: Header =
            serde_json::from_slice(&first).context("corrupt: the header frame does not parse")?;
        Ok((header, reader))
    }

    /// The next frame, `None` at the end of the file.
    pub fn next_frame(&mut self) -> Result<Option<Frame>> {
        if self.failed {
            bail!("the recording cannot be read past frame {}", self.index);
        }
        let frame = self.read_frame();
        self.failed = frame.is_err();
        frame
    }

    fn read_frame(&mut self) -> Result<Option<Frame>> {
        let Some(payload) = self.payload()? else {
            return Ok(None);
        };
        let index = self.index - 1;
        let frame = match self.version {
            1 => serde_json::from_slice(&payload).map_err(anyhow::Error::from),
            _ => self.unpacker.unpack(&payload),
        };
        frame
            .with_context(|| format!("corrupt: frame {index} does not parse"))
            .map(Some)
    }

    /// The next frame's checked payload, `None` at the end of the file.
    fn payload(&mut self) -> Result<Option<Vec<u8>>> {
        let index = self.index;
        let mut head = [0u8; 8];
        match read_full(&mut self.input, &mut head)? {
            0 => return Ok(None),
            8 => {}
            _ => {
                return Err(CutOff {
                    frame: index,
                    detail: "in its length/checksum".into(),
                }
                .into())
            }
        }
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > MAX_FRAME {
            bail!("corrupt: frame {index} claims {len} bytes");
        }
        // Grown as the bytes arrive: a forged length costs no more memory than the file.
        let mut body = Vec::new();
        (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut body)
            .context("cannot read the recording")?;
        if body.len() < len as usize {
            // A bit flipped in a length reads past the end as a cut would, but mostly claims
            // far more than the frames before it, which a recording's frames do not (each
            // holds what changed since the one before).
            if self.largest > 0 && len / CUT_FRAME_GROWTH > self.largest {
                bail!(
                    "corrupt: frame {index} claims {len} bytes, more than {CUT_FRAME_GROWTH} \
                     times the largest before it ({}), and the file ends {} bytes into it",
                    self.largest,
                    body.len()
                );
            }
            return Err(CutOff {
                frame: index,
                detail: format!("({len} bytes announced, {} there)", body.len()),
            }
            .into());
        }
        if crc32fast::hash(&body) != crc {
            bail!("corrupt: frame {index} fails its checksum");
        }
        self.index += 1;
        self.largest = self.largest.max(len);
        Ok(Some(body))
    }
}

/// How many times the largest frame before it a frame cut off by the end of the file may claim
/// and still be taken for a cut rather than a damaged length.
const CUT_FRAME_GROWTH: u32 = 4;

/// A frame the end of the file cut off: the frames before it are whole (each was checked), and
/// nothing can follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutOff {
    /// Its number (the header is frame 0).
    pub frame: usize,
    /// Where it is cut.
    pub detail: String,
}

impl std::fmt::Display for CutOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "truncated: frame {} is cut off {}",
            self.frame, self.detail
        )
    }
}

impl std::error::Error for CutOff {}

/// Fills `buf` as far as `input` goes; how many bytes it got (fewer only at the end).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("cannot read the recording"),
        }
    }
    Ok(got)
}

/// A recording read back.
#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub frames: Vec<Frame>,
    /// The frame the end of the file cut off, after `frames` (None: the file is whole).
    pub cut_off: Option<CutOff>,
}

impl Recording {
    /// The whole recording, read frame by frame; a cut-off end is warned of (the samples
    /// before it are replayed: an interrupted `record` loses its last frame, not the run).
    pub fn read(path: &Path) -> Result<Self> {
        let (header, mut reader) = Reader::open(path)?;
        let rec = Self::collect(header, &mut reader)
            .with_context(|| format!("{} is not a usable recording", path.display()))?;
        if let Some(cut) = &rec.cut_off {
            log::warn!(
                "{}: {cut}, as a record stopped while writing leaves it (or a damaged length): \
                 the {} samples before it are replayed",
                path.display(),
                rec.frames.len()
            );
        }
        Ok(rec)
    }

    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let (header, mut reader) = Reader::new(bytes)?;
        Self::collect(header, &mut reader)
    }

    fn collect(header: Header, reader: &mut Reader<impl Read>) -> Result<Self> {
        let mut frames = Vec::new();
        let cut_off = loop {
            match reader.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break None,
                Err(e) => match e.downcast::<CutOff>() {
                    Ok(cut) => break Some(cut),
                    Err(e) => return Err(e),
                },
            }
        };
        if frames.len() < 2 {
            let cut = cut_off.map_or(String::new(), |c| format!(" ({c})"));
            bail!(
                "the recording holds {} whole sample(s){cut}; a window needs at least 2",
                frames.len()
            );
        }
        Ok(Self {
            header,
            frames,
            cut_off,
        })
    }

    /// The names of the devices its pools had, in any frame, and unless `pools_only` those of
    /// the devices it saw without a pool too (NAPI polls, drops): what `--dev` can pick out of
    /// it (a simulation replays pools only).
    pub fn device_names(&self, pools_only: bool) -> std::collections::BTreeSet<String> {
        self.frames
            .iter()
            .flat_map(|f| {
                let pools = f.pools.iter().filter_map(|p| p.identity.map(|i| i.ifname));
                let devices = f.devices.iter().filter(|_| !pools_only);
                pools.chain(devices.map(|(_, d)| d.ifname))
            })
            .filter_map(|raw| crate::model::c_name(&raw))
            .collect()
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

    /// Where each frame of a recording ends (the header is frame 0).
    fn frame_ends(bytes: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut at = MAGIC.len() + 4;
        while at < bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            at += 8 + len;
            ends.push(at);
        }
        ends
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

    /// What `--dev` can pick: the pools' devices, and unless pools only, devices seen without a
    /// pool (a drop on `lo`).
    #[test]
    fn device_names_are_the_pools_and_the_devices_seen() {
        let name = |n: &str| {
            let mut raw = [0u8; 16];
            raw[..n.len()].copy_from_slice(n.as_bytes());
            raw
        };
        let mut id = PoolIdentity::EMPTY;
        id.ifname = name("eth0");
        let frame = Frame {
            pools: vec![
                RecordedPool {
                    pool: 1,
                    counters: PoolCounters::default(),
                    identity: Some(id),
                    gve_queue: None,
                    state: None,
                },
                // A pool whose identity was never read names nothing.
                RecordedPool {
                    pool: 2,
                    counters: PoolCounters::default(),
                    identity: None,
                    gve_queue: None,
                    state: None,
                },
            ],
            devices: vec![(
                3,
                DeviceIdentity {
                    ifindex: 1,
                    napi_id: 0,
                    netdev: 3,
                    ifname: name("lo"),
                },
            )],
            ..Frame::default()
        };
        let rec = Recording {
            header: header(),
            frames: vec![Frame::default(), frame],
            cut_off: None,
        };
        let names = |pools_only| rec.device_names(pools_only).into_iter().collect::<Vec<_>>();
        assert_eq!(names(false), ["eth0", "lo"]);
        assert_eq!(names(true), ["eth0"]);
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
            // Nor in binary: as a varint (how frames write numbers) or a plain word.
            for written in [
                postcard::to_stdvec(&addr).unwrap(),
                addr.to_le_bytes().to_vec(),
            ] {
                assert!(!bytes.windows(written.len()).any(|w| w == written));
            }
        }
        let last = Recording::parse(&bytes).unwrap().samples().pop().unwrap();
        let netdev = last.pools[&1].identity.unwrap().netdev;
        assert_eq!(netdev, 2);
        assert_eq!(last.drops.keys().next().unwrap().netdev, netdev);
    }

    /// Version 1 wrote each frame as JSON: such a file reads to the frames it was written
    /// from, the same as version 2 does.
    #[test]
    fn version_1_files_still_read() {
        let t0 = Instant::now();
        let mut aliases = Aliases::default();
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&1u32.to_le_bytes());
        write_frame(&mut v1, &serde_json::to_vec(&header()).unwrap()).unwrap();
        let mut frames = Vec::new();
        for i in 0..3u64 {
            let s = sample(t0 + Duration::from_millis(10 * i), 100 * i);
            let f = Frame::from_sample(&s, t0, &mut aliases);
            write_frame(&mut v1, &serde_json::to_vec(&f).unwrap()).unwrap();
            frames.push(f);
        }
        assert_eq!(Recording::parse(&v1).unwrap().frames, frames);
        let v3 = recording_bytes(&tempdir());
        assert_eq!(&v3[8..12], &3u32.to_le_bytes());
        assert_eq!(Recording::parse(&v3).unwrap().frames, frames);
        // Version 2: packed, a pool's counts one word shorter (no `release_full`): a real
        // one, `ppscope record` on the tracepoint-only host.
        let v2 = include_bytes!("../../../fuzz/corpus/record/host-tracepoints-v2.ppscope");
        assert_eq!(&v2[8..12], &2u32.to_le_bytes());
        let rec = Recording::parse(v2).unwrap();
        assert!(!rec.frames.is_empty());
        assert!(rec
            .frames
            .iter()
            .flat_map(|f| f.pools.iter())
            .all(|p| p.counters.release_full == 0));
        // A real one: `ppscope record` on the tracepoint-only host (no traffic), before
        // version 2.
        let old = include_bytes!("../../../fuzz/corpus/record/host-tracepoints.ppscope");
        assert_eq!(&old[8..12], &1u32.to_le_bytes());
        let rec = Recording::parse(old).unwrap();
        assert_eq!(
            (rec.header.kernel.as_str(), rec.frames.len()),
            ("6.18.44-fc-v657", 5)
        );
    }

    /// xorshift: the same "random" traffic every run.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    /// `pools` pools receiving traffic, one sample every 10 ms: what `record` sees of a busy
    /// host (a pool's counters, fill and slow-path buckets, state and its device's NAPI and
    /// drops move every frame; now and then a pool comes, goes, changes size or a counter
    /// goes back).
    fn busy_samples(pools: u64, frames: u64, dice: &mut Dice) -> Vec<RawSample> {
        let t0 = Instant::now();
        let mut counters: Vec<PoolCounters> = vec![PoolCounters::default(); pools as usize];
        let mut out = Vec::new();
        for f in 0..frames {
            let mut s = RawSample::empty(t0 + Duration::from_millis(10 * f));
            for (i, c) in counters.iter_mut().enumerate() {
                let i = i as u64;
                if dice.roll(500) == 0 {
                    continue; // gone for a frame (a vanished pool, its address reused later)
                }
                let allocs = 20 + dice.roll(40);
                c.alloc_calls += allocs;
                c.refill_calls += allocs / 16;
                c.refill_pages += allocs;
                c.put_calls += allocs;
                c.put_cached += allocs - 1;
                c.put_released += 1;
                c.release_pages += 1;
                c.hold_pages += dice.roll(2);
                c.fill_hist[dice.roll(10) as usize] += 1;
                if dice.roll(4) == 0 {
                    c.slow_calls += 1;
                    let ns = 2_000 + dice.roll(50_000);
                    c.slow_ns_sum += ns;
                    c.slow_hist[ns.ilog2() as usize] += 1;
                }
                if dice.roll(1000) == 0 {
                    c.put_calls -= 1; // a counter that went back
                }
                let mut id = PoolIdentity::EMPTY;
                id.netdev = NETDEV + (i % 8) * 0x1000;
                id.ifindex = 2 + (i % 8) as u32;
                id.queue_idx = (i / 8) as u32;
                id.pool_size = if dice.roll(300) == 0 { 4096 } else { 1024 };
                id.netlink_id = i as u32 + 1;
                id.ifname[..4].copy_from_slice(b"eth0");
                id.driver[..4].copy_from_slice(b"gve\0");
                id.known = 0x7f;
                let mut pool = RawPool::from_counters(*c);
                pool.identity = Some(id);
                pool.state = Some(PoolState {
                    stamp_ns: 1_000_000_000 + f * 10_000_000,
                    ring_fill: dice.roll(1024) as u32,
                    inflight: 1024 + dice.roll(64) as u32,
                    known: 3,
                    _pad: 0,
                });
                s.pools.insert(POOL + i * 0x2000, pool);
            }
            for d in 0..8u64 {
                let netdev = NETDEV + d * 0x1000;
                s.napi.insert(
                    netdev + 0x100,
                    NapiCounters {
                        polls: f * 3,
                        work: f * 90,
                        full_budget: f / 10,
                        budget: 64,
                    },
                );
                s.napi_devices.insert(netdev + 0x100, netdev);
                let key = DropKey {
                    netdev,
                    reason: 2,
                    _pad: 0,
                };
                s.drops.insert(key, f / 7);
            }
            s.sites[0].calls = f * 5;
            s.runtime = Some(ProgramRuntime {
                run_ns: f * 1_000_000,
                runs: f * 4_000,
            });
            out.push(s);
        }
        out
    }

    /// What a busy host's recording costs: at most `BYTES_PER_POOL_FRAME` per pool and
    /// frame (JSON took about a kilobyte), and it reads back to exactly the frames it was
    /// written from.
    #[test]
    fn a_busy_recording_is_compact_and_reads_back_exactly() {
        let (pools, frames) = (1000, 50);
        let samples = busy_samples(pools, frames, &mut Dice(0x2545_f491_4f6c_dd1d));
        let path = tempdir().join("busy.ppscope");
        let start = samples[0].at;
        let mut w = Writer::create(&path, &header()).unwrap();
        let mut written = 0;
        for s in &samples {
            written += w.append(s, start).unwrap();
        }
        drop(w);
        let per_pool_frame = written as f64 / (pools * frames) as f64;
        let mut aliases = Aliases::default();
        let expected: Vec<Frame> = samples
            .iter()
            .map(|s| Frame::from_sample(s, start, &mut aliases))
            .collect();
        let json: usize = expected
            .iter()
            .map(|f| serde_json::to_vec(f).unwrap().len())
            .sum();
        eprintln!(
            "recording: {per_pool_frame:.0} bytes per pool and frame (JSON: {:.0})",
            json as f64 / (pools * frames) as f64
        );
        assert!(
            per_pool_frame <= BYTES_PER_POOL_FRAME as f64,
            "{per_pool_frame:.0} bytes per pool and frame"
        );
        let rec = Recording::read(&path).unwrap();
        assert_eq!(rec.frames.len(), expected.len());
        for (i, (got, want)) in rec.frames.iter().zip(&expected).enumerate() {
            assert!(got == want, "frame {i} reads back otherwise");
        }
    }

    /// The reader takes one frame at a time: a file cut off in its third frame hands out the
    /// first two before it says so (a reader of the whole file would refuse at once).
    #[test]
    fn the_reader_streams_frame_by_frame() {
        let bytes = recording_bytes(&tempdir());
        let cut = &bytes[..bytes.len() - 5];
        let (h, mut reader) = Reader::new(cut).unwrap();
        assert_eq!(h, header());
        assert_eq!(reader.next_frame().unwrap().unwrap().t_ns, 0);
        assert_eq!(reader.next_frame().unwrap().unwrap().t_ns, 10_000_000);
        let e = format!("{:#}", reader.next_frame().unwrap_err());
        assert!(e.contains("truncated: frame 3 is cut off"), "{e}");
        // and it stops there: nothing after a frame it could not read.
        assert!(reader.next_frame().is_err());
        let (_, mut whole) = Reader::new(&bytes[..]).unwrap();
        assert_eq!(
            (0..4).filter_map(|_| whole.next_frame().unwrap()).count(),
            3
        );
    }

    #[test]
    fn bad_input_gets_one_sentence_never_a_panic() {
        let good = recording_bytes(&tempdir());
        let err = |b: &[u8]| format!("{:#}", Recording::parse(b).unwrap_err());
        assert!(err(b"hello world, not a recording").contains("not a ppscope recording"));
        let mut future = good.clone();
        future[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        assert!(
            err(&future).contains(&format!("newer ppscope (format v{})", FORMAT_VERSION + 1)),
            "{}",
            err(&future)
        );
        let mut flipped = good.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        assert!(err(&flipped).contains("checksum"), "{}", err(&flipped));
        // Cut off in its last frame: the whole frames before it read, and the cut is said.
        let cut = Recording::parse(&good[..good.len() - 5]).unwrap();
        assert_eq!(cut.frames.len(), 2);
        let said = cut.cut_off.expect("the cut is said").to_string();
        assert!(
            said.starts_with("truncated: frame 3 is cut off ("),
            "{said}"
        );
        assert_eq!(Recording::parse(&good).unwrap().cut_off, None);
        // Cut off before a window's two samples: refused, with the cut named.
        let ends = frame_ends(&good);
        let e = err(&good[..ends[2] - 1]);
        assert!(
            e.contains("holds 1 whole sample(s) (truncated: frame 2 is cut off"),
            "{e}"
        );
        // The last frame's length damaged so that it reads past the end: a little more than
        // it holds reads as a cut; far more than any frame before it is refused as damage.
        let with_len = |len: u32| {
            let mut b = good.clone();
            b[ends[2]..ends[2] + 4].copy_from_slice(&len.to_le_bytes());
            b
        };
        let last = (ends[3] - ends[2] - 8) as u32;
        let cut = Recording::parse(&with_len(last + 10)).unwrap();
        assert!(cut.cut_off.is_some());
        let header = (ends[0] - MAGIC.len() - 4 - 8) as u32;
        let e = err(&with_len(header * 5));
        assert!(
            e.contains("corrupt: frame 3 claims") && e.contains("4 times"),
            "{e}"
        );
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

    /// What the hooks missed so far is the live run's: a header leaves it out.
    #[test]
    fn a_header_carries_the_hooks_but_not_what_they_missed() {
        use crate::snapshot::{Backend, HookMissed};
        let status = HookStatus {
            targets: vec!["page_pool_put_unrefed_netmem".into()],
            ..crate::testing::hook_status(
                "recycle",
                Some(Backend::Kprobe),
                Some(HookMissed {
                    skipped_runs: 2,
                    kprobe_hits_dropped: Some(9),
                }),
            )
        };
        let facts = SourceFacts {
            hooks: vec![status.clone()],
            ..Default::default()
        };
        let h = Header::new(&facts, Duration::from_millis(10));
        assert_eq!(
            h.hooks,
            [HookStatus {
                missed: None,
                ..status
            }]
        );
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

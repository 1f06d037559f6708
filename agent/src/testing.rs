//! Test support shared by this crate's unit tests and other crates' tests (the TUI's frames):
//! samples and recordings built by hand. Not part of the tool.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use ppscope_common::{PoolCounters, PoolIdentity};

use crate::{
    model::{Coverage, RawPool, RawSample, SourceFacts},
    recording,
    snapshot::{Backend, Group, HookMissed, HookStatus},
};

/// A page_pool hook's status, served by `backend` (None: not attached), with what its
/// programs `missed`, and nothing else known.
pub fn hook_status(
    hook: &'static str,
    backend: Option<Backend>,
    missed: Option<HookMissed>,
) -> HookStatus {
    HookStatus {
        hook: hook.into(),
        group: Group::PagePool,
        backend,
        targets: vec![],
        reasons: vec![],
        loses: "".into(),
        load: None,
        missed,
    }
}

/// The facts of a source on a kernel called `kernel` with 4 KiB pages, no hooks and no drop
/// reasons, whose counters `coverage` feeds.
pub fn facts(kernel: &str, coverage: Coverage) -> SourceFacts {
    SourceFacts {
        kernel: kernel.into(),
        page_size: 4096,
        coverage,
        ..SourceFacts::default()
    }
}

/// A pool identity that knows only its device name (cut to 15 bytes, as the kernel's).
pub fn identity(ifname: &str) -> PoolIdentity {
    let mut id = PoolIdentity::EMPTY;
    let n = ifname.len().min(id.ifname.len() - 1);
    id.ifname[..n].copy_from_slice(&ifname.as_bytes()[..n]);
    id.known = PoolIdentity::KNOWN_IFNAME;
    id
}

/// A sample at `at` holding one pool, at `addr` (ppscope's id 1), with these counters and
/// identity.
pub fn one_pool_sample(
    at: Instant,
    addr: u64,
    counters: PoolCounters,
    identity: PoolIdentity,
) -> RawSample {
    let mut s = RawSample::empty(at);
    s.pools.insert(
        addr,
        RawPool {
            id: 1,
            identity: Some(identity),
            ..RawPool::from_counters(counters)
        },
    );
    s
}

/// Every hook a burst profile reads, attached: the allocation and recycle hooks of `--detail
/// full`, and the refill, slow-path, hold and release hooks `--detail light` keeps
/// ([`Coverage::per_page`] without the cache's layout, which only the split needs).
pub fn profile_coverage() -> Coverage {
    Coverage {
        cache_layout: false,
        ..Coverage::per_page()
    }
}

/// A pool (at address 7, with identity `id` and a ring of 256) under bursts, `steps` samples
/// 10 ms apart: 100 pages taken a step for 15 steps, then 1,500 back at once. Counted the way
/// each detail level's hooks count it: `full` sees every allocation and recycle,
/// `light` sees refills, pages from the allocator, pages that found the ring full and the
/// ring's fill. The books of a ring of 256 are kept by hand (no alloc cache: every page taken
/// goes through the ring or the allocator).
pub fn starved_ring(steps: usize, mut id: PoolIdentity) -> StarvedRing {
    use ppscope_common::PoolState;
    const RING: u64 = 256;
    let t0 = Instant::now();
    id.ring_size = RING as u32;
    id.known |= PoolIdentity::KNOWN_RING_SIZE;
    let (mut full, mut light) = (PoolCounters::default(), PoolCounters::default());
    let mut fill = 0u64;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..steps {
        if i > 0 && i % 16 == 0 {
            let into = 1500u64.min(RING - fill);
            fill += into;
            full.put_calls += 1500;
            full.put_released += 1500 - into;
            light.release_pages += 1500 - into;
        } else if i > 0 {
            let from_ring = 100u64.min(fill);
            fill -= from_ring;
            let slow = 100 - from_ring;
            for c in [&mut full, &mut light] {
                c.hold_pages += slow;
                c.slow_calls += slow.div_ceil(64);
                c.refill_pages += from_ring;
                c.refill_calls += from_ring.div_ceil(64);
            }
            full.alloc_calls += 100;
        }
        let at = t0 + Duration::from_millis(10 * i as u64);
        let state = PoolState {
            ring_fill: fill as u32,
            known: 1,
            ..Default::default()
        };
        for (counters, out) in [(full, &mut a), (light, &mut b)] {
            let mut s = RawSample::empty(at);
            s.pools.insert(
                7,
                RawPool {
                    identity: Some(id),
                    state: Some(state),
                    ..RawPool::from_counters(counters)
                },
            );
            out.push(s);
        }
    }
    StarvedRing { full: a, light: b }
}

/// [`starved_ring`]'s samples, as each detail level's hooks count them.
pub struct StarvedRing {
    pub full: Vec<RawSample>,
    pub light: Vec<RawSample>,
}

/// A snapshot of `pools` pools a second apart, each of which took and gave back pages (what
/// the page_pool tracepoints count), named `ppscope:1` on.
pub fn snapshot_with_pools(pools: u64) -> crate::snapshot::Snapshot {
    let t0 = Instant::now();
    let first = RawSample::empty(t0);
    let mut later = RawSample::empty(t0 + Duration::from_secs(1));
    for i in 0..pools {
        let mut pool = RawPool {
            id: i + 1,
            identity: Some(identity("eth0")),
            ..Default::default()
        };
        pool.counters.hold_pages = 1000 + i;
        pool.counters.release_pages = 900;
        later.pools.insert(0x1000 * (i + 1), pool);
    }
    let cov = Coverage {
        hold: true,
        release: true,
        ..Default::default()
    };
    crate::model::snapshot(&facts("test", cov), &first, &later)
}

/// Writes a recording as `ppscope record` does: the header `record` writes for `facts`
/// (version `test`, started at the epoch, so that what shows it does not change from run to
/// run) and one frame a sample, timed from `start`.
pub fn write_recording(
    path: &Path,
    facts: &SourceFacts,
    interval: Duration,
    start: Instant,
    samples: impl IntoIterator<Item = RawSample>,
) {
    let header = recording::Header {
        ppscope_version: "test".into(),
        started_unix_ms: 0,
        ..recording::Header::new(facts, interval)
    };
    let mut w = recording::Writer::create(path, &header).unwrap();
    for s in samples {
        w.append(&s, start).unwrap();
    }
}

/// How a veth pool's ring of 256 is overrun at every 10th step of
/// [`write_overrun_recording`] (the other steps: one slow path of 8–16 µs, 64 pages in).
pub struct Overrun {
    /// Slow-path calls in the step (each after an empty refill).
    pub slow_calls: u64,
    /// Of them, slow paths of 8–16 µs and of 65–131 µs.
    pub slow_8us: u64,
    pub slow_65us: u64,
    /// Pages the full ring sent back to the allocator.
    pub released: u64,
    /// Pages the slow paths brought in.
    pub pages_in: u64,
}

impl Overrun {
    /// A ring overrun by 600 pages, whose refills then find it empty 120 times.
    pub const HARD: Overrun = Overrun {
        slow_calls: 120,
        slow_8us: 30,
        slow_65us: 10,
        released: 600,
        pages_in: 600,
    };
}

/// Writes 3 s at 10 ms of one veth pool whose ring of 256 is overrun every 100 ms: the slow path
/// and ring-full returns come in bursts, and the advice grows the ring.
pub fn write_starving_recording(path: &Path) {
    // Its device joins the pool to the timeline (an alias in the recording).
    write_overrun_recording(path, 0x1000, 0xffff_8880_0042_0000, &Overrun::HARD);
}

/// Writes 3 s at 10 ms of the veth1 pool at `pool` (its device `netdev`, 0: unknown), 1,000
/// pages allocated and recycled (400 into the cache) a step, and every 10th step `overrun`.
pub fn write_overrun_recording(path: &Path, pool: u64, netdev: u64, overrun: &Overrun) {
    let coverage = Coverage::per_page();
    let mut id = identity("veth1");
    id.driver[..4].copy_from_slice(b"veth");
    id.pool_size = 256;
    id.ring_size = 256;
    id.netdev = netdev;
    id.known |= PoolIdentity::KNOWN_POOL_SIZE | PoolIdentity::KNOWN_RING_SIZE;
    let t0 = Instant::now();
    let mut c = PoolCounters::default();
    let samples = (0..=300u64).map(|i| {
        if i > 0 {
            let burst = i % 10 == 0;
            let on_burst = |n: u64, otherwise: u64| if burst { n } else { otherwise };
            c.alloc_calls += 1000;
            c.refill_calls += 15;
            c.refill_pages += 15 * 64;
            c.slow_calls += on_burst(overrun.slow_calls, 1);
            c.refill_empty += on_burst(overrun.slow_calls, 1);
            c.slow_ns_sum += 20_000;
            c.slow_hist[13] += on_burst(overrun.slow_8us, 1);
            c.slow_hist[16] += on_burst(overrun.slow_65us, 0);
            c.put_calls += 1000;
            c.put_cached += 400;
            c.put_released += on_burst(overrun.released, 0);
            c.hold_pages += on_burst(overrun.pages_in, 64);
            c.release_pages += on_burst(overrun.released, 0);
        }
        one_pool_sample(t0 + Duration::from_millis(10 * i), pool, c, id)
    });
    write_recording(
        path,
        &facts("7.2.13-test", coverage),
        Duration::from_millis(10),
        t0,
        samples,
    );
}

/// `schema/NAME` of this workspace: the JSON Schemas the README documents.
pub fn schema_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../schema")
        .join(name)
}

/// Every error of `value` against the JSON Schema `schema/NAME` of this workspace (the
/// layout the README documents), as "path: message" lines: empty when the output keeps it.
#[cfg(any(test, feature = "schema-check"))]
pub fn schema_errors(name: &str, value: &serde_json::Value) -> Vec<String> {
    let path = schema_file(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    validator
        .iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// "2.7k/s" (or "2.7k") → 2700.0: a rate as the dashboard prints it (k, M, G suffixes), for
/// tests that read figures off a frame.
pub fn parse_rate(text: &str) -> Option<f64> {
    let n = text.strip_suffix("/s").unwrap_or(text);
    let (digits, scale) = match n.chars().last()? {
        'k' => (&n[..n.len() - 1], 1e3),
        'M' => (&n[..n.len() - 1], 1e6),
        'G' => (&n[..n.len() - 1], 1e9),
        _ => (n, 1.0),
    };
    digits.parse::<f64>().ok().map(|d| d * scale)
}

//! The model's input: cumulative counters of every pool and site at one instant, as the probes
//! (or a recording, or a simulation) give them, and which hooks fed them.
use std::{collections::HashMap, sync::Arc, time::Instant};

use ppscope_common::{
    site_stat, DeviceIdentity, DropKey, NapiCounters, PoolCounters, PoolHot, PoolIdentity,
    PoolRare, PoolState, PoolTeardown, SiteStats, LATENCY_BUCKETS,
};
use serde::Serialize;

use crate::snapshot::{Detail, HookStatus, ProfileBasis};

/// Which hooks feed the counters, so that a count nobody measured is shown as unknown, not 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Coverage {
    pub alloc: bool,
    pub refill: bool,
    pub slow: bool,
    pub recycle: bool,
    pub recycle_bulk: bool,
    pub hold: bool,
    pub release: bool,
    /// The alloc cache's layout is known, and a page that left the pool is told (by the
    /// release marks, or by reading its `pp`): where a recycled page went (the cache, the
    /// ring, or out of the pool) can be told after the recycle.
    pub cache_layout: bool,
    pub provider_alloc: bool,
    pub dontneed: bool,
    pub devmem_free: bool,
    pub gve_alloc: bool,
    pub gve_poll: bool,
    pub napi: bool,
    pub drops: bool,
    pub page_return: bool,
    /// `pool_release`: pools being destroyed.
    #[serde(default)]
    pub teardown: bool,
}

impl Coverage {
    /// The page_pool hooks a burst profile of pages and the single-page split need: the
    /// allocation and single recycle (per page), refill and slow path (per batch), pages in
    /// and out of the pool, with the alloc cache's layout known. Not what `--detail full`
    /// attaches: no bulk recycle, page return, teardown, driver, devmem, NAPI or drop hooks.
    pub fn per_page() -> Self {
        Self {
            alloc: true,
            refill: true,
            slow: true,
            recycle: true,
            hold: true,
            release: true,
            cache_layout: true,
            ..Self::default()
        }
    }

    /// What a burst profile can be made of with these hooks (the one rule:
    /// [`ProfileBasis::from_hooks`]).
    pub fn profile_basis(&self) -> Option<ProfileBasis> {
        ProfileBasis::from_hooks(|hook| match hook {
            "alloc" => self.alloc,
            "recycle" => self.recycle,
            "refill" => self.refill,
            "page_hold" => self.hold,
            "page_release" => self.release,
            _ => false,
        })
    }
}

/// ppscope's own pool ids, for pools the kernel gives no netlink id (kernels before 6.8):
/// the pool's kernel address would hand KASLR to anyone who can scrape the agent. A pool keeps
/// its id while every sample holds it; new pools are numbered in address order, so the same
/// samples name their pools the same each time they are read. (A recording's samples hold its
/// own numbers for the addresses, so a replay numbers its pools in the order they were first
/// written: its ids need not be the live run's.) A source names each sample's pools with one
/// of these before anything else sees them.
#[derive(Debug, Default)]
pub struct PoolIds {
    ids: ByAddr<u64, u64>,
    /// The last id given (64 bits: pools churning by the thousand a second never wrap it).
    last: u64,
}

impl PoolIds {
    /// Sets `id` on every pool: the one it had in the previous sample, or the next free. Pools
    /// absent from this sample are forgotten (one back later is a new pool to its reader).
    pub fn name(&mut self, pools: &mut ByAddr<u64, RawPool>) {
        self.ids.retain(|addr, _| pools.contains_key(addr));
        let mut new = Vec::new();
        for (addr, pool) in pools.iter_mut() {
            match self.ids.get(addr) {
                Some(&id) => pool.id = id,
                None => new.push(*addr),
            }
        }
        new.sort_unstable();
        for addr in new {
            self.last += 1;
            self.ids.insert(addr, self.last);
            if let Some(pool) = pools.get_mut(&addr) {
                pool.id = self.last;
            }
        }
    }
}

/// One pool at one instant.
#[derive(Debug, Clone, Default)]
pub struct RawPool {
    /// ppscope's own name for the pool (from 1; [`PoolIds`]): its kernel address never
    /// leaves the process.
    pub id: u64,
    /// The pool's counts (its histograms are `hists`).
    pub counters: PoolCounts,
    /// The pool's histograms (None: all zero), shared with the samples before while they do
    /// not change: they are most of a pool's kilobyte and move only with its rare events, and
    /// the agent holds four samples at once (BENCHMARKS.md, the agent at 10,000 pools).
    pub hists: Option<Arc<PoolHists>>,
    pub identity: Option<PoolIdentity>,
    /// The gve rx queue this pool serves, when gve's pool creation was seen.
    pub gve_queue: Option<u32>,
    /// Ring fill and inflight pages as of the pool's last rare event.
    pub state: Option<PoolState>,
}

impl RawPool {
    /// A pool of these counts and histograms.
    pub fn from_counters(counters: PoolCounters) -> Self {
        let hists = PoolHists::of_counters(&counters);
        Self {
            counters: PoolCounts::of(&counters),
            hists: (hists != PoolHists::default()).then(|| Arc::new(hists)),
            ..Self::default()
        }
    }

    /// The counts with the histograms (what a recording keeps).
    pub fn full_counters(&self) -> PoolCounters {
        let mut c = PoolCounters::default();
        self.counters.put(&mut c);
        if let Some(h) = &self.hists {
            h.put(&mut c);
        }
        c
    }
}

/// Declares [`PoolCounts`] with every summed hot counter (`hot_fields!`).
macro_rules! pool_counts {
    ($($f:ident),*) => {
        /// A pool's counts: [`PoolCounters`] without its histograms, which a sample keeps
        /// apart ([`RawPool::hists`]). A sample holds one per pool, and the agent four
        /// samples at once: the histograms inline were 1,024 of a pool's 1,176 bytes in each.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct PoolCounts {
            $(pub $f: u64,)*
            /// The longest ring-full run in progress on any CPU.
            pub full_run: u64,
            /// The longest empty-ring run in progress on any CPU.
            pub empty_run: u64,
        }

        impl PoolCounts {
            /// Adds one CPU's hot counters. Runs in progress are per-CPU state: the longest
            /// stands.
            pub fn add_hot(&mut self, h: &PoolHot) {
                $(self.$f = self.$f.wrapping_add(h.$f);)*
                self.full_run = self.full_run.max(h.full_run);
                self.empty_run = self.empty_run.max(h.empty_run);
            }

            fn of(c: &PoolCounters) -> Self {
                Self {
                    $($f: c.$f,)*
                    full_run: c.full_run,
                    empty_run: c.empty_run,
                }
            }

            fn put(&self, c: &mut PoolCounters) {
                $(c.$f = self.$f;)*
                c.full_run = self.full_run;
                c.empty_run = self.empty_run;
            }
        }
    };
}
ppscope_common::hot_fields!(pool_counts);

/// A pool's histograms, as [`PoolCounters`] holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolHists {
    pub slow: [u64; LATENCY_BUCKETS],
    pub full_run: [u64; LATENCY_BUCKETS],
    pub empty_run: [u64; LATENCY_BUCKETS],
    pub fill: [u64; LATENCY_BUCKETS],
}

impl PoolHists {
    /// The histograms of a pool's rare-event record (`PoolCounters::set_hists`' rule).
    pub fn of(rare: &PoolRare) -> Self {
        let mut c = PoolCounters::default();
        c.set_hists(rare);
        Self::of_counters(&c)
    }

    fn of_counters(c: &PoolCounters) -> Self {
        Self {
            slow: c.slow_hist,
            full_run: c.full_run_hist,
            empty_run: c.empty_run_hist,
            fill: c.fill_hist,
        }
    }

    /// Writes the histograms into `c`.
    pub fn put(&self, c: &mut PoolCounters) {
        c.slow_hist = self.slow;
        c.full_run_hist = self.full_run;
        c.empty_run_hist = self.empty_run;
        c.fill_hist = self.fill;
    }
}

/// Cumulative run time and run count of ppscope's own programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramRuntime {
    pub run_ns: u64,
    pub runs: u64,
}

/// A map keyed by kernel address (pool, NAPI instance, net_device) or another key read
/// from the kernel's maps, with a fast hasher: these maps are built and looked up for every
/// pool at every collection (10,000 pools: SipHash was a tenth of the agent's time), and
/// their keys come from the kernel, not from anyone who could choose colliding keys.
pub type ByAddr<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Cumulative counters of every pool at one instant.
#[derive(Debug, Clone)]
pub struct RawSample {
    pub at: Instant,
    pub pools: ByAddr<u64, RawPool>,
    /// Whole-site stats, indexed by `site_stat::*`.
    pub sites: [SiteStats; site_stat::COUNT as usize],
    /// gve NAPI poll per rx queue.
    pub gve_poll: ByAddr<u32, SiteStats>,
    /// NAPI polls per NAPI instance, and the device of each instance.
    pub napi: ByAddr<u64, NapiCounters>,
    pub napi_devices: ByAddr<u64, u64>,
    /// Devices seen by the NAPI and drop hooks, by net_device address.
    pub devices: ByAddr<u64, DeviceIdentity>,
    /// Drops per (device, reason).
    pub drops: ByAddr<DropKey, u64>,
    /// None when BPF run-time statistics could not be switched on.
    pub runtime: Option<ProgramRuntime>,
    /// Pools being destroyed (`pool_release`): release attempts so far, by pool address.
    pub teardowns: ByAddr<u64, PoolTeardown>,
}

impl RawSample {
    pub fn empty(at: Instant) -> Self {
        Self {
            at,
            pools: ByAddr::default(),
            sites: [SiteStats::default(); site_stat::COUNT as usize],
            gve_poll: ByAddr::default(),
            napi: ByAddr::default(),
            napi_devices: ByAddr::default(),
            devices: ByAddr::default(),
            drops: ByAddr::default(),
            runtime: None,
            teardowns: ByAddr::default(),
        }
    }
}

impl SourceFacts {
    /// Why no pool of this source can ever be advised (the hooks the advice replays are not
    /// attached), for a warning up front; None when they are.
    pub fn advice_unavailable(&self) -> Option<&'static str> {
        self.coverage
            .profile_basis()
            .is_none()
            .then_some(crate::snapshot::ADVICE_NEEDS)
    }
}

/// What a source knows of the kernel it samples, beside the samples themselves: the same for
/// every sample of a run, and carried in a recording's header so that a replay on another
/// host reads the numbers as the recorded host meant them. (One part moves: what each hook's
/// programs missed so far, `HookStatus::missed`, which a live source updates at every check
/// and a recording does not carry.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceFacts {
    /// The kernel release (or what a simulation calls itself).
    pub kernel: String,
    /// Bytes per page on the sampled host (inflight bytes, ring memory in the advice).
    pub page_size: u64,
    /// Which hooks fed the counters.
    pub coverage: Coverage,
    /// Per hook: the backend that served it, or why none did.
    pub hooks: Vec<HookStatus>,
    /// `enum skb_drop_reason` names by value.
    pub drop_reasons: HashMap<u32, String>,
    /// The detail level hooked at (`--detail`).
    pub detail: Detail,
    /// Whether the programs read a pool or page they hold as a plain number through
    /// `bpf_rdonly_cast` (a load each) rather than `bpf_probe_read_kernel` (a helper call
    /// each): see `probes/cast.rs`. False for a replay or a simulation.
    pub cast_reads: bool,
    /// Pools show their kernel address (`--show-addresses`, local commands run by root).
    pub show_addresses: bool,
    /// Whether the kernel timed the programs, for ppscope's own cost (doctor says which).
    pub bpf_stats: BpfStats,
    /// Which of the programs' skipped runs the kernel counts (`probes/skipped.rs`; doctor says).
    pub skipped_runs_counted: SkippedRunsCounted,
}

/// Which programs' skipped runs the kernel counts (it does not nest tracing programs, and
/// counts each run it skips), from its BTF. Nothing for a replay or a simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkippedRunsCounted {
    /// fentry, fexit (Linux 5.11+: `bpf_prog_info.recursion_misses`).
    pub trampolines: bool,
    /// kprobes, kretprobes and tracepoints, `tp_btf` and raw (counted since 6.7 and 6.1;
    /// taken as counted where BTF has the kprobe link info's `missed`, of 6.7).
    pub kprobes_and_tracepoints: bool,
}

/// The kernel's BPF run-time stats as a live source found them. They time every BPF program
/// on the host, so ppscope turns them on only when asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BpfStats {
    /// Not asked for (or not a live source): ppscope's own cost is unknown.
    #[default]
    Off,
    /// On while ppscope runs: `--bpf-stats`.
    Asked,
    /// `--bpf-stats` was refused (the kernel wants CAP_SYS_ADMIN).
    Refused,
    /// On by the administrator's `kernel.bpf_stats_enabled` sysctl.
    Sysctl,
}

impl BpfStats {
    /// Whether ppscope's programs are timed.
    pub fn on(self) -> bool {
        matches!(self, BpfStats::Asked | BpfStats::Sysctl)
    }
}

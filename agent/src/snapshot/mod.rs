//! The snapshot: what every consumer (report, export, dashboard) receives. Plain serde
//! types and the figures read off them; no I/O and nothing that knows where the numbers came
//! from. `crate::model` fills them from samples; `crate::pipeline` assembles one.
use std::collections::BTreeMap;

use ppscope_common::SiteStats;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod health;
mod hooks;
pub use hooks::{
    Backend, Detail, Group, HookLoad, HookMissed, HookStatus, MissedNote, ProfileBasis,
    LEFT_OFF_LIGHT, MODULE_NOT_LOADED,
};
mod netlink;
pub use netlink::{NetlinkPoolStats, NetlinkPoolView, NetlinkSourceView};
pub(crate) mod advice;
pub use advice::{Advice, Confidence, ConfidenceLevel, CurvePoint, Knob, SimOutcome, Verdict};

/// NAPI polling of one device over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NapiView {
    pub polls: u64,
    pub work: u64,
    pub work_per_poll: Option<f64>,
    /// Polls that used their whole budget: the device had more packets than one poll takes.
    pub full_budget_polls: u64,
    pub full_budget_share: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DropView {
    pub reason: u32,
    /// The `enum skb_drop_reason` name, from BTF.
    pub reason_name: Option<String>,
    pub count: u64,
}

/// A device whose pools are shown: its NAPI work and its drops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceView {
    #[serde(skip)]
    pub netdev: u64,
    pub ifname: Option<String>,
    pub ifindex: Option<u32>,
    pub napi_id: Option<u32>,
    pub napi: Option<NapiView>,
    pub drops_total: Option<u64>,
    pub drops: Vec<DropView>,
}

/// One device in one step of the timeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceStep {
    #[serde(skip)]
    pub netdev: u64,
    pub ifname: Option<String>,
    /// Each figure is None (unknown, `?`) where no hook on this kernel counts it.
    pub allocs: Option<u64>,
    pub slow: Option<u64>,
    pub ring_full: Option<u64>,
    /// Pages that entered / left the device's pools (tracepoints: every backend has them).
    pub pages_in: Option<u64>,
    pub pages_out: Option<u64>,
    pub napi_polls: Option<u64>,
    pub napi_full_budget: Option<u64>,
    pub drops: Option<u64>,
}

impl DeviceStep {
    /// Whether anything known moved in this step.
    pub fn moved(&self) -> bool {
        [
            self.allocs,
            self.slow,
            self.ring_full,
            self.pages_in,
            self.pages_out,
            self.napi_polls,
            self.drops,
        ]
        .iter()
        .any(|v| v.unwrap_or(0) > 0)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TimelineStep {
    /// Seconds since the window started, at the end of this step.
    pub t: f64,
    pub devices: Vec<DeviceStep>,
}

/// One measured site over an interval: latency, and the site's value where it has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SiteView {
    pub calls: u64,
    pub latency: Option<Latency>,
    /// Sum of the value (frags freed, NAPI work) over the interval.
    pub value_sum: Option<u64>,
    /// Distribution of the value per call (log2 buckets; p50/p99/max are bucket edges).
    pub value: Option<Latency>,
    /// value_sum / calls.
    pub value_per_call: Option<f64>,
    /// Total time / value_sum: e.g. ns per frag freed.
    pub ns_per_value: Option<f64>,
    /// Calls that returned an error.
    pub errors: u64,
}

impl SiteView {
    pub fn from_stats(s: &SiteStats, has_value: bool) -> Self {
        let value = has_value
            .then(|| Latency::from_log2(&s.value_hist, s.value_sum))
            .flatten();
        Self {
            calls: s.calls,
            latency: Latency::from_log2(&s.ns_hist, s.ns_sum),
            value_sum: has_value.then_some(s.value_sum),
            value,
            value_per_call: if has_value {
                ratio(s.value_sum, s.calls)
            } else {
                None
            },
            // Only where calls were timed (a simulation counts calls but not time).
            ns_per_value: if has_value && s.value_sum > 0 && s.ns_hist.iter().any(|n| *n > 0) {
                Some(s.ns_sum as f64 / s.value_sum as f64)
            } else {
                None
            },
            errors: s.errors,
        }
    }
}

/// devmem TCP: `SO_DEVMEM_DONTNEED` frees, buffer returns, provider allocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevmemView {
    /// `sock_devmem_dontneed`: latency and frags freed per call.
    pub dontneed: Option<SiteView>,
    /// `net_devmem_free_dmabuf`: one buffer back to the dmabuf's gen_pool.
    pub free: Option<SiteView>,
    /// Memory-provider allocations (devmem, io_uring zcrx), all pools.
    pub provider_alloc: Option<SiteView>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GveQueueView {
    pub queue: u32,
    /// NAPI poll (`gve_rx_poll_dqo`): duration, and work per poll as the value.
    pub poll: SiteView,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GveView {
    /// `gve_alloc_buffer` latency.
    pub alloc: Option<SiteView>,
    pub queues: Vec<GveQueueView>,
}

/// Why a snapshot has no [`OverheadView`], as the reports say it.
pub const OWN_COST_UNKNOWN: &str = "BPF run-time stats were not on for ppscope: --bpf-stats \
(CAP_SYS_ADMIN) or kernel.bpf_stats_enabled=1 turns them on, at a cost to every BPF program on \
the host; a replay has them if its recording was made so";

/// ppscope's own cost over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OverheadView {
    pub runs: u64,
    pub run_ns: u64,
    pub ns_per_run: Option<f64>,
    /// Share of one CPU spent in ppscope's programs.
    pub cpu_share: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AllocSplit {
    pub cache: Option<u64>,
    pub ring: Option<u64>,
    pub slow: Option<u64>,
    /// All allocation calls seen.
    pub total: Option<u64>,
    /// Refills that found the ring empty (each is followed by a slow-path call).
    pub ring_empty: Option<u64>,
    /// Pages moved from the ring to the cache by refills.
    pub ring_pages: Option<u64>,
    /// Fragment allocator calls (shown apart: not page allocations).
    pub frag_calls: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecycleSplit {
    pub cached: Option<u64>,
    pub ring: Option<u64>,
    pub ring_full: Option<u64>,
    pub total: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PageFlow {
    /// Pages that entered the pool from the page allocator or a memory provider.
    pub allocated: Option<u64>,
    /// Pages that left the pool (ring full, not recyclable, teardown).
    pub released: Option<u64>,
}

/// A log2 latency histogram and the figures read off it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Latency {
    pub count: u64,
    /// Upper edges (exclusive) in ns of the buckets holding the quantile: a bound, not a mean.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u64,
    /// Count per log2 bucket: bucket i holds [2^i, 2^(i+1)) ns, and the last (31) every
    /// duration from 2^31 ns on (the kernel clamps; its quantile edge is then a floor).
    pub buckets: Vec<u64>,
}

impl Latency {
    pub fn from_log2(buckets: &[u64], sum_ns: u64) -> Option<Self> {
        let count: u64 = buckets.iter().sum();
        if count == 0 {
            return None;
        }
        let edge = |i: usize| 1u64 << (i + 1).min(63);
        let quantile = |q: f64| {
            let rank = ((q * count as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (i, n) in buckets.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return edge(i);
                }
            }
            edge(buckets.len() - 1)
        };
        let top = buckets.iter().rposition(|n| *n > 0).unwrap_or(0);
        let last = buckets.iter().rposition(|n| *n > 0).map_or(0, |i| i + 1);
        Some(Self {
            count,
            p50_ns: quantile(0.50),
            p99_ns: quantile(0.99),
            max_ns: edge(top),
            sum_ns,
            buckets: buckets[..last].to_vec(),
        })
    }
}

/// A log2 distribution of a count (run lengths, ring fill): bucket edges, not means.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Distribution {
    pub samples: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    /// Samples per log2 bucket: bucket i holds [2^i, 2^(i+1)).
    pub buckets: Vec<u64>,
}

impl Distribution {
    pub fn from_log2(buckets: &[u64]) -> Option<Self> {
        let l = Latency::from_log2(buckets, 0)?;
        Some(Self {
            samples: l.count,
            p50: l.p50_ns,
            p99: l.p99_ns,
            max: l.max_ns,
            buckets: l.buckets,
        })
    }
}

/// The burst profile the kernel keeps per pool: how far recycles overran the ring, how far
/// allocations drained it, and how full it was when it mattered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BurstView {
    /// Runs of consecutive recycles that found the ring full (pages per run).
    pub ring_full_runs: Option<Distribution>,
    /// Runs of consecutive refills that found the ring empty.
    pub empty_ring_runs: Option<Distribution>,
    /// Ring fill at refills, slow paths and releases (a ring full to its producers, its next
    /// slot taken, counts as its size: the kernel clears taken slots in batches). Without the
    /// ring's size known, the releases into a full ring are left out (fewer samples than
    /// pages released). Refills that took pages are sampled, one in 8 per pool and CPU
    /// counting for the 8, so samples match events within a few per CPU.
    pub ring_fill: Option<Distribution>,
}

/// A pool the driver destroyed while pages were still out of it: the kernel retries its
/// release every second until they come back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeardownView {
    /// Release attempts over the interval.
    pub attempts: u64,
    /// Pages still out of the pool at the last attempt.
    pub inflight_pages: i64,
}

/// What identifies a pool from one snapshot to the next: its kernel address, or, for a pool a
/// window shows from the kernel's stats alone, its netlink id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKey {
    Addr(u64),
    Netlink(u32),
}

/// One pool over one interval.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PoolView {
    /// The pool's name: `netlink:N`, the kernel's netlink id (Linux 6.8+), or `ppscope:N`,
    /// ppscope's own id where the kernel gives none (stable while the pool lives). Never its
    /// kernel address, which would hand KASLR to anyone who can read the output.
    pub pool: String,
    /// The kernel address of the `struct page_pool` (`--show-addresses` only: a local
    /// command run by root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The kernel address as a number, the key pools are joined by inside the process (0 for
    /// a pool known only from netlink, or read from an agent).
    #[serde(skip)]
    pub addr: u64,
    /// Kernel address of its net_device (0: unknown), to join NAPI and drop records.
    #[serde(skip)]
    pub netdev: u64,
    pub ifname: Option<String>,
    /// The device's driver (virtio_net, gve, mlx5_core; veth for the software pair).
    pub driver: Option<String>,
    pub ifindex: Option<u32>,
    pub queue: Option<u32>,
    pub netlink_id: Option<u32>,
    pub pool_size: Option<u32>,
    pub ring_size: Option<u32>,
    pub order: Option<u32>,
    pub memory_provider: Option<bool>,
    /// The gve rx queue this pool serves (seen at pool creation).
    pub gve_queue: Option<u32>,
    /// Entries in the ptr_ring at the pool's last refill, slow path or page release (during
    /// a run of releases into a full ring, up to 63 releases a CPU behind); the ring's size
    /// when a release found it full to its producers (its next slot taken: the kernel clears
    /// taken slots in batches).
    pub ring_fill: Option<u32>,
    /// The device's configured rx ring (ethtool -g), where the driver reports it.
    pub device_rx_ring: Option<u32>,
    /// Pages out of the pool (in use by the driver, the stack or sockets), read from the
    /// pool's hold/release counters at that same moment, and the memory they pin.
    pub inflight_pages: Option<u32>,
    pub inflight_bytes: Option<u64>,
    /// Memory-provider allocations of this pool and their mean time.
    pub provider_allocs: Option<u64>,
    pub provider_alloc_mean_ns: Option<f64>,
    pub alloc: AllocSplit,
    pub recycle: RecycleSplit,
    pub pages: PageFlow,
    /// Where `alloc` came from when not from the probes: "kernel" (its own page_pool stats).
    pub alloc_source: Option<std::borrow::Cow<'static, str>>,
    pub recycle_source: Option<std::borrow::Cow<'static, str>>,
    /// The kernel's netlink view of this pool (same network namespace only).
    #[serde(rename = "kernel")]
    pub netlink: Option<NetlinkPoolView>,
    /// ring / (ring + slow): when the alloc cache ran dry, how often the ring refilled it.
    pub ring_hit_rate: Option<f64>,
    /// (cache + ring) / all allocations.
    pub fast_path_rate: Option<f64>,
    pub slow_path_latency: Option<Latency>,
    /// The kernel-side burst profile over the interval.
    pub bursts: BurstView,
    /// Ring-size advice from this pool's burst profile (None: too little measured).
    pub advice: Option<Advice>,
    /// Release attempts after the pool was destroyed (None: not being destroyed, or the
    /// `pool_release` hook is not attached).
    #[serde(default)]
    pub teardown: Option<TeardownView>,
    /// Packets its device received over the interval, for the health verdict where nothing
    /// splits allocations (None: the napi_poll hook is off, or its device is not known or
    /// received nothing).
    #[serde(default)]
    pub device_packets: Option<health::DevicePackets>,
}

impl PoolView {
    /// A pool known only from netlink (no probe saw it in the window).
    pub fn unprobed(netlink_id: u32, ifindex: Option<u32>, ifname: Option<String>) -> Self {
        Self {
            pool: pool_name(Some(netlink_id), 0),
            address: None,
            addr: 0,
            netdev: 0,
            ifname,
            driver: None,
            ifindex,
            queue: None,
            netlink_id: Some(netlink_id),
            pool_size: None,
            ring_size: None,
            order: None,
            memory_provider: None,
            gve_queue: None,
            ring_fill: None,
            device_rx_ring: None,
            inflight_pages: None,
            inflight_bytes: None,
            provider_allocs: None,
            provider_alloc_mean_ns: None,
            alloc: AllocSplit::default(),
            recycle: RecycleSplit::default(),
            pages: PageFlow::default(),
            alloc_source: None,
            recycle_source: None,
            netlink: None,
            ring_hit_rate: None,
            fast_path_rate: None,
            slow_path_latency: None,
            bursts: BurstView::default(),
            advice: None,
            teardown: None,
            device_packets: None,
        }
    }

    /// What identifies this pool from one snapshot to the next.
    pub fn key(&self) -> PoolKey {
        match (self.addr, self.netlink_id) {
            (0, Some(id)) => PoolKey::Netlink(id),
            (addr, _) => PoolKey::Addr(addr),
        }
    }

    /// Activity used to order pools: the busiest first.
    pub fn activity(&self) -> u64 {
        self.alloc.total.unwrap_or(0)
            + self.recycle.total.unwrap_or(0)
            + self.pages.allocated.unwrap_or(0)
            + self.pages.released.unwrap_or(0)
            // A destroyed pool stuck with pages out moves only here: it stays listed.
            + self.teardown.as_ref().map_or(0, |t| t.attempts)
    }

    /// How a person names this pool: `vnet1 q0`, `veth1`, or its name (`netlink:7`).
    pub fn label(&self) -> String {
        match (&self.ifname, self.queue) {
            (Some(n), Some(q)) => format!("{n} q{q}"),
            (Some(n), None) => n.clone(),
            (None, _) => self.pool.clone(),
        }
    }
}

/// How a pool is named outside the process: by the kernel's netlink id where the pool has one
/// (Linux 6.8+; `ynl --family netdev --dump page-pool-get` shows the same), else by ppscope's
/// own id (`model::PoolIds`); never by its kernel address.
pub fn pool_name(netlink_id: Option<u32>, ppscope_id: u64) -> String {
    match netlink_id {
        Some(id) => format!("netlink:{id}"),
        None => format!("ppscope:{ppscope_id}"),
    }
}

/// What every consumer receives: all pools over one interval, and how they were measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    pub kernel: String,
    pub duration_seconds: f64,
    pub pools: Vec<PoolView>,
    /// None when none of the devmem hooks is attached.
    pub devmem: Option<DevmemView>,
    /// None when the gve module is not loaded (or none of its hooks attached).
    pub gve: Option<GveView>,
    /// Pages leaving their pools (all pools): how long the return takes. A sample, not a
    /// count: a return interrupted on its CPU by another one is not timed.
    pub page_return: Option<SiteView>,
    /// ppscope's own programs: None when the kernel kept no BPF run-time stats (they are on
    /// with `--bpf-stats` or the `kernel.bpf_stats_enabled` sysctl), or the source has none.
    pub overhead: Option<OverheadView>,
    /// What the kernel's netlink page-pool interface gave (None: not asked).
    #[serde(rename = "kernel_source")]
    pub netlink: Option<NetlinkSourceView>,
    /// The devices of the pools shown: NAPI work and drops over the window.
    pub devices: Vec<DeviceView>,
    /// Per step (one interval) per device: the chain slow path → NAPI → drops, in time.
    pub timeline: Vec<TimelineStep>,
    /// Per hook: the backend that served it and where, or why nothing did.
    pub backends: BTreeMap<String, HookStatus>,
    /// The detail level the source hooked at (`--detail`); None for a simulation.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// Why no pool of a source can be advised, whatever it waits for: the advice replays a pool's
/// burst profile, and these hooks are what make one ([`ProfileBasis`]).
pub const ADVICE_NEEDS: &str = "it needs the refill hook (fentry or kprobes) with page_hold and page_release, or the alloc and recycle hooks, which this kernel does not give";

impl Snapshot {
    /// Whether the source attached `hook` (by its name in `backends`).
    fn hook_attached(&self, hook: &str) -> bool {
        self.backends.get(hook).is_some_and(HookStatus::attached)
    }

    /// [`ADVICE_NEEDS`] when the hooks the advice replays are missing from this snapshot's
    /// source; None when they are attached, or when the source names no hooks (a simulation).
    pub fn advice_unavailable(&self) -> Option<&'static str> {
        if self.backends.is_empty() {
            return None;
        }
        let on = |h: &str| self.hook_attached(h);
        ProfileBasis::from_hooks(on)
            .is_none()
            .then_some(ADVICE_NEEDS)
    }

    /// What a window that shows no pool may hide: said after "no page_pool activity". A
    /// healthy pool under light traffic recycles its pages in its own cache and never refills
    /// it or calls the page allocator, so where no hook sees every allocation and netlink's
    /// page_pool stats are not read, its traffic is invisible and "no traffic?" would send the
    /// reader the wrong way.
    pub fn quiet_hint(&self) -> QuietHint {
        let on = |h: &str| self.hook_attached(h);
        // A pool serving packets allocates now and then: a fragment taken from its current
        // page passes only the fragment hook, but each new page passes this one.
        if self.backends.is_empty() || on("alloc") {
            QuietHint::NoTraffic
        } else if self.netlink.as_ref().is_some_and(|k| k.stats_available) {
            QuietHint::Unlisted {
                refills: on("refill"),
            }
        } else {
            QuietHint::HealthyUnseen {
                refills: on("refill"),
            }
        }
    }

    /// For a report, after the hint: what the kernel's stats cover and what would attach the
    /// allocation hook. None under [`QuietHint::NoTraffic`].
    pub fn quiet_why(&self) -> Option<String> {
        let hooks = match self.detail {
            Some(Detail::Light) => {
                "left off by --detail light (--detail full attaches it where fentry or kprobes \
                 work)"
            }
            _ => "not attached on this kernel (ppscope doctor says why)",
        };
        let stats = match self.quiet_hint() {
            QuietHint::NoTraffic => return None,
            QuietHint::Unlisted { .. } => {
                "read for the pools netlink lists in this network \
                namespace: not another namespace's, nor a pool its driver made without a \
                netdev (veth's)"
            }
            QuietHint::HealthyUnseen { .. } => self
                .netlink
                .as_ref()
                .and_then(|k| k.stats_missing.as_deref().or(k.error.as_deref()))
                .unwrap_or("not asked by this source"),
        };
        Some(format!(
            "Kernel page_pool stats: {stats}. The allocation hook: {hooks}."
        ))
    }

    /// A snapshot of these pools only: no devmem, gve, device or timeline section, no hooks.
    pub fn with_pools(
        kernel: impl Into<String>,
        duration_seconds: f64,
        pools: Vec<PoolView>,
    ) -> Self {
        Self {
            kernel: kernel.into(),
            duration_seconds,
            pools,
            devmem: None,
            gve: None,
            page_return: None,
            overhead: None,
            netlink: None,
            devices: Vec::new(),
            timeline: Vec::new(),
            backends: Default::default(),
            detail: None,
        }
    }
}

/// Why a window shows no pool ([`Snapshot::quiet_hint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuietHint {
    /// Every allocation is seen (or the source names no hooks: a simulation): no pool moved.
    NoTraffic,
    /// No allocation hook, the kernel's stats read: a pool they do not cover shows only at a
    /// refill (when `refills` is hooked) or a page to or from the page allocator.
    Unlisted { refills: bool },
    /// No allocation hook and no kernel stats: every pool shows only there.
    HealthyUnseen { refills: bool },
}

impl QuietHint {
    /// The hint, short enough for the dashboard's two-line headline at 80 columns after "No
    /// page_pool activity in this interval (".
    pub fn text(self) -> &'static str {
        match self {
            QuietHint::NoTraffic => "no traffic on a page_pool driver?",
            QuietHint::Unlisted { refills: true } => {
                "no traffic here? pools netlink does not list show only at refills or the page \
                 allocator"
            }
            QuietHint::Unlisted { refills: false } => {
                "no traffic here? pools netlink does not list show only at the page allocator"
            }
            QuietHint::HealthyUnseen { refills: true } => {
                "light traffic is unseen here: a pool shows only at refills or the page allocator"
            }
            QuietHint::HealthyUnseen { refills: false } => {
                "light traffic is unseen here: a pool shows only at the page allocator"
            }
        }
    }
}

/// `num / den`, unknown (not 0 or NaN) when nothing was counted.
pub fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

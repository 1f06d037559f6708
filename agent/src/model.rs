//! The model: raw per-pool counters in, a [`Snapshot`] of what they mean out.
//!
//! Pure functions only, so every split and rate here is unit-tested without a kernel.
//!
//! Allocation split (per allocation call, the kernel's own `alloc_*` stats definitions):
//! **cache** = served from the alloc cache, **ring** = served by a refill from the ptr_ring,
//! **slow** = served by the slow path (page allocator) or a memory provider.
//! Recycle split (per page): **cached** = into the alloc cache (direct), **ring** = into the
//! ptr_ring, **ring_full** = left the pool instead (ring full, or the page was not recyclable).
use std::{collections::HashMap, time::Instant};

use ppscope_common::{
    site_stat, DeviceIdentity, DropKey, NapiCounters, PoolCounters, PoolIdentity, PoolState,
    SiteStats, LATENCY_BUCKETS,
};
use serde::{Deserialize, Serialize};

use crate::probes::HookStatus;

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
    /// The alloc cache's layout is known (needed to see direct recycling).
    pub cache_layout: bool,
    pub provider_alloc: bool,
    pub dontneed: bool,
    pub devmem_free: bool,
    pub gve_alloc: bool,
    pub gve_poll: bool,
    pub napi: bool,
    pub drops: bool,
    pub page_return: bool,
}

#[derive(Debug, Clone, Default)]
pub struct RawPool {
    pub counters: PoolCounters,
    pub identity: Option<PoolIdentity>,
    /// The gve rx queue this pool serves, when gve's pool creation was seen.
    pub gve_queue: Option<u32>,
    /// Ring fill and inflight pages as of the pool's last rare event.
    pub state: Option<PoolState>,
}

/// Cumulative run time and run count of ppscope's own programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramRuntime {
    pub run_ns: u64,
    pub runs: u64,
}

/// Cumulative counters of every pool at one instant.
#[derive(Debug, Clone)]
pub struct RawSample {
    pub at: Instant,
    pub pools: HashMap<u64, RawPool>,
    /// Whole-site stats, indexed by `site_stat::*`.
    pub sites: [SiteStats; site_stat::COUNT as usize],
    /// gve NAPI poll per rx queue.
    pub gve_poll: HashMap<u32, SiteStats>,
    /// NAPI polls per NAPI instance, and the device of each instance.
    pub napi: HashMap<u64, NapiCounters>,
    pub napi_devices: HashMap<u64, u64>,
    /// Devices seen by the NAPI and drop hooks, by net_device address.
    pub devices: HashMap<u64, DeviceIdentity>,
    /// Drops per (device, reason).
    pub drops: HashMap<DropKey, u64>,
    /// None when BPF run-time statistics could not be switched on.
    pub runtime: Option<ProgramRuntime>,
}

impl RawSample {
    pub fn empty(at: Instant) -> Self {
        Self {
            at,
            pools: HashMap::new(),
            sites: [SiteStats::default(); site_stat::COUNT as usize],
            gve_poll: HashMap::new(),
            napi: HashMap::new(),
            napi_devices: HashMap::new(),
            devices: HashMap::new(),
            drops: HashMap::new(),
            runtime: None,
        }
    }
}

/// `into += other`, field by field (summing per-CPU values).
pub fn accumulate(into: &mut PoolCounters, other: &PoolCounters) {
    macro_rules! add {
        ($($f:ident),*) => { $( into.$f = into.$f.wrapping_add(other.$f); )* };
    }
    ppscope_common::hot_fields!(add);
    for (into, other) in [
        (&mut into.slow_hist, &other.slow_hist),
        (&mut into.full_run_hist, &other.full_run_hist),
        (&mut into.empty_run_hist, &other.empty_run_hist),
        (&mut into.fill_hist, &other.fill_hist),
    ] {
        for (a, b) in into.iter_mut().zip(other.iter()) {
            *a = a.wrapping_add(*b);
        }
    }
    // Runs in progress are per-CPU state, not counts: the longest one stands for them.
    into.full_run = into.full_run.max(other.full_run);
    into.empty_run = into.empty_run.max(other.empty_run);
}

/// `later - earlier`, field by field. A counter that went backwards (the pool was evicted and
/// seen again) restarts from its new value rather than wrapping to a huge number.
pub fn delta(later: &PoolCounters, earlier: &PoolCounters) -> PoolCounters {
    let mut d = PoolCounters::default();
    macro_rules! sub {
        ($($f:ident),*) => { $( d.$f = later.$f.checked_sub(earlier.$f).unwrap_or(later.$f); )* };
    }
    ppscope_common::hot_fields!(sub);
    for (out, l, e) in [
        (&mut d.slow_hist, &later.slow_hist, &earlier.slow_hist),
        (
            &mut d.full_run_hist,
            &later.full_run_hist,
            &earlier.full_run_hist,
        ),
        (
            &mut d.empty_run_hist,
            &later.empty_run_hist,
            &earlier.empty_run_hist,
        ),
        (&mut d.fill_hist, &later.fill_hist, &earlier.fill_hist),
    ] {
        for i in 0..LATENCY_BUCKETS {
            out[i] = l[i].checked_sub(e[i]).unwrap_or(l[i]);
        }
    }
    d.full_run = later.full_run;
    d.empty_run = later.empty_run;
    d
}

/// `into += other` for site stats (summing per-CPU values).
pub fn accumulate_site(into: &mut SiteStats, other: &SiteStats) {
    into.calls = into.calls.wrapping_add(other.calls);
    into.ns_sum = into.ns_sum.wrapping_add(other.ns_sum);
    into.value_sum = into.value_sum.wrapping_add(other.value_sum);
    into.errors = into.errors.wrapping_add(other.errors);
    for i in 0..LATENCY_BUCKETS {
        into.ns_hist[i] = into.ns_hist[i].wrapping_add(other.ns_hist[i]);
        into.value_hist[i] = into.value_hist[i].wrapping_add(other.value_hist[i]);
    }
}

/// `later - earlier` for site stats, restarting where a value went backwards.
pub fn delta_site(later: &SiteStats, earlier: &SiteStats) -> SiteStats {
    let d = |a: u64, b: u64| a.checked_sub(b).unwrap_or(a);
    let mut out = SiteStats {
        calls: d(later.calls, earlier.calls),
        ns_sum: d(later.ns_sum, earlier.ns_sum),
        value_sum: d(later.value_sum, earlier.value_sum),
        errors: d(later.errors, earlier.errors),
        ..Default::default()
    };
    for i in 0..LATENCY_BUCKETS {
        out.ns_hist[i] = d(later.ns_hist[i], earlier.ns_hist[i]);
        out.value_hist[i] = d(later.value_hist[i], earlier.value_hist[i]);
    }
    out
}

/// NAPI polling of one device over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NapiView {
    pub polls: u64,
    pub work: u64,
    pub work_per_poll: Option<f64>,
    /// Polls that used their whole budget: the device had more packets than one poll takes.
    pub full_budget_polls: u64,
    pub full_budget_share: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DropView {
    pub reason: u32,
    /// The `enum skb_drop_reason` name, from BTF.
    pub reason_name: Option<String>,
    pub count: u64,
}

/// A device whose pools are shown: its NAPI work and its drops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStep {
    #[serde(skip)]
    pub netdev: u64,
    pub ifname: Option<String>,
    pub allocs: u64,
    pub slow: u64,
    pub ring_full: u64,
    /// Pages that entered / left the device's pools (tracepoints: every backend has them).
    pub pages_in: u64,
    pub pages_out: u64,
    pub napi_polls: u64,
    pub napi_full_budget: u64,
    pub drops: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineStep {
    /// Seconds since the window started, at the end of this step.
    pub t: f64,
    pub devices: Vec<DeviceStep>,
}

fn unique_netdevs(pools: &[PoolView]) -> Vec<u64> {
    let mut v: Vec<u64> = pools.iter().map(|p| p.netdev).filter(|d| *d != 0).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn device_name(id: &DeviceIdentity) -> Option<String> {
    ifname(&id.ifname)
}

fn napi_delta(earlier: &RawSample, later: &RawSample, netdev: u64) -> NapiCounters {
    let mut total = NapiCounters::default();
    for (napi, now) in &later.napi {
        if later.napi_devices.get(napi) != Some(&netdev) {
            continue;
        }
        let before = earlier.napi.get(napi).copied().unwrap_or_default();
        total.polls += now.polls.saturating_sub(before.polls);
        total.work += now.work.saturating_sub(before.work);
        total.full_budget += now.full_budget.saturating_sub(before.full_budget);
        total.budget += now.budget.saturating_sub(before.budget);
    }
    total
}

fn drops_delta(earlier: &RawSample, later: &RawSample, netdev: u64) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = later
        .drops
        .iter()
        .filter(|(k, _)| k.netdev == netdev)
        .map(|(k, n)| {
            let before = earlier.drops.get(k).copied().unwrap_or(0);
            (k.reason, n.saturating_sub(before))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// NAPI and drops of the given devices over the interval.
pub fn device_views(
    earlier: &RawSample,
    later: &RawSample,
    netdevs: &[u64],
    cov: &Coverage,
) -> Vec<DeviceView> {
    netdevs
        .iter()
        .map(|&netdev| {
            let id = later.devices.get(&netdev);
            let napi = cov.napi.then(|| {
                let n = napi_delta(earlier, later, netdev);
                NapiView {
                    polls: n.polls,
                    work: n.work,
                    work_per_poll: ratio(n.work, n.polls),
                    full_budget_polls: n.full_budget,
                    full_budget_share: ratio(n.full_budget, n.polls),
                }
            });
            let drops: Vec<DropView> = drops_delta(earlier, later, netdev)
                .into_iter()
                .map(|(reason, count)| DropView {
                    reason,
                    reason_name: None,
                    count,
                })
                .collect();
            DeviceView {
                netdev,
                ifname: id.and_then(device_name),
                ifindex: id.map(|i| i.ifindex),
                napi_id: id.map(|i| i.napi_id).filter(|n| *n != 0),
                napi,
                drops_total: cov.drops.then(|| drops.iter().map(|d| d.count).sum()),
                drops,
            }
        })
        .collect()
}

/// One step of the timeline: per device of `netdevs`, what moved between two samples.
pub fn timeline_step(
    t: f64,
    earlier: &RawSample,
    later: &RawSample,
    netdevs: &[u64],
) -> TimelineStep {
    let zero = RawPool::default();
    let devices = netdevs
        .iter()
        .map(|&netdev| {
            let mut step = DeviceStep {
                netdev,
                ifname: later.devices.get(&netdev).and_then(device_name),
                ..Default::default()
            };
            for (addr, now) in &later.pools {
                let Some(id) = &now.identity else { continue };
                if id.netdev != netdev {
                    continue;
                }
                if step.ifname.is_none() {
                    step.ifname = ifname(&id.ifname);
                }
                let before = earlier.pools.get(addr).unwrap_or(&zero);
                let d = delta(&now.counters, &before.counters);
                step.allocs += d.alloc_calls;
                step.slow += d.slow_calls + d.mp_alloc_calls;
                step.ring_full += d.put_released + d.bulk_released;
                step.pages_in += d.hold_pages;
                step.pages_out += d.release_pages;
            }
            let n = napi_delta(earlier, later, netdev);
            step.napi_polls = n.polls;
            step.napi_full_budget = n.full_budget;
            step.drops = drops_delta(earlier, later, netdev)
                .iter()
                .map(|(_, c)| c)
                .sum();
            step
        })
        .collect();
    TimelineStep { t, devices }
}

/// Ring fill and inflight pages (with the memory they pin) from a pool's last state read.
pub fn apply_state(view: &mut PoolView, st: &PoolState) {
    if st.known & 1 != 0 {
        view.ring_fill = Some(st.ring_fill);
    }
    if st.known & 2 != 0 {
        view.inflight_pages = Some(st.inflight);
        let page = crate::kernel::page_size() << view.order.unwrap_or(0);
        view.inflight_bytes = Some(st.inflight as u64 * page);
    }
}

/// The net_devices of every pool in a sample (for timeline steps).
pub fn pool_netdevs(sample: &RawSample) -> Vec<u64> {
    let mut v: Vec<u64> = sample
        .pools
        .values()
        .filter_map(|p| p.identity.map(|i| i.netdev))
        .filter(|d| *d != 0)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Keeps, in each step, the devices of the report, and only steps where anything moved.
pub fn keep_steps_of(steps: Vec<TimelineStep>, devices: &[DeviceView]) -> Vec<TimelineStep> {
    let wanted: Vec<u64> = devices.iter().map(|d| d.netdev).collect();
    steps
        .into_iter()
        .map(|mut s| {
            s.devices.retain(|d| {
                wanted.contains(&d.netdev)
                    && (d.allocs
                        + d.slow
                        + d.ring_full
                        + d.pages_in
                        + d.pages_out
                        + d.napi_polls
                        + d.drops)
                        > 0
            });
            s
        })
        .filter(|s| !s.devices.is_empty())
        .collect()
}

/// Names drop reasons from the kernel's `enum skb_drop_reason`.
pub fn name_drop_reasons(snap: &mut Snapshot, names: &HashMap<u32, String>) {
    for d in &mut snap.devices {
        for drop in &mut d.drops {
            drop.reason_name = names
                .get(&drop.reason)
                .map(|n| n.trim_start_matches("SKB_DROP_REASON_").to_string());
        }
    }
}

/// One measured site over an interval: latency, and the site's value where it has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DevmemView {
    /// `sock_devmem_dontneed`: latency and frags freed per call.
    pub dontneed: Option<SiteView>,
    /// `net_devmem_free_dmabuf`: one buffer back to the dmabuf's gen_pool.
    pub free: Option<SiteView>,
    /// Memory-provider allocations (devmem, io_uring zcrx), all pools.
    pub provider_alloc: Option<SiteView>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GveQueueView {
    pub queue: u32,
    /// NAPI poll (`gve_rx_poll_dqo`): duration, and work per poll as the value.
    pub poll: SiteView,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GveView {
    /// `gve_alloc_buffer` latency.
    pub alloc: Option<SiteView>,
    pub queues: Vec<GveQueueView>,
}

/// ppscope's own cost over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverheadView {
    pub runs: u64,
    pub run_ns: u64,
    pub ns_per_run: Option<f64>,
    /// Share of one CPU spent in ppscope's programs.
    pub cpu_share: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecycleSplit {
    pub cached: Option<u64>,
    pub ring: Option<u64>,
    pub ring_full: Option<u64>,
    pub total: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageFlow {
    /// Pages that entered the pool from the page allocator or a memory provider.
    pub allocated: Option<u64>,
    /// Pages that left the pool (ring full, not recyclable, teardown).
    pub released: Option<u64>,
}

/// A log2 latency histogram and the figures read off it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    /// Upper edges (exclusive) in ns of the buckets holding the quantile: a bound, not a mean.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u64,
    /// Count per log2 bucket: bucket i holds [2^i, 2^(i+1)) ns.
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstView {
    /// Runs of consecutive recycles that found the ring full (pages per run).
    pub ring_full_runs: Option<Distribution>,
    /// Runs of consecutive refills that found the ring empty.
    pub empty_ring_runs: Option<Distribution>,
    /// Ring fill at refills, slow paths and releases.
    pub ring_fill: Option<Distribution>,
}

/// One pool over one interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolView {
    /// Kernel address of the `struct page_pool`: the only identity when nothing else is known.
    pub pool: String,
    /// The same address as a number (0 for a pool known only from netlink).
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
    /// Entries in the ptr_ring at the pool's last refill, slow path or page release.
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
    pub kernel: Option<crate::kernel_view::KernelPoolView>,
    /// ring / (ring + slow): when the alloc cache ran dry, how often the ring refilled it.
    pub ring_hit_rate: Option<f64>,
    /// (cache + ring) / all allocations.
    pub fast_path_rate: Option<f64>,
    pub slow_path_latency: Option<Latency>,
    /// The kernel-side burst profile over the interval.
    pub bursts: BurstView,
    /// Ring-size advice from this pool's burst profile (None: too little measured).
    pub advice: Option<crate::advice::Advice>,
}

impl PoolView {
    /// A pool known only from netlink (no probe saw it in the window).
    pub fn unprobed(netlink_id: u32, ifindex: Option<u32>) -> Self {
        Self {
            pool: format!("netlink:{netlink_id}"),
            addr: 0,
            netdev: 0,
            ifname: ifindex.and_then(crate::kernel::ifname_of),
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
            kernel: None,
            ring_hit_rate: None,
            fast_path_rate: None,
            slow_path_latency: None,
            bursts: BurstView::default(),
            advice: None,
        }
    }

    /// Activity used to order pools: the busiest first.
    pub fn activity(&self) -> u64 {
        self.alloc.total.unwrap_or(0)
            + self.recycle.total.unwrap_or(0)
            + self.pages.allocated.unwrap_or(0)
            + self.pages.released.unwrap_or(0)
    }

    /// How a person names this pool: `vnet1 q0`, `veth1`, or the pool address.
    pub fn label(&self) -> String {
        match (&self.ifname, self.queue) {
            (Some(n), Some(q)) => format!("{n} q{q}"),
            (Some(n), None) => n.clone(),
            (None, _) => self.pool.clone(),
        }
    }
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

fn ifname(raw: &[u8; 16]) -> Option<String> {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    let name = String::from_utf8_lossy(&raw[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

/// Turns one pool's counters over an interval into what they mean.
pub fn pool_view(
    pool: u64,
    c: &PoolCounters,
    id: Option<&PoolIdentity>,
    cov: &Coverage,
) -> PoolView {
    let known = |bit: u32| id.filter(|i| i.known & bit != 0);
    let ring = cov
        .refill
        .then(|| c.refill_calls.saturating_sub(c.refill_empty));
    let slow = cov.slow.then(|| c.slow_calls + c.mp_alloc_calls);
    // Fewer allocation calls than refills + slow paths means some calls went through a path
    // the alloc hook does not see: then the cache share is unknown, not a made-up 0.
    let total = (cov.alloc && c.alloc_calls >= ring.unwrap_or(0) + slow.unwrap_or(0))
        .then_some(c.alloc_calls);
    let cache = match (total, ring, slow) {
        (Some(t), Some(r), Some(s)) => Some(t - r - s),
        _ => None,
    };
    let alloc = AllocSplit {
        cache,
        ring,
        slow,
        total,
        ring_empty: cov.refill.then_some(c.refill_empty),
        ring_pages: cov.refill.then_some(c.refill_pages),
        frag_calls: cov.alloc.then_some(c.frag_calls),
    };

    let bulk_pages = if cov.recycle_bulk { c.bulk_pages } else { 0 };
    let bulk_released = if cov.recycle_bulk { c.bulk_released } else { 0 };
    let cached = (cov.recycle && cov.cache_layout).then_some(c.put_cached);
    let ring_full = (cov.recycle && cov.release).then(|| c.put_released + bulk_released);
    let recycle_ring = match (cached, ring_full) {
        (Some(cached), Some(full)) => {
            Some((c.put_calls + bulk_pages).saturating_sub(cached + full))
        }
        _ => None,
    };
    let recycle = RecycleSplit {
        cached,
        ring: recycle_ring,
        ring_full,
        total: cov.recycle.then_some(c.put_calls + bulk_pages),
    };

    let fast = match (cache, ring) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    PoolView {
        pool: format!("{pool:#x}"),
        addr: pool,
        netdev: id.map_or(0, |i| i.netdev),
        ifname: known(PoolIdentity::KNOWN_IFNAME).and_then(|i| ifname(&i.ifname)),
        driver: id.and_then(|i| ifname(&i.driver)),
        ifindex: known(PoolIdentity::KNOWN_IFINDEX).map(|i| i.ifindex),
        queue: known(PoolIdentity::KNOWN_QUEUE).map(|i| i.queue_idx),
        netlink_id: known(PoolIdentity::KNOWN_NETLINK_ID).map(|i| i.netlink_id),
        pool_size: known(PoolIdentity::KNOWN_POOL_SIZE).map(|i| i.pool_size),
        ring_size: known(PoolIdentity::KNOWN_RING_SIZE).map(|i| i.ring_size),
        order: known(PoolIdentity::KNOWN_ORDER).map(|i| i.order),
        memory_provider: known(PoolIdentity::KNOWN_MEMORY_PROVIDER)
            .map(|i| i.has_memory_provider != 0),
        gve_queue: None,
        ring_fill: None,
        device_rx_ring: None,
        inflight_pages: None,
        inflight_bytes: None,
        provider_allocs: cov.provider_alloc.then_some(c.mp_alloc_calls),
        provider_alloc_mean_ns: if cov.provider_alloc && c.mp_alloc_calls > 0 {
            Some(c.mp_ns_sum as f64 / c.mp_alloc_calls as f64)
        } else {
            None
        },
        alloc,
        recycle,
        pages: PageFlow {
            allocated: cov.hold.then_some(c.hold_pages),
            released: cov.release.then_some(c.release_pages),
        },
        alloc_source: None,
        recycle_source: None,
        kernel: None,
        ring_hit_rate: match (ring, slow) {
            (Some(r), Some(s)) => ratio(r, r + s),
            _ => None,
        },
        fast_path_rate: match (fast, slow) {
            (Some(f), Some(s)) => ratio(f, f + s),
            _ => None,
        },
        slow_path_latency: if cov.slow {
            Latency::from_log2(&c.slow_hist, c.slow_ns_sum)
        } else {
            None
        },
        bursts: BurstView {
            ring_full_runs: (cov.recycle && cov.release)
                .then(|| Distribution::from_log2(&c.full_run_hist))
                .flatten(),
            empty_ring_runs: cov
                .refill
                .then(|| Distribution::from_log2(&c.empty_run_hist))
                .flatten(),
            ring_fill: Distribution::from_log2(&c.fill_hist),
        },
        advice: None,
    }
}

/// What every consumer receives: all pools over one interval, and how they were measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// ppscope's own programs: None when BPF run-time stats are unavailable.
    pub overhead: Option<OverheadView>,
    /// What the kernel's netlink page-pool interface gave (None: not asked).
    pub kernel_source: Option<crate::kernel_view::KernelSourceView>,
    /// The devices of the pools shown: NAPI work and drops over the window.
    pub devices: Vec<DeviceView>,
    /// Per step (one interval) per device: the chain slow path → NAPI → drops, in time.
    pub timeline: Vec<TimelineStep>,
    /// Per hook: the backend that served it and where, or why nothing did.
    pub backends: std::collections::BTreeMap<String, HookStatus>,
}

impl Snapshot {
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
            kernel_source: None,
            devices: Vec::new(),
            timeline: Vec::new(),
            backends: Default::default(),
        }
    }
}

/// Everything that moved between two samples, busiest pools first.
pub fn snapshot(
    kernel: String,
    earlier: &RawSample,
    later: &RawSample,
    cov: &Coverage,
    hooks: &[HookStatus],
) -> Snapshot {
    let zero = RawPool::default();
    let mut pools: Vec<PoolView> = later
        .pools
        .iter()
        .filter_map(|(addr, now)| {
            let before = earlier.pools.get(addr).unwrap_or(&zero);
            let d = delta(&now.counters, &before.counters);
            (d != PoolCounters::default()).then(|| {
                let id = now.identity.as_ref().or(before.identity.as_ref());
                let mut view = pool_view(*addr, &d, id, cov);
                view.gve_queue = now.gve_queue.or(before.gve_queue);
                if let Some(st) = now.state {
                    apply_state(&mut view, &st);
                }
                view
            })
        })
        .collect();
    pools.sort_by(|a, b| b.activity().cmp(&a.activity()).then(a.pool.cmp(&b.pool)));
    let netdevs: Vec<u64> = unique_netdevs(&pools);
    let mut devices = device_views(earlier, later, &netdevs, cov);
    for d in devices.iter_mut().filter(|d| d.ifname.is_none()) {
        // No NAPI or drop record named it: its pools know the name.
        d.ifname = pools
            .iter()
            .find(|p| p.netdev == d.netdev)
            .and_then(|p| p.ifname.clone());
    }

    let site = |i: u32, on: bool, has_value: bool| {
        on.then(|| {
            let i = i as usize;
            SiteView::from_stats(&delta_site(&later.sites[i], &earlier.sites[i]), has_value)
        })
    };
    let devmem = (cov.dontneed || cov.devmem_free || cov.provider_alloc).then(|| DevmemView {
        dontneed: site(site_stat::DONTNEED, cov.dontneed, true),
        free: site(site_stat::DEVMEM_FREE, cov.devmem_free, false),
        provider_alloc: site(site_stat::PROVIDER_ALLOC, cov.provider_alloc, false),
    });
    let gve = (cov.gve_alloc || cov.gve_poll).then(|| {
        let mut queues: Vec<GveQueueView> = later
            .gve_poll
            .iter()
            .map(|(q, now)| {
                let before = earlier.gve_poll.get(q).copied().unwrap_or_default();
                GveQueueView {
                    queue: *q,
                    poll: SiteView::from_stats(&delta_site(now, &before), true),
                }
            })
            .filter(|q| q.poll.calls > 0)
            .collect();
        queues.sort_by_key(|q| q.queue);
        GveView {
            alloc: site(site_stat::GVE_ALLOC, cov.gve_alloc, false),
            queues,
        }
    });
    let duration = later.at.duration_since(earlier.at).as_secs_f64();
    let overhead = match (earlier.runtime, later.runtime) {
        (Some(a), Some(b)) => {
            let runs = b.runs.saturating_sub(a.runs);
            let run_ns = b.run_ns.saturating_sub(a.run_ns);
            Some(OverheadView {
                runs,
                run_ns,
                ns_per_run: ratio(run_ns, runs),
                cpu_share: if duration > 0.0 {
                    run_ns as f64 / 1e9 / duration
                } else {
                    0.0
                },
            })
        }
        _ => None,
    };
    Snapshot {
        kernel,
        duration_seconds: duration,
        pools,
        devmem,
        gve,
        page_return: site(site_stat::PAGE_RETURN, cov.page_return, false),
        overhead,
        kernel_source: None,
        devices,
        timeline: Vec::new(),
        backends: hooks
            .iter()
            .map(|h| (h.hook.to_string(), h.clone()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Coverage = Coverage {
        alloc: true,
        refill: true,
        slow: true,
        recycle: true,
        recycle_bulk: true,
        hold: true,
        release: true,
        cache_layout: true,
        provider_alloc: true,
        dontneed: true,
        devmem_free: true,
        gve_alloc: true,
        gve_poll: true,
        napi: true,
        drops: true,
        page_return: true,
    };

    fn counters() -> PoolCounters {
        PoolCounters {
            alloc_calls: 1000,
            refill_calls: 30,
            refill_empty: 5,
            refill_pages: 25 * 64,
            slow_calls: 5,
            put_calls: 990,
            put_cached: 600,
            put_released: 40,
            bulk_pages: 10,
            bulk_released: 2,
            hold_pages: 320,
            release_pages: 42,
            ..Default::default()
        }
    }

    #[test]
    fn allocation_split_matches_kernel_definitions() {
        let v = pool_view(1, &counters(), None, &ALL);
        // 30 refills, 5 found the ring empty → 25 allocations served by the ring.
        assert_eq!(v.alloc.ring, Some(25));
        assert_eq!(v.alloc.slow, Some(5));
        assert_eq!(v.alloc.cache, Some(1000 - 25 - 5));
        assert_eq!(v.alloc.ring_empty, Some(5));
        assert_eq!(v.ring_hit_rate, Some(25.0 / 30.0));
        assert_eq!(v.fast_path_rate, Some(995.0 / 1000.0));
    }

    #[test]
    fn recycle_split_adds_up() {
        let v = pool_view(1, &counters(), None, &ALL);
        assert_eq!(v.recycle.cached, Some(600));
        assert_eq!(v.recycle.ring_full, Some(42));
        assert_eq!(v.recycle.total, Some(1000));
        assert_eq!(v.recycle.ring, Some(1000 - 600 - 42));
        assert_eq!(v.pages.allocated, Some(320));
        assert_eq!(v.pages.released, Some(42));
    }

    #[test]
    fn unmeasured_counts_are_unknown_not_zero() {
        // The restricted host: only the page_pool tracepoints.
        let cov = Coverage {
            hold: true,
            release: true,
            ..Default::default()
        };
        let v = pool_view(1, &counters(), None, &cov);
        assert_eq!(v.alloc, AllocSplit::default());
        assert_eq!(v.recycle, RecycleSplit::default());
        assert_eq!(v.ring_hit_rate, None);
        assert_eq!(v.fast_path_rate, None);
        assert_eq!(v.pages.allocated, Some(320));
        let json = serde_json::to_value(&v).unwrap();
        assert!(json["alloc"]["cache"].is_null());
        assert!(json["ifname"].is_null());
    }

    #[test]
    fn identity_fields_only_when_read() {
        let mut id = PoolIdentity::EMPTY;
        id.ifname[..5].copy_from_slice(b"vnet1");
        id.known = PoolIdentity::KNOWN_IFNAME | PoolIdentity::KNOWN_POOL_SIZE;
        id.pool_size = 256;
        id.queue_idx = 7; // not marked known
        let v = pool_view(0xffff_8880_0000_1000, &counters(), Some(&id), &ALL);
        assert_eq!(v.ifname.as_deref(), Some("vnet1"));
        assert_eq!(v.pool_size, Some(256));
        assert_eq!(v.queue, None);
        assert_eq!(v.label(), "vnet1");
        let anon = pool_view(0xffff_8880_0000_1000, &counters(), None, &ALL);
        assert_eq!(anon.label(), "0xffff888000001000");
    }

    #[test]
    fn an_alloc_hook_that_misses_calls_leaves_the_cache_share_unknown() {
        let c = PoolCounters {
            alloc_calls: 4,
            refill_calls: 2391,
            slow_calls: 4,
            ..Default::default()
        };
        let v = pool_view(1, &c, None, &ALL);
        assert_eq!(v.alloc.cache, None);
        assert_eq!(v.alloc.total, None);
        assert_eq!(v.alloc.ring, Some(2391));
        assert_eq!(v.fast_path_rate, None);
        assert!(
            v.ring_hit_rate.is_some(),
            "refills and slow paths are still exact"
        );
    }

    #[test]
    fn burst_profile_distributions() {
        let mut c = counters();
        c.full_run_hist[3] = 9; // runs of 8..15 pages
        c.full_run_hist[7] = 1; // one run of 128..255
        c.fill_hist[8] = 4;
        let v = pool_view(1, &c, None, &ALL);
        let runs = v.bursts.ring_full_runs.unwrap();
        assert_eq!(
            (runs.samples, runs.p50, runs.p99, runs.max),
            (10, 16, 256, 256)
        );
        assert_eq!(v.bursts.ring_fill.unwrap().max, 512);
        assert_eq!(v.bursts.empty_ring_runs, None, "no empty-ring run seen");
        let mut a = PoolCounters {
            full_run: 5,
            ..Default::default()
        };
        let b = PoolCounters {
            full_run: 3,
            ..Default::default()
        };
        accumulate(&mut a, &b);
        assert_eq!(
            a.full_run, 5,
            "a run in progress is per-CPU state, not a sum"
        );
    }

    #[test]
    fn no_division_by_zero() {
        let v = pool_view(1, &PoolCounters::default(), None, &ALL);
        assert_eq!(v.ring_hit_rate, None);
        assert_eq!(v.fast_path_rate, None);
        assert_eq!(v.slow_path_latency, None);
    }

    #[test]
    fn delta_and_accumulate() {
        let mut a = counters();
        accumulate(&mut a, &counters());
        assert_eq!(a.alloc_calls, 2000);
        let d = delta(&a, &counters());
        assert_eq!(d, counters());
        // A pool evicted and re-seen restarts instead of wrapping.
        let d = delta(&counters(), &a);
        assert_eq!(d.alloc_calls, 1000);
    }

    #[test]
    fn percentiles_from_log2_buckets() {
        let mut b = [0u64; LATENCY_BUCKETS];
        b[10] = 98; // [1024, 2048) ns
        b[14] = 1; // [16384, 32768)
        b[20] = 1; // [1 Mi, 2 Mi)
        let l = Latency::from_log2(&b, 12345).unwrap();
        assert_eq!(l.count, 100);
        assert_eq!(l.p50_ns, 2048);
        assert_eq!(l.p99_ns, 32768);
        assert_eq!(l.max_ns, 2 << 20);
        assert_eq!(l.buckets.len(), 21);
        // One sample: every quantile is its bucket.
        let mut one = [0u64; LATENCY_BUCKETS];
        one[0] = 1;
        let l = Latency::from_log2(&one, 0).unwrap();
        assert_eq!((l.p50_ns, l.p99_ns, l.max_ns), (2, 2, 2));
        assert_eq!(Latency::from_log2(&[0; LATENCY_BUCKETS], 0), None);
    }

    #[test]
    fn snapshot_keeps_moving_pools_busiest_first() {
        let t0 = Instant::now();
        let mut before = RawSample::empty(t0);
        before.pools.insert(
            1,
            RawPool {
                counters: counters(),
                identity: None,
                ..Default::default()
            },
        );
        before.pools.insert(
            2,
            RawPool {
                counters: counters(),
                identity: None,
                ..Default::default()
            },
        );
        let mut after = before.clone();
        after.at = t0 + std::time::Duration::from_secs(2);
        // Pool 1 idle, pool 2 moved, pool 3 appeared.
        after.pools.get_mut(&2).unwrap().counters.alloc_calls += 10;
        let small = PoolCounters {
            hold_pages: 3,
            ..Default::default()
        };
        after.pools.insert(
            3,
            RawPool {
                counters: small,
                identity: None,
                ..Default::default()
            },
        );
        let s = snapshot("k".into(), &before, &after, &ALL, &[]);
        let names: Vec<_> = s.pools.iter().map(|p| p.pool.clone()).collect();
        assert_eq!(names, vec!["0x2", "0x3"]);
        assert_eq!(s.pools[0].alloc.total, Some(10));
        assert_eq!(s.duration_seconds, 2.0);
    }
}

//! Devices of the pools shown: NAPI work and drops over an interval, and the timeline that
//! lines them up with the pools' slow paths step by step.
use std::collections::HashMap;

use ppscope_common::{DeviceIdentity, NapiCounters};

use super::{
    c_name,
    counters::{pool_delta, since},
    ratio, ByAddr, Coverage, RawPool, RawSample,
};
use crate::snapshot::{
    DeviceStep, DeviceView, DropView, NapiView, PoolView, Snapshot, TimelineStep,
};

pub(super) fn unique_netdevs(pools: &[PoolView]) -> Vec<u64> {
    let mut v: Vec<u64> = pools.iter().map(|p| p.netdev).filter(|d| *d != 0).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn device_name(id: &DeviceIdentity) -> Option<String> {
    c_name(&id.ifname)
}

/// What moved per device between two samples: NAPI work (over the device's NAPI instances)
/// and drops by reason, most first. Made in one pass over each map whatever the number of
/// devices: a pass per device made a collection quadratic in them (1,000 veth pairs: most of
/// the agent's time, `perf` in `cargo xtask bench --only agent`). The drops are one sorted
/// list, a device's a run in it, not a list per device: at 10,000 devices that each drop
/// packets, a list and a SipHash entry per device were about a quarter of `top`'s CPU on the
/// development host (0.60–0.65% of a core, 0.47% without: the agent benchmark's lab, whose
/// pools that `top` did not show, see BENCHMARKS.md).
struct DeviceDeltas {
    napi: ByAddr<u64, NapiCounters>,
    /// (device, reason, count) of the drops that moved, by device, then most first.
    drops: Vec<(u64, u32, u64)>,
}

impl DeviceDeltas {
    fn between(earlier: &RawSample, later: &RawSample) -> Self {
        let mut napi: ByAddr<u64, NapiCounters> = ByAddr::default();
        for (instance, now) in &later.napi {
            let Some(&netdev) = later.napi_devices.get(instance) else {
                continue;
            };
            let before = earlier.napi.get(instance).copied().unwrap_or_default();
            let total = napi.entry(netdev).or_default();
            total.polls += since(now.polls, before.polls);
            total.work += since(now.work, before.work);
            total.full_budget += since(now.full_budget, before.full_budget);
            total.budget += since(now.budget, before.budget);
        }
        let mut drops: Vec<(u64, u32, u64)> = later
            .drops
            .iter()
            .filter_map(|(k, n)| {
                let before = earlier.drops.get(k).copied().unwrap_or(0);
                let moved = since(*n, before);
                (moved > 0).then_some((k.netdev, k.reason, moved))
            })
            .collect();
        drops.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)).then(a.1.cmp(&b.1)));
        Self { napi, drops }
    }

    fn napi(&self, netdev: u64) -> NapiCounters {
        self.napi.get(&netdev).copied().unwrap_or_default()
    }

    /// The device's drops that moved, as (reason, count), most first.
    fn drops(&self, netdev: u64) -> impl Iterator<Item = (u32, u64)> + '_ {
        let from = self.drops.partition_point(|d| d.0 < netdev);
        self.drops[from..]
            .iter()
            .take_while(move |d| d.0 == netdev)
            .map(|&(_, reason, count)| (reason, count))
    }
}

/// NAPI and drops of the given devices over the interval.
pub fn device_views(
    earlier: &RawSample,
    later: &RawSample,
    netdevs: &[u64],
    cov: &Coverage,
) -> Vec<DeviceView> {
    let moved = DeviceDeltas::between(earlier, later);
    netdevs
        .iter()
        .map(|&netdev| {
            let id = later.devices.get(&netdev);
            let napi = cov.napi.then(|| {
                let n = moved.napi(netdev);
                NapiView {
                    polls: n.polls,
                    work: n.work,
                    work_per_poll: ratio(n.work, n.polls),
                    full_budget_polls: n.full_budget,
                    full_budget_share: ratio(n.full_budget, n.polls),
                }
            });
            let drops: Vec<DropView> = moved
                .drops(netdev)
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
    cov: &Coverage,
) -> TimelineStep {
    let zero = RawPool::default();
    let moved = DeviceDeltas::between(earlier, later);
    // The pools' figures per device, in one pass over the pools (see DeviceDeltas).
    let mut per_device: ByAddr<u64, (Option<String>, [u64; 5])> = ByAddr::default();
    for (addr, now) in &later.pools {
        let Some(id) = &now.identity else { continue };
        let before = earlier.pools.get(addr).unwrap_or(&zero);
        let d = pool_delta(now, before);
        let (name, sums) = per_device.entry(id.netdev).or_default();
        if name.is_none() {
            *name = c_name(&id.ifname);
        }
        sums[0] += d.alloc_calls;
        sums[1] += d.slow_calls + d.mp_alloc_calls;
        sums[2] += d.put_released + d.bulk_released;
        sums[3] += d.hold_pages;
        sums[4] += d.release_pages;
    }
    let devices = netdevs
        .iter()
        .map(|&netdev| {
            let (pool_name, [allocs, slow, ring_full, pages_in, pages_out]) =
                per_device.get(&netdev).cloned().unwrap_or_default();
            let ifname = later
                .devices
                .get(&netdev)
                .and_then(device_name)
                .or(pool_name);
            let n = moved.napi(netdev);
            let drops = moved.drops(netdev).map(|(_, c)| c).sum();
            // The same coverage rules as a pool's figures: unmeasured is unknown, not 0.
            DeviceStep {
                netdev,
                ifname,
                allocs: cov.alloc.then_some(allocs),
                slow: cov.slow.then_some(slow),
                ring_full: (cov.recycle && cov.release).then_some(ring_full),
                pages_in: cov.hold.then_some(pages_in),
                pages_out: cov.release.then_some(pages_out),
                napi_polls: cov.napi.then_some(n.polls),
                napi_full_budget: cov.napi.then_some(n.full_budget),
                drops: cov.drops.then_some(drops),
            }
        })
        .collect();
    TimelineStep { t, devices }
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
            s.devices
                .retain(|d| wanted.contains(&d.netdev) && d.moved());
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

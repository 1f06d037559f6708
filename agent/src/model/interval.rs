//! Two samples → the snapshot of everything that moved between them.
use std::collections::HashMap;

use ppscope_common::{site_stat, PoolCounters};

use super::{
    counters::{delta_site, pool_delta},
    devices::{device_views, unique_netdevs},
    pools::{apply_state, pool_view, teardown_view},
    ratio, RawPool, RawSample, SourceFacts,
};
use crate::snapshot::{
    health::DevicePackets, DeviceView, DevmemView, GveQueueView, GveView, OverheadView, PoolView,
    SiteView, Snapshot,
};

/// Everything that moved between two samples, busiest pools first.
pub fn snapshot(facts: &SourceFacts, earlier: &RawSample, later: &RawSample) -> Snapshot {
    let cov = &facts.coverage;
    let zero = RawPool::default();
    // A pool being destroyed may have no counters left that move: its release attempts do.
    // Only pools the counters know are shown: a churning device destroys hundreds of pools
    // nobody sent a page through, and listing each by address costs every collection.
    let pools: Vec<PoolView> = later
        .pools
        .keys()
        .filter_map(|addr| {
            let now = later.pools.get(addr).unwrap_or(&zero);
            let before = earlier.pools.get(addr).unwrap_or(&zero);
            let d = pool_delta(now, before);
            let teardown = cov
                .teardown
                .then(|| teardown_view(later.teardowns.get(addr), earlier.teardowns.get(addr)))
                .flatten();
            (d != PoolCounters::default() || teardown.is_some()).then(|| {
                let id = now.identity.as_ref().or(before.identity.as_ref());
                let mut view = pool_view(*addr, now.id.max(before.id), &d, id, cov);
                view.address = facts.show_addresses.then(|| format!("{addr:#x}"));
                view.gve_queue = now.gve_queue.or(before.gve_queue);
                if let Some(st) = now.state {
                    apply_state(&mut view, &st, facts.page_size);
                }
                view.teardown = teardown;
                view
            })
        })
        .collect();
    let mut pools = busiest_first(pools);
    let netdevs: Vec<u64> = unique_netdevs(&pools);
    let mut devices = device_views(earlier, later, &netdevs, cov);
    if devices.iter().any(|d| d.ifname.is_none()) {
        // No NAPI or drop record named it (light leaves `napi_poll` off): its pools know it.
        // One map, not a search of the pools per device: 10,000 veths are 10,000 devices.
        let mut of_pools: HashMap<u64, &PoolView> = HashMap::new();
        for p in &pools {
            of_pools.entry(p.netdev).or_insert(p);
        }
        for d in devices.iter_mut().filter(|d| d.ifname.is_none()) {
            if let Some(p) = of_pools.get(&d.netdev) {
                d.ifname.clone_from(&p.ifname);
                d.ifindex = d.ifindex.or(p.ifindex);
            }
        }
    }
    attach_device_packets(&mut pools, &devices);

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
            // A sum over programs, not one counter: it drops when a module's programs are
            // unloaded (gve reloaded), and then the interval is not known; 0, not the total.
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
        kernel: facts.kernel.clone(),
        duration_seconds: duration,
        pools,
        devmem,
        gve,
        page_return: site(site_stat::PAGE_RETURN, cov.page_return, false),
        overhead,
        netlink: None,
        devices,
        timeline: Vec::new(),
        backends: facts
            .hooks
            .iter()
            .map(|h| (h.hook.to_string(), h.clone()))
            .collect(),
        // A source without hooks (a simulation) has no detail level to report.
        detail: (!facts.hooks.is_empty()).then_some(facts.detail),
    }
}

/// Pools by activity, most first, then by name. Sorted as indices and moved once: a view is
/// about a kilobyte, and a sort moving 10,000 of them was a tenth of the agent's time at
/// 10,000 pools (`perf`, `cargo xtask bench --only agent --pools 10000`).
fn busiest_first(pools: Vec<PoolView>) -> Vec<PoolView> {
    let mut order: Vec<(u64, usize)> = pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.activity(), i))
        .collect();
    order.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| pools[a.1].pool.cmp(&pools[b.1].pool))
    });
    let mut slots: Vec<Option<PoolView>> = pools.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, i)| slots[i].take())
        .collect()
}

/// Gives each pool its device's received packets (the work of its NAPI polls) and the fresh
/// pages of the device's pools shown, where the device's polls counted packets: the health
/// verdict's basis where nothing splits allocations.
fn attach_device_packets(pools: &mut [PoolView], devices: &[DeviceView]) {
    // Per device: fresh pages of its pools, and how many took any.
    let mut fresh: HashMap<u64, (u64, u32)> = HashMap::new();
    for p in pools.iter().filter(|p| p.netdev != 0) {
        if let Some(n @ 1..) = p.pages.allocated {
            let f = fresh.entry(p.netdev).or_default();
            f.0 += n;
            f.1 += 1;
        }
    }
    let work: HashMap<u64, u64> = devices
        .iter()
        .filter(|d| d.netdev != 0)
        .filter_map(|d| Some((d.netdev, d.napi.as_ref()?.work)))
        .filter(|&(_, work)| work > 0)
        .collect();
    for p in pools.iter_mut().filter(|p| p.pages.allocated.is_some()) {
        if let Some(&packets) = work.get(&p.netdev) {
            let (fresh_pages, pools) = fresh.get(&p.netdev).copied().unwrap_or_default();
            p.device_packets = Some(DevicePackets {
                packets,
                fresh_pages,
                pools,
            });
        }
    }
}

//! The kernel's own view of its pools (netlink `netdev` family), merged into a snapshot.
//!
//! Probes and kernel counters meet here: every probed pool gets the kernel's identity facts
//! (netlink id → ifindex, NAPI id, inflight pages and bytes, detach state) and, where the
//! kernel keeps page_pool stats, its own counters over the same window. A split the probes
//! could not measure (no kprobes, no fentry) is taken from those counters and marked so.
//! Netlink answers for ppscope's own network namespace only.
use std::collections::HashMap;

use super::ratio;
use crate::{
    host::netlink::{NetlinkPool, NetlinkPoolStats, NetlinkSample},
    snapshot::{AllocSplit, NetlinkPoolView, NetlinkSourceView, PoolView, RecycleSplit, Snapshot},
};

fn stats_delta(later: &NetlinkPoolStats, earlier: Option<&NetlinkPoolStats>) -> NetlinkPoolStats {
    let Some(e) = earlier else {
        return later.clone();
    };
    let d = super::since;
    NetlinkPoolStats {
        id: later.id,
        ifindex: later.ifindex,
        alloc_fast: d(later.alloc_fast, e.alloc_fast),
        alloc_slow: d(later.alloc_slow, e.alloc_slow),
        alloc_slow_high_order: d(later.alloc_slow_high_order, e.alloc_slow_high_order),
        alloc_empty: d(later.alloc_empty, e.alloc_empty),
        alloc_refill: d(later.alloc_refill, e.alloc_refill),
        alloc_waive: d(later.alloc_waive, e.alloc_waive),
        recycle_cached: d(later.recycle_cached, e.recycle_cached),
        recycle_cache_full: d(later.recycle_cache_full, e.recycle_cache_full),
        recycle_ring: d(later.recycle_ring, e.recycle_ring),
        recycle_ring_full: d(later.recycle_ring_full, e.recycle_ring_full),
        recycle_released_refcnt: d(later.recycle_released_refcnt, e.recycle_released_refcnt),
    }
}

fn is_zero(s: &NetlinkPoolStats) -> bool {
    *s == NetlinkPoolStats {
        id: s.id,
        ifindex: s.ifindex,
        ..Default::default()
    }
}

/// The kernel's split in ppscope's terms (the definitions are the kernel's own).
fn splits_from_stats(s: &NetlinkPoolStats) -> (AllocSplit, RecycleSplit) {
    let slow = s.alloc_slow + s.alloc_slow_high_order;
    let alloc = AllocSplit {
        cache: Some(s.alloc_fast),
        ring: Some(s.alloc_refill),
        slow: Some(slow),
        total: Some(s.alloc_fast + s.alloc_refill + slow),
        ring_empty: Some(s.alloc_empty),
        ring_pages: None,
        frag_calls: None,
    };
    let ring_full = s.recycle_ring_full + s.recycle_released_refcnt;
    let recycle = RecycleSplit {
        cached: Some(s.recycle_cached),
        ring: Some(s.recycle_ring),
        ring_full: Some(ring_full),
        total: Some(s.recycle_cached + s.recycle_ring + ring_full),
    };
    (alloc, recycle)
}

/// Fills a pool's unmeasured splits from the kernel's counters and recomputes its rates.
fn fill_from_kernel(p: &mut PoolView, s: &NetlinkPoolStats) {
    let (alloc, recycle) = splits_from_stats(s);
    if p.alloc.total.is_none() || p.alloc.ring.is_none() || p.alloc.slow.is_none() {
        p.alloc = alloc;
        p.alloc_source = Some("kernel".into());
        let (cache, ring, slow) = (
            p.alloc.cache.unwrap_or(0),
            p.alloc.ring.unwrap_or(0),
            p.alloc.slow.unwrap_or(0),
        );
        p.ring_hit_rate = ratio(ring, ring + slow);
        p.fast_path_rate = ratio(cache + ring, cache + ring + slow);
    }
    if p.recycle.cached.is_none() || p.recycle.ring.is_none() || p.recycle.ring_full.is_none() {
        p.recycle = recycle;
        p.recycle_source = Some("kernel".into());
    }
}

/// Merges what netlink said at the window's start and end into the snapshot.
pub fn merge(snap: &mut Snapshot, start: &NetlinkSample, end: &NetlinkSample) {
    let by_id: HashMap<u32, &NetlinkPool> = end.pools.iter().map(|p| (p.id, p)).collect();
    let delta_of = |id: u32| -> Option<NetlinkPoolStats> {
        let later = end.stats.as_ref()?.get(&id)?;
        Some(stats_delta(
            later,
            start.stats.as_ref().and_then(|m| m.get(&id)),
        ))
    };
    let mut seen = std::collections::HashSet::new();
    for p in &mut snap.pools {
        let Some(id) = p.netlink_id else { continue };
        let Some(nl) = by_id.get(&id) else { continue };
        seen.insert(id);
        let stats = delta_of(id);
        if let Some(s) = &stats {
            fill_from_kernel(p, s);
        }
        p.netlink = Some(netlink_pool_view(nl, stats));
    }
    // Pools the kernel counted but no probe saw (tracepoint-only hosts see few events).
    for nl in &end.pools {
        if seen.contains(&nl.id) {
            continue;
        }
        let Some(stats) = delta_of(nl.id) else {
            continue;
        };
        if is_zero(&stats) {
            continue;
        }
        let mut p = PoolView::unprobed(
            nl.id,
            nl.ifindex,
            nl.ifindex.and_then(|i| end.ifnames.get(&i).cloned()),
        );
        fill_from_kernel(&mut p, &stats);
        p.netlink = Some(netlink_pool_view(nl, Some(stats)));
        snap.pools.push(p);
    }
    snap.netlink = Some(NetlinkSourceView {
        stats_available: end.stats.is_some(),
        stats_missing: end.stats_missing.clone(),
        error: end.error.clone(),
    });
}

fn netlink_pool_view(nl: &NetlinkPool, stats: Option<NetlinkPoolStats>) -> NetlinkPoolView {
    NetlinkPoolView {
        ifindex: nl.ifindex,
        napi_id: nl.napi_id,
        inflight_pages: nl.inflight,
        inflight_bytes: nl.inflight_mem,
        detached: nl.detach_time.is_some(),
        dmabuf: nl.dmabuf,
        io_uring: nl.io_uring,
        stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{pool_view, Coverage};
    use ppscope_common::{PoolCounters, PoolIdentity};

    fn nl_pool(id: u32) -> NetlinkPool {
        NetlinkPool {
            id,
            ifindex: Some(3),
            napi_id: Some(8193),
            inflight: Some(512),
            inflight_mem: Some(512 * 4096),
            detach_time: None,
            dmabuf: None,
            io_uring: false,
        }
    }

    fn stats(id: u32, fast: u64) -> NetlinkPoolStats {
        NetlinkPoolStats {
            id,
            alloc_fast: fast,
            alloc_refill: 10,
            alloc_slow: 2,
            recycle_ring: fast,
            recycle_ring_full: 3,
            ..Default::default()
        }
    }

    fn snapshot_with(pool: PoolView) -> Snapshot {
        Snapshot::with_pools("k", 1.0, vec![pool])
    }

    fn sample(pools: Vec<NetlinkPool>, st: Vec<NetlinkPoolStats>) -> NetlinkSample {
        NetlinkSample {
            pools,
            stats: Some(st.into_iter().map(|s| (s.id, s)).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn tracepoint_only_pool_gets_the_kernel_split_over_the_window() {
        let mut id = PoolIdentity::EMPTY;
        id.netlink_id = 7;
        id.known = PoolIdentity::KNOWN_NETLINK_ID;
        let cov = Coverage {
            hold: true,
            release: true,
            ..Default::default()
        };
        let c = PoolCounters {
            hold_pages: 64,
            ..Default::default()
        };
        let mut snap = snapshot_with(pool_view(0x10, 1, &c, Some(&id), &cov));
        let start = sample(vec![nl_pool(7)], vec![stats(7, 100)]);
        let end = sample(vec![nl_pool(7)], vec![stats(7, 1100)]);
        merge(&mut snap, &start, &end);
        let p = &snap.pools[0];
        assert_eq!(p.alloc_source.as_deref(), Some("kernel"));
        // alloc_refill and alloc_slow did not move between the samples: the window's delta.
        assert_eq!(p.alloc.cache, Some(1000));
        assert_eq!(p.alloc.ring, Some(0));
        assert_eq!(p.fast_path_rate, Some(1.0));
        assert_eq!(p.recycle.ring, Some(1000));
        let k = p.netlink.as_ref().unwrap();
        assert_eq!(k.inflight_pages, Some(512));
        assert_eq!(k.napi_id, Some(8193));
        assert_eq!(p.pages.allocated, Some(64), "probe counts stay");
    }

    #[test]
    fn probed_splits_are_kept_and_the_kernel_counters_shown_beside() {
        let mut id = PoolIdentity::EMPTY;
        id.netlink_id = 7;
        id.known = PoolIdentity::KNOWN_NETLINK_ID;
        let all = Coverage {
            alloc: true,
            refill: true,
            slow: true,
            recycle: true,
            release: true,
            cache_layout: true,
            ..Default::default()
        };
        let c = PoolCounters {
            alloc_calls: 990,
            refill_calls: 9,
            slow_calls: 2,
            put_calls: 990,
            ..Default::default()
        };
        let mut snap = snapshot_with(pool_view(0x10, 1, &c, Some(&id), &all));
        merge(
            &mut snap,
            &sample(vec![], vec![]),
            &sample(vec![nl_pool(7)], vec![stats(7, 1000)]),
        );
        let p = &snap.pools[0];
        assert_eq!(p.alloc_source, None);
        assert_eq!(p.alloc.total, Some(990));
        assert_eq!(
            p.netlink
                .as_ref()
                .unwrap()
                .stats
                .as_ref()
                .unwrap()
                .alloc_fast,
            1000
        );
    }

    #[test]
    fn pools_only_the_kernel_saw_are_added_idle_ones_are_not() {
        let mut snap = snapshot_with(PoolView::unprobed(1, None, None));
        snap.pools.clear();
        let start = sample(vec![], vec![stats(4, 5), stats(5, 5)]);
        let end = sample(
            vec![nl_pool(4), nl_pool(5)],
            vec![stats(4, 5), stats(5, 50)],
        );
        merge(&mut snap, &start, &end);
        assert_eq!(snap.pools.len(), 1);
        assert_eq!(snap.pools[0].netlink_id, Some(5));
        assert_eq!(snap.pools[0].alloc.cache, Some(45));
    }

    #[test]
    fn a_kernel_without_stats_is_said_not_hidden() {
        let mut snap = snapshot_with(PoolView::unprobed(1, None, None));
        let end = NetlinkSample {
            stats_missing: Some("this kernel has no CONFIG_PAGE_POOL_STATS".into()),
            ..Default::default()
        };
        merge(&mut snap, &NetlinkSample::default(), &end);
        let k = snap.netlink.unwrap();
        assert!(!k.stats_available);
        assert_eq!(
            k.stats_missing.as_deref(),
            Some("this kernel has no CONFIG_PAGE_POOL_STATS")
        );
    }
}

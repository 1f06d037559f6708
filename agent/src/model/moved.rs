//! Which pools moved between two samples, without assembling a snapshot: what the agent
//! retires pools by (a pool still for longer than its grace leaves the metrics), collection by
//! collection, while it assembles snapshots only when a scrape asks.
use std::collections::HashSet;

use ppscope_common::PoolIdentity;

use super::RawSample;
use crate::{host::netlink::NetlinkSample, snapshot::PoolKey};

/// The pools whose figures moved from `earlier` to `later`: a probed pool whose counters or
/// teardown moved, and a pool whose kernel stats moved, under both keys a snapshot may give
/// it (its address when the probes know the pool, `netlink:N` when a window shows it from
/// the kernel's stats alone). A pool in a snapshot of any window over these samples moved in
/// some pair of them.
pub fn moved_pools(
    earlier: &RawSample,
    later: &RawSample,
    netlink: Option<(&NetlinkSample, &NetlinkSample)>,
) -> HashSet<PoolKey> {
    let mut moved = HashSet::new();
    for (addr, now) in &later.pools {
        let before = earlier.pools.get(addr);
        if before.is_none_or(|b| b.counters != now.counters || b.hists != now.hists) {
            moved.insert(PoolKey::Addr(*addr));
        }
    }
    for (addr, t) in &later.teardowns {
        if earlier.teardowns.get(addr) != Some(t) {
            moved.insert(PoolKey::Addr(*addr));
        }
    }
    let Some((start, end)) = netlink else {
        return moved;
    };
    let (Some(before), Some(after)) = (&start.stats, &end.stats) else {
        return moved;
    };
    let kernel_moved: HashSet<u32> = after
        .iter()
        .filter(|(id, s)| before.get(id) != Some(s))
        .map(|(id, _)| *id)
        .collect();
    if kernel_moved.is_empty() {
        return moved;
    }
    for (addr, p) in &later.pools {
        let id = p
            .identity
            .filter(|i| i.known & PoolIdentity::KNOWN_NETLINK_ID != 0)
            .map(|i| i.netlink_id);
        if let Some(id) = id {
            if kernel_moved.contains(&id) {
                moved.insert(PoolKey::Addr(*addr));
            }
        }
    }
    moved.extend(kernel_moved.into_iter().map(PoolKey::Netlink));
    moved
}

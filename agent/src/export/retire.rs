//! Pools that stopped moving leave the agent's metrics after a grace period, and come back
//! when they move again.
use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use crate::snapshot::Snapshot;

/// Pools that stopped moving leave the metrics after a grace period.
#[derive(Debug, Default)]
pub struct Retirement {
    /// Per pool: its activity when it last moved, and when that was.
    last_moved: HashMap<String, (u64, Instant)>,
}

impl Retirement {
    /// Drops from `snap` the pools that have not moved for longer than `grace` as of `now`.
    pub fn retire(&mut self, snap: &mut Snapshot, grace: Duration, now: Instant) {
        let listed: HashSet<String> = snap.pools.iter().map(|p| p.pool.clone()).collect();
        snap.pools.retain(|p| {
            let activity = p.activity();
            let entry = self
                .last_moved
                .entry(p.pool.clone())
                .or_insert((activity, now));
            if entry.0 != activity {
                *entry = (activity, now);
            }
            now.duration_since(entry.1) <= grace
        });
        // Forget only pools the kernel side no longer lists: forgetting a quiet pool that is
        // still listed would make it new again, and bring it back after its grace.
        self.last_moved.retain(|pool, _| listed.contains(pool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::PoolView;

    fn pool(netlink_id: u32, allocs: u64) -> PoolView {
        let mut p = PoolView::unprobed(netlink_id, None, None);
        p.alloc.total = Some(allocs);
        p
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.pools.iter().map(|p| p.pool.clone()).collect()
    }

    #[test]
    fn a_pool_leaves_after_its_grace_and_comes_back_when_it_moves() {
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut r = Retirement::default();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let snap = |a: u64, b: u64| Snapshot::with_pools("k", 1.0, vec![pool(1, a), pool(2, b)]);

        let mut s = snap(10, 10);
        r.retire(&mut s, grace, at(0));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        // Pool 2 keeps moving, pool 1 does not: within its grace it stays.
        let mut s = snap(10, 20);
        r.retire(&mut s, grace, at(5));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        let mut s = snap(10, 30);
        r.retire(&mut s, grace, at(6));
        assert_eq!(names(&s), ["netlink:2"], "quiet for 6 s > 5 s of grace");
        // It moves again: back at once.
        let mut s = snap(11, 30);
        r.retire(&mut s, grace, at(7));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
    }

    #[test]
    fn a_quiet_pool_still_listed_is_not_made_new_again() {
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut r = Retirement::default();
        let mut s = Snapshot::with_pools("k", 1.0, vec![pool(1, 10)]);
        r.retire(&mut s, grace, t0);
        for secs in [6, 60, 600] {
            let mut s = Snapshot::with_pools("k", 1.0, vec![pool(1, 10)]);
            r.retire(&mut s, grace, t0 + Duration::from_secs(secs));
            assert!(s.pools.is_empty(), "still retired at {secs} s");
        }
        // Gone from the kernel side: forgotten, so a new pool at the same name starts afresh.
        let mut s = Snapshot::with_pools("k", 1.0, vec![]);
        r.retire(&mut s, grace, t0 + Duration::from_secs(601));
        assert!(r.last_moved.is_empty());
    }
}

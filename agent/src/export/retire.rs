//! Pools that stopped moving leave the agent's metrics after a grace period, and come back
//! when they move again. Moves are noted at every collection (`model::moved_pools`, no
//! snapshot needed); the pools are dropped from a snapshot when a scrape assembles it.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::snapshot::{PoolKey, Snapshot};

/// When each pool last moved, for the pools that moved within the grace.
#[derive(Debug, Default, Clone)]
pub struct Retirement {
    grace: Duration,
    last_moved: HashMap<PoolKey, Instant>,
}

impl Retirement {
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            last_moved: HashMap::new(),
        }
    }

    /// Notes the pools that moved in the collection made at `at`, and forgets those still
    /// for longer than the grace (what they were is not needed to retire them: a pool never
    /// noted is retired), so churned pools do not pile up between scrapes.
    pub fn moved(&mut self, keys: impl IntoIterator<Item = PoolKey>, at: Instant) {
        for key in keys {
            self.last_moved.insert(key, at);
        }
        let grace = self.grace;
        self.last_moved
            .retain(|_, t| at.saturating_duration_since(*t) <= grace);
    }

    /// Drops from `snap` the pools that have not moved for longer than the grace as of `now`.
    pub fn retire(&self, snap: &mut Snapshot, now: Instant) {
        snap.pools.retain(|p| {
            self.last_moved
                .get(&p.key())
                .is_some_and(|t| now.saturating_duration_since(*t) <= self.grace)
        });
    }

    /// Pools noted as moving within the grace.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.last_moved.len()
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
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Retirement::new(Duration::from_secs(5));
        let snap = || Snapshot::with_pools("k", 1.0, vec![pool(1, 10), pool(2, 10)]);
        r.moved([PoolKey::Netlink(1), PoolKey::Netlink(2)], at(0));
        let mut s = snap();
        r.retire(&mut s, at(0));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        // Pool 2 keeps moving, pool 1 does not: within its grace it stays.
        r.moved([PoolKey::Netlink(2)], at(5));
        let mut s = snap();
        r.retire(&mut s, at(5));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        // Collections note moves whether or not anyone scrapes: the scrape at 6 s knows pool
        // 1 has been still since 0 s.
        r.moved([PoolKey::Netlink(2)], at(6));
        let mut s = snap();
        r.retire(&mut s, at(6));
        assert_eq!(names(&s), ["netlink:2"], "still for 6 s > 5 s of grace");
        // It moves again: back at once.
        r.moved([PoolKey::Netlink(1)], at(7));
        let mut s = snap();
        r.retire(&mut s, at(7));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
    }

    /// A scrape long after the last collection (collections failing): judged as of when the
    /// caller says, and a pool noted within the grace of that instant stays.
    #[test]
    fn retire_judges_as_of_the_instant_it_is_given() {
        let t0 = Instant::now();
        let mut r = Retirement::new(Duration::from_secs(5));
        r.moved([PoolKey::Netlink(1)], t0);
        let snap = || Snapshot::with_pools("k", 1.0, vec![pool(1, 10)]);
        let mut s = snap();
        r.retire(&mut s, t0 + Duration::from_secs(5));
        assert_eq!(names(&s), ["netlink:1"]);
        let mut s = snap();
        r.retire(&mut s, t0 + Duration::from_secs(6));
        assert!(s.pools.is_empty(), "still for 6 s > 5 s of grace");
    }

    #[test]
    fn still_pools_are_forgotten_without_a_scrape_and_stay_retired() {
        let t0 = Instant::now();
        let mut r = Retirement::new(Duration::from_secs(5));
        // A churning host: a new pool every second, none scraped.
        for s in 0..600 {
            r.moved([PoolKey::Addr(0x1000 + s)], t0 + Duration::from_secs(s));
        }
        assert!(r.tracked() <= 6, "{} pools remembered", r.tracked());
        // A quiet pool still listed in the totals is not made new again.
        let mut s = Snapshot::with_pools("k", 1.0, vec![pool(9, 10)]);
        r.retire(&mut s, t0 + Duration::from_secs(600));
        assert!(s.pools.is_empty());
    }
}

//! Each pool's rare-event record and identity as the last sample read them, taken again while
//! the pool's counts say neither can have changed.
//!
//! Every write to a pool's record (`POOL_RARE`: ring state, histograms) or identity
//! (`POOL_IDENTITY`) that the agent reads (not `pool_release`'s `FREED` mark, which only the
//! programs use) is made by a program that also moves one of the pool's counts, or by the
//! fold of a CPU's slot into the pool's entry (the end of a ring-full or empty-ring run is
//! filed then), which moves the entry's `fold_head`. So a pool whose counts and folds are what
//! they were at the last sample has the record and identity it had then. At 10,000 pools the
//! whole-map reads were a third of the agent's time (`perf`: the kernel's batch lookup and
//! its copy of 1.3 KB a pool), every collection, though most pools had not moved.
//!
//! The record is written a few instructions after the count that announces it (same program):
//! a sample that read the counts before it and the record after may miss that write. So a
//! pool seen to change is read again at the next sample too ([`Kept::again`]).
use std::sync::Arc;

use ppscope_common::{PoolIdentity, PoolState};

use crate::model::{ByAddr, PoolCounts, PoolHists};

/// What a pool's counts were when its record was read, and what was read.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    /// The pool's counts, summed over CPUs.
    pub counts: PoolCounts,
    /// The sum of its entries' `fold_head` over CPUs (a fold moves it; see the module doc).
    pub folds: u64,
    /// Read again at the next sample whatever the counts say: this one saw a change.
    pub again: bool,
    pub hists: Option<Arc<PoolHists>>,
    pub state: Option<PoolState>,
    pub identity: Option<PoolIdentity>,
}

/// A pool's counts and folds in this sample (what [`KeptRecords::stale`] compares).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Seen {
    pub counts: PoolCounts,
    pub folds: u64,
}

/// Reading a record pool by pool costs a system call each, the whole map one per 4,096: past
/// one pool in this many the whole map is read.
pub(super) const READ_WHOLE_FROM: usize = 4;

#[derive(Debug, Default)]
pub(super) struct KeptRecords {
    by_pool: ByAddr<u64, Kept>,
}

impl KeptRecords {
    /// The pool's record and identity as last read, if they cannot have changed since.
    pub fn unchanged(&self, pool: u64, seen: &Seen) -> Option<&Kept> {
        self.by_pool
            .get(&pool)
            .filter(|k| !k.again && k.counts == seen.counts && k.folds == seen.folds)
    }

    /// Whether the pools this sample must read are so many that the whole maps are cheaper.
    pub fn read_whole(stale: usize, pools: usize) -> bool {
        stale * READ_WHOLE_FROM > pools
    }

    /// What the next sample compares with: every pool of this sample (pools gone from the
    /// counters are forgotten), `again` for those whose counts or folds changed.
    pub fn replace(&mut self, pools: impl Iterator<Item = (u64, Seen, Kept)>, capacity: usize) {
        let mut next = ByAddr::with_capacity_and_hasher(capacity, Default::default());
        for (pool, seen, mut kept) in pools {
            kept.again = self
                .by_pool
                .get(&pool)
                .is_none_or(|k| k.counts != seen.counts || k.folds != seen.folds);
            kept.counts = seen.counts;
            kept.folds = seen.folds;
            next.insert(pool, kept);
        }
        self.by_pool = next;
    }

    /// The histograms as last read, to share when they did not change.
    pub fn hists(&self, pool: u64) -> Option<&Arc<PoolHists>> {
        self.by_pool.get(&pool)?.hists.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(alloc: u64, folds: u64) -> Seen {
        let mut s = Seen::default();
        s.counts.alloc_calls = alloc;
        s.folds = folds;
        s
    }

    fn kept(fill: u32) -> Kept {
        Kept {
            counts: PoolCounts::default(),
            folds: 0,
            again: false,
            hists: None,
            state: Some(PoolState {
                ring_fill: fill,
                ..PoolState::default()
            }),
            identity: None,
        }
    }

    #[test]
    fn a_pool_is_taken_from_the_last_read_only_once_its_counts_held_still_for_a_sample() {
        let mut k = KeptRecords::default();
        assert!(k.unchanged(1, &seen(5, 0)).is_none(), "never read");
        k.replace([(1, seen(5, 0), kept(7))].into_iter(), 1);
        // Seen for the first time: read again once (the record may lag the count).
        assert!(k.unchanged(1, &seen(5, 0)).is_none());
        k.replace([(1, seen(5, 0), kept(8))].into_iter(), 1);
        let got = k
            .unchanged(1, &seen(5, 0))
            .expect("held still for a sample");
        assert_eq!(
            got.state.map(|s| s.ring_fill),
            Some(8),
            "the later read kept"
        );
        // A count moved, or a fold: read again, twice.
        assert!(k.unchanged(1, &seen(6, 0)).is_none());
        assert!(k.unchanged(1, &seen(5, 3)).is_none());
        k.replace([(1, seen(5, 3), kept(9))].into_iter(), 1);
        assert!(k.unchanged(1, &seen(5, 3)).is_none());
        // A pool gone from the counters is forgotten.
        k.replace(std::iter::empty(), 0);
        assert!(k.hists(1).is_none() && k.unchanged(1, &seen(5, 3)).is_none());
    }

    #[test]
    fn the_whole_maps_are_read_past_a_quarter_of_the_pools() {
        assert!(!KeptRecords::read_whole(0, 10_000));
        assert!(!KeptRecords::read_whole(2_500, 10_000));
        assert!(KeptRecords::read_whole(2_501, 10_000));
        assert!(
            KeptRecords::read_whole(10, 10),
            "a first sample reads the whole maps"
        );
    }
}

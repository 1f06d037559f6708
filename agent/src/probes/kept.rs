//! Each pool's rare-event record and identity as the last sample read them, taken again while
//! the pool's counts say neither can have changed.
//!
//! Every write to a pool's record (`POOL_RARE`: ring state, histograms) or identity
//! (`POOL_IDENTITY`) that the agent reads (not `pool_release`'s `FREED` mark, which only the
//! programs use) is made by a program that also moves one of the pool's counts, or by the
//! fold of a CPU's slot into the pool's entry (the ring-full run it ends is filed then), which
//! moves the entry's `fold_head`. So a pool whose counts and folds are what they were at the
//! last sample has the record and identity it had then. At 10,000 pools the whole-map reads
//! were a third of the agent's time (`perf`: the kernel's batch lookup and its copy of 1.3 KB
//! a pool), every collection, though most pools had not moved.
//!
//! The record is written a few instructions before or after the count that announces it (same
//! program): a sample that read the counts before it and the record after may miss that
//! write. So a pool seen to change is read again at the next sample too (`Kept::again`). What
//! moves no count: the LRU evicting a record or identity (more pools than `--map-capacity`),
//! and a nested program counting on another pool's slot (`pool::hot`). So the whole maps are
//! read every [`WHOLE_EVERY`] samples whatever the counts say.
use std::sync::Arc;

use ppscope_common::{PoolIdentity, PoolState};

use crate::model::{ByAddr, PoolCounts, PoolHists};

/// A pool's record and identity as read (None: not in the map).
#[derive(Debug, Clone, Default)]
pub(super) struct Records {
    pub hists: Option<Arc<PoolHists>>,
    pub state: Option<PoolState>,
    pub identity: Option<PoolIdentity>,
}

/// What a pool's counts were when its records were read, and what was read.
#[derive(Debug, Clone)]
struct Kept {
    seen: Seen,
    /// Read again at the next sample whatever the counts say: this one saw a change.
    again: bool,
    records: Records,
}

/// A pool's counts, summed over CPUs, and the sum of its entries' `fold_head` over CPUs (a fold
/// moves it; see the module doc), in one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Seen {
    pub counts: PoolCounts,
    pub folds: u64,
}

/// Reading pool by pool costs two system calls a pool (record and identity), the whole maps
/// one per 4,096 entries each: past one pool in this many the whole maps are read.
pub(super) const READ_WHOLE_FROM: usize = 4;

/// Samples between two whole reads, whatever the counts say (see the module doc): an evicted
/// record shows as gone within this many collections.
pub(super) const WHOLE_EVERY: u32 = 60;

#[derive(Debug, Default)]
pub(super) struct KeptRecords {
    by_pool: ByAddr<u64, Kept>,
    /// Samples since the whole maps were last read.
    since_whole: u32,
}

impl KeptRecords {
    /// The pool's record and identity as last read, if they cannot have changed since.
    pub fn unchanged(&self, pool: u64, seen: &Seen) -> Option<&Records> {
        self.by_pool
            .get(&pool)
            .filter(|k| !k.again && k.seen == *seen)
            .map(|k| &k.records)
    }

    /// Whether this sample reads the whole maps: the pools it must read are so many that the
    /// whole maps are cheaper, or they were last read whole [`WHOLE_EVERY`] samples ago.
    pub fn read_whole(&self, stale: usize, pools: usize) -> bool {
        stale * READ_WHOLE_FROM > pools || self.since_whole + 1 >= WHOLE_EVERY
    }

    /// What the next sample compares with: every pool of this sample (pools gone from the
    /// counters are forgotten), `again` for those whose counts or folds changed.
    pub fn replace(
        &mut self,
        pools: impl Iterator<Item = (u64, Seen, Records)>,
        capacity: usize,
        read_whole: bool,
    ) {
        let mut next = ByAddr::with_capacity_and_hasher(capacity, Default::default());
        for (pool, seen, records) in pools {
            let again = self.by_pool.get(&pool).is_none_or(|k| k.seen != seen);
            next.insert(
                pool,
                Kept {
                    seen,
                    again,
                    records,
                },
            );
        }
        self.by_pool = next;
        self.since_whole = if read_whole { 0 } else { self.since_whole + 1 };
    }

    /// The histograms as last read, to share when they did not change.
    pub fn hists(&self, pool: u64) -> Option<&Arc<PoolHists>> {
        self.by_pool.get(&pool)?.records.hists.as_ref()
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

    fn read(fill: u32) -> Records {
        Records {
            state: Some(PoolState {
                ring_fill: fill,
                ..PoolState::default()
            }),
            ..Records::default()
        }
    }

    fn fill(r: Option<&Records>) -> Option<u32> {
        r.and_then(|r| r.state).map(|s| s.ring_fill)
    }

    #[test]
    fn a_pool_is_taken_from_the_last_read_only_once_its_counts_held_still_for_a_sample() {
        let mut k = KeptRecords::default();
        assert!(k.unchanged(1, &seen(5, 0)).is_none(), "never read");
        k.replace([(1, seen(5, 0), read(7))].into_iter(), 1, true);
        // Seen for the first time: read again once (the record may lag the count).
        assert!(k.unchanged(1, &seen(5, 0)).is_none());
        k.replace([(1, seen(5, 0), read(8))].into_iter(), 1, false);
        assert_eq!(fill(k.unchanged(1, &seen(5, 0))), Some(8), "the later read");
        // A count moved, or a fold: read again, twice.
        assert!(k.unchanged(1, &seen(6, 0)).is_none());
        assert!(k.unchanged(1, &seen(5, 3)).is_none());
        k.replace([(1, seen(5, 3), read(9))].into_iter(), 1, false);
        assert!(k.unchanged(1, &seen(5, 3)).is_none());
        // A pool gone from the counters is forgotten.
        k.replace(std::iter::empty(), 0, false);
        assert!(k.hists(1).is_none() && k.unchanged(1, &seen(5, 3)).is_none());
    }

    #[test]
    fn the_whole_maps_are_read_past_a_quarter_of_the_pools_and_every_minute_of_samples() {
        let mut k = KeptRecords::default();
        assert!(!k.read_whole(0, 10_000));
        assert!(!k.read_whole(2_500, 10_000));
        assert!(k.read_whole(2_501, 10_000));
        assert!(k.read_whole(10, 10), "a first sample reads the whole maps");
        k.replace(std::iter::empty(), 0, true);
        for _ in 1..WHOLE_EVERY {
            assert!(!k.read_whole(0, 10_000));
            k.replace(std::iter::empty(), 0, false);
        }
        assert!(
            k.read_whole(0, 10_000),
            "an evicted record shows as gone within {WHOLE_EVERY} samples"
        );
    }
}

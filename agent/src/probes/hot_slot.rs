//! The per-CPU slots of the pools each CPU saw last (`HotSlot`, `ebpf/src/pool.rs`): a few
//! per CPU, each pool always in the same one (`HotSlot::index`). The per-page hooks count
//! there and fold into the pool's hash entry only when the slot switches pools. A pool's
//! counts on a CPU are its hash entry plus its slot while the slot holds it. NAPI polls are
//! counted the same way (`NapiSlot`, `ebpf/src/hooks/napi_poll.rs`): what follows holds for
//! each slot ([`Slot`]).
//!
//! The collection reads the slots, then the hash, then the slots again; a fold can run on any
//! CPU meanwhile. [`fold`] adds exactly what the hash copy does not already hold, so a counter
//! never goes backwards between collections (the model would take that for a restart) and
//! never counts a page twice:
//!
//! - the slot's occupant after the hash was read: its counts cannot be in the hash yet (a
//!   fold empties the slot);
//! - the occupant before, when the slot changed pools during the read: its counts are in the
//!   hash copy if the copy was taken after its fold (the entry's `fold_head` reached the
//!   occupancy's `seq`), else they are added as the first copy of the slot saw them.
//!
//! Copies taken while a fold was writing (`HotSlot::settled`, `PoolHot`'s `fold_head` /
//! `fold_tail`) are taken again.
use ppscope_common::{HotSlot, NapiHot, NapiSlot, PoolHot, HOT_SLOTS, NAPI_SLOTS};

/// A per-CPU slot and the hash entry its counts fold into: the per-page counts of a pool
/// ([`HotSlot`] into [`PoolHot`]) and the polls of a NAPI instance ([`NapiSlot`] into
/// [`NapiHot`]). Both fold with the same bracket, so one reading rule serves both.
pub trait Slot: Copy {
    type Entry: Copy;
    /// Slots per CPU, and the one `key` counts in.
    const SLOTS: u32;
    fn index(key: u64) -> u32;
    /// The key whose counts the slot holds (0: none).
    fn occupant(&self) -> u64;
    fn seq(&self) -> u64;
    /// A copy of one whole state (not taken while a fold was changing it).
    fn settled(&self) -> bool;
    fn add_to(&self, entry: &mut Self::Entry);
    /// The `seq` of the last occupancy folded into `entry`.
    fn fold_head(entry: &Self::Entry) -> u64;
    /// A copy of `entry` taken while no fold was writing it.
    fn entry_settled(entry: &Self::Entry) -> bool;
}

/// Adds to one CPU's hash copy of `key` the slot counts it does not hold (see the module).
pub fn fold<S: Slot>(entry: &mut S::Entry, key: u64, before: &S, after: &S) {
    if after.occupant() == key {
        after.add_to(entry);
    }
    if before.occupant() == key && before.seq() != after.seq() && S::fold_head(entry) < before.seq()
    {
        before.add_to(entry);
    }
}

impl Slot for HotSlot {
    type Entry = PoolHot;
    const SLOTS: u32 = HOT_SLOTS;

    fn index(pool: u64) -> u32 {
        HotSlot::index(pool)
    }

    fn occupant(&self) -> u64 {
        self.pool
    }

    fn seq(&self) -> u64 {
        self.seq
    }

    fn settled(&self) -> bool {
        HotSlot::settled(self)
    }

    fn add_to(&self, hot: &mut PoolHot) {
        hot.alloc_calls += self.alloc_calls;
        hot.frag_calls += self.frag_calls;
        hot.put_calls += self.put_calls;
        hot.put_cached += self.put_cached;
        hot.put_released += self.put_released;
        hot.hold_pages += self.hold_pages;
        hot.release_pages += self.release_pages;
        hot.release_full += self.release_full;
        hot.refill_calls += self.refill_calls;
        hot.refill_empty += self.refill_empty;
        hot.refill_pages += self.refill_pages;
        hot.full_run += self.full_run;
        hot.empty_run += self.empty_run;
    }

    fn fold_head(hot: &PoolHot) -> u64 {
        hot.fold_head
    }

    fn entry_settled(hot: &PoolHot) -> bool {
        hot.fold_head == hot.fold_tail
    }
}

impl Slot for NapiSlot {
    type Entry = NapiHot;
    const SLOTS: u32 = NAPI_SLOTS;

    fn index(napi: u64) -> u32 {
        NapiSlot::index(napi)
    }

    fn occupant(&self) -> u64 {
        self.napi
    }

    fn seq(&self) -> u64 {
        self.seq
    }

    fn settled(&self) -> bool {
        NapiSlot::settled(self)
    }

    fn add_to(&self, hot: &mut NapiHot) {
        hot.counts.polls += self.counts.polls;
        hot.counts.work += self.counts.work;
        hot.counts.full_budget += self.counts.full_budget;
        hot.counts.budget += self.counts.budget;
    }

    fn fold_head(hot: &NapiHot) -> u64 {
        hot.fold_head
    }

    fn entry_settled(hot: &NapiHot) -> bool {
        hot.fold_head == hot.fold_tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of one CPU: the slot and the hash entries of two pools, driven as the eBPF side
    /// drives them (count in the slot, fold on a switch), with the agent's read interleaved
    /// at every point of a switch.
    #[derive(Clone, Default)]
    struct Cpu {
        slot: HotSlot,
        hash: [PoolHot; 3],
        /// The slot's `seq` when the switch in progress began (the eBPF side reads it once).
        seq0: u64,
    }

    impl Cpu {
        fn count(&mut self, pool: u64) {
            if self.slot.pool != pool {
                for step in 0..SWITCH_STEPS {
                    self.switch_step(pool, step);
                }
            }
            self.slot.alloc_calls += 1;
        }

        /// One store of `switch_slot`, in its order.
        fn switch_step(&mut self, pool: u64, step: usize) {
            if step == 0 {
                self.seq0 = self.slot.seq;
            }
            let seq = self.seq0;
            let old = self.slot.pool as usize;
            match step {
                0 => self.slot.seq_end = seq | 1,
                1 => self.hash[old].fold_tail = seq | 1,
                2 => self.hash[old].alloc_calls += self.slot.alloc_calls,
                3 => self.hash[old].fold_head = seq,
                4 => self.hash[old].fold_tail = seq,
                5 => self.slot.alloc_calls = 0,
                6 => self.slot.pool = pool,
                7 => self.slot.seq = seq + 2,
                8 => self.slot.seq_end = seq + 2,
                _ => unreachable!(),
            }
        }

        /// What the agent computes for `pool` from the given copies.
        fn read(before: &HotSlot, hash: &PoolHot, after: &HotSlot, pool: u64) -> u64 {
            let mut h = *hash;
            fold(&mut h, pool, before, after);
            h.alloc_calls
        }

        fn truth(&self, pool: u64) -> u64 {
            self.hash[pool as usize].alloc_calls
                + if self.slot.pool == pool {
                    self.slot.alloc_calls
                } else {
                    0
                }
        }
    }

    const SWITCH_STEPS: usize = 9;

    /// Every interleaving of one read (slot, hash, slot) with one switch, at every store:
    /// the folded count is never above the truth at the end of the read, never below the
    /// truth at its start (so never below the previous collection), for both pools.
    #[test]
    fn a_read_racing_a_switch_neither_double_counts_nor_goes_backwards() {
        // Pool 1 holds the slot with 5 counts (3 already folded from an earlier stay).
        let mut base = Cpu::default();
        for _ in 0..3 {
            base.count(1);
        }
        base.count(2);
        for _ in 0..5 {
            base.count(1);
        }
        // Points in the switch (0..=9 stores done) at which each copy is taken, in order.
        let mut checked = 0;
        for b in 0..=SWITCH_STEPS {
            for h in b..=SWITCH_STEPS {
                for a in h..=SWITCH_STEPS {
                    let mut cpu = base.clone();
                    let start = [cpu.truth(1), cpu.truth(2)];
                    let (mut before, mut hash, mut after) = (None, None, None);
                    for step in 0..=SWITCH_STEPS {
                        if step == b {
                            before = Some(cpu.slot);
                        }
                        if step == h {
                            hash = Some(cpu.hash);
                        }
                        if step == a {
                            after = Some(cpu.slot);
                        }
                        if step < SWITCH_STEPS {
                            cpu.switch_step(2, step);
                        }
                    }
                    let (before, hash, after) = (before.unwrap(), hash.unwrap(), after.unwrap());
                    // A copy taken mid-fold is taken again by the reader: skip those.
                    if !before.settled() || !after.settled() {
                        continue;
                    }
                    for pool in [1u64, 2] {
                        if !HotSlot::entry_settled(&hash[pool as usize]) {
                            continue;
                        }
                        let seen = Cpu::read(&before, &hash[pool as usize], &after, pool);
                        let end = cpu.truth(pool);
                        checked += 1;
                        assert!(
                            seen >= start[pool as usize - 1] && seen <= end,
                            "pool {pool}, copies at {b}/{h}/{a}: read {seen}, truth {} → {end}",
                            start[pool as usize - 1]
                        );
                    }
                }
            }
        }
        // A slot copy is whole only before the switch began or after it ended, and a hash copy
        // only outside the fold (the reader takes the others again): of the 220 orders × 2
        // pools, 21 are reads the reader accepts, among them the one that matters, a hash
        // copy before the fold between slot copies on both sides of the switch.
        assert_eq!(checked, 21);
    }

    #[test]
    fn a_settled_slot_adds_its_counts_to_its_pool_only() {
        let mut cpu = Cpu::default();
        for _ in 0..4 {
            cpu.count(1);
        }
        cpu.count(2);
        cpu.count(2);
        let (s, h) = (cpu.slot, cpu.hash);
        assert_eq!(Cpu::read(&s, &h[1], &s, 1), 4);
        assert_eq!(Cpu::read(&s, &h[2], &s, 2), 2);
        assert!(
            s.settled() && h.iter().all(HotSlot::entry_settled),
            "{s:?} {h:?}"
        );
    }

    /// NAPI polls fold by the same rule: the slot's instance gets the slot's counts, once; a
    /// copy of the entry that already holds the slot's previous occupancy does not get it
    /// again.
    #[test]
    fn a_napi_slot_folds_by_the_same_rule() {
        use ppscope_common::NapiCounters;
        let counts = NapiCounters {
            polls: 3,
            work: 40,
            full_budget: 1,
            budget: 192,
        };
        let slot = NapiSlot {
            seq: 4,
            napi: 0xa0,
            counts,
            seq_end: 4,
            ..Default::default()
        };
        let mut entry = NapiHot {
            fold_head: 2,
            counts: NapiCounters {
                polls: 10,
                ..Default::default()
            },
            fold_tail: 2,
        };
        fold(&mut entry, 0xa0, &slot, &slot);
        assert_eq!((entry.counts.polls, entry.counts.work), (13, 40));
        let mut other = NapiHot::default();
        fold(&mut other, 0xb0, &slot, &slot);
        assert_eq!(other, NapiHot::default(), "another instance gets nothing");
        // The slot moved on to 0xb0 during the read, and the entry copy was taken after the
        // fold of occupancy 4 (fold_head 4): nothing added twice.
        let moved = NapiSlot {
            seq: 6,
            napi: 0xb0,
            counts: NapiCounters::default(),
            seq_end: 6,
            ..Default::default()
        };
        let mut folded = NapiHot {
            fold_head: 4,
            counts: NapiCounters {
                polls: 13,
                ..Default::default()
            },
            fold_tail: 4,
        };
        fold(&mut folded, 0xa0, &slot, &moved);
        assert_eq!(folded.counts.polls, 13);
        assert!(NapiSlot::entry_settled(&folded));
    }
}

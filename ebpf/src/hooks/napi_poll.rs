//! `napi_poll` (around the pool, any driver): NAPI work per poll and polls that used their
//! whole budget.
//!
//! Raw tracepoint `napi:napi_poll` (`tp_napi_poll`). Counted in the CPU's slot
//! (`NAPI_SLOT`), folded into the instance's `NAPI_COUNTERS` entry when the CPU polls another
//! instance: the same scheme, and the same bracket, as the per-page counts (`pool::hot`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use ppscope_common::{NapiCounters, NapiHot, NapiSlot};

use crate::{
    config,
    kmem::{device_identity, read_field},
    maps::{NAPI_COUNTERS, NAPI_IDENTITY, NAPI_SLOT},
    pool::{put, SWITCH_AFTER},
};

/// `napi:napi_poll(napi, work, budget)`: how much of its budget each poll used.
#[raw_tracepoint(tracepoint = "napi_poll")]
pub fn tp_napi_poll(ctx: RawTracePointContext) -> i32 {
    let napi = ctx.arg::<u64>(0);
    let work = ctx.arg::<u64>(1) as i32;
    let budget = ctx.arg::<u64>(2) as i32;
    if napi == 0 {
        return 0;
    }
    // SAFETY: this CPU's element of a per-CPU array (a program nested between the check and
    // the adds may move one poll to the other instance, as for pages).
    let Some(s) = NAPI_SLOT
        .get_ptr_mut(NapiSlot::index(napi))
        .map(|s| unsafe { &mut *s })
    else {
        return 0;
    };
    if s.napi != napi {
        if NAPI_COUNTERS.get_ptr_mut(napi).is_none() && !first_sight(napi) {
            return 0;
        }
        // As `pool::hot`: another instance's poll goes to its entry, and the slot changes
        // hands every `SWITCH_AFTER`th one. No program but this one writes the slot, and a
        // program does not run nested in itself on one CPU: no fold is in progress here.
        s.misses += 1;
        if s.napi != 0 && s.misses % SWITCH_AFTER != 0 {
            if let Some(c) = NAPI_COUNTERS.get_ptr_mut(napi) {
                // SAFETY: this CPU's value of the instance's entry.
                count_poll(unsafe { &mut (*c).counts }, work, budget);
            }
            return 0;
        }
        switch(s, napi);
    }
    count_poll(&mut s.counts, work, budget);
    if s.counts.polls % 64 == 0 {
        // A lookup marks the entry recently used: the slot's own instance would otherwise
        // look cold to the LRU, and be the first evicted from a full map.
        let _ = NAPI_COUNTERS.get_ptr_mut(napi);
    }
    0
}

#[inline(always)]
fn count_poll(c: &mut NapiCounters, work: i32, budget: i32) {
    c.polls += 1;
    c.work += work.max(0) as u64;
    c.budget += budget.max(0) as u64;
    if work >= budget && budget > 0 {
        c.full_budget += 1;
    }
}

/// The instance's identity and its hash entry, made on first sight (before any of its counts
/// sit in a slot: the agent folds a slot only into an entry it read).
#[inline(always)]
fn first_sight(napi: u64) -> bool {
    // SAFETY: read-only lookup of an identity record.
    if unsafe { NAPI_IDENTITY.get(napi) }.is_none() {
        let netdev = read_field::<u64>(napi, config().offsets.napi_dev).unwrap_or(0);
        let _ = NAPI_IDENTITY.insert(napi, device_identity(netdev, napi), 0);
    }
    NAPI_COUNTERS.insert(napi, NapiHot::default(), 0).is_ok()
}

/// Folds the slot into its instance's entry, bracketed as `pool::switch_slot` does (see
/// `HotSlot` for the reader's side), and gives the slot to `napi`.
#[inline(always)]
fn switch(s: &mut NapiSlot, napi: u64) {
    let seq = s.seq;
    put!(s.seq_end, seq | 1);
    // An entry the LRU evicted meanwhile is made again with the slot's counts, not lost.
    if NAPI_COUNTERS.get_ptr_mut(s.napi).is_none() && s.napi != 0 {
        let _ = NAPI_COUNTERS.insert(s.napi, NapiHot::default(), 0);
    }
    if let Some(c) = NAPI_COUNTERS.get_ptr_mut(s.napi) {
        // SAFETY: this CPU's value of the old instance's entry.
        let c = unsafe { &mut *c };
        put!(c.fold_tail, seq | 1);
        put!(c.counts.polls, c.counts.polls + s.counts.polls);
        put!(c.counts.work, c.counts.work + s.counts.work);
        put!(
            c.counts.full_budget,
            c.counts.full_budget + s.counts.full_budget
        );
        put!(c.counts.budget, c.counts.budget + s.counts.budget);
        put!(c.fold_head, seq);
        put!(c.fold_tail, seq);
    }
    put!(s.counts.polls, 0);
    put!(s.counts.work, 0);
    put!(s.counts.full_budget, 0);
    put!(s.counts.budget, 0);
    put!(s.napi, napi);
    put!(s.seq, seq + 2);
    put!(s.seq_end, seq + 2);
}

//! `refill`: ring refills and empty-ring misses, so the ring hit rate.
//!
//! On `page_pool_refill_alloc_cache`: kprobe `pp_refill_entry` + kretprobe `pp_refill_exit`, or
//! fexit `fx_refill` alone (fexit sees the pool argument and the return value, and reads the
//! pool's fields as plain loads: `kmem::Typed`).

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe},
    programs::{FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::site;

use crate::{
    config,
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, PoolRead, Probed, Typed},
    pool::{
        file, hot_unnamed, record_state, refresh_device, touch_counters, Hist, Hot, REFILL_WEIGHT,
    },
};

/// Counts one refill in `$c` (the pool's slot or its entry: both have the fields).
/// Counting only: the filing is decided before (`fill_weight!`) and the device check made
/// once after (the macro is inlined into both arms of the match; the device check in both
/// made it the largest program, and the verifier's time at start-up grows with that).
macro_rules! count_refill {
    ($c:expr, $got:expr, $left:expr) => {{
        let c = $c;
        c.refill_calls += 1;
        if $got == 0 {
            c.refill_empty += 1;
            c.empty_run += 1;
        } else {
            c.empty_run = 0;
            // The refill moved `count + 1` pages: the cache now holds `count`, one returned.
            c.refill_pages += $left + 1;
        }
    }};
}

/// Whether this refill files the ring's fill, as the weight it files it with (0: not
/// filed; see `HotSlot::fill_weight`), and the run of empty refills it ends (0: none), from
/// `$c` (the pool's slot or its entry) before the refill is counted. An empty refill is
/// filed alone: it is the ring's exhaustion, which the record's state shows and the slow
/// path that follows reads again.
macro_rules! fill_weight {
    ($c:expr, $got:expr) => {{
        let c = $c;
        if $got == 0 {
            (1, 0)
        } else {
            let (w, ended) = (c.fill_weight, c.empty_run);
            if w == 0 || w >= FILE_FILL_EVERY || ended > 0 {
                c.fill_weight = 1;
                (if w == 0 { 1 } else { w }, ended)
            } else {
                c.fill_weight = w + 1;
                (0, 0)
            }
        }
    }};
}

/// Counted in the pool's slot, as the per-page hooks count (`pool::hot`): refills are light's
/// most frequent event, and a hash lookup each was a fifth of its cost. The ring's state, its
/// fill and the empty-ring run go to the pool's rare-event record (one lookup for the three),
/// at an empty refill, at the end of a run of them, and at the first refill that took pages
/// and every 8th after (`HotSlot::fill_weight`): at every refill, the lookup and the ring's
/// reads were most of this program's time, the largest of `--detail light`.
///
/// The pool's counts are found first: the verifier walks everything after a branch once per
/// way it went, and the lookup is most of the program (see `recycle`). The filing is decided
/// and done before the counts and the device check: after them, the verifier walked the
/// refill program's 5,544 instructions as 9,068 in the VM lab (over the tests' budget of
/// 8,000), and with the device check before the filing as 19,335.
#[inline(always)]
fn on_refill_exit<R: PoolRead>(pool: u64, got: u64) {
    let Some(mut hot) = hot_unnamed(pool) else {
        return;
    };
    let (fill_weight, ended_run) = match &mut hot {
        Hot::Slot(s) => fill_weight!(s, got),
        Hot::Entry(c) => fill_weight!(c, got),
    };
    if fill_weight > 0 {
        let rare = record_state::<R>(pool, got == 0, Hist::Fill, fill_weight);
        // The run of empty refills ended: filed in the record `record_state` looked up.
        if let (Some(r), true) = (rare, ended_run > 0) {
            file(r, Hist::EmptyRun, ended_run);
        }
    }
    let left = if got == 0 {
        0
    } else {
        R::field::<u32>(pool, config().offsets.pool_alloc_count).unwrap_or(0) as u64
    };
    match &mut hot {
        Hot::Slot(s) => count_refill!(s, got, left),
        Hot::Entry(c) => count_refill!(c, got, left),
    }
    // The device (renamed, or another pool at this address) is checked at the pool's first
    // refill or page in on this CPU and at most once a second after (`Hot::device_check_due`,
    // which reads the clock at every 8th refill): at every refill it was about a third of the
    // program's reads, at every 8th most of its time under TCG (BENCHMARKS.md). The first
    // also reads a new pool's identity (`hot_unnamed`).
    if hot.device_check_due(REFILL_WEIGHT) {
        refresh_device(pool);
        touch_counters(pool);
    }
}

/// A refill that took pages files the ring's fill at this many such refills (see
/// `HotSlot::fill_weight`).
const FILE_FILL_EVERY: u64 = 8;

#[kprobe]
pub fn pp_refill_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::REFILL, Owner::Task, arg(&ctx, 0), 0, false);
    0
}

#[kretprobe]
pub fn pp_refill_exit(ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::REFILL, Owner::Task) {
        on_refill_exit::<Probed>(f.pool, ctx.ret::<u64>());
    }
    0
}

#[fexit]
pub fn fx_refill(ctx: FExitContext) -> u32 {
    on_refill_exit::<Typed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

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
    frames::{close_frame, open_frame},
    kmem::{arg, PoolRead, Probed, Typed},
    pool::{close_run, counters, record_state, refresh_device, Hist},
};

#[inline(always)]
fn on_refill_exit<R: PoolRead>(pool: u64, got: u64) {
    let cfg = config();
    record_state::<R>(pool);
    if let Some(c) = counters(pool) {
        c.refill_calls += 1;
        // The device (renamed, or another pool at this address) is checked on this CPU's
        // first refill of the pool and every 64th after, as `page_hold` does per page: at
        // every refill it was about a third of the program's reads (BENCHMARKS.md).
        if c.refill_calls % 64 == 1 {
            refresh_device(pool);
        }
        if got == 0 {
            c.refill_empty += 1;
            c.empty_run += 1;
        } else {
            close_run(pool, &mut c.empty_run, Hist::EmptyRun);
            // The refill moved `count + 1` pages: the cache now holds `count`, one was returned.
            let left = R::field::<u32>(pool, cfg.offsets.pool_alloc_count).unwrap_or(0);
            c.refill_pages += left as u64 + 1;
        }
    }
}

#[kprobe]
pub fn pp_refill_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::REFILL, arg(&ctx, 0), 0, false);
    0
}

#[kretprobe]
pub fn pp_refill_exit(ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::REFILL) {
        on_refill_exit::<Probed>(f.pool, ctx.ret::<u64>());
    }
    0
}

#[fexit]
pub fn fx_refill(ctx: FExitContext) -> u32 {
    on_refill_exit::<Typed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

//! `page_hold`: pages entering the pool from the page allocator or provider.
//!
//! Raw tracepoint `page_pool:page_pool_state_hold` (`tp_state_hold`) first: it is the exact
//! source and fires for memory providers too. Else kprobe `pp_hold` / fentry `fe_hold` on
//! `page_pool_set_pp_info`, called once per page the slow path brings in (memory providers may
//! bypass it).

use aya_ebpf::{
    macros::{fentry, kprobe, raw_tracepoint},
    programs::{FEntryContext, ProbeContext, RawTracePointContext},
};

use crate::{
    kmem::arg,
    pool::{hot_unnamed, refresh_device, touch_counters, Hot},
};

#[inline(always)]
fn on_hold(pool: u64) {
    let Some(mut hot) = hot_unnamed(pool) else {
        return;
    };
    match &mut hot {
        Hot::Slot(s) => s.hold_pages += 1,
        Hot::Entry(c) => c.hold_pages += 1,
    }
    // Pages enter a pool by the thousand under churn: the device is checked at the pool's
    // first refill or page in on this CPU and at most once a second after, the clock read at
    // every 64th page in (`Hot::device_check_due`; a check at every page tripled this
    // program's cost). The first also reads a new pool's identity (`hot_unnamed`).
    if hot.device_check_due(1) {
        refresh_device(pool);
        touch_counters(pool);
    }
}

#[kprobe]
pub fn pp_hold(ctx: ProbeContext) -> u32 {
    on_hold(arg(&ctx, 0));
    0
}

#[fentry]
pub fn fe_hold(ctx: FEntryContext) -> u32 {
    on_hold(ctx.arg::<u64>(0));
    0
}

// Raw tracepoint: the pool is argument 0 in every kernel's TP_PROTO.
#[raw_tracepoint(tracepoint = "page_pool_state_hold")]
pub fn tp_state_hold(ctx: RawTracePointContext) -> i32 {
    on_hold(ctx.arg::<u64>(0));
    0
}

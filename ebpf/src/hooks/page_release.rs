//! `page_release`: pages leaving the pool, so ring_full.
//!
//! Raw tracepoint `page_pool:page_pool_state_release` (`tp_state_release`) first: it is the
//! exact source and fires for memory providers too. Else kprobe `pp_release` / fentry
//! `fe_release` on `page_pool_return_netmem` (older kernels: `page_pool_return_page`).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, kprobe, raw_tracepoint},
    programs::{FEntryContext, ProbeContext, RawTracePointContext},
};
use ppscope_common::site;

use crate::{
    frames::frame,
    kmem::{arg, Probed},
    pool::{count_page, record_state},
};

#[inline(always)]
fn on_release(pool: u64) {
    count_page!(pool, release_pages);
    record_state::<Probed>(pool, false);
    // Tell an open bulk-recycle frame of this task that one of its pages left the pool (a
    // single recycle sees that by itself: see `recycle`).
    if let Some(f) = frame(site::BULK) {
        if f.pid_tgid == bpf_get_current_pid_tgid() && f.pool == pool {
            f.released += 1;
        }
    }
}

#[kprobe]
pub fn pp_release(ctx: ProbeContext) -> u32 {
    on_release(arg(&ctx, 0));
    0
}

#[fentry]
pub fn fe_release(ctx: FEntryContext) -> u32 {
    on_release(ctx.arg::<u64>(0));
    0
}

// Raw tracepoint: the pool is argument 0 in every kernel's TP_PROTO.
#[raw_tracepoint(tracepoint = "page_pool_state_release")]
pub fn tp_state_release(ctx: RawTracePointContext) -> i32 {
    on_release(ctx.arg::<u64>(0));
    0
}

//! `page_release`: pages leaving the pool, so ring_full.
//!
//! Tracepoint `page_pool:page_pool_state_release` first: it is the exact source and fires for
//! memory providers too. As `tp_btf` (`tb_state_release`: the pool argument is BTF-typed, its
//! fields are plain loads) where the kernel allows tracing programs, else as a raw tracepoint
//! (`tp_state_release`: a load through `bpf_rdonly_cast` per field, a helper call where the
//! kernel lacks it). Else kprobe `pp_release` / fentry
//! `fe_release` on `page_pool_return_netmem` (older kernels: `page_pool_return_page`).

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, kprobe, raw_tracepoint},
    programs::{BtfTracePointContext, FEntryContext, ProbeContext, RawTracePointContext},
};
use ppscope_common::site;

use crate::{
    frames::own_frame,
    kmem::{arg, PoolRead, Probed, Typed},
    pool::{count_page, mark_released, record_state, Hist},
};

/// Runs per page while the ring is full (a ring-full churn): the ring's state is read as the
/// program can read the pool (`R`).
#[inline(always)]
fn on_release<R: PoolRead>(pool: u64, netmem: u64) {
    count_page!(pool, release_pages);
    // For the single recycle this release may be part of (see `recycle`).
    mark_released::<R>(pool, netmem);
    record_state::<R>(pool, false, Hist::ReleaseFill);
    // Tell an open bulk-recycle frame of this task that one of its pages left the pool (a
    // single recycle learns it from the mark above).
    if let Some(f) = own_frame(site::BULK) {
        if f.pool == pool {
            f.released += 1;
        }
    }
}

#[kprobe]
pub fn pp_release(ctx: ProbeContext) -> u32 {
    on_release::<Probed>(arg(&ctx, 0), arg(&ctx, 1));
    0
}

#[fentry]
pub fn fe_release(ctx: FEntryContext) -> u32 {
    on_release::<Probed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

// Raw tracepoint: the pool is argument 0 in every kernel's TP_PROTO, the page (or netmem) 1.
#[raw_tracepoint(tracepoint = "page_pool_state_release")]
pub fn tp_state_release(ctx: RawTracePointContext) -> i32 {
    on_release::<Probed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

// The same tracepoint with typed arguments: `const struct page_pool *pool` is argument 0, the
// page (`netmem_ref` or `struct page *`) 1.
#[btf_tracepoint(function = "page_pool_state_release")]
pub fn tb_state_release(ctx: BtfTracePointContext) -> i32 {
    on_release::<Typed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

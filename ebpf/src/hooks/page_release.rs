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
    config,
    frames::own_frame,
    kmem::{arg, PoolRead, Probed, Typed},
    pool::{hot, mark_released, record_fill, ring_fill, Hist, Hot, RingSide},
};

/// Runs per page while the ring is full (a ring-full churn): the ring's state is read as the
/// program can read the pool (`R`). A release into a ring full to its producers, after the
/// first of the slot's occupancy, is counted in the pool's slot (`release_full`: its fill is the
/// ring's size, which the agent's model adds to the distribution) instead of filed in the
/// pool's record: the record's lookup and its atomic add were more than half of this
/// program's time on the development host (`xtask/src/bench/report.rs`). Every 64th is filed
/// still, so the ring's state in the record stays that of the churn. The ring's reads widen
/// the window of the race `pool::hot` describes (a nested program switching the slot
/// between the lookup and the count) by a few loads.
#[inline(always)]
fn on_release<R: PoolRead>(pool: u64, netmem: u64) {
    let Some(mut hot) = hot(pool) else {
        return;
    };
    let (released, full) = match &mut hot {
        Hot::Slot(s) => (&mut s.release_pages, &mut s.release_full),
        Hot::Entry(c) => (&mut c.release_pages, &mut c.release_full),
    };
    *released += 1;
    let fill = ring_fill::<R>(pool, RingSide::Producer);
    if *released % FILE_FULL_EVERY != 1 && fill.is_some_and(|f| f.full()) {
        *full += 1;
    } else {
        record_fill::<R>(pool, fill, Hist::ReleaseFill, 1);
    }
    // Where no recycle hook can attach, nobody takes a mark or opens a frame
    // (`ProbeConfig::feed_recycles`: fixed at load, so the verifier drops this code). After
    // the ring's reads, not before: the verifier walked 3,641 instructions for this program
    // on the development host with it (3,928 with the mark first), 3,606 without (3,661
    // and 3,626 since the slot's index is computed).
    if config().feed_recycles != 0 {
        // For the single recycle this release may be part of (see `recycle`).
        mark_released::<R>(pool, netmem);
        // Tell an open bulk-recycle frame of this task that one of its pages left the pool
        // (a single recycle learns it from the mark above).
        if let Some(f) = own_frame(site::BULK) {
            if f.pool == pool {
                f.released += 1;
            }
        }
    }
}

/// One release into a full ring in this many is filed in the pool's record (see
/// [`on_release`]).
const FILE_FULL_EVERY: u64 = 64;

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

//! `recycle`: single-page recycles, so the cached/ring/ring_full split.
//!
//! On `page_pool_put_unrefed_netmem` (older kernels: `page_pool_put_defragged_page`): fexit
//! `fx_put_exit` alone (it sees the arguments), or kprobe `pp_put_entry` + kretprobe
//! `pp_put_exit` (the entry keeps the arguments for the return).
//!
//! Where the page went is learnt after the call. A page on top of the alloc cache was recycled
//! directly (the common case in a pool's own NAPI; looked at first). A page that left the pool
//! (ring full, or not recyclable) went through the `page_release` tracepoint on this CPU
//! inside the call, whose program marked it (`pool::mark_released`; taken by
//! `pool::take_release_mark`); any other is in the ring. Without a mark to go by (the marks
//! off: no tracepoint, or no recycle hook) a page that left is told by reading it: the kernel
//! clears its `pp` before handing it back.

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe},
    programs::{FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, KernelOffsets, OFFSET_UNKNOWN};

use crate::{
    config,
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, read_cast, PoolRead, Probed, Typed},
    pool::{close_run, hot, take_release_mark, Hist, Hot},
};

/// Direct recycling pushes the page on top of the alloc cache, and nothing can pop it before
/// we look (the cache is only touched in this softirq context). A page sent to the ring or
/// handed back cannot also be in the cache (it would be a double free), so "top of cache ==
/// our page" is exact, and says the page stayed.
///
/// The cache's count is read as the program reads the pool (`R`); the slot, at an index only
/// known at run time (the verifier refuses a typed load at a variable offset), as the cache of
/// a pool cast `8 * index` bytes further on (`read_cast`: one load; without the kfunc, the
/// helper, the largest part of the recycle's cost priced in the VM lab, BENCHMARKS.md).
#[inline(always)]
fn on_top_of_cache<R: PoolRead>(pool: u64, netmem: u64, o: &KernelOffsets) -> bool {
    if o.pool_alloc_cache == OFFSET_UNKNOWN {
        return false;
    }
    match R::field::<u32>(pool, o.pool_alloc_count) {
        Some(count) if count > 0 && count <= 128 => {
            let shifted = pool + (count as u64 - 1) * 8;
            read_cast::<u64>(shifted, config().cast.page_pool, o.pool_alloc_cache) == Some(netmem)
        }
        _ => false,
    }
}

/// Where the page went: (stayed in the cache, stayed in the pool).
///
/// The cache first: a page on top of it stayed (exact, see [`on_top_of_cache`]), the common
/// case in a pool's own NAPI, whose recycles then read neither the mark nor the page. (The
/// lab's veth pool recycles none into its cache: there every page takes the mark as well.)
/// A mark left untaken stays harmless: it names a page and the pool's intake at the release,
/// and a later recycle of that page needs the pool to take it in again first.
#[inline(always)]
fn classify<R: PoolRead>(pool: u64, netmem: u64) -> (bool, bool) {
    let o = &config().offsets;
    if on_top_of_cache::<R>(pool, netmem, o) {
        return (true, true);
    }
    let kept = match take_release_mark::<R>(pool, netmem) {
        // Left the pool in this call: the release marked it (no read of the page).
        Some(true) => false,
        // Kept, and not in the cache: in the ring.
        Some(false) => true,
        // No mark to go by (marks off, or one the pool's intake since leaves in doubt): the
        // page's `pp` tells. Without its offset nothing tells a page that left: counted as
        // kept, and the agent shows ring_full as unknown (`Coverage::cache_layout`).
        None => {
            o.page_pp == OFFSET_UNKNOWN
                || read_cast::<u64>(netmem & !1, config().cast.page, o.page_pp) == Some(pool)
        }
    };
    (false, kept)
}

/// The pool's counts are found first and the page classified after: the verifier walks
/// everything after a branch once per way the branch went, and the lookup (with the slot's
/// switch and a new pool's identity) is most of the program, the classification three ways
/// (`doctor` shows the instructions it walked: 59,544 the other way round, in the VM lab).
#[inline(always)]
fn on_put_exit<R: PoolRead>(pool: u64, netmem: u64) {
    let Some(mut hot) = hot(pool) else {
        return;
    };
    let (cached, kept) = classify::<R>(pool, netmem);
    let (calls, released, full_run, in_cache) = match &mut hot {
        Hot::Slot(s) => (
            &mut s.put_calls,
            &mut s.put_released,
            &mut s.full_run,
            &mut s.put_cached,
        ),
        Hot::Entry(c) => (
            &mut c.put_calls,
            &mut c.put_released,
            &mut c.full_run,
            &mut c.put_cached,
        ),
    };
    *calls += 1;
    if !kept {
        *released += 1;
        *full_run += 1;
        return;
    }
    close_run(pool, full_run, Hist::FullRun);
    *in_cache += cached as u64;
}

// The pair knows its call by the stack (`Owner::call`), not the task: a load on each side
// instead of a helper call, on every page recycled. The rarer pairs (refill, slow path, bulk
// recycle, whose frame `page_release` looks up by the task) keep the task.
#[kprobe]
pub fn pp_put_entry(ctx: ProbeContext) -> u32 {
    open_frame(
        site::PUT,
        Owner::call(ctx.regs),
        arg(&ctx, 0),
        arg(&ctx, 1),
        false,
    );
    0
}

#[kretprobe]
pub fn pp_put_exit(ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::PUT, Owner::call(ctx.regs)) {
        on_put_exit::<Probed>(f.pool, f.netmem);
    }
    0
}

#[fexit]
pub fn fx_put_exit(ctx: FExitContext) -> u32 {
    on_put_exit::<Typed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

//! `recycle`: single-page recycles, so the cached/ring/ring_full split.
//!
//! On `page_pool_put_unrefed_netmem` (older kernels: `page_pool_put_defragged_page`): fexit
//! `fx_put_exit` alone (it sees the arguments), or kprobe `pp_put_entry` + kretprobe
//! `pp_put_exit` (the entry keeps the arguments for the return).
//!
//! Where the page went is learnt after the call. A page that left the pool (ring full, or not
//! recyclable) went through `page_release` on this CPU inside the call, which marked it
//! (`pool::take_release_mark`); a page on top of the alloc cache was recycled directly (the
//! common case in a pool's own NAPI); any other is in the ring. Without the marks (no
//! `page_release` hook) a page that left is told by reading it: the kernel clears its `pp`
//! before handing it back.

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe},
    programs::{FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, KernelOffsets, OFFSET_UNKNOWN};

use crate::{
    config,
    frames::{close_frame, open_frame},
    kmem::{arg, read_field, PoolRead, Probed, Typed},
    pool::{close_run, hot, take_release_mark, Hist, Hot},
};

/// Direct recycling pushes the page on top of the alloc cache, and nothing can pop it before
/// we look (the cache is only touched in this softirq context). A page sent to the ring or
/// handed back cannot also be in the cache (it would be a double free), so "top of cache ==
/// our page" is exact, and says the page stayed.
///
/// The cache's count is read as the program reads the pool (`R`); the slot, at an offset only
/// known at run time, always through the helper (the verifier refuses a typed load there).
#[inline(always)]
fn on_top_of_cache<R: PoolRead>(pool: u64, netmem: u64, o: &KernelOffsets) -> bool {
    if o.pool_alloc_cache == OFFSET_UNKNOWN {
        return false;
    }
    match R::field::<u32>(pool, o.pool_alloc_count) {
        Some(count) if count > 0 && count <= 128 => {
            let slot = o.pool_alloc_cache as u64 + (count as u64 - 1) * 8;
            read_field::<u64>(pool, slot as u32) == Some(netmem)
        }
        _ => false,
    }
}

#[inline(always)]
fn on_put_exit<R: PoolRead>(pool: u64, netmem: u64) {
    let cfg = config();
    let o = &cfg.offsets;
    let (cached, kept) = match take_release_mark(pool, netmem) {
        // Left the pool in this call: the release marked it (no read of the kernel at all).
        Some(true) => (false, false),
        // Kept: in the cache if on top of it, else in the ring (one helper call).
        Some(false) => (on_top_of_cache::<R>(pool, netmem, o), true),
        // No marks (page_release not attached): the cache first, as a page on top of it
        // stayed and its `pp` need not be read. Without `pp`'s offset nothing tells a page
        // that left: counted as kept, and the agent shows ring_full as unknown
        // (`Coverage::cache_layout`).
        None => {
            let cached = on_top_of_cache::<R>(pool, netmem, o);
            let kept = cached
                || o.page_pp == OFFSET_UNKNOWN
                || read_field::<u64>(netmem & !1, o.page_pp) == Some(pool);
            (cached, kept)
        }
    };
    match hot(pool) {
        Some(Hot::Slot(s)) => {
            s.put_calls += 1;
            if !kept {
                s.put_released += 1;
                s.full_run += 1;
                return;
            }
            close_run(pool, &mut s.full_run, Hist::FullRun);
            s.put_cached += cached as u64;
        }
        Some(Hot::Entry(c)) => {
            c.put_calls += 1;
            if !kept {
                c.put_released += 1;
                c.full_run += 1;
                return;
            }
            close_run(pool, &mut c.full_run, Hist::FullRun);
            c.put_cached += cached as u64;
        }
        None => {}
    }
}

#[kprobe]
pub fn pp_put_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::PUT, arg(&ctx, 0), arg(&ctx, 1), false);
    0
}

#[kretprobe]
pub fn pp_put_exit(_ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::PUT) {
        on_put_exit::<Probed>(f.pool, f.netmem);
    }
    0
}

#[fexit]
pub fn fx_put_exit(ctx: FExitContext) -> u32 {
    on_put_exit::<Typed>(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

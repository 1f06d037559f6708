//! `alloc`: allocation counts, so the cache share and fast-path rate.
//!
//! kprobe `pp_alloc` on `page_pool_alloc_netmems` (older kernels: `page_pool_alloc_netmem`),
//! and on the wrapper `page_pool_alloc_pages` where it carries its own inlined copy (6.12);
//! fentry `fe_alloc` on the function, `fe_alloc_wrapper` on that wrapper.

use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};

use crate::{
    kmem::arg,
    pool::{count_page, touch_counters},
};

#[inline(always)]
fn on_alloc(pool: u64) {
    // A pool served from its cache alone has no refill or hold to keep its entry recent.
    if count_page!(pool, alloc_calls) % 4096 == 0 {
        touch_counters(pool);
    }
}

#[kprobe]
pub fn pp_alloc(ctx: ProbeContext) -> u32 {
    on_alloc(arg(&ctx, 0));
    0
}

#[fentry]
pub fn fe_alloc(ctx: FEntryContext) -> u32 {
    on_alloc(ctx.arg::<u64>(0));
    0
}

/// A second instance for an alloc wrapper that carries its own copy (one target per fentry).
#[fentry]
pub fn fe_alloc_wrapper(ctx: FEntryContext) -> u32 {
    on_alloc(ctx.arg::<u64>(0));
    0
}

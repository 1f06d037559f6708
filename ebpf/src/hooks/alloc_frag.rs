//! `alloc_frag`: fragment allocation counts.
//!
//! kprobe `pp_alloc_frag` / fentry `fe_alloc_frag` on `page_pool_alloc_frag_netmem` (older
//! kernels: `page_pool_alloc_frag`).

use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};

use crate::{kmem::arg, pool::count_page};

#[inline(always)]
fn on_alloc_frag(pool: u64) {
    count_page!(pool, frag_calls);
}

#[kprobe]
pub fn pp_alloc_frag(ctx: ProbeContext) -> u32 {
    on_alloc_frag(arg(&ctx, 0));
    0
}

#[fentry]
pub fn fe_alloc_frag(ctx: FEntryContext) -> u32 {
    on_alloc_frag(ctx.arg::<u64>(0));
    0
}

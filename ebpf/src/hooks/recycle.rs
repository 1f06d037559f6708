//! `recycle`: single-page recycles, so the cached/ring/ring_full split.
//!
//! On `page_pool_put_unrefed_netmem` (older kernels: `page_pool_put_defragged_page`): kprobe
//! `pp_put_entry` + kretprobe `pp_put_exit`, or fentry `fe_put_entry` + fexit `fx_put_exit`.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, OFFSET_UNKNOWN};

use crate::{
    config,
    frames::{close_frame, open_frame},
    kmem::{arg, read_field},
    pool::{close_run, counters, Hist},
};

#[inline(always)]
fn on_put_exit(pool: u64, netmem: u64, released: bool) {
    let cfg = config();
    let Some(c) = counters(pool) else {
        return;
    };
    c.put_calls += 1;
    if released {
        c.put_released += 1;
        c.full_run += 1;
        return;
    }
    close_run(pool, &mut c.full_run, Hist::FullRun);
    // Direct recycling pushes the page on top of the alloc cache, and nothing can pop it
    // before we look (the cache is only touched in this softirq context). A page sent to the
    // ring cannot also be in the cache, so "top of cache == our page" is exact.
    let o = &cfg.offsets;
    if let Some(count) = read_field::<u32>(pool, o.pool_alloc_count) {
        if count > 0 && count <= 128 && o.pool_alloc_cache != OFFSET_UNKNOWN {
            let slot = o.pool_alloc_cache as u64 + (count as u64 - 1) * 8;
            if read_field::<u64>(pool, slot as u32) == Some(netmem) {
                c.put_cached += 1;
            }
        }
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
        on_put_exit(f.pool, f.netmem, f.released != 0);
    }
    0
}

#[fentry]
pub fn fe_put_entry(ctx: FEntryContext) -> u32 {
    open_frame(site::PUT, ctx.arg::<u64>(0), ctx.arg::<u64>(1), false);
    0
}

#[fexit]
pub fn fx_put_exit(ctx: FExitContext) -> u32 {
    // fexit has the arguments: only "released meanwhile" comes from the frame.
    let released = close_frame(site::PUT).is_some_and(|f| f.released != 0);
    on_put_exit(ctx.arg::<u64>(0), ctx.arg::<u64>(1), released);
    0
}

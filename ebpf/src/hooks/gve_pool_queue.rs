//! `gve_pool_queue`: which gve rx queue each pool serves (pools created after start).
//!
//! On `gve_rx_create_page_pool` (module `gve`): kprobe `gve_create_entry` + kretprobe
//! `gve_create_exit`.

use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use ppscope_common::site;

use crate::{
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, gve_queue_of_rx},
    maps::GVE_POOL_QUEUE,
};

#[inline(always)]
fn on_gve_create_exit(pool: u64) {
    let Some(f) = close_frame(site::GVE_CREATE, Owner::Task) else {
        return;
    };
    // Error pointers (-4095..-1) are not pools.
    if pool == 0 || pool > u64::MAX - 4096 {
        return;
    }
    if let Some(queue) = gve_queue_of_rx(f.netmem) {
        let _ = GVE_POOL_QUEUE.insert(pool, queue, 0);
    }
}

/// `gve_rx_create_page_pool(priv, rx, ...)` returns the pool of queue `rx->q_num`.
#[kprobe]
pub fn gve_create_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::GVE_CREATE, Owner::Task, 0, arg(&ctx, 1), false);
    0
}

#[kretprobe]
pub fn gve_create_exit(ctx: RetProbeContext) -> u32 {
    on_gve_create_exit(ctx.ret::<u64>());
    0
}

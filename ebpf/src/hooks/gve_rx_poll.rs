//! `gve_rx_poll`: gve NAPI poll time and work per rx queue.
//!
//! On `gve_rx_poll_dqo` (module `gve`): kprobe `gve_poll_entry` + kretprobe `gve_poll_exit`.

use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use ppscope_common::site;

use crate::{
    config,
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, gve_queue_of_rx, now_ns, read_field},
    maps::{GVE_POLL, ZERO_SITE},
    pool::site_add,
};

#[inline(always)]
fn on_gve_poll_exit(work: i64) {
    let Some(f) = close_frame(site::GVE_POLL, Owner::Task) else {
        return;
    };
    // The frame's `pool` slot carries the queue number here.
    let queue = f.pool as u32;
    let elapsed = now_ns().saturating_sub(f.start_ns);
    if GVE_POLL.get_ptr_mut(queue).is_none() {
        let Some(zero) = ZERO_SITE.get_ptr(0) else {
            return;
        };
        // SAFETY: the zero slot is never written.
        let _ = GVE_POLL.insert(queue, unsafe { &*zero }, 0);
    }
    if let Some(stats) = GVE_POLL.get_ptr_mut(queue) {
        // SAFETY: per-CPU value of this CPU.
        site_add(unsafe { &mut *stats }, elapsed, Some(work));
    }
}

/// `gve_rx_poll_dqo(block, budget)`: the queue is `block->rx->q_num`.
#[kprobe]
pub fn gve_poll_entry(ctx: ProbeContext) -> u32 {
    let o = &config().offsets;
    let rx = read_field::<u64>(arg(&ctx, 0), o.gve_block_rx).unwrap_or(0);
    let queue = gve_queue_of_rx(rx).unwrap_or(u32::MAX);
    open_frame(site::GVE_POLL, Owner::Task, queue as u64, 0, true);
    0
}

#[kretprobe]
pub fn gve_poll_exit(ctx: RetProbeContext) -> u32 {
    on_gve_poll_exit(ctx.ret::<i32>() as i64);
    0
}

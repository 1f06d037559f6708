//! `gve_alloc`: gve buffer allocation latency.
//!
//! On `gve_alloc_buffer` (module `gve`): kprobe `gve_alloc_entry` + kretprobe `gve_alloc_exit`.

use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use ppscope_common::{site, site_stat};

use crate::frames::{on_site_exit, open_frame, Owner};

#[kprobe]
pub fn gve_alloc_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::GVE_ALLOC, Owner::Task, 0, 0, true);
    0
}

#[kretprobe]
pub fn gve_alloc_exit(ctx: RetProbeContext) -> u32 {
    on_site_exit(
        site::GVE_ALLOC,
        site_stat::GVE_ALLOC,
        Some(ctx.ret::<i32>() as i64).filter(|v| *v < 0),
    );
    0
}

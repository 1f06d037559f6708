//! `page_return`: how long a page takes to leave its pool (unmap and free, or back to a
//! provider).
//!
//! On `page_pool_return_netmem` (older kernels: `page_pool_return_page`), the functions
//! `page_release` probes when its tracepoint is missing: kprobe `pp_return_entry` + kretprobe
//! `pp_return_exit`, or fentry `fe_return_entry` + fexit `fx_return_exit`.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, site_stat};

use crate::frames::{on_site_exit, open_frame, Owner};

#[kprobe]
pub fn pp_return_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::PAGE_RETURN, Owner::Task, 0, 0, true);
    0
}

#[kretprobe]
pub fn pp_return_exit(_ctx: RetProbeContext) -> u32 {
    on_site_exit(site::PAGE_RETURN, site_stat::PAGE_RETURN, None);
    0
}

#[fentry]
pub fn fe_return_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::PAGE_RETURN, Owner::Task, 0, 0, true);
    0
}

#[fexit]
pub fn fx_return_exit(_ctx: FExitContext) -> u32 {
    on_site_exit(site::PAGE_RETURN, site_stat::PAGE_RETURN, None);
    0
}

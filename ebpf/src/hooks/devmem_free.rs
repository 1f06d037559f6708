//! `devmem_free`: the cost of returning a devmem buffer to its dmabuf (the ring-full path).
//!
//! On `net_devmem_free_dmabuf`: kprobe `dm_free_entry` + kretprobe `dm_free_exit`, or fentry
//! `fe_devmem_free_entry` + fexit `fx_devmem_free_exit`.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, site_stat};

use crate::frames::{on_site_exit, open_frame, Owner};

#[kprobe]
pub fn dm_free_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::DEVMEM_FREE, Owner::Task, 0, 0, true);
    0
}

#[kretprobe]
pub fn dm_free_exit(_ctx: RetProbeContext) -> u32 {
    on_site_exit(site::DEVMEM_FREE, site_stat::DEVMEM_FREE, None);
    0
}

#[fentry]
pub fn fe_devmem_free_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::DEVMEM_FREE, Owner::Task, 0, 0, true);
    0
}

#[fexit]
pub fn fx_devmem_free_exit(_ctx: FExitContext) -> u32 {
    on_site_exit(site::DEVMEM_FREE, site_stat::DEVMEM_FREE, None);
    0
}

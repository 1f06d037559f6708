//! `devmem_dontneed`: SO_DEVMEM_DONTNEED latency and frags freed per call.
//!
//! On `sock_devmem_dontneed` (else `sock_devmem_dontneed_autorelease`): kprobe
//! `dm_dontneed_entry` + kretprobe `dm_dontneed_exit`, or fentry `fe_dontneed_entry` + fexit
//! `fx_dontneed_exit`.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, site_stat};

use crate::frames::{on_site_exit, open_frame, Owner};

#[kprobe]
pub fn dm_dontneed_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::DONTNEED, Owner::Task, 0, 0, true);
    0
}

#[kretprobe]
pub fn dm_dontneed_exit(ctx: RetProbeContext) -> u32 {
    on_site_exit(
        site::DONTNEED,
        site_stat::DONTNEED,
        Some(ctx.ret::<i32>() as i64),
    );
    0
}

#[fentry]
pub fn fe_dontneed_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::DONTNEED, Owner::Task, 0, 0, true);
    0
}

/// `sock_devmem_dontneed(sk, optval, optlen)` returns the frags freed. `sockptr_t optval` is
/// a 16-byte struct passed in two argument slots, so the return value is not `arg(3)`: ask
/// the kernel for it (`bpf_get_func_ret`).
#[fexit]
pub fn fx_dontneed_exit(ctx: FExitContext) -> u32 {
    let ret = ctx.ret::<i64>().map(|r| r as i32 as i64).ok();
    on_site_exit(site::DONTNEED, site_stat::DONTNEED, ret);
    0
}

//! `provider_alloc`: memory-provider (devmem gen_pool, io_uring zcrx) allocations and their
//! latency.
//!
//! On every provider found of `mp_dmabuf_devmem_alloc_netmems` and `io_pp_zc_alloc_netmems`:
//! kprobe `pp_mp_entry` + kretprobe `pp_mp_exit` on each; one fentry/fexit pair per function
//! (a program attaches to one function): `fe_mp_entry` + `fx_mp_exit` on the first,
//! `fe_mp_entry_2` + `fx_mp_exit_2` on the second.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::{site, site_stat};

use crate::{
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, now_ns},
    pool::{counters, site_record},
};

#[inline(always)]
fn on_provider_alloc_exit() {
    let Some(f) = close_frame(site::PROVIDER_ALLOC, Owner::Task) else {
        return;
    };
    let elapsed = now_ns().saturating_sub(f.start_ns);
    if let Some(c) = counters(f.pool) {
        c.mp_alloc_calls += 1;
        c.mp_ns_sum += elapsed;
    }
    site_record(site_stat::PROVIDER_ALLOC, elapsed, None);
}

#[kprobe]
pub fn pp_mp_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::PROVIDER_ALLOC, Owner::Task, arg(&ctx, 0), 0, true);
    0
}

#[kretprobe]
pub fn pp_mp_exit(_ctx: RetProbeContext) -> u32 {
    on_provider_alloc_exit();
    0
}

#[fentry]
pub fn fe_mp_entry(ctx: FEntryContext) -> u32 {
    open_frame(
        site::PROVIDER_ALLOC,
        Owner::Task,
        ctx.arg::<u64>(0),
        0,
        true,
    );
    0
}

#[fexit]
pub fn fx_mp_exit(_ctx: FExitContext) -> u32 {
    on_provider_alloc_exit();
    0
}

#[fentry]
pub fn fe_mp_entry_2(ctx: FEntryContext) -> u32 {
    open_frame(
        site::PROVIDER_ALLOC,
        Owner::Task,
        ctx.arg::<u64>(0),
        0,
        true,
    );
    0
}

#[fexit]
pub fn fx_mp_exit_2(_ctx: FExitContext) -> u32 {
    on_provider_alloc_exit();
    0
}

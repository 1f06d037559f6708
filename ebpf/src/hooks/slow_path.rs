//! `slow_path`: slow-path calls and their latency.
//!
//! On `__page_pool_alloc_netmems_slow` (older kernels: `__page_pool_alloc_pages_slow`): kprobe
//! `pp_slow_entry` + kretprobe `pp_slow_exit`, or fentry `fe_slow_entry` + fexit `fx_slow_exit`.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::site;

use crate::{
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, now_ns, Probed},
    pool::{counters, file, record_state, Hist},
};

#[inline(always)]
fn on_slow_exit() {
    let Some(f) = close_frame(site::SLOW, Owner::Task) else {
        return;
    };
    let elapsed = now_ns().saturating_sub(f.start_ns);
    // The counts first: the verifier walks what follows a branch once per way it went, and
    // the lookup (with a new pool's identity) is most of the program (see `recycle`).
    let Some(c) = counters(f.pool) else {
        return;
    };
    c.slow_calls += 1;
    c.slow_ns_sum += elapsed;
    if let Some(r) = record_state::<Probed>(f.pool, false, Hist::Fill, 1) {
        file(r, Hist::Slow, elapsed);
    }
}

#[kprobe]
pub fn pp_slow_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::SLOW, Owner::Task, arg(&ctx, 0), 0, true);
    0
}

#[kretprobe]
pub fn pp_slow_exit(_ctx: RetProbeContext) -> u32 {
    on_slow_exit();
    0
}

#[fentry]
pub fn fe_slow_entry(ctx: FEntryContext) -> u32 {
    open_frame(site::SLOW, Owner::Task, ctx.arg::<u64>(0), 0, true);
    0
}

#[fexit]
pub fn fx_slow_exit(_ctx: FExitContext) -> u32 {
    on_slow_exit();
    0
}

//! Benchmark floors.
//!
//! Empty programs on the same hot hooks as ppscope's (one per backend). They do nothing on
//! purpose: their BPF run time per call is the floor of that backend on that hook (the cost of
//! entering and leaving a program, stats accounting included), which `cargo xtask bench`
//! compares ppscope's bodies against. Only the bench helper (`xtask/src/bin/bench-probe.rs`)
//! loads them; the product's attach plan never names them.

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, raw_tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RawTracePointContext,
        RetProbeContext,
    },
};

#[fentry]
pub fn bench_fe_alloc(_ctx: FEntryContext) -> u32 {
    0
}

#[fentry]
pub fn bench_fe_frag(_ctx: FEntryContext) -> u32 {
    0
}

#[fentry]
pub fn bench_fe_put(_ctx: FEntryContext) -> u32 {
    0
}

#[fexit]
pub fn bench_fx_put(_ctx: FExitContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_alloc(_ctx: ProbeContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_frag(_ctx: ProbeContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_put(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn bench_krp_put(_ctx: RetProbeContext) -> u32 {
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_hold")]
pub fn bench_tp_hold(_ctx: RawTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_release")]
pub fn bench_tp_release(_ctx: RawTracePointContext) -> i32 {
    0
}

/// The same tracepoint as `tp_btf`, the form ppscope's `page_release` takes where the kernel
/// allows it.
#[btf_tracepoint(function = "page_pool_state_release")]
pub fn bench_tb_release(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// `--detail light`'s own per-event hooks, empty: what having a program there costs at all.
#[fexit]
pub fn bench_fx_refill(_ctx: FExitContext) -> u32 {
    0
}

#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn bench_tp_drops(_ctx: RawTracePointContext) -> i32 {
    0
}

//! Benchmark floors.
//!
//! Empty programs on the same hot hooks as ppscope's (one per backend, or an entry and a
//! return where a recycle's backend has both). They do nothing on
//! purpose: their BPF run time per call is the floor of that backend on that hook (the cost of
//! entering and leaving a program, stats accounting included), which `cargo xtask bench`
//! compares ppscope's bodies against. Only the bench helper (`xtask/src/bin/bench-probe.rs`)
//! loads them; the product's attach plan never names them.
//!
//! Beside the empty programs of each hook the benchmark's table prices, a counting one
//! (`bench_c…`): one add to a per-CPU array slot, the least any program that counts per CPU
//! costs on that hook (an array lookup the verifier inlines and a read-modify-write), which
//! the benchmark shows next to ppscope's body: how much of the 1.25× budget counting at all
//! takes before anything is counted per pool. On the kprobe recycle, where ppscope needs an
//! entry and a return, a counting pair.
//!
//! A new hook's floor: its programs here, attached in `bench-probe.rs`'s `floor()`, and a row
//! of `HOOK_PROGS` (`xtask/src/bench/host.rs`) naming which of them a table row sums.

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, raw_tracepoint},
    maps::PerCpuArray,
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RawTracePointContext,
        RetProbeContext,
    },
};

/// What the counting floors add to: one slot per CPU.
#[map]
static BENCH_COUNT: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The arguments the counting pair's entry hands its return: (pool, page) per CPU.
#[map]
static BENCH_HANDOVER: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn count_once() {
    if let Some(n) = BENCH_COUNT.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array.
        unsafe { *n += 1 };
    }
}

#[fentry]
pub fn bench_cfe_alloc(_ctx: FEntryContext) -> u32 {
    count_once();
    0
}

#[fentry]
pub fn bench_cfe_frag(_ctx: FEntryContext) -> u32 {
    count_once();
    0
}

#[fexit]
pub fn bench_cfx_put(_ctx: FExitContext) -> u32 {
    count_once();
    0
}

#[kprobe]
pub fn bench_ckp_alloc(_ctx: ProbeContext) -> u32 {
    count_once();
    0
}

#[kprobe]
pub fn bench_ckp_frag(_ctx: ProbeContext) -> u32 {
    count_once();
    0
}

/// The kprobe recycle's counting pair: the entry keeps the call's pool and page in a per-CPU
/// slot (the two ppscope's return needs, handed over in a frame), the return counts one when
/// it finds the pool there and clears it. The least a kprobe pair that counts what its entry
/// was handed costs, set against the empty pair as ppscope's pair is.
#[kprobe]
pub fn bench_ckp_put(ctx: ProbeContext) -> u32 {
    if let Some(s) = BENCH_HANDOVER.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array.
        let s = unsafe { &mut *s };
        s[0] = ctx.arg::<u64>(0).unwrap_or(0);
        s[1] = ctx.arg::<u64>(1).unwrap_or(0);
    }
    0
}

#[kretprobe]
pub fn bench_ckrp_put(_ctx: RetProbeContext) -> u32 {
    if let Some(s) = BENCH_HANDOVER.get_ptr_mut(0) {
        // SAFETY: as above.
        let s = unsafe { &mut *s };
        if s[0] != 0 {
            s[0] = 0;
            count_once();
        }
    }
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_hold")]
pub fn bench_ctp_hold(_ctx: RawTracePointContext) -> i32 {
    count_once();
    0
}

#[btf_tracepoint(function = "page_pool_state_release")]
pub fn bench_ctb_rel(_ctx: BtfTracePointContext) -> i32 {
    count_once();
    0
}

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

//! ppscope's kernel side: small programs on the page_pool alloc and recycle paths.
//!
//! Rules: count per pool per CPU, take timestamps only around what is timed (the slow path and
//! the per-call sites: provider, page return, devmem, gve), never hard-code a
//! struct offset (they arrive in `PPSCOPE_CONFIG`), never loop unbounded. Every hook has the
//! same body whichever backend (kprobe/kretprobe, fentry/fexit or raw tracepoint) carries it;
//! its programs only fetch their arguments and call it. Every helper is `#[inline(always)]`
//! (keep it so): programs carry their helpers inlined, not as BPF-to-BPF calls.
//!
//! Layout: `hooks/` has one file per hook of the agent's hook table (`HOOKS` in
//! `agent/src/probes/`), named after the hook, with the hook's body and every program that
//! carries it; `maps.rs` every map; `kmem.rs` the kernel-memory reads; `pool.rs` the per-pool
//! and per-site accounting; `frames.rs` the entry/exit frames; `bench.rs` the benchmark floors;
//! `lab.rs` the lab's XDP program. Program and map names are ELF symbols, global whichever
//! module holds them: the agent finds them by name. ARCHITECTURE.md at the repository root has
//! the recipe for adding a hook.
#![no_std]
#![no_main]
// The atomic add intrinsic: the BPF target has no compare-and-swap, so core's atomics offer
// no fetch_add, but the instruction exists (the build already runs with RUSTC_BOOTSTRAP=1).
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod bench;
mod frames;
mod hooks;
mod kmem;
mod lab;
mod maps;
mod pool;

use ppscope_common::ProbeConfig;

/// Written by the agent before load (`EbpfLoader::override_global`).
#[no_mangle]
static PPSCOPE_CONFIG: ProbeConfig = ProbeConfig::DEFAULT;

#[inline(always)]
pub(crate) fn config() -> ProbeConfig {
    // SAFETY: the global is plain data the loader rewrote before load; a volatile read keeps
    // the compiler from folding the default value in.
    unsafe { core::ptr::read_volatile(&PPSCOPE_CONFIG) }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

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
//! `lab.rs` the lab's XDP program; `log.rs` the rare log lines (aya-log, off unless asked).
//! Program and map names are ELF symbols, global whichever
//! module holds them: the agent finds them by name. ARCHITECTURE.md at the repository root has
//! the recipe for adding a hook.
#![no_std]
#![no_main]
// The atomic add intrinsic: the BPF target has no compare-and-swap, so core's atomics offer
// no fetch_add, but the instruction exists (the build already runs with RUSTC_BOOTSTRAP=1).
#![allow(internal_features)]
#![feature(core_intrinsics)]
// Inline assembly on the BPF target (one 32-bit move: `kmem::address_low_bits`).
#![feature(asm_experimental_arch)]

mod bench;
mod frames;
mod hooks;
mod kmem;
mod lab;
mod log;
mod maps;
mod pool;

use ppscope_common::ProbeConfig;

/// Written by the agent before load (`EbpfLoader::override_global`).
#[no_mangle]
static PPSCOPE_CONFIG: ProbeConfig = ProbeConfig::DEFAULT;

#[inline(always)]
pub(crate) fn config() -> &'static ProbeConfig {
    // Only the global's address is read volatile: the compiler then cannot tell which static
    // it points to and fold the default values in, and loads each field where it is used. (A
    // volatile copy of the whole config loaded all its fields, 35 loads, at every call in
    // every program.) To the verifier the fields are known constants: aya freezes the
    // read-only section before load, which is what lets `kmem::Typed` use them as offsets.
    let at: *const ProbeConfig = &PPSCOPE_CONFIG;
    // SAFETY: a read of a local; the pointer is to a static that lives for the program's run.
    unsafe { &*core::ptr::read_volatile(&at) }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

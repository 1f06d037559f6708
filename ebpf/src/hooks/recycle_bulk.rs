//! `recycle_bulk`: bulk recycles (XDP redirect/TX completion).
//!
//! On `page_pool_put_netmem_bulk` (older kernels: `page_pool_put_page_bulk`): kprobe
//! `pp_bulk_entry` + kretprobe `pp_bulk_exit`, or fentry `fe_bulk_entry` + fexit `fx_bulk_exit`.
//! Before 6.14 the bulk free took the pool as its first argument (three parameters in BTF):
//! `pp_bulk_entry_pool` / `fe_bulk_entry_pool` are the entry programs then.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use ppscope_common::site;

use crate::{
    config,
    frames::{close_frame, open_frame, Owner},
    kmem::{arg, read_cast, read_word},
    pool::counters,
};

#[inline(always)]
fn bulk_entry(pool: u64, count: u64) {
    if let Some(c) = counters(pool) {
        c.bulk_calls += 1;
        c.bulk_pages += count;
    }
    open_frame(site::BULK, Owner::Task, pool, 0, false);
}

/// The pool of a bulk free without a pool argument: the first netmem names it (bit 0 marks a
/// net_iov; pages and net_iovs carry `pp` at the same offset).
#[inline(always)]
fn bulk_pool(data: u64) -> u64 {
    let cfg = config();
    let first = read_word(data).unwrap_or(0) & !1u64;
    read_cast::<u64>(first, cfg.cast.page, cfg.offsets.page_pp).unwrap_or(0)
}

#[inline(always)]
fn on_bulk_exit() {
    if let Some(f) = close_frame(site::BULK, Owner::Task) {
        if let Some(c) = counters(f.pool) {
            c.bulk_released += f.released;
        }
    }
}

/// `page_pool_put_page_bulk(pool, data, count)` (kernels before 6.14).
#[kprobe]
pub fn pp_bulk_entry_pool(ctx: ProbeContext) -> u32 {
    bulk_entry(arg(&ctx, 0), arg(&ctx, 2) & 0xffff_ffff);
    0
}

/// `page_pool_put_netmem_bulk(data, count)`.
#[kprobe]
pub fn pp_bulk_entry(ctx: ProbeContext) -> u32 {
    bulk_entry(bulk_pool(arg(&ctx, 0)), arg(&ctx, 1) & 0xffff_ffff);
    0
}

#[kretprobe]
pub fn pp_bulk_exit(_ctx: RetProbeContext) -> u32 {
    on_bulk_exit();
    0
}

#[fentry]
pub fn fe_bulk_entry_pool(ctx: FEntryContext) -> u32 {
    bulk_entry(ctx.arg::<u64>(0), ctx.arg::<u64>(2) & 0xffff_ffff);
    0
}

#[fentry]
pub fn fe_bulk_entry(ctx: FEntryContext) -> u32 {
    bulk_entry(
        bulk_pool(ctx.arg::<u64>(0)),
        ctx.arg::<u64>(1) & 0xffff_ffff,
    );
    0
}

#[fexit]
pub fn fx_bulk_exit(_ctx: FExitContext) -> u32 {
    on_bulk_exit();
    0
}

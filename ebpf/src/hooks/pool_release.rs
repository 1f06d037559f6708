//! `pool_release`: a pool destroyed while pages are still out of it.
//!
//! Raw tracepoint `page_pool:page_pool_release` (`tp_pool_release`). The kernel fires it at
//! each attempt to release a destroyed pool: once from `page_pool_destroy`, then every second
//! from the deferred retry while pages are inflight. Rare: nothing on the page path. The
//! attempt that finds no page out frees the pool: its identity is marked
//! `PoolIdentity::FREED`, so a new pool born at the address is read again
//! (`pool::refresh_device`) instead of keeping the old pool's netlink id and sizes, at its
//! first device check (`LAST_POOL_FREE`: that check does not wait out the second), and the
//! next attempt at the address starts a new count (`PoolTeardown::freed_before`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use ppscope_common::{PoolIdentity, PoolTeardown};

use crate::{
    kmem::now_ns,
    maps::{LAST_POOL_FREE, POOL_IDENTITY, POOL_TEARDOWN},
};

#[inline(always)]
fn on_pool_release(pool: u64, inflight: i64) {
    if inflight < 0 {
        // More pages came back than left: the kernel's hold/release counts disagree.
        crate::log::bpf_warn!(
            "a destroyed pool reports {} pages inflight (more returned than handed out)",
            inflight
        );
    }
    // `page_pool_release` frees the pool right after the attempt that finds none inflight.
    if inflight == 0 {
        if let Some(id) = POOL_IDENTITY.get_ptr_mut(pool) {
            // SAFETY: a value of the shared identity map; a racing refresh reads it again.
            unsafe { (*id).known |= PoolIdentity::FREED };
        }
        if let Some(at) = LAST_POOL_FREE.get_ptr_mut(0) {
            // SAFETY: the one slot of an array map; racing frees each write the time of a free
            // (the later may lose: a check then waits out its second, as before).
            unsafe { *at = now_ns() };
        }
    }
    if let Some(t) = POOL_TEARDOWN.get_ptr_mut(pool) {
        // SAFETY: this pool's entry; the kernel releases one pool from one place at a time.
        let t = unsafe { &mut *t };
        // An entry whose last attempt found no page out is a freed pool's: this attempt is
        // the first of a new pool born at the address (counting on would add both pools').
        if t.inflight == 0 {
            t.freed_before += 1;
            t.attempts = 1;
        } else {
            t.attempts += 1;
        }
        t.inflight = inflight;
        return;
    }
    let first = PoolTeardown {
        attempts: 1,
        inflight,
        freed_before: 0,
    };
    if let Err(e) = POOL_TEARDOWN.insert(pool, first, 0) {
        crate::log::bpf_warn!(
            "a destroyed pool's release attempts could not be stored (map insert: error {})",
            e
        );
    }
}

/// `page_pool_release(pool, inflight, hold, release)`.
#[raw_tracepoint(tracepoint = "page_pool_release")]
pub fn tp_pool_release(ctx: RawTracePointContext) -> i32 {
    on_pool_release(ctx.arg::<u64>(0), ctx.arg::<u64>(1) as i32 as i64);
    0
}

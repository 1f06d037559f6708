//! `napi_poll` (around the pool, any driver): NAPI work per poll and polls that used their
//! whole budget.
//!
//! Raw tracepoint `napi:napi_poll` (`tp_napi_poll`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use ppscope_common::NapiCounters;

use crate::{
    config,
    kmem::{device_identity, read_field},
    maps::{NAPI_COUNTERS, NAPI_IDENTITY},
};

/// `napi:napi_poll(napi, work, budget)`: how much of its budget each poll used.
#[raw_tracepoint(tracepoint = "napi_poll")]
pub fn tp_napi_poll(ctx: RawTracePointContext) -> i32 {
    let napi = ctx.arg::<u64>(0);
    let work = ctx.arg::<u64>(1) as i32;
    let budget = ctx.arg::<u64>(2) as i32;
    if napi == 0 {
        return 0;
    }
    if NAPI_COUNTERS.get_ptr_mut(napi).is_none() {
        // SAFETY: read-only lookup of an identity record.
        if unsafe { NAPI_IDENTITY.get(napi) }.is_none() {
            let netdev = read_field::<u64>(napi, config().offsets.napi_dev).unwrap_or(0);
            let _ = NAPI_IDENTITY.insert(napi, device_identity(netdev, napi), 0);
        }
        let _ = NAPI_COUNTERS.insert(napi, NapiCounters::default(), 0);
    }
    if let Some(c) = NAPI_COUNTERS.get_ptr_mut(napi) {
        // SAFETY: per-CPU value of this CPU.
        let c = unsafe { &mut *c };
        c.polls += 1;
        c.work += work.max(0) as u64;
        c.budget += budget.max(0) as u64;
        if work >= budget && budget > 0 {
            c.full_budget += 1;
        }
    }
    0
}

//! Per-CPU sums and interval differences of the kernel-side counters.
use std::sync::Arc;

use ppscope_common::{PoolCounters, SiteStats, LATENCY_BUCKETS};

use super::RawPool;

/// `later - earlier` of one cumulative counter. One that went backwards restarted (its map
/// entry was evicted and made again, or a new pool took the address): all it holds now is new,
/// so that is the difference, never a wrapped huge number. The one rule for every counter
/// ppscope reads (pools, sites, NAPI, drops, netlink stats, teardowns).
pub fn since(later: u64, earlier: u64) -> u64 {
    later.checked_sub(earlier).unwrap_or(later)
}

/// `later - earlier` of one pool, field by field, its histograms included (see
/// [`RawPool::hists`]; left at zero without a look when both samples share them). A count that
/// went backwards (the pool was evicted and seen again) restarts from its new value ([`since`]).
pub fn pool_delta(later: &RawPool, earlier: &RawPool) -> PoolCounters {
    let (l, e) = (&later.counters, &earlier.counters);
    let mut d = PoolCounters::default();
    macro_rules! sub {
        ($($f:ident),*) => { $( d.$f = since(l.$f, e.$f); )* };
    }
    ppscope_common::hot_fields!(sub);
    d.full_run = l.full_run;
    d.empty_run = l.empty_run;
    if let Some(l) = &later.hists {
        match &earlier.hists {
            Some(e) if Arc::ptr_eq(l, e) => {}
            e => {
                let e = e.as_deref().copied().unwrap_or_default();
                for (out, l, e) in [
                    (&mut d.slow_hist, &l.slow, &e.slow),
                    (&mut d.full_run_hist, &l.full_run, &e.full_run),
                    (&mut d.empty_run_hist, &l.empty_run, &e.empty_run),
                    (&mut d.fill_hist, &l.fill, &e.fill),
                ] {
                    for i in 0..LATENCY_BUCKETS {
                        out[i] = since(l[i], e[i]);
                    }
                }
            }
        }
    }
    d
}

/// `into += other` for site stats (summing per-CPU values).
pub fn accumulate_site(into: &mut SiteStats, other: &SiteStats) {
    into.calls = into.calls.wrapping_add(other.calls);
    into.ns_sum = into.ns_sum.wrapping_add(other.ns_sum);
    into.value_sum = into.value_sum.wrapping_add(other.value_sum);
    into.errors = into.errors.wrapping_add(other.errors);
    for i in 0..LATENCY_BUCKETS {
        into.ns_hist[i] = into.ns_hist[i].wrapping_add(other.ns_hist[i]);
        into.value_hist[i] = into.value_hist[i].wrapping_add(other.value_hist[i]);
    }
}

/// `later - earlier` for site stats, restarting where a value went backwards.
pub fn delta_site(later: &SiteStats, earlier: &SiteStats) -> SiteStats {
    let d = since;
    let mut out = SiteStats {
        calls: d(later.calls, earlier.calls),
        ns_sum: d(later.ns_sum, earlier.ns_sum),
        value_sum: d(later.value_sum, earlier.value_sum),
        errors: d(later.errors, earlier.errors),
        ..Default::default()
    };
    for i in 0..LATENCY_BUCKETS {
        out.ns_hist[i] = d(later.ns_hist[i], earlier.ns_hist[i]);
        out.value_hist[i] = d(later.value_hist[i], earlier.value_hist[i]);
    }
    out
}

//! One pool's counters over an interval → what they mean (splits, rates, latency, bursts).
use ppscope_common::{PoolCounters, PoolIdentity, PoolState, PoolTeardown};

use super::{c_name, ratio, Coverage};
use crate::snapshot::{
    pool_name, AllocSplit, BurstView, Distribution, Latency, PageFlow, PoolView, RecycleSplit,
    TeardownView,
};

/// Ring fill and inflight pages (with the memory they pin, in pages of `page_size` bytes, the
/// size on the host that was sampled) from a pool's last state read.
pub fn apply_state(view: &mut PoolView, st: &PoolState, page_size: u64) {
    if st.known & 1 != 0 {
        view.ring_fill = Some(st.ring_fill);
    }
    if st.known & 2 != 0 {
        view.inflight_pages = Some(st.inflight);
        let page = page_size << view.order.unwrap_or(0);
        view.inflight_bytes = Some(st.inflight as u64 * page);
    }
}

/// Turns one pool's counters over an interval into what they mean. `pool` is its kernel
/// address (the key it is joined by inside the process), `ppscope_id` its own id.
pub fn pool_view(
    pool: u64,
    ppscope_id: u64,
    c: &PoolCounters,
    id: Option<&PoolIdentity>,
    cov: &Coverage,
) -> PoolView {
    let known = |bit: u32| id.filter(|i| i.known & bit != 0);
    let ring = cov
        .refill
        .then(|| c.refill_calls.saturating_sub(c.refill_empty));
    let slow = cov.slow.then(|| c.slow_calls + c.mp_alloc_calls);
    // Fewer allocation calls than refills + slow paths means some calls went through a path
    // the alloc hook does not see: then the cache share is unknown, not a made-up 0.
    let total = (cov.alloc && c.alloc_calls >= ring.unwrap_or(0) + slow.unwrap_or(0))
        .then_some(c.alloc_calls);
    let cache = match (total, ring, slow) {
        (Some(t), Some(r), Some(s)) => Some(t - r - s),
        _ => None,
    };
    let alloc = AllocSplit {
        cache,
        ring,
        slow,
        total,
        ring_empty: cov.refill.then_some(c.refill_empty),
        ring_pages: cov.refill.then_some(c.refill_pages),
        frag_calls: cov.alloc.then_some(c.frag_calls),
    };

    let bulk_pages = if cov.recycle_bulk { c.bulk_pages } else { 0 };
    let bulk_released = if cov.recycle_bulk { c.bulk_released } else { 0 };
    let cached = (cov.recycle && cov.cache_layout).then_some(c.put_cached);
    // Without the recycle hooks (`--detail light`, tracepoint-only kernels), or without the
    // layout that tells them where a page went, every page that left the pool is still seen
    // once, by `page_release`: ring full or not recyclable (the kernel's ring_full +
    // released_refcnt), and pages of a pool being torn down.
    let ring_full = match (cov.recycle && cov.cache_layout, cov.release) {
        (true, true) => Some(c.put_released + bulk_released),
        (false, true) => Some(c.release_pages),
        (_, false) => None,
    };
    let recycle_ring = match (cached, ring_full) {
        (Some(cached), Some(full)) => {
            Some((c.put_calls + bulk_pages).saturating_sub(cached + full))
        }
        _ => None,
    };
    let recycle = RecycleSplit {
        cached,
        ring: recycle_ring,
        ring_full,
        total: cov.recycle.then_some(c.put_calls + bulk_pages),
    };

    let fast = match (cache, ring) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    let netlink_id = known(PoolIdentity::KNOWN_NETLINK_ID).map(|i| i.netlink_id);
    PoolView {
        pool: pool_name(netlink_id, ppscope_id),
        address: None,
        addr: pool,
        netdev: id.map_or(0, |i| i.netdev),
        ifname: known(PoolIdentity::KNOWN_IFNAME).and_then(|i| c_name(&i.ifname)),
        driver: id.and_then(|i| c_name(&i.driver)),
        ifindex: known(PoolIdentity::KNOWN_IFINDEX).map(|i| i.ifindex),
        queue: known(PoolIdentity::KNOWN_QUEUE).map(|i| i.queue_idx),
        netlink_id,
        pool_size: known(PoolIdentity::KNOWN_POOL_SIZE).map(|i| i.pool_size),
        ring_size: known(PoolIdentity::KNOWN_RING_SIZE).map(|i| i.ring_size),
        order: known(PoolIdentity::KNOWN_ORDER).map(|i| i.order),
        memory_provider: known(PoolIdentity::KNOWN_MEMORY_PROVIDER)
            .map(|i| i.has_memory_provider != 0),
        gve_queue: None,
        ring_fill: None,
        device_rx_ring: None,
        inflight_pages: None,
        inflight_bytes: None,
        provider_allocs: cov.provider_alloc.then_some(c.mp_alloc_calls),
        provider_alloc_mean_ns: if cov.provider_alloc && c.mp_alloc_calls > 0 {
            Some(c.mp_ns_sum as f64 / c.mp_alloc_calls as f64)
        } else {
            None
        },
        alloc,
        recycle,
        pages: PageFlow {
            allocated: cov.hold.then_some(c.hold_pages),
            released: cov.release.then_some(c.release_pages),
        },
        alloc_source: None,
        recycle_source: None,
        netlink: None,
        ring_hit_rate: match (ring, slow) {
            (Some(r), Some(s)) => ratio(r, r + s),
            _ => None,
        },
        fast_path_rate: match (fast, slow) {
            (Some(f), Some(s)) => ratio(f, f + s),
            _ => None,
        },
        slow_path_latency: if cov.slow {
            Latency::from_log2(&c.slow_hist, c.slow_ns_sum)
        } else {
            None
        },
        bursts: bursts(
            c,
            cov,
            known(PoolIdentity::KNOWN_RING_SIZE).map(|i| i.ring_size),
        ),
        advice: None,
        teardown: None,
        device_packets: None,
    }
}

/// A destroyed pool's release attempts over the interval, and the pages still out at the last
/// one; None when it made no attempt in the interval. Attempts of another pool at the address
/// than `before`'s (a freed pool's address reused) all fall in the interval.
pub fn teardown_view(
    now: Option<&PoolTeardown>,
    before: Option<&PoolTeardown>,
) -> Option<TeardownView> {
    let now = now?;
    let before = before
        .filter(|b| b.freed_before == now.freed_before)
        .map_or(0, |b| b.attempts);
    let attempts = super::since(now.attempts, before);
    (attempts > 0).then_some(TeardownView {
        attempts,
        inflight_pages: now.inflight,
    })
}

/// The burst profile over the interval. A distribution is None where no hook feeds it, and has
/// no samples where its hook saw none (measured: none). Ring fill is recorded at slow paths,
/// releases and empty refills, and at one refill that took pages in 8 per pool and CPU,
/// weighted by the refills it stands for (`HotSlot::fill_weight`); its log2 bucket edges are capped at the ring's size (a full ring of 256
/// is "at most 256", not "below 512"). Most releases into a full ring were only counted
/// (`release_full`): their fill is the ring's size, so without it (the pool's identity
/// unread) they are left out.
fn bursts(c: &PoolCounters, cov: &Coverage, ring_size: Option<u32>) -> BurstView {
    let measured =
        |on: bool, hist: &[u64]| on.then(|| Distribution::from_log2(hist).unwrap_or_default());
    let mut fill = c.fill_hist;
    if let Some(size) = ring_size.filter(|s| *s > 0) {
        let at_size = &mut fill[ppscope_common::log2_bucket(u64::from(size))];
        *at_size = at_size.wrapping_add(c.release_full);
    }
    let mut ring_fill = measured(cov.refill || cov.slow || cov.release, &fill);
    if let (Some(d), Some(size)) = (&mut ring_fill, ring_size) {
        let size = u64::from(size);
        d.p50 = d.p50.min(size);
        d.p99 = d.p99.min(size);
        d.max = d.max.min(size);
    }
    BurstView {
        ring_full_runs: measured(cov.recycle && cov.release, &c.full_run_hist),
        empty_ring_runs: measured(cov.refill, &c.empty_run_hist),
        ring_fill,
    }
}

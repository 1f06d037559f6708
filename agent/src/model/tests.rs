use std::time::Instant;

use ppscope_common::{PoolCounters, PoolIdentity, LATENCY_BUCKETS};

use super::*;
use crate::snapshot::*;

const ALL: Coverage = Coverage {
    alloc: true,
    refill: true,
    slow: true,
    recycle: true,
    recycle_bulk: true,
    hold: true,
    release: true,
    cache_layout: true,
    provider_alloc: true,
    dontneed: true,
    devmem_free: true,
    gve_alloc: true,
    gve_poll: true,
    napi: true,
    drops: true,
    page_return: true,
    teardown: true,
};

fn counters() -> PoolCounters {
    PoolCounters {
        alloc_calls: 1000,
        refill_calls: 30,
        refill_empty: 5,
        refill_pages: 25 * 64,
        slow_calls: 5,
        put_calls: 990,
        put_cached: 600,
        put_released: 40,
        bulk_pages: 10,
        bulk_released: 2,
        hold_pages: 320,
        release_pages: 42,
        ..Default::default()
    }
}

#[test]
fn allocation_split_matches_kernel_definitions() {
    let v = pool_view(1, 1, &counters(), None, &ALL);
    // 30 refills, 5 found the ring empty → 25 allocations served by the ring.
    assert_eq!(v.alloc.ring, Some(25));
    assert_eq!(v.alloc.slow, Some(5));
    assert_eq!(v.alloc.cache, Some(1000 - 25 - 5));
    assert_eq!(v.alloc.ring_empty, Some(5));
    assert_eq!(v.ring_hit_rate, Some(25.0 / 30.0));
    assert_eq!(v.fast_path_rate, Some(995.0 / 1000.0));
}

#[test]
fn recycle_split_adds_up() {
    let v = pool_view(1, 1, &counters(), None, &ALL);
    assert_eq!(v.recycle.cached, Some(600));
    assert_eq!(v.recycle.ring_full, Some(42));
    assert_eq!(v.recycle.total, Some(1000));
    assert_eq!(v.recycle.ring, Some(1000 - 600 - 42));
    assert_eq!(v.pages.allocated, Some(320));
    assert_eq!(v.pages.released, Some(42));
}

#[test]
fn unmeasured_counts_are_unknown_not_zero() {
    // The restricted host: only the page_pool tracepoints.
    let cov = Coverage {
        hold: true,
        release: true,
        ..Default::default()
    };
    let v = pool_view(1, 1, &counters(), None, &cov);
    assert_eq!(v.alloc, AllocSplit::default());
    // Pages leaving the pool are seen by page_release alone: that part of the split is known.
    assert_eq!(
        v.recycle,
        RecycleSplit {
            ring_full: Some(counters().release_pages),
            ..Default::default()
        }
    );
    assert_eq!(v.ring_hit_rate, None);
    assert_eq!(v.fast_path_rate, None);
    assert_eq!(v.pages.allocated, Some(320));
    let json = serde_json::to_value(&v).unwrap();
    assert!(json["alloc"]["cache"].is_null());
    assert!(json["ifname"].is_null());
}

#[test]
fn identity_fields_only_when_read() {
    let mut id = PoolIdentity::EMPTY;
    id.ifname[..5].copy_from_slice(b"vnet1");
    id.known = PoolIdentity::KNOWN_IFNAME | PoolIdentity::KNOWN_POOL_SIZE;
    id.pool_size = 256;
    id.queue_idx = 7; // not marked known
    let v = pool_view(0xffff_8880_0000_1000, 1, &counters(), Some(&id), &ALL);
    assert_eq!(v.ifname.as_deref(), Some("vnet1"));
    assert_eq!(v.pool_size, Some(256));
    assert_eq!(v.queue, None);
    assert_eq!(v.label(), "vnet1");
    // Named, never by its kernel address: ppscope's own id, or the kernel's netlink id.
    let anon = pool_view(0xffff_8880_0000_1000, 3, &counters(), None, &ALL);
    assert_eq!((anon.label(), anon.address), ("ppscope:3".into(), None));
    id.known |= PoolIdentity::KNOWN_NETLINK_ID;
    id.netlink_id = 12;
    let v = pool_view(0xffff_8880_0000_1000, 3, &counters(), Some(&id), &ALL);
    assert_eq!(v.pool, "netlink:12");
}

/// A pool keeps its id while samples hold it; new pools take the next ids in address order;
/// one gone and back is new.
#[test]
fn pool_ids_are_stable_and_never_reused() {
    let mut ids = crate::model::PoolIds::default();
    let mut pools = crate::model::ByAddr::default();
    for addr in [0x30, 0x10] {
        pools.insert(addr, RawPool::default());
    }
    ids.name(&mut pools);
    assert_eq!((pools[&0x10].id, pools[&0x30].id), (1, 2));
    pools.remove(&0x10);
    pools.insert(0x20, RawPool::default());
    ids.name(&mut pools);
    assert_eq!((pools[&0x20].id, pools[&0x30].id), (3, 2));
    pools.insert(0x10, RawPool::default());
    ids.name(&mut pools);
    assert_eq!(pools[&0x10].id, 4);
}

#[test]
fn an_alloc_hook_that_misses_calls_leaves_the_cache_share_unknown() {
    let c = PoolCounters {
        alloc_calls: 4,
        refill_calls: 2391,
        slow_calls: 4,
        ..Default::default()
    };
    let v = pool_view(1, 1, &c, None, &ALL);
    assert_eq!(v.alloc.cache, None);
    assert_eq!(v.alloc.total, None);
    assert_eq!(v.alloc.ring, Some(2391));
    assert_eq!(v.fast_path_rate, None);
    assert!(
        v.ring_hit_rate.is_some(),
        "refills and slow paths are still exact"
    );
}

#[test]
fn burst_profile_distributions() {
    let mut c = counters();
    c.full_run_hist[3] = 9; // runs of 8..15 pages
    c.full_run_hist[7] = 1; // one run of 128..255
    c.fill_hist[8] = 4;
    let v = pool_view(1, 1, &c, None, &ALL);
    let runs = v.bursts.ring_full_runs.unwrap();
    assert_eq!(
        (runs.samples, runs.p50, runs.p99, runs.max),
        (10, 16, 256, 256)
    );
    assert_eq!(
        v.bursts.ring_fill.clone().unwrap().max,
        512,
        "no ring size known"
    );
    assert_eq!(
        v.bursts.empty_ring_runs.as_ref().map(|d| d.samples),
        Some(0),
        "measured: no empty-ring run"
    );
    // A full ring of 256 falls in the log2 bucket [256, 512): at most 256, not 512.
    let mut id = PoolIdentity::EMPTY;
    id.known = PoolIdentity::KNOWN_RING_SIZE;
    id.ring_size = 256;
    let v = pool_view(1, 1, &c, Some(&id), &ALL);
    assert_eq!(v.bursts.ring_fill.unwrap().max, 256);
    // Without the hooks that feed them: unknown, not "none".
    let tp_only = Coverage {
        hold: true,
        ..Default::default()
    };
    let v = pool_view(1, 1, &c, None, &tp_only);
    assert_eq!(v.bursts, BurstView::default());
    let mut a = PoolCounts {
        full_run: 5,
        ..Default::default()
    };
    let b = ppscope_common::PoolHot {
        full_run: 3,
        ..Default::default()
    };
    // How the probes sum a pool's per-CPU counters.
    a.add_hot(&b);
    assert_eq!(
        a.full_run, 5,
        "a run in progress is per-CPU state, not a sum"
    );
    // The ring's fill is one distribution, filed by the allocation side and by releases apart
    // (plain and atomic adds never share a word).
    let mut rare = ppscope_common::PoolRare::default();
    rare.fill_hist[3] = 2;
    rare.release_fill_hist[3] = 5;
    rare.release_fill_hist[8] = 1;
    let h = PoolHists::of(&rare);
    assert_eq!((h.fill[3], h.fill[8], h.fill[0]), (7, 1, 0));
}

/// Releases into a full ring the programs only counted are in the fill distribution at the
/// ring's size, where it is known; a count that went back (its map entry evicted) restarts
/// like every other instead of counting twice.
#[test]
fn full_releases_are_filled_in_at_the_rings_size() {
    let mut c = counters();
    c.fill_hist = [0; LATENCY_BUCKETS];
    c.fill_hist[7] = 3;
    c.release_full = 10;
    let fill = |c: &PoolCounters, id: Option<&PoolIdentity>| {
        pool_view(1, 1, c, id, &ALL).bursts.ring_fill.unwrap()
    };
    assert_eq!(fill(&c, None).samples, 3, "no ring size: left out");
    let mut id = PoolIdentity::EMPTY;
    id.ring_size = 256;
    assert_eq!(fill(&c, Some(&id)).samples, 3, "a ring size not read");
    id.known = PoolIdentity::KNOWN_RING_SIZE;
    let f = fill(&c, Some(&id));
    assert_eq!((f.samples, f.p50, f.max), (13, 256, 256));
    assert_eq!(
        (f.buckets[7], f.buckets[8]),
        (3, 10),
        "256 is log2 bucket 8"
    );
    // Between two samples: the count's difference; a count that went back restarts.
    let before = RawPool::from_counters(c);
    let mut later = c;
    later.release_full = 25;
    let d = pool_delta(&RawPool::from_counters(later), &before);
    assert_eq!(d.release_full, 15);
    later.release_full = 4;
    later.fill_hist[7] += 2;
    let d = pool_delta(&RawPool::from_counters(later), &before);
    assert_eq!(d.release_full, 4, "evicted and counted again");
    // The histogram from the kernel's record moved on its own: the interval shows both
    // moves, not the lifetime of either.
    let f = fill(&d, Some(&id));
    assert_eq!((f.samples, f.buckets[7], f.buckets[8]), (6, 2, 4));
}

#[test]
fn no_division_by_zero() {
    let v = pool_view(1, 1, &PoolCounters::default(), None, &ALL);
    assert_eq!(v.ring_hit_rate, None);
    assert_eq!(v.fast_path_rate, None);
    assert_eq!(v.slow_path_latency, None);
}

#[test]
fn delta_restarts_a_counter_that_went_backwards() {
    let mut a = counters();
    a.alloc_calls += 1000;
    let (a, base) = (
        RawPool::from_counters(a),
        RawPool::from_counters(counters()),
    );
    let d = pool_delta(&a, &base);
    assert_eq!((d.alloc_calls, d.refill_calls), (1000, 0));
    // A pool evicted and re-seen restarts instead of wrapping.
    let d = pool_delta(&base, &a);
    assert_eq!(d.alloc_calls, 1000);
}

/// Histograms shared between samples (the agent's memory at 10,000 pools) difference to
/// nothing; changed ones bucket by bucket; a pool's rare events alone make it move; and a
/// pool's counts round-trip through the form recordings keep.
#[test]
fn shared_histograms_difference_to_nothing_and_changed_ones_by_bucket() {
    use std::sync::Arc;
    let mut c = counters();
    c.slow_hist[4] = 3;
    c.fill_hist[2] = 7;
    let before = RawPool::from_counters(c);
    assert_eq!(before.full_counters(), c, "the form recordings keep");
    // What a sample keeps per pool beside the shared histograms: not a kilobyte.
    assert!(std::mem::size_of::<RawPool>() < 400);
    let same = before.clone();
    assert!(Arc::ptr_eq(
        same.hists.as_ref().unwrap(),
        before.hists.as_ref().unwrap()
    ));
    assert_eq!(pool_delta(&same, &before), PoolCounters::default());

    let mut later = c;
    later.slow_hist[4] = 5;
    later.slow_hist[9] = 1;
    let after = RawPool::from_counters(later);
    let d = pool_delta(&after, &before);
    assert_eq!((d.slow_hist[4], d.slow_hist[9], d.fill_hist[2]), (2, 1, 0));
    assert_eq!(d.alloc_calls, 0, "only the histograms moved");
    // A pool with no histograms yet against one with: nothing moved there.
    assert_eq!(
        pool_delta(&RawPool::from_counters(counters()), &before).slow_hist,
        [0; LATENCY_BUCKETS]
    );

    let t0 = Instant::now();
    let mut s0 = RawSample::empty(t0);
    s0.pools.insert(1, before.clone());
    let mut s1 = RawSample::empty(t0 + std::time::Duration::from_secs(1));
    s1.pools.insert(1, after);
    assert!(moved_pools(&s0, &s1, None).contains(&PoolKey::Addr(1)));
    s1.pools.insert(1, same);
    assert!(moved_pools(&s0, &s1, None).is_empty());
}

#[test]
fn percentiles_from_log2_buckets() {
    let mut b = [0u64; LATENCY_BUCKETS];
    b[10] = 98; // [1024, 2048) ns
    b[14] = 1; // [16384, 32768)
    b[20] = 1; // [1 Mi, 2 Mi)
    let l = Latency::from_log2(&b, 12345).unwrap();
    assert_eq!(l.count, 100);
    assert_eq!(l.p50_ns, 2048);
    assert_eq!(l.p99_ns, 32768);
    assert_eq!(l.max_ns, 2 << 20);
    assert_eq!(l.buckets.len(), 21);
    // One sample: every quantile is its bucket.
    let mut one = [0u64; LATENCY_BUCKETS];
    one[0] = 1;
    let l = Latency::from_log2(&one, 0).unwrap();
    assert_eq!((l.p50_ns, l.p99_ns, l.max_ns), (2, 2, 2));
    assert_eq!(Latency::from_log2(&[0; LATENCY_BUCKETS], 0), None);
}

#[test]
fn snapshot_keeps_moving_pools_busiest_first() {
    let t0 = Instant::now();
    let mut before = RawSample::empty(t0);
    before.pools.insert(
        1,
        RawPool {
            id: 1,
            identity: None,
            ..RawPool::from_counters(counters())
        },
    );
    before.pools.insert(
        2,
        RawPool {
            id: 2,
            identity: None,
            ..RawPool::from_counters(counters())
        },
    );
    let mut after = before.clone();
    after.at = t0 + std::time::Duration::from_secs(2);
    // Pool 1 idle, pool 2 moved, pool 3 appeared.
    after.pools.get_mut(&2).unwrap().counters.alloc_calls += 10;
    let small = PoolCounters {
        hold_pages: 3,
        ..Default::default()
    };
    after.pools.insert(
        3,
        RawPool {
            id: 3,
            identity: None,
            ..RawPool::from_counters(small)
        },
    );
    let s = snapshot(&crate::testing::facts("k", ALL), &before, &after);
    let names: Vec<_> = s.pools.iter().map(|p| p.pool.clone()).collect();
    assert_eq!(names, vec!["ppscope:2", "ppscope:3"]);
    assert_eq!(s.pools[0].alloc.total, Some(10));
    assert_eq!(s.duration_seconds, 2.0);
}

#[test]
fn a_destroyed_pool_shows_its_release_attempts_even_when_nothing_else_moves() {
    use ppscope_common::PoolTeardown;
    let t0 = Instant::now();
    let mut before = RawSample::empty(t0);
    before.pools.insert(1, RawPool::from_counters(counters()));
    let mut after = before.clone();
    after.at = t0 + std::time::Duration::from_secs(1);
    // Pool 1 destroyed with 12 pages out: two attempts; pool 9, unknown to the counters (no
    // page went through it), is not listed.
    let torn = |attempts, inflight| PoolTeardown {
        attempts,
        inflight,
        freed_before: 0,
    };
    after.teardowns.insert(1, torn(2, 12));
    after.teardowns.insert(9, torn(1, 0));
    let mut cov = ALL;
    let s = snapshot(&crate::testing::facts("k", cov), &before, &after);
    let view = |a: u64| s.pools.iter().find(|p| p.addr == a).cloned();
    let p1 = view(1).expect("its attempts moved");
    assert_eq!(
        p1.teardown,
        Some(TeardownView {
            attempts: 2,
            inflight_pages: 12
        })
    );
    assert_eq!(p1.alloc.total, Some(0), "its counters did not move");
    assert!(
        view(9).is_none(),
        "a pool no page went through is not listed"
    );
    // The next interval: pool 1 retried once more, pool 9 is done.
    let mut later = after.clone();
    later.at += std::time::Duration::from_secs(1);
    later.teardowns.insert(1, torn(3, 4));
    let s = snapshot(&crate::testing::facts("k", cov), &after, &later);
    let pools: Vec<_> = s
        .pools
        .iter()
        .map(|p| (p.addr, p.teardown.clone()))
        .collect();
    assert_eq!(
        pools,
        vec![(
            1,
            Some(TeardownView {
                attempts: 1,
                inflight_pages: 4
            })
        )]
    );
    // Pool 1 freed (its last attempt found no page out) and a new pool born at its address
    // destroyed in turn: the new pool's attempts start again, all in the interval, even where
    // they equal or pass the freed pool's count.
    let mut freed = later.clone();
    freed.at += std::time::Duration::from_secs(1);
    freed.teardowns.insert(1, torn(4, 0));
    let mut reborn = freed.clone();
    reborn.at += std::time::Duration::from_secs(1);
    let new_pool = |attempts| PoolTeardown {
        attempts,
        inflight: 0,
        freed_before: 1,
    };
    for attempts in [1, 4, 6] {
        reborn.teardowns.insert(1, new_pool(attempts));
        let s = snapshot(&crate::testing::facts("k", cov), &freed, &reborn);
        assert_eq!(
            s.pools[0].teardown.as_ref().map(|t| t.attempts),
            Some(attempts)
        );
        assert!(moved_pools(&freed, &reborn, None).contains(&PoolKey::Addr(1)));
    }
    // Without the hook: nothing said, not a made-up zero.
    cov.teardown = false;
    let s = snapshot(&crate::testing::facts("k", cov), &before, &after);
    assert!(s.pools.is_empty(), "{:?}", s.pools);
}

/// The pools that moved between two collections, under each key a snapshot may give them: the
/// agent retires by these, not by assembling a snapshot every interval.
#[test]
fn moved_pools_are_those_whose_counters_teardown_or_kernel_stats_moved() {
    use crate::{
        host::netlink::NetlinkSample,
        snapshot::{NetlinkPoolStats, PoolKey},
    };
    use ppscope_common::PoolTeardown;
    let t0 = Instant::now();
    let with_id = |id: u32, hold: u64| {
        let mut identity = PoolIdentity::EMPTY;
        identity.netlink_id = id;
        identity.known |= PoolIdentity::KNOWN_NETLINK_ID;
        let mut p = RawPool {
            identity: Some(identity),
            ..Default::default()
        };
        p.counters.hold_pages = hold;
        p
    };
    let mut before = RawSample::empty(t0);
    before.pools.insert(1, with_id(11, 5)); // will move
    before.pools.insert(2, with_id(12, 5)); // still, but its kernel stats move
    before.pools.insert(3, with_id(13, 5)); // still
    let mut after = before.clone();
    after.pools.get_mut(&1).unwrap().counters.hold_pages = 6;
    after.pools.insert(4, with_id(0, 1)); // new
    after.teardowns.insert(
        5,
        PoolTeardown {
            attempts: 1,
            ..Default::default()
        },
    );
    let stats = |id: u32, fast: u64| NetlinkPoolStats {
        id,
        alloc_fast: fast,
        ..Default::default()
    };
    let nl = |fast12: u64| NetlinkSample {
        stats: Some(
            [
                (12, stats(12, fast12)),
                (13, stats(13, 7)),
                (99, stats(99, fast12)),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let (nl_before, nl_after) = (nl(100), nl(200));
    let moved = crate::model::moved_pools(&before, &after, Some((&nl_before, &nl_after)));
    let mut got: Vec<PoolKey> = moved.into_iter().collect();
    got.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(
        got,
        [
            PoolKey::Addr(1),
            PoolKey::Addr(2),
            PoolKey::Addr(4),
            PoolKey::Addr(5),
            PoolKey::Netlink(12),
            PoolKey::Netlink(99),
        ]
    );
    // Without netlink, only what the probes saw.
    assert_eq!(crate::model::moved_pools(&before, &after, None).len(), 3);
}

/// `--detail light` leaves `napi_poll` off: a device that dropped nothing has no record of its
/// own, and is named by its pool; its NAPI figures are unknown, not 0.
#[test]
fn a_device_without_napi_or_drop_records_is_named_by_its_pool() {
    let mut id = PoolIdentity::EMPTY;
    id.netdev = 7;
    id.ifindex = 12;
    id.known |= PoolIdentity::KNOWN_IFINDEX | PoolIdentity::KNOWN_IFNAME;
    id.ifname[..4].copy_from_slice(b"eth3");
    let (before, after) = one_pool_moving(id);
    let light = Coverage { napi: false, ..ALL };
    let s = snapshot(&crate::testing::facts("k", light), &before, &after);
    let d = &s.devices[0];
    assert_eq!((d.ifname.as_deref(), d.ifindex), (Some("eth3"), Some(12)));
    assert!(d.napi.is_none(), "{d:?}");
    assert_eq!(d.drops_total, Some(0));
}

/// Two samples a second apart of pool 1 (identity `id`): nothing counted, then `counters()`.
fn one_pool_moving(id: PoolIdentity) -> (RawSample, RawSample) {
    let t0 = Instant::now();
    let pool = |c: PoolCounters| RawPool {
        identity: Some(id),
        ..RawPool::from_counters(c)
    };
    let mut before = RawSample::empty(t0);
    before.pools.insert(1, pool(PoolCounters::default()));
    let mut after = RawSample::empty(t0 + std::time::Duration::from_secs(1));
    after.pools.insert(1, pool(counters()));
    (before, after)
}

#[test]
fn a_timeline_step_says_unknown_where_no_hook_counts() {
    let mut id = PoolIdentity::EMPTY;
    id.netdev = 7;
    let (before, after) = one_pool_moving(id);
    // The development host: the page_pool tracepoints and NAPI, nothing on the alloc path.
    let tracepoints = Coverage {
        hold: true,
        release: true,
        napi: true,
        ..Default::default()
    };
    let step = timeline_step(1.0, &before, &after, &[7], &tracepoints);
    let d = &step.devices[0];
    assert_eq!((d.allocs, d.slow, d.ring_full), (None, None, None));
    assert_eq!((d.pages_in, d.pages_out), (Some(320), Some(42)));
    assert_eq!(d.drops, None, "no drop hook");
    let json = serde_json::to_value(d).unwrap();
    assert!(json["allocs"].is_null(), "{json}");
    let all = timeline_step(1.0, &before, &after, &[7], &ALL);
    assert_eq!(all.devices[0].allocs, Some(1000));
    assert_eq!(all.devices[0].drops, Some(0), "counted: none");
}

/// A device's drops are its own however the devices around it dropped: one between two that
/// dropped has none, and reasons that dropped as many are listed by reason.
#[test]
fn a_devices_drops_are_its_own_most_first_then_by_reason() {
    use ppscope_common::DropKey;
    let t0 = Instant::now();
    let before = RawSample::empty(t0);
    let mut after = RawSample::empty(t0 + std::time::Duration::from_secs(1));
    for (netdev, reason, count) in [(10, 7, 4), (10, 3, 4), (10, 9, 6), (30, 2, 1)] {
        let key = DropKey {
            netdev,
            reason,
            _pad: 0,
        };
        after.drops.insert(key, count);
    }
    let views = device_views(&before, &after, &[10, 20, 30], &ALL);
    let drops: Vec<Vec<(u32, u64)>> = views
        .iter()
        .map(|v| v.drops.iter().map(|d| (d.reason, d.count)).collect())
        .collect();
    assert_eq!(drops, [vec![(9, 6), (3, 4), (7, 4)], vec![], vec![(2, 1)]]);
    assert_eq!(views[1].drops_total, Some(0));
}

/// Each device gets the NAPI work and drops of its own instances only, and its pools' pages,
/// with devices, NAPI instances and drops read in one pass each (not per device).
#[test]
fn devices_get_their_own_napi_drops_and_pages() {
    use ppscope_common::{DropKey, NapiCounters};
    let t0 = Instant::now();
    let mut before = RawSample::empty(t0);
    let mut after = RawSample::empty(t0 + std::time::Duration::from_secs(1));
    for dev in 1..=3u64 {
        let mut id = PoolIdentity::EMPTY;
        id.netdev = dev;
        let pool = |c: PoolCounters| RawPool {
            identity: Some(id),
            ..RawPool::from_counters(c)
        };
        before
            .pools
            .insert(100 + dev, pool(PoolCounters::default()));
        let c = PoolCounters {
            hold_pages: 10 * dev,
            ..Default::default()
        };
        after.pools.insert(100 + dev, pool(c));
        // Two NAPI instances per device, each polled `dev` times (and once before).
        for q in 0..2 {
            let napi = dev * 1000 + q;
            before.napi_devices.insert(napi, dev);
            after.napi_devices.insert(napi, dev);
            let polled = |polls| NapiCounters {
                polls,
                work: polls * 8,
                ..Default::default()
            };
            before.napi.insert(napi, polled(1));
            after.napi.insert(napi, polled(1 + dev));
        }
        let key = |reason| DropKey {
            netdev: dev,
            reason,
            _pad: 0,
        };
        after.drops.insert(key(2), dev);
        after.drops.insert(key(5), 2 * dev);
    }
    // An instance whose device is unknown counts nowhere.
    after.napi.insert(
        9,
        NapiCounters {
            polls: 50,
            ..Default::default()
        },
    );
    let views = device_views(&before, &after, &[1, 2, 3], &ALL);
    for (v, dev) in views.iter().zip(1..=3u64) {
        let napi = v.napi.as_ref().unwrap();
        assert_eq!((napi.polls, napi.work), (2 * dev, 16 * dev), "device {dev}");
        let drops: Vec<(u32, u64)> = v.drops.iter().map(|d| (d.reason, d.count)).collect();
        assert_eq!(drops, [(5, 2 * dev), (2, dev)], "device {dev}: most first");
        assert_eq!(v.drops_total, Some(3 * dev));
    }
    // A device before or after those that dropped has none of their drops.
    for absent in [0, 4] {
        let v = &device_views(&before, &after, &[absent], &ALL)[0];
        assert!(v.drops.is_empty(), "device {absent}: {:?}", v.drops);
        assert_eq!(v.drops_total, Some(0));
    }
    let step = timeline_step(1.0, &before, &after, &[1, 2, 3], &ALL);
    for (d, dev) in step.devices.iter().zip(1..=3u64) {
        assert_eq!(d.pages_in, Some(10 * dev), "device {dev}");
        assert_eq!(d.napi_polls, Some(2 * dev));
        assert_eq!(d.drops, Some(3 * dev));
    }
}

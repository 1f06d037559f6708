//! The agent's histograms as a real Prometheus reads them: the server `ppscope agent` runs,
//! fed two pools whose slow paths fall in different buckets, scraped by Prometheus (the Debian
//! package `cargo xtask setup` installs), and the quantile query an alert rule makes summed
//! across both. Buckets that differed per pool (each cut at its highest non-empty one) made
//! `sum by (le)` add mismatched series; every series now carries the same `le` set.
use std::{
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use ppscope::{
    export::http::{BlockingServer, Publication, ServerState},
    model::{self, Coverage, PoolHists, RawPool, RawSample},
};
use ppscope_common::PoolIdentity;

mod common;

use common::Prometheus;

/// Two pools of one device after `secs` seconds: each took 100 slow paths a second, pool 1's
/// in [1, 2) µs (log2 bucket 10), pool 2's in [4, 8) µs (bucket 12).
fn sample(t0: Instant, secs: u64) -> RawSample {
    let mut s = RawSample::empty(t0 + Duration::from_secs(secs));
    for (id, bucket) in [(1u32, 10usize), (2, 12)] {
        let mut identity = PoolIdentity::EMPTY;
        identity.ifname[..4].copy_from_slice(b"eth0");
        identity.netlink_id = id;
        identity.queue_idx = id - 1;
        identity.known =
            PoolIdentity::KNOWN_IFNAME | PoolIdentity::KNOWN_NETLINK_ID | PoolIdentity::KNOWN_QUEUE;
        let mut hists = PoolHists::default();
        hists.slow[bucket] = 100 * secs;
        let mut pool = RawPool {
            id: id.into(),
            identity: Some(identity),
            hists: Some(Arc::new(hists)),
            ..Default::default()
        };
        pool.counters.slow_calls = 100 * secs;
        pool.counters.slow_ns_sum = 100 * secs * (1 << bucket);
        s.pools.insert(u64::from(id) << 12, pool);
    }
    s
}

#[test]
#[ignore = "needs prometheus (cargo xtask setup installs it): run through `cargo xtask test`"]
fn two_pools_histograms_sum_into_the_right_quantile_in_prometheus() {
    let t0 = Instant::now();
    let first = sample(t0, 0);
    let facts = ppscope::testing::facts(
        "test",
        Coverage {
            slow: true,
            ..Default::default()
        },
    );
    let snapshot_at = |secs| model::snapshot(&facts, &first, &sample(t0, secs));
    let publish = |state: &ServerState, secs| {
        state.publish(Publication::fixed(
            snapshot_at(secs),
            snapshot_at(1),
            Instant::now(),
        ))
    };
    let state = ServerState::new(Duration::from_secs(3600), 100);
    publish(&state, 1);
    let server = BlockingServer::start("127.0.0.1:0".parse().unwrap(), state.clone()).unwrap();

    let prom = Prometheus::scraping(&server.addr.to_string(), "histograms");
    let quantile = "histogram_quantile(0.99, sum by (le) (rate(ppscope_page_pool_slow_path_seconds_bucket[1m])))";
    let buckets_per_pool = "count by (pool) (ppscope_page_pool_slow_path_seconds_bucket)";
    // The counts grow by a second's worth every second, as a collection would move them;
    // rate() needs two scrapes of each.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut secs = 1;
    let mut p99 = None;
    while Instant::now() < deadline {
        thread::sleep(Duration::from_secs(1));
        secs += 1;
        publish(&state, secs);
        p99 = prom.value(quantile);
        if p99.is_some_and(f64::is_finite) && secs > 6 {
            break;
        }
    }
    let p99 = p99.unwrap_or_else(|| panic!("Prometheus gave no quantile for {quantile}"));
    // Half the slow paths in [1, 2) µs, half in [4, 8) µs: the 99th percentile is in the
    // second (Prometheus interpolates within the bucket: 4.096 + 4.096 * 0.98 µs).
    assert!(
        p99 > 4.096e-6 && p99 <= 8.192e-6,
        "p99 {p99} s, expected in (4.096, 8.192] µs"
    );
    // Both pools carry the same 32 buckets (31 log2 edges and +Inf).
    let per_pool = prom.query(buckets_per_pool).expect("count by pool");
    let counts: Vec<&str> = per_pool
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["value"][1].as_str())
        .collect();
    assert_eq!(counts, ["32", "32"], "{per_pool:#}");
    // The scraper above asked for OpenMetrics; the 0.0.4 text, what a plain GET gets, passes
    // Prometheus' own parser and linter (promtool).
    let (status, text) =
        common::http_get_timeout(&server.addr.to_string(), "/metrics", Duration::from_secs(5))
            .expect("a plain GET of /metrics");
    assert_eq!(status, 200);
    assert!(!text.contains("# EOF"), "0.0.4 has no EOF marker");
    if let Err(refused) = common::promtool_check_metrics(&text) {
        panic!("promtool check metrics: {refused}");
    }
    server.stop();
}

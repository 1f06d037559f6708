use std::{collections::HashMap, time::Instant};

use ppscope_common::PoolCounters;

use super::*;
use crate::{
    advice::scenario,
    export::http::{BlockingServer, Publication, ServerState},
    model::{Coverage, RawSample, SourceFacts},
    testing,
};

fn totals(s: &Snapshot) -> (u64, u64) {
    let p = &s.pools[0];
    (p.alloc.total.unwrap(), p.recycle.total.unwrap())
}

#[test]
fn sim_source_plays_the_scenario_at_the_requested_pace() {
    let mut a = SimSource::new("gve-devmem-alltoall").unwrap();
    let mut b = SimSource::new("gve-devmem-alltoall").unwrap();
    for _ in 0..3 {
        let sa = a.next(Duration::from_secs(1)).unwrap().unwrap();
        let sb = b.next(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(totals(&sa), totals(&sb), "deterministic");
        let p = &sa.pools[0];
        // 400 buffers per ms for one second of simulated time.
        assert_eq!(p.alloc.total, Some(400_000));
        let (c, r, s) = (
            p.alloc.cache.unwrap(),
            p.alloc.ring.unwrap(),
            p.alloc.slow.unwrap(),
        );
        assert_eq!(c + r + s, 400_000);
        assert!(s > 0, "the default ring starves: provider calls");
        assert_eq!(p.ifname.as_deref(), Some("eth1"));
        assert_eq!(p.ring_size, Some(4096));
        assert!(p.recycle.ring_full.unwrap() > 0);
        let advice = p.advice.as_ref().expect("advice attached");
        assert!(advice.summary().contains("grow"), "{}", advice.summary());
        assert!((sa.duration_seconds - 1.0).abs() < 1e-9);
        // devmem: the frees of the burst in calls of 128 tokens, the ring-full ones
        // back to the dmabuf; no time is simulated.
        let devmem = sa
            .devmem
            .as_ref()
            .expect("a provider pool has a devmem view");
        let dontneed = devmem.dontneed.as_ref().unwrap();
        assert_eq!(dontneed.value_sum, p.recycle.total);
        // Bursts of 12,000 tokens: 93 calls of 128 and one of 96 each.
        assert_eq!(dontneed.calls, dontneed.value_sum.unwrap() / 12_000 * 94);
        assert_eq!(dontneed.latency, None);
        assert_eq!(
            devmem.free.as_ref().unwrap().calls,
            p.recycle.ring_full.unwrap()
        );
        assert_eq!(devmem.provider_alloc.as_ref().unwrap().calls, s);
    }
    // Half the interval, half the allocations.
    let half = a.next(Duration::from_millis(500)).unwrap().unwrap();
    assert_eq!(half.pools[0].alloc.total, Some(200_000));
}

#[test]
fn sim_all_has_one_pool_per_scenario_and_names_are_checked() {
    let mut all = SimSource::new("all").unwrap();
    let snap = all.next(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(snap.pools.len(), scenario::NAMES.len());
    let err = SimSource::new("nope").err().unwrap().to_string();
    assert!(
        err.contains("gve-devmem-alltoall") && err.contains("all"),
        "{err}"
    );
}

fn sample(at: Instant, allocs: u64, slow: u64) -> RawSample {
    let counters = PoolCounters {
        alloc_calls: allocs,
        slow_calls: slow,
        ..PoolCounters::default()
    };
    testing::one_pool_sample(
        at,
        0xffff_8880_0000_1000,
        counters,
        testing::identity("veth1"),
    )
}

#[test]
fn replay_source_steps_through_a_recording_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.ppr");
    let cov = Coverage {
        alloc: true,
        slow: true,
        refill: true,
        ..Coverage::default()
    };
    let t0 = Instant::now();
    let samples = [(0, 0), (100, 1), (300, 2), (600, 4), (1000, 5)]
        .iter()
        .enumerate()
        .map(|(i, (a, s))| sample(t0 + Duration::from_millis(500 * i as u64), *a, *s));
    testing::write_recording(
        &path,
        &testing::facts("6.18-test", cov),
        Duration::from_millis(500),
        t0,
        samples,
    );
    let mut r = ReplaySource::open(&path).unwrap();
    assert!(r.describe().contains("0.0/2.0 s"), "{}", r.describe());
    let one = r.next(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(one.pools[0].alloc.total, Some(300));
    assert_eq!(one.pools[0].alloc.slow, Some(2));
    assert_eq!(one.kernel, "6.18-test");
    let two = r.next(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(two.pools[0].alloc.total, Some(700));
    assert!(r.next(Duration::from_secs(1)).unwrap().is_none(), "ended");
    let mut only = OnlyDevice {
        inner: ReplaySource::open(&path).unwrap(),
        dev: "vnet1".into(),
    };
    assert!(only
        .next(Duration::from_secs(1))
        .unwrap()
        .unwrap()
        .pools
        .is_empty());
    std::fs::write(&path, b"not a recording").unwrap();
    assert!(ReplaySource::open(&path).is_err());
}

#[test]
fn connect_source_reads_an_agents_last_interval_over_http() {
    let state = ServerState::new(Duration::from_secs(1), 100);
    let server = BlockingServer::start("127.0.0.1:0".parse().unwrap(), state.clone()).unwrap();
    let url = format!("http://{}", server.addr);
    let mut c = ConnectSource::new(&url).unwrap();
    let err = c.next(Duration::from_secs(1)).err().unwrap().to_string();
    assert!(err.contains("not collected yet"), "{err}");
    let mut sim = SimSource::new("all").unwrap();
    let since_start = sim.next(Duration::from_secs(2)).unwrap().unwrap();
    let last = sim.next(Duration::from_secs(1)).unwrap().unwrap();
    state.publish(Publication::fixed(
        since_start,
        last.clone(),
        Instant::now(),
    ));
    let got = c.next(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(got.pools.len(), last.pools.len());
    for (g, w) in got.pools.iter().zip(&last.pools) {
        assert_eq!(g.label(), w.label());
        assert_eq!(g.alloc, w.alloc);
        assert_eq!(g.recycle, w.recycle);
        assert_eq!(g.advice, w.advice);
    }
    assert_eq!(c.describe(), format!("agent {url}"));
    server.stop();
    assert!(ConnectSource::new("ftp://x").is_err());
}

#[test]
fn a_recording_of_a_live_window_replays_into_the_advice_it_gave() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.ppr");
    // What the advice reads of the source: its coverage and its page size (not this host's).
    let facts = SourceFacts {
        page_size: 16384,
        ..testing::facts("7.2-test", testing::profile_coverage())
    };
    // A starved virtio-net pool, as the full hooks count it.
    let mut id = testing::identity("vnet1");
    id.ifindex = 3;
    id.driver[..10].copy_from_slice(b"virtio_net");
    id.known |= ppscope_common::PoolIdentity::KNOWN_IFINDEX;
    let samples = testing::starved_ring(161, id).full;
    let t0 = samples[0].at;
    let opts = live::DiagnoseOptions {
        duration: Duration::from_secs(60),
        interval: Duration::from_secs(1),
        only_dev: Some("vnet1"),
    };
    let live = live::diagnose_window(&facts, &samples, None, None, &opts);
    // The ring check, which only a live diagnose makes: `ethtool -g` says 1024 now.
    let rx_rings = HashMap::from([(3, 1024)]);
    let checked = live::diagnose_window(&facts, &samples, None, Some(&rx_rings), &opts);
    testing::write_recording(&path, &facts, Duration::from_millis(10), t0, samples);
    let rec = crate::recording::Recording::read(&path).unwrap();
    let replayed = replay::diagnose(&rec, opts.interval, opts.only_dev);

    let advice = |s: &Snapshot| {
        let p = &s.pools[0];
        assert_eq!(p.ifname.as_deref(), Some("vnet1"));
        serde_json::to_value(p.advice.as_ref().expect("advice")).unwrap()
    };
    let (live, mut checked, replayed) = (advice(&live), advice(&checked), advice(&replayed));
    assert_eq!(
        live["verdict"], "grow",
        "bursts of 1,500 in a ring of 256: {live:#}"
    );
    assert_eq!(live["knob"]["kind"], "device_queue_size", "{live:#}");
    assert_eq!(live, replayed, "the same samples, live and replayed");
    // The ring check adds its note and the suspected size, and nothing else in the advice.
    let note = checked["evidence"].as_array_mut().unwrap().pop().unwrap();
    assert!(
        note.as_str().unwrap().contains("did not rebuild the pool"),
        "{note}"
    );
    assert_eq!(checked["resize_suspect"], 256);
    checked["resize_suspect"] = live["resize_suspect"].clone();
    assert_eq!(
        checked, live,
        "the ring check changes only its note and resize_suspect"
    );
}

#[test]
fn a_recording_that_could_not_keep_its_pace_says_so() {
    let ms = Duration::from_millis;
    // 13 samples over 11.3 s when asked for 10 ms, as the VM lab's emulated guest wrote.
    let slow = live::Recorded {
        samples: 13,
        span: ms(11_298),
    };
    let note = slow.pace_note(ms(10)).expect("far slower than asked");
    assert!(
        note.starts_with("one sample every 941ms on average, not every 10ms"),
        "{note}"
    );
    // Within half an interval of the pace asked, or too few samples for a pace: nothing.
    let kept = live::Recorded {
        samples: 1001,
        span: ms(14_000),
    };
    assert_eq!(kept.pace_note(ms(10)), None);
    assert_eq!(kept.pace_note(ms(13)), None);
    let lone = live::Recorded {
        samples: 1,
        span: Duration::ZERO,
    };
    assert_eq!(lone.pace_note(ms(10)), None);
    // Below a millisecond the figures are in microseconds, the asked one as it was given.
    let fast = live::Recorded {
        samples: 11,
        span: Duration::from_micros(8_000),
    };
    let note = fast
        .pace_note(Duration::from_micros(500))
        .expect("800us against 500us");
    assert!(
        note.starts_with("one sample every 800us on average, not every 500us"),
        "{note}"
    );
}

//! Smoke runs of `cargo xtask bench --quick`: each benchmark runs for seconds and its figures
//! must be sane (real programs ran, real pools were seen, times are positive and bounded).
//! Not timed tests: nothing here fails because the machine is slow.
//!
//! `#[ignore]`d for a plain `cargo test` (root, BPF, namespaces; the second boots the VM lab);
//! `cargo xtask test` runs them.
use xtask::bench::{collect, BenchArgs};

fn quick(only: &[&str], no_vm: bool) -> xtask::bench::Results {
    let args = BenchArgs {
        quick: true,
        only: only.iter().map(|s| s.to_string()).collect(),
        no_vm,
        // A prebuilt ppscope (its eBPF object is found beside it), when the checkout's own
        // build is not wanted.
        ppscope: std::env::var_os("PPSCOPE_BENCH_PPSCOPE").map(Into::into),
        ..BenchArgs::default()
    };
    collect(&args).expect("the quick benchmarks run")
}

#[test]
#[ignore = "needs root and BPF; run by cargo xtask test"]
fn bench_host_quick_smoke() {
    let r = quick(&[], true);
    // Probe cost on the host's tracepoints: both ppscope and the empty programs ran over the
    // same events, and ppscope's body costs something but not absurdly much.
    assert!(
        !r.probe_cost.is_empty(),
        "no probe-cost rows: {:?}",
        r.probe_cost_notes
    );
    for p in &r.probe_cost {
        assert!(p.calls > 100, "too few events: {p:?}");
        assert!(p.floor.median > 0.0 && p.ours.median > 0.0, "{p:?}");
        assert!(
            (0.5..100.0).contains(&p.ratio.median),
            "implausible ratio: {p:?}"
        );
        // Copies of the empty program (at least two in a window) ran over the hook's calls,
        // and identical programs cost about the same (a spread is the dearest copy over the
        // cheapest).
        let copies = p.floor_copies.as_ref().expect("the floor's copies ran");
        assert!((1.0..3.0).contains(&copies.max), "{p:?}");
    }
    // The run-time stats' price: the empty program ran in both windows, and the stats add
    // their clock reads (a run with them is not cheaper than one without).
    let stats = r
        .stats_cost
        .as_ref()
        .unwrap_or_else(|| panic!("no stats-cost figures: {:?}", r.probe_cost_notes));
    assert!(stats.off.median > 0.0 && stats.off.n == 2, "{stats:?}");
    assert!(stats.on.median >= stats.off.median, "{stats:?}");
    // The agent exported every pool made for it, within bounded memory.
    assert_eq!(r.agent.len(), 2, "{:?}", r.agent_notes);
    for a in &r.agent {
        assert!(a.pools_exported >= a.pools_made, "{a:?}");
        assert!(a.rss_mb > 1.0 && a.rss_mb < 1024.0, "{a:?}");
        assert!(a.cpu.median >= 0.0 && a.cpu.max < 200.0, "{a:?}");
    }
    // top ran beside them in a real terminal, and its title's pool count was read.
    assert!(!r.top.is_empty(), "{:?}", r.agent_notes);
    for t in &r.top {
        assert!(t.pools_shown.is_some(), "top's screen was not read: {t:?}");
    }
    let pp = r
        .startup
        .iter()
        .find(|s| s.tool.starts_with("ppscope"))
        .unwrap_or_else(|| panic!("no ppscope start-up: {:?}", r.startup_notes));
    assert!(pp.ms.median > 1.0 && pp.ms.median < 120_000.0, "{pp:?}");
    assert_eq!(r.simulator.len(), 3);
    for s in &r.simulator {
        assert!(s.events > 0 && s.ms.median > 0.0, "{s:?}");
    }
}

#[test]
#[ignore = "boots the VM lab; run by cargo xtask test"]
fn vm_bench_quick_smoke() {
    let r = quick(&["probe-cost", "workload", "agent-vm"], false);
    for backend in ["fentry", "kprobe"] {
        let rows: Vec<_> = r
            .probe_cost
            .iter()
            .filter(|p| p.backend == backend)
            .collect();
        assert!(
            rows.iter().any(|p| p.hook == "alloc" && p.calls > 100),
            "{backend}: no alloc events measured: {:?} {:?}",
            rows,
            r.probe_cost_notes
        );
    }
    for w in ["virtio", "veth", "bursty"] {
        for c in ["none", "fentry", "kprobe"] {
            let row = r
                .workload
                .iter()
                .find(|x| x.workload == w && x.config == c)
                .unwrap_or_else(|| panic!("no {w}/{c} row: {:?}", r.workload_notes));
            assert!(row.mbps.median > 0.1, "{row:?}");
        }
    }
    // The agent in the guest (--detail full) saw about every pool move in the windows with
    // traffic, and few in the windows without. Not every one: an interval of an emulated
    // CPU can miss a pool's datagram (a trial run of 1,000 pools listed 720 in the best
    // interval of its moving window).
    let (moving, still): (Vec<_>, Vec<_>) = r
        .agent_vm
        .iter()
        .filter(|w| !w.light)
        .partition(|w| w.moving);
    assert!(
        !moving.is_empty() && !still.is_empty(),
        "{:?} {:?}",
        r.agent_vm,
        r.agent_notes
    );
    for w in &moving {
        assert!(w.pools_per_interval * 2 > w.pools_made, "{w:?}");
        assert!(w.cpu > 0.0 && w.rss_mb > 1.0, "{w:?}");
    }
    // A light agent on the same traffic ran, and saw few of the pools move (no refill, no
    // page allocator, no netlink stats for veth pools).
    let light: Vec<_> = r.agent_vm.iter().filter(|w| w.light).collect();
    assert!(!light.is_empty(), "no light window: {:?}", r.agent_notes);
    for w in light.iter().chain(&still) {
        assert!(w.pools_per_interval * 2 < w.pools_made, "{w:?}");
    }
}

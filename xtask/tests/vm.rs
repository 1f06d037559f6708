//! VM lab tests: ppscope on a current Debian kernel (kprobes, BTF, page_pool stats on), booted
//! under QEMU by `cargo xtask vm`. Numbers are checked against the kernel's own counters.
//!
//! `#[ignore]`d for a plain `cargo test` (they need root, QEMU and a kernel download);
//! `cargo xtask test` runs them.
use std::collections::HashMap;

use ppscope::testing::schema_errors;
use serde_json::Value;
use xtask::{
    vm::{run_script, which, with_libs, KernelChoice, VmRun},
    workspace_root,
};

/// The most instructions the verifier may walk for one hook's programs: as the host tests'
/// `WALK_BUDGET` (tests/common/mod.rs), which says why.
const WALK_BUDGET: u64 = 8_000;

/// An attached hook (`doctor --json`'s `hooks[]`) says what its programs' walk took, within
/// [`WALK_BUDGET`].
fn assert_walk_within_budget(what: &str, hook: &Value) {
    let walked = hook["load"]["verified_insns"].as_u64();
    assert!(walked.is_some_and(|n| n <= WALK_BUDGET), "{what}: {hook:#}");
}

/// The text between `@@name` and the next `@@` line.
fn section<'a>(output: &'a str, name: &str) -> &'a str {
    let start = output
        .find(&format!("@@{name}\n"))
        .unwrap_or_else(|| panic!("no @@{name} section in the VM output:\n{output}"))
        + name.len()
        + 3;
    let end = output[start..]
        .find("\n@@")
        .map_or(output.len(), |i| start + i + 1);
    &output[start..end]
}

/// `ethtool -S` lines `name: value`.
fn ethtool_stats(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The guest CPUs of `lab_run`'s VM.
const LAB_CPUS: u32 = 2;

/// Boots `kernel`, runs one diagnose per backend side by side over the same traffic.
fn lab_run(
    kernel: KernelChoice,
    backends: &[&str],
) -> (HashMap<String, Value>, HashMap<String, u64>, String) {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/diagnose-lab.sh"));
    run.kernel = kernel;
    run.cpus = LAB_CPUS;
    run.args = std::iter::once("4".to_string())
        .chain(backends.iter().map(|b| b.to_string()))
        .collect();
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let diags = backends
        .iter()
        .map(|b| {
            let v: Value = serde_json::from_str(section(&out.output, &format!("diag-{b}")))
                .unwrap_or_else(|e| panic!("diagnose --backend {b} JSON: {e}\n{}", out.output));
            (b.to_string(), v)
        })
        .collect();
    let stats = ethtool_stats(section(&out.output, "ethtool-veth1"));
    (diags, stats, out.output)
}

fn pools_named<'a>(diag: &'a Value, ifname: &str) -> Vec<&'a Value> {
    diag["pools"]
        .as_array()
        .expect("pools array")
        .iter()
        .filter(|p| p["ifname"] == ifname)
        .collect()
}

fn sum(pools: &[&Value], path: &[&str]) -> u64 {
    pools
        .iter()
        .map(|p| {
            let mut v = *p;
            for k in path {
                v = &v[*k];
            }
            v.as_u64()
                .unwrap_or_else(|| panic!("{path:?} unknown in {p:#}"))
        })
        .sum()
}

/// |ours - kernel| within 2% of the flow it belongs to (all allocations, or all recycles).
fn assert_close(what: &str, ours: u64, kernel: u64, flow: u64) {
    let diff = ours.abs_diff(kernel);
    let limit = (flow as f64 * 0.02).ceil() as u64;
    assert!(
        diff <= limit,
        "{what}: ppscope {ours} vs kernel {kernel} (diff {diff} > 2% of {flow} = {limit})"
    );
}

/// Two runs' pools agree within 2% of `flow` on every path (`["alloc", "ring"]`, …).
fn assert_paths_close(what: &str, (a, b): (&[&Value], &[&Value]), paths: &[[&str; 2]], flow: u64) {
    for path in paths {
        assert_close(
            &format!("{what} {path:?}"),
            sum(a, path),
            sum(b, path),
            flow,
        );
    }
}

/// The kernel's `rx_pp_*` stats summed into all allocations and all recycles: the flows a
/// difference is measured against.
fn kernel_flows(k: &HashMap<String, u64>) -> (u64, u64) {
    let allocs = k["rx_pp_alloc_fast"]
        + k["rx_pp_alloc_refill"]
        + k["rx_pp_alloc_slow"]
        + k["rx_pp_alloc_slow_ho"];
    let recycles = k["rx_pp_recycle_cached"]
        + k["rx_pp_recycle_ring"]
        + k["rx_pp_recycle_ring_full"]
        + k["rx_pp_recycle_released_ref"];
    (allocs, recycles)
}

/// The ring-fill distribution of `ifname`'s pools counts every rare event it stands for: a
/// sample per slow path and page released, and the refills' share, though a refill that took
/// pages reads the ring only at every 8th on its CPU, filed with the weight of the refills
/// since (`HotSlot::fill_weight`). What may differ is the refills a window's first filing
/// stands for from before the window and those not yet filed at its end: under 8 per CPU
/// and pool each.
fn assert_fill_samples_add_up(what: &str, diag: &Value, ifname: &str) {
    let pools = pools_named(diag, ifname);
    let events = sum(&pools, &["alloc", "ring"])
        + sum(&pools, &["alloc", "ring_empty"])
        + sum(&pools, &["alloc", "slow"])
        + sum(&pools, &["pages", "released"]);
    let samples: u64 = pools
        .iter()
        .map(|p| p["bursts"]["ring_fill"]["samples"].as_u64().unwrap_or(0))
        .sum();
    let slack = 2 * 8 * u64::from(LAB_CPUS) * pools.len() as u64;
    eprintln!("{what} {ifname}: ring-fill samples {samples}, events {events}");
    assert!(
        events > 100 && samples.abs_diff(events) <= slack.max(events / 50),
        "{what} {ifname}: ring-fill samples {samples} against {events} refills, slow paths \
         and releases (allowed {} off)",
        slack.max(events / 50)
    );
}

/// The veth1 pools' counts of one backend against the kernel's `rx_pp_*` stats.
fn assert_matches_kernel_stats(backend: &str, diag: &Value, k: &HashMap<String, u64>) {
    let veth = pools_named(diag, "veth1");
    assert!(!veth.is_empty(), "{backend}: no veth1 pool: {diag:#}");
    let (kernel_allocs, kernel_recycles) = kernel_flows(k);
    assert!(
        kernel_allocs > 1000,
        "too little veth traffic to compare: {k:?}"
    );
    let close = |what: &str, path: &[&str], kernel: u64, flow: u64| {
        assert_close(&format!("{backend} {what}"), sum(&veth, path), kernel, flow)
    };
    close(
        "alloc total",
        &["alloc", "total"],
        kernel_allocs,
        kernel_allocs,
    );
    close(
        "alloc cache",
        &["alloc", "cache"],
        k["rx_pp_alloc_fast"],
        kernel_allocs,
    );
    close(
        "alloc ring",
        &["alloc", "ring"],
        k["rx_pp_alloc_refill"],
        kernel_allocs,
    );
    close(
        "alloc slow",
        &["alloc", "slow"],
        k["rx_pp_alloc_slow"] + k["rx_pp_alloc_slow_ho"],
        kernel_allocs,
    );
    close(
        "alloc ring_empty",
        &["alloc", "ring_empty"],
        k["rx_pp_alloc_empty"],
        kernel_allocs,
    );
    close(
        "recycle total",
        &["recycle", "total"],
        kernel_recycles,
        kernel_recycles,
    );
    close(
        "recycle cached",
        &["recycle", "cached"],
        k["rx_pp_recycle_cached"],
        kernel_recycles,
    );
    close(
        "recycle ring",
        &["recycle", "ring"],
        k["rx_pp_recycle_ring"],
        kernel_recycles,
    );
    close(
        "recycle ring_full",
        &["recycle", "ring_full"],
        k["rx_pp_recycle_ring_full"] + k["rx_pp_recycle_released_ref"],
        kernel_recycles,
    );
}

/// Two backends watching the same traffic agree within 2% on every count both measure.
fn assert_backends_agree(a: (&str, &Value), b: (&str, &Value), ifname: &str) {
    let (pa, pb) = (pools_named(a.1, ifname), pools_named(b.1, ifname));
    assert!(
        !pa.is_empty() && !pb.is_empty(),
        "{ifname} missing under {} or {}",
        a.0,
        b.0
    );
    for (side, fields) in [
        (
            "alloc",
            &["total", "cache", "ring", "slow", "ring_empty"][..],
        ),
        ("recycle", &["total", "cached", "ring", "ring_full"][..]),
    ] {
        let flow = sum(&pa, &[side, "total"]).max(1);
        for f in fields {
            let (x, y) = (sum(&pa, &[side, f]), sum(&pb, &[side, f]));
            assert_close(
                &format!("{ifname} {side}.{f}: {} vs {}", a.0, b.0),
                x,
                y,
                flow,
            );
        }
    }
}

/// `--detail light` beside full runs of the same traffic: no per-page hook attached; what it
/// shows agrees within 2% with the full (fentry) run and, where `kernel` (veth1's `rx_pp_*`)
/// is given, with the kernel's own counters; what it cannot know is unknown, not 0.
fn assert_light_agrees(diags: &HashMap<String, Value>, kernel: Option<&HashMap<String, u64>>) {
    let light = &diags["light"];
    let full = &diags["fentry"];
    assert_eq!(light["detail"], "light", "{:#}", light["backends"]);
    assert_eq!(full["detail"], "full");
    for hook in ["alloc", "alloc_frag", "recycle", "recycle_bulk"] {
        let h = &light["backends"][hook];
        assert!(h["backend"].is_null(), "{hook} attached under light: {h:#}");
        assert!(
            h["reasons"][0].as_str().unwrap().contains("--detail light"),
            "{h:#}"
        );
    }
    for hook in ["refill", "slow_path", "page_hold", "page_release"] {
        let h = &light["backends"][hook];
        assert!(!h["backend"].is_null(), "light keeps {hook}: {h:#}");
    }
    let (lv, fv) = (pools_named(light, "veth1"), pools_named(full, "veth1"));
    assert!(!lv.is_empty(), "light: no veth1 pool: {light:#}");
    // Refills, slow paths and empty rings are per-refill events: light sees them exactly.
    let flow = sum(&fv, &["recycle", "total"]).max(sum(&fv, &["alloc", "total"]));
    assert_paths_close(
        "veth1 light vs fentry",
        (&lv, &fv),
        &[
            ["alloc", "ring"],
            ["alloc", "slow"],
            ["alloc", "ring_empty"],
        ],
        flow,
    );
    assert!(
        lv.iter().all(|p| !p["ring_hit_rate"].is_null()),
        "light knows the ring hit rate: {lv:#?}"
    );
    // veth's pools are not listed by netlink: no kernel stats for them, so the cache share
    // stays unknown under light (no alloc hook), never a made-up 0.
    assert!(
        lv.iter()
            .all(|p| p["alloc"]["cache"].is_null() && p["kernel"].is_null()),
        "{lv:#?}"
    );
    if let Some(k) = kernel {
        let (kernel_allocs, kernel_recycles) = kernel_flows(k);
        for (what, path, kernel, flow) in [
            (
                "alloc ring",
                ["alloc", "ring"],
                k["rx_pp_alloc_refill"],
                kernel_allocs,
            ),
            (
                "alloc slow",
                ["alloc", "slow"],
                k["rx_pp_alloc_slow"] + k["rx_pp_alloc_slow_ho"],
                kernel_allocs,
            ),
            (
                "alloc ring_empty",
                ["alloc", "ring_empty"],
                k["rx_pp_alloc_empty"],
                kernel_allocs,
            ),
            (
                "recycle ring_full (pages that left the pool)",
                ["recycle", "ring_full"],
                k["rx_pp_recycle_ring_full"] + k["rx_pp_recycle_released_ref"],
                kernel_recycles,
            ),
        ] {
            assert_close(&format!("light {what}"), sum(&lv, &path), kernel, flow);
        }
        // vnet1 is listed by netlink (sid keeps page_pool stats): light takes the whole split
        // from the kernel, and it agrees with what fentry counted page by page.
        let (l, f) = (pools_named(light, "vnet1"), pools_named(full, "vnet1"));
        assert!(l.iter().all(|p| p["alloc_source"] == "kernel"), "{l:#?}");
        assert_paths_close(
            "vnet1 light (kernel stats) vs fentry",
            (&l, &f),
            &[["alloc", "total"], ["alloc", "cache"], ["recycle", "total"]],
            sum(&f, &["alloc", "total"]),
        );
    }
    let errors = schema_errors("diagnose.schema.json", light);
    assert!(errors.is_empty(), "light off the schema: {errors:#?}");
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_sid_fentry_and_kprobe_match_each_other_and_the_kernel() {
    let (diags, k, output) = lab_run(
        KernelChoice::Sid,
        &["fentry", "kprobe", "tracepoint", "light"],
    );
    eprintln!("veth1 kernel stats: {k:?}");
    for backend in ["fentry", "kprobe"] {
        let diag = &diags[backend];
        for hook in [
            "alloc",
            "refill",
            "slow_path",
            "recycle",
            "recycle_bulk",
            "devmem_dontneed",
        ] {
            assert_eq!(
                diag["backends"][hook]["backend"], backend,
                "{hook} under --backend {backend}: {:#}",
                diag["backends"][hook]
            );
        }
        // virtio-net: the receiving NIC's pool is reported, by name, with allocations.
        let virtio = pools_named(diag, "vnet1");
        assert!(!virtio.is_empty(), "{backend}: no vnet1 pool:\n{output}");
        let allocs = sum(&virtio, &["alloc", "total"]);
        assert!(allocs > 1000, "{backend}: vnet1 allocations {allocs}");
        let split = sum(&virtio, &["alloc", "cache"])
            + sum(&virtio, &["alloc", "ring"])
            + sum(&virtio, &["alloc", "slow"]);
        assert_eq!(split, allocs, "cache + ring + slow must add up");
        assert!(
            virtio
                .iter()
                .all(|p| p["pool_size"].as_u64() == Some(256) && p["queue"] == 0),
            "QEMU's default vring is 256, one queue: {virtio:#?}"
        );
        assert_matches_kernel_stats(backend, diag, &k);
        for ifname in ["vnet1", "veth1"] {
            assert_fill_samples_add_up(backend, diag, ifname);
        }
    }
    assert_backends_agree(
        ("fentry", &diags["fentry"]),
        ("kprobe", &diags["kprobe"]),
        "veth1",
    );

    // State read from kernel memory at rare events: the ring cannot hold more than its size,
    // and the receiving NIC has pages out (posted to the device or in the stack).
    let fe = &diags["fentry"];
    for p in pools_named(fe, "vnet1") {
        assert!(p["ring_fill"].as_u64() <= p["ring_size"].as_u64(), "{p:#}");
        assert!(p["inflight_pages"].as_u64() > Some(0), "{p:#}");
    }
    let released: u64 = fe["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pages"]["released"].as_u64().unwrap_or(0))
        .sum();
    // Timed returns are a sample, not a count: a return interrupted on its CPU by another
    // (softirq) one is not timed (one frame per CPU), so they are most, not all, releases.
    // A run whose rings never overflowed releases nothing (a CI run: 0 and 0), and then times
    // nothing either.
    let returns = fe["page_return"]["calls"].as_u64().unwrap();
    assert!(
        if released == 0 {
            returns == 0
        } else {
            returns * 2 > released
        },
        "page_return {returns} vs pages released {released}"
    );
    // Forced backends leave the tracepoint-only hooks out; auto (tracepoint run) has them.
    let tp_dev = diags["tracepoint"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["ifname"] == "vnet1")
        .cloned()
        .expect("vnet1 device under tracepoints");
    assert!(tp_dev["napi"]["polls"].as_u64() > Some(0), "{tp_dev:#}");

    // Netlink: the pool ids ppscope read from kernel memory are the ids page-pool-get
    // lists; veth registers its pools with no netdev, so netlink does not list them.
    for p in pools_named(&diags["fentry"], "vnet1") {
        let k = &p["kernel"];
        assert!(
            k.is_object(),
            "vnet1 pool {} not matched in page-pool-get: {p:#}",
            p["netlink_id"]
        );
        assert!(k["stats"].is_object(), "sid keeps page_pool stats: {p:#}");
        assert!(k["inflight_pages"].as_u64() > Some(0), "{p:#}");
        // The kernel's facts the README lists: the NAPI instance it serves and that it is
        // live (not detached, lingering for its pages). No ifindex: the lab moved vnet1 into
        // ppb after virtio-net made its pools, the move unregistered it in this namespace,
        // and the kernel parks an unregistered netdev's pools on this namespace's loopback
        // (page_pool_unreg_netdev), which netlink lists without an ifindex.
        assert!(k["ifindex"].is_null(), "{p:#}");
        assert!(
            k["napi_id"].as_u64() > Some(0),
            "virtio-net gives its NAPI id: {p:#}"
        );
        assert_eq!(k["detached"], false, "{p:#}");
        assert_eq!(k["stats"]["id"], p["netlink_id"], "{p:#}");
    }
    for p in pools_named(&diags["fentry"], "veth1") {
        assert!(p["kernel"].is_null(), "{p:#}");
    }
    // The same stats as `nobody` with only CAP_BPF + CAP_PERFMON (same namespace, where the
    // kernel parked vnet1's pool): the kernel does not make page-pool-stats-get admin-only,
    // so the deploy files grant no CAP_NET_ADMIN.
    let doctor = section(&output, "doctor-nobody");
    let doctor: Value =
        serde_json::from_str(doctor).unwrap_or_else(|e| panic!("doctor as nobody: {e}\n{doctor}"));
    let line = doctor["backends"]["netlink stats"].as_str().unwrap_or("");
    assert!(
        line.starts_with("serve the split") && !line.contains("(0 pool(s)"),
        "netlink stats as nobody+bpf,perfmon: {doctor:#}"
    );
    // Netlink answers for the caller's namespace: from ppb, where vnet1 now is, the pool
    // parked on this namespace's loopback is not listed.
    let ppb: Value = serde_json::from_str(section(&output, "doctor-ppb")).unwrap();
    let line = ppb["backends"]["netlink stats"].as_str().unwrap_or("");
    assert!(
        line.contains("(0 pool(s)"),
        "netlink stats from ppb: {ppb:#}"
    );
    for (backend, diag) in &diags {
        let errors = schema_errors("diagnose.schema.json", diag);
        assert!(errors.is_empty(), "{backend} off the schema: {errors:#?}");
    }

    assert_light_agrees(&diags, Some(&k));

    // Tracepoints alone: the split comes from the kernel's own stats, and its exact parts
    // (refills from the ring, slow-path calls) equal what fentry measured.
    let tp = pools_named(&diags["tracepoint"], "vnet1");
    assert!(!tp.is_empty(), "tracepoint: no vnet1 pool");
    assert!(tp.iter().all(|p| p["alloc_source"] == "kernel"), "{tp:#?}");
    let fe = pools_named(&diags["fentry"], "vnet1");
    let flow = sum(&fe, &["alloc", "total"]);
    for f in ["ring", "slow"] {
        assert_close(
            &format!("vnet1 alloc.{f}: kernel stats vs fentry"),
            sum(&tp, &["alloc", f]),
            sum(&fe, &["alloc", f]),
            flow,
        );
    }
}

/// A quiet host: pings 50 ms apart, so the CPUs idle between packets and each NAPI poll runs
/// in a softirq on the idle task, whose pid_tgid is 0. The kprobe backend pairs a recycle's
/// entry and return through a per-CPU frame; keyed by the task, until an open frame was
/// marked apart from the pid (`Frame::OPEN`), 0 read as a free frame and those recycles went
/// uncounted (16-23 of the kernel's 26 in lab runs of 50 pings; 41 of 51 in this test). Keyed
/// by the stack pointer at the call since (`frames::Owner`), these recycles run on the
/// idle task's stack or the IRQ stack; a rule that never matched a return to its entry
/// would count nothing here (one requiring equal stack pointers counted 0 of 51). Each
/// pool is held to the kernel's own counters of the same window, which the report carries.
#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_kprobe_counts_a_quiet_hosts_recycles_as_the_kernel_does() {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/quiet-lab.sh"));
    run.args = vec!["100".into()];
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let diag: Value = serde_json::from_str(section(&out.output, "diag"))
        .unwrap_or_else(|e| panic!("diagnose JSON: {e}\n{}", out.output));
    assert_eq!(diag["backends"]["recycle"]["backend"], "kprobe");
    // The pair found its own calls: no warning that its returns found other calls' frames
    // (the rule requiring equal stack pointers had it: "recycle: 51 returns found ...").
    let stderr = section(&out.output, "diag-stderr");
    assert!(
        !stderr.contains("found their call's frame held by another call"),
        "{stderr}"
    );
    for ifname in ["vnet0", "vnet1"] {
        let pools = pools_named(&diag, ifname);
        assert!(!pools.is_empty(), "no {ifname} pool:\n{}", out.output);
        let kernel: u64 = pools
            .iter()
            .map(|p| {
                let k = &p["kernel"]["stats"];
                assert!(k.is_object(), "{ifname}: no kernel stats: {p:#}");
                [
                    "recycle_cached",
                    "recycle_ring",
                    "recycle_ring_full",
                    "recycle_released_refcnt",
                ]
                .iter()
                .map(|f| k[f].as_u64().unwrap())
                .sum::<u64>()
            })
            .sum();
        assert!(
            kernel >= 40,
            "{ifname}: too few recycles to compare: {kernel}"
        );
        let ours = sum(&pools, &["recycle", "total"]);
        // ppscope's counts and the kernel's are read a moment apart at each end of the window.
        let limit = (kernel / 20).max(2);
        assert!(
            ours.abs_diff(kernel) <= limit,
            "{ifname}: kprobe counted {ours} recycles, the kernel {kernel} (more than {limit} apart)\n{}",
            section(&out.output, "ping")
        );
    }
}

/// Another tool's kprobes (bpftrace's) busy in tasks on both CPUs while virtio-net's NAPI
/// softirqs come in. A softirq taken inside bpftrace's kprobe handler finds the CPU's kprobe
/// busy, and the kernel drops ppscope's kprobe hits before any program runs; one taken while
/// bpftrace's program runs skips ppscope's programs. The kprobe agent exports both per hook
/// (the first read from its kprobes' links) and warns. The same traffic without bpftrace
/// first: the hits dropped must be bpftrace's doing, and the agents' own map reads (they hold
/// the CPU's `bpf_prog_active` too) skip some programs alone. The fentry agent beside it,
/// whose programs the same kernel counts too, exports the skipped runs as well, and no
/// kprobe hits.
#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_kprobe_programs_skipped_under_another_tools_kprobes_are_exported_and_warned_of() {
    let bpftrace = which("bpftrace").expect("bpftrace on the host (cargo xtask setup)");
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/skipped-runs.sh"));
    run.args = vec!["10".into()];
    run.extra = with_libs(&bpftrace, "/usr/sbin/bpftrace").expect("ldd bpftrace");
    // bpftrace brings LLVM: the guest's initramfs grows by ~200 MB.
    run.memory = "3G".into();
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let name = "ppscope_skipped_runs_total";
    let missed = "ppscope_kprobe_missed_total";
    let alone = section(&out.output, "kprobe-alone");
    let kprobe = section(&out.output, "kprobe-metrics");
    let sum = |text: &str, metric: &str| metric_values(text, metric, &[]).iter().sum::<f64>();
    let (alone_runs, alone_hits) = (sum(alone, name), sum(alone, missed));
    let (more_runs, more_hits) = (
        sum(kprobe, name) - alone_runs,
        sum(kprobe, missed) - alone_hits,
    );
    println!(
        "kprobe agent: skipped runs {alone_runs} alone, {more_runs} more with bpftrace; \
         dropped kprobe hits {alone_hits} alone, {more_hits} more with bpftrace"
    );
    // A NAPI softirq taken inside bpftrace's kprobe handler finds the CPU's kprobe busy: the
    // kernel drops ppscope's kprobe hits there, before any program runs (thousands in a run,
    // none alone).
    assert!(
        more_hits > 100.0 && more_hits > 10.0 * alone_hits,
        "the kprobe agent's dropped kprobe hits: {alone_hits} alone, {more_hits} more with \
         bpftrace's kprobes busy:\n{}",
        out.output
    );
    // And its programs are skipped while bpftrace's hold the CPU (at kretprobe returns, which
    // the kprobe layer does not guard), as the agents' own map reads skip some alone: the
    // alone phase's count moved from 4 to over 1,000 between runs, so only that bpftrace's
    // phase adds some is asserted.
    assert!(
        more_runs > 0.0,
        "the kprobe agent's skipped runs: {alone_runs} alone, {more_runs} more with bpftrace's \
         kprobes busy:\n{}",
        out.output
    );
    assert_eq!(
        metric_values(
            kprobe,
            "ppscope_hook_attached",
            &["hook=\"recycle\"", "backend=\"kprobe\""]
        ),
        [1.0]
    );
    let stderr = section(&out.output, "kprobe-stderr");
    assert!(
        stderr.contains("the kernel skipped")
            && stderr.contains("of ppscope's programs on this hook"),
        "{stderr}"
    );
    assert!(
        stderr.contains("recycle: the kernel dropped")
            && stderr.contains("ppscope_kprobe_missed_total"),
        "{stderr}"
    );
    let fentry = section(&out.output, "fentry-metrics");
    assert!(
        metric_values(fentry, name, &["hook=\"recycle\""]).len() == 1,
        "the fentry agent does not export {name} for recycle:\n{fentry}"
    );
    // The dropped hits are read from each kprobe's link, found by its program's id among the
    // agent's own descriptors: every hook on kprobes has the series (a hook whose links were
    // not found has none), and the copies held do not grow from one check to the next.
    let on_kprobes: Vec<&str> = kprobe
        .lines()
        .filter(|l| l.starts_with("ppscope_hook_attached{") && l.contains("backend=\"kprobe\""))
        .filter(|l| l.ends_with(" 1"))
        .filter_map(|l| l.split("hook=\"").nth(1)?.split('"').next())
        .collect();
    assert!(on_kprobes.contains(&"recycle"), "{on_kprobes:?}");
    for hook in &on_kprobes {
        assert_eq!(
            metric_values(kprobe, missed, &[&format!("hook=\"{hook}\"")]).len(),
            1,
            "the kprobe agent does not export {missed} for {hook}:\n{kprobe}"
        );
    }
    // The snapshot says so too, per hook (what reports and dashboards read).
    let snapshot: Value =
        serde_json::from_str(section(&out.output, "kprobe-snapshot")).expect("snapshot JSON");
    let errors = schema_errors("diagnose.schema.json", &snapshot);
    assert!(errors.is_empty(), "{errors:?}");
    let dropped = snapshot["backends"]["recycle"]["missed"]["kprobe_hits_dropped"].as_u64();
    assert!(
        dropped.is_some_and(|d| d > 0),
        "the snapshot's recycle hook: {}",
        snapshot["backends"]["recycle"]
    );
    let links = |name| {
        section(&out.output, name)
            .trim()
            .parse::<u32>()
            .unwrap_or(0)
    };
    let (links_alone, links_end) = (links("kprobe-links-alone"), links("kprobe-links-end"));
    assert!(
        links_alone > 0 && links_end == links_alone,
        "the kprobe agent's BPF link descriptors: {links_alone} after the first phase, \
         {links_end} at the end"
    );
    assert!(
        metric_values(fentry, missed, &[]).is_empty(),
        "the fentry agent exports {missed}:\n{fentry}"
    );
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_trixie_612_older_symbols_fentry_and_kprobe_agree() {
    let (diags, k, _output) = lab_run(KernelChoice::Trixie, &["fentry", "kprobe", "light"]);
    // 6.12 has no CONFIG_PAGE_POOL_STATS: check against the packets XDP saw instead.
    assert!(
        !k.contains_key("rx_pp_alloc_fast"),
        "trixie grew page_pool stats? {k:?}"
    );
    let packets = k["rx_queue_0_xdp_packets"];
    assert!(packets > 1000, "too little veth traffic: {k:?}");
    // No kernel stats here: light knows the per-refill figures, the rest is unknown.
    assert_light_agrees(&diags, None);
    for backend in ["fentry", "kprobe"] {
        let diag = &diags[backend];
        assert_eq!(
            diag["backends"]["slow_path"]["targets"][0],
            "__page_pool_alloc_pages_slow"
        );
        let veth = pools_named(diag, "veth1");
        assert!(!veth.is_empty(), "{backend}: no veth1 pool: {diag:#}");
        // Every XDP packet's page is recycled once: the recycle count follows the packets.
        assert_close(
            &format!("{backend} recycles vs XDP packets"),
            sum(&veth, &["recycle", "total"]),
            packets,
            packets,
        );
        assert!(
            sum(&veth, &["alloc", "ring"]) > 0,
            "{backend}: refills from the ring"
        );
    }
    let a = pools_named(&diags["fentry"], "veth1");
    let b = pools_named(&diags["kprobe"], "veth1");
    let flow = sum(&a, &["recycle", "total"]);
    assert_paths_close(
        "trixie fentry vs kprobe",
        (&a, &b),
        &[
            ["alloc", "ring"],
            ["alloc", "slow"],
            ["recycle", "total"],
            ["recycle", "ring"],
        ],
        flow,
    );
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_run_cli_runs_a_script_with_its_arguments_and_exit_status() {
    let dir = std::env::temp_dir().join(format!("ppscope-vm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("probe.sh");
    std::fs::write(
        &script,
        "echo \"args: $1|$2\"\nip netns list | sort | tr '\\n' ' '; echo\n\
         ip -n ppb -4 -o addr show vnet1 | awk '{print $4}'\n\
         uname -r\nexit 7\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm", "run", "--no-ppscope", "--script"])
        .arg(&script)
        .args(["--", "one", "two words"])
        .output()
        .expect("run cargo xtask vm");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("args: one|two words"), "{stdout}");
    for ns in ["ppa", "ppb", "ppc", "ppd"] {
        assert!(stdout.contains(ns), "netns {ns} missing: {stdout}");
    }
    assert!(stdout.contains("198.18.0.2/24"), "{stdout}");
}

fn devmem_gve_run(kernel: KernelChoice, calls: u32, backend: &str) -> (Value, Value, String) {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/devmem-gve.sh"));
    run.kernel = kernel;
    run.args = vec![calls.to_string(), backend.into()];
    let tool = std::path::PathBuf::from(env!("CARGO_BIN_EXE_devmem-dontneed"));
    run.extra.push((tool, "devmem-dontneed".into()));
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let doctor: Value = serde_json::from_str(section(&out.output, "doctor")).unwrap();
    let diag: Value = serde_json::from_str(section(&out.output, "diag")).unwrap();
    (doctor, diag, out.output)
}

fn hook<'a>(doctor: &'a Value, name: &str) -> &'a Value {
    doctor["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hook"] == name)
        .unwrap_or_else(|| panic!("no hook {name} in {doctor:#}"))
}

/// As the systemd unit runs it (nobody with CAP_BPF and CAP_PERFMON only), tracefs and
/// debugfs root-only: fentry and the tracepoints attach, so no CAP_DAC_READ_SEARCH (nothing
/// reads tracefs); kprobes are refused at Debian's `perf_event_paranoid` 3 with the sysctl
/// that lets them through named, and attach at 2.
#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_least_privilege_needs_no_tracefs_and_names_what_refuses_kprobes() {
    let run = VmRun::new(workspace_root().join("xtask/vm-tests/least-privilege.sh"));
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let doctor = |name: &str| -> Value {
        serde_json::from_str(section(&out.output, name))
            .unwrap_or_else(|e| panic!("doctor {name}: {e}\n{}", out.output))
    };
    let auto = doctor("auto");
    for name in ["alloc", "refill", "slow_path", "recycle"] {
        assert_eq!(hook(&auto, name)["backend"], "fentry", "{auto:#}");
    }
    for name in ["page_hold", "page_release", "napi_poll", "drops"] {
        assert_eq!(hook(&auto, name)["backend"], "tracepoint", "{auto:#}");
    }
    let at_2 = doctor("kprobe2");
    for name in ["alloc", "refill", "recycle", "page_hold", "page_release"] {
        assert_eq!(hook(&at_2, name)["backend"], "kprobe", "{at_2:#}");
    }
    // The lab's sid kernel is Debian's, which keeps its patched level 3: were it 2 or below,
    // this test would check no refusal.
    let paranoid: i32 = section(&out.output, "paranoid").trim().parse().unwrap();
    assert!(paranoid > 2, "perf_event_paranoid {paranoid} in the lab");
    let kprobe = doctor("kprobe");
    let alloc = hook(&kprobe, "alloc");
    assert!(alloc["backend"].is_null(), "{alloc:#}");
    let why = alloc["reasons"][0].as_str().unwrap();
    for words in [
        "Permission denied",
        &format!("kernel.perf_event_paranoid is {paranoid}"),
        "sysctl kernel.perf_event_paranoid=2",
    ] {
        assert!(why.contains(words), "{why}");
    }
    // No page_pool hook attaches: the sentence after the report says why, as doctor does.
    let refusal = section(&out.output, "kprobe-refusal");
    assert!(
        refusal.contains("none of ppscope's page_pool hooks could be attached")
            && refusal.contains("kernel.perf_event_paranoid"),
        "{refusal}"
    );
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_sid_dontneed_counts_every_call_and_gve_hooks_attach() {
    for backend in ["fentry", "kprobe"] {
        let (doctor, diag, output) = devmem_gve_run(KernelChoice::Sid, 37, backend);
        for name in ["gve_alloc", "gve_rx_poll", "gve_pool_queue"] {
            let h = hook(&doctor, name);
            if backend == "kprobe" {
                assert_eq!(h["backend"], "kprobe", "{name}: {h:#}");
                assert!(
                    h["targets"][0].as_str().unwrap().starts_with("gve_"),
                    "{h:#}"
                );
            } else {
                // Module functions are probed with kprobes only: a forced fentry says so.
                assert!(h["backend"].is_null(), "{h:#}");
                assert!(
                    h["reasons"][0].as_str().unwrap().contains("it has: kprobe"),
                    "{h:#}"
                );
            }
        }
        assert_eq!(hook(&doctor, "devmem_dontneed")["backend"], backend);
        // Every hook this backend serves loaded and attached: a program the verifier refuses
        // is a hook missing, which auto would quietly serve with the next backend (a refused
        // fx_refill once showed only as a slower light in the benchmark).
        for h in doctor["hooks"].as_array().unwrap() {
            if h["backend"].is_null() {
                let why = h["reasons"].to_string();
                assert!(
                    why.contains("cannot serve this hook") || why.contains("left off by"),
                    "{backend}: {h:#}"
                );
            } else {
                assert_walk_within_budget(backend, h);
            }
        }
        assert!(output.contains("calls=37 ok=37"), "{output}");
        let d = &diag["devmem"]["dontneed"];
        assert_eq!(d["calls"], 37, "{backend}: {d:#}");
        assert_eq!(d["value_sum"], 0, "no frags are freed: {d:#}");
        assert_eq!(d["errors"], 0, "{d:#}");
        assert_eq!(d["latency"]["count"], 37, "{d:#}");
        if backend == "kprobe" {
            // gve is loaded but has no device: its section is there, with no polls.
            assert!(diag["gve"].is_object(), "{:#}", diag["gve"]);
            assert_eq!(diag["gve"]["queues"].as_array().map(Vec::len), Some(0));
        }
    }
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_trixie_dontneed_and_gve_without_page_pool() {
    let (doctor, diag, _output) = devmem_gve_run(KernelChoice::Trixie, 5, "auto");
    assert_eq!(diag["devmem"]["dontneed"]["calls"], 5);
    // 6.12's gve has no page_pool: its pool functions are absent, and doctor says so.
    let create = hook(&doctor, "gve_pool_queue");
    assert!(create["backend"].is_null(), "{create:#}");
    assert!(
        create["reasons"][0]
            .as_str()
            .unwrap()
            .contains("gve_rx_create_page_pool"),
        "{create:#}"
    );
    assert_eq!(hook(&doctor, "gve_rx_poll")["backend"], "kprobe");
    // 6.12's verifier walks ppscope's programs within the same budget as sid's.
    for h in doctor["hooks"].as_array().unwrap() {
        if !h["backend"].is_null() {
            assert_walk_within_budget("trixie", h);
        }
    }
}

/// One bursty run on a lab booted with `rx_queue_size`: (diagnose JSON, simulate JSON).
fn bursty_run(rx_queue_size: u16, resize_rx: u16) -> (Value, Value, String) {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/bursty-record.sh"));
    run.rx_queue_size = Some(rx_queue_size);
    run.args = vec![
        "8".into(),
        "150".into(),
        "100".into(),
        resize_rx.to_string(),
    ];
    let tool = std::path::PathBuf::from(env!("CARGO_BIN_EXE_bursty"));
    run.extra.push((tool, "bursty".into()));
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let diag: Value = serde_json::from_str(section(&out.output, "diagnose"))
        .unwrap_or_else(|e| panic!("diagnose: {e}\n{}", out.output));
    let sim: Value = serde_json::from_str(section(&out.output, "simulate"))
        .unwrap_or_else(|e| panic!("simulate: {e}\n{}", out.output));
    // Both keep the documented layout, advice included (only the lab's hooks give it).
    let errors = schema_errors("diagnose.schema.json", &diag);
    assert!(errors.is_empty(), "diagnose off the schema: {errors:#?}");
    let errors = schema_errors("simulate.schema.json", &sim);
    assert!(errors.is_empty(), "simulate off the schema: {errors:#?}");
    (diag, sim, out.output)
}

/// Writes the lab's HTML report under target/tmp and has headless chromium parse and paint
/// it: the starving verdict, the timeline's rows of the chain (the NAPI row is there whenever
/// the hook counted, zeros included) and the advice curve with both sizes marked.
fn report_renders(html: &str) {
    let page =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-starved-virtio-report.html");
    std::fs::write(&page, html).unwrap();
    let chromium = |args: &[&str]| {
        std::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-dev-shm-usage",
            ])
            .args(args)
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("chromium (installed by `cargo xtask setup`)")
    };
    let dom = String::from_utf8_lossy(&chromium(&["--dump-dom"]).stdout).into_owned();
    for part in [
        "class=\"verdict starving\"",
        "class=\"series slow\"",
        "class=\"series ring_full\"",
        "class=\"series napi_full_budget\"",
        "class=\"curve\"",
        "class=\"current\"",
        "class=\"recommended\"",
    ] {
        assert!(
            dom.contains(part),
            "no {part} in the report chromium parsed:\n{dom}"
        );
    }
    let png = page.with_extension("png");
    let _ = std::fs::remove_file(&png);
    chromium(&[
        &format!("--screenshot={}", png.display()),
        "--window-size=900,1800",
    ]);
    let painted = std::fs::metadata(&png).map_or(0, |m| m.len());
    assert!(
        painted > 20_000,
        "chromium painted {painted} bytes of {}",
        png.display()
    );
}

/// Per page: the share of allocations served by a recycled page, as measured.
fn measured_recycled(diag: &Value) -> f64 {
    let pools = pools_named(diag, "vnet1");
    let allocs = sum(&pools, &["alloc", "total"]) as f64;
    let fresh = sum(&pools, &["pages", "allocated"]) as f64;
    1.0 - (fresh / allocs).min(1.0)
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_advice_for_a_starved_virtio_pool_holds_when_applied() {
    // A small vring starved by a receiver that stalls and drains.
    let (diag, sim, output) = bursty_run(256, 0);
    let before = measured_recycled(&diag);
    let result = sim["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ifname"] == "vnet1")
        .unwrap_or_else(|| panic!("no advice for vnet1:\n{output}"));
    let advice = &result["advice"];
    eprintln!("advice at 256: {}", result["summary"]);
    // A live diagnose of the same traffic, side by side with the recording, advises growing
    // through the same knob, not always to the same size: the two sample on their own, the
    // recorder every 10 ms and the diagnose every 100 ms (its 10 m window / 6000), each
    // slower when the guest cannot keep up (under TCG, steps of 0.8 to 1.1 s were seen in the
    // advice's evidence), so their steps cut the bursts at different places (a CI run
    // advised 512 live and 1024 from the recording). That the same samples, live and
    // replayed from a recording, give the same advice (bar the ring check, which only a live
    // run makes) is unit tested: `a_recording_of_a_live_window_replays_into_the_advice_it_gave`.
    let live: Value = serde_json::from_str(section(&output, "live")).unwrap();
    let live_advice = &pools_named(&live, "vnet1")[0]["advice"];
    eprintln!(
        "live advice: {} → {} ({})",
        live_advice["current_size"], live_advice["recommended_size"], live_advice["verdict"]
    );
    assert_eq!(live_advice["verdict"], "grow", "live: {live_advice:#}");
    assert_eq!(live_advice["knob"], advice["knob"], "live: {live_advice:#}");
    // The recorder says when it could not sample as often as asked (--interval 10ms).
    let samplers = section(&output, "samplers");
    let written: f64 = samplers
        .lines()
        .find_map(|l| l.strip_prefix("ppscope: ")?.split_once(" samples written"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count from the recorder:\n{samplers}"));
    let mean_ms = diag["duration_seconds"].as_f64().unwrap() * 1e3 / (written - 1.0);
    assert_eq!(
        samplers.contains("on average, not every 10ms"),
        mean_ms > 15.0,
        "one sample every {mean_ms:.1} ms on average:\n{samplers}"
    );
    // The same recording, diagnosed and simulated, gives the same advice.
    let replayed = &pools_named(&diag, "vnet1")[0]["advice"];
    for field in ["verdict", "recommended_size", "knob"] {
        assert_eq!(
            replayed[field], advice[field],
            "diagnose --replay vs simulate --replay: {field}"
        );
    }
    assert_eq!(advice["verdict"], "grow", "{advice:#}");
    assert_eq!(
        advice["knob"]["kind"], "device_queue_size",
        "virtio-net's knob is the queue size: {advice:#}"
    );
    let size = advice["recommended_size"].as_u64().unwrap();
    assert!(
        size > 256 && size <= 1024,
        "grow within QEMU's range: {advice:#}"
    );
    let predicted = advice["predicted"]["recycled_rate"].as_f64().unwrap();
    let at_current = advice["current"]["recycled_rate"].as_f64().unwrap();
    // How far the model, replaying the recorded profile at the size it was recorded at, is
    // from what was measured there. Under TCG it runs high (seen 5 to 17 points until
    // 2026-11-30; 22 and 28 points on 2026-12-01, once the NAPI and refill hooks got cheaper
    // and the starved receiver measured less recycling: the replay runs from a warmed steady
    // state, the real window does not, and the guest's timing moves bursts within a 10 ms
    // step); the advice must own up to a large miss in its confidence. Past 35 points the
    // two runs are not the same workload.
    let bias = at_current - before;
    eprintln!("model at 256 predicts {at_current:.3}, measured {before:.3} (bias {bias:+.3})");
    assert!(
        bias.abs() <= 0.35,
        "model at 256 predicts {at_current:.3}, measured {before:.3}: not the same workload"
    );
    if bias.abs() > 0.08 {
        assert_eq!(
            advice["confidence"]["level"], "low",
            "a model {bias:+.3} off what it measured must not claim more than low confidence: {advice:#}"
        );
    }

    // Apply the advice: boot the lab with the advised vring and run the same workload. The
    // same workload at the same size measured anywhere from 0.44 to 0.73 recycled under TCG
    // from one boot to the next (2026-12-01), so each size is measured twice, alternating,
    // and the means compared: one pair of single runs once measured the advised ring below
    // the starved one (0.730 → 0.637) while the next two pairs gained 26 and 29 points.
    let mut after_runs = Vec::new();
    let mut before_runs = vec![before];
    for round in 0..2 {
        if round == 1 {
            let (diag_again, _, _) = bursty_run(256, 0);
            before_runs.push(measured_recycled(&diag_again));
        }
        let (diag_after, _, output_after) = bursty_run(size as u16, 0);
        let pool_size = pools_named(&diag_after, "vnet1")[0]["pool_size"].as_u64();
        assert_eq!(
            pool_size,
            Some(size),
            "the new vring built a new pool:\n{output_after}"
        );
        after_runs.push(measured_recycled(&diag_after));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (before, after) = (mean(&before_runs), mean(&after_runs));
    eprintln!(
        "recycled per page: 256 → {before_runs:.3?} measured (mean {before:.3}); {size} → \
         {predicted:.3} predicted, {after_runs:.3?} measured (mean {after:.3})"
    );
    assert!(
        after > before,
        "growing the ring must help: {before:.3} → {after:.3}"
    );
    // The gain the advice promises holds: the measured gain (256 → the new size) falls short
    // of the modelled one by at most 20 points (the run-to-run spread of the same workload
    // under TCG is ~10 points). A larger gain than promised is the advice holding, not
    // failing: 2026-12-01's fresh-clone CI measured 0.484 → 0.837 (+35 points) against a
    // modelled 0.810 → 0.950 (+14), which the two-sided form of this check (the prediction
    // with the bias at 256 subtracted, within 20 points) failed by 1.3 points; the next run
    // measured +23 against +25 modelled. How far the model is off is bounded above (at 256)
    // and owned up to in its confidence.
    let (gained, promised) = (after - before, predicted - at_current);
    assert!(
        gained >= promised - 0.20,
        "measured {before:.3} → {after:.3} at {size} (+{gained:.3}), modelled {at_current:.3} → \
         {predicted:.3} (+{promised:.3})"
    );

    // The report a person attaches to a ticket, from the first run's recording: a browser
    // parses and paints the verdict, the chain and the curve (the README's picture is such a
    // page). Last, so a browser's failure does not hide the advice's result.
    report_renders(section(&output, "html"));
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_a_ring_resize_that_did_not_rebuild_the_pool_is_said() {
    // virtio-net: ethtool -G resizes the vring (down from the size the device was created
    // with; it cannot grow past it), the page_pool built at probe stays as it was.
    let (_, _, output) = bursty_run(1024, 256);
    let live: Value = serde_json::from_str(section(&output, "live")).unwrap();
    let pool = pools_named(&live, "vnet1")[0].clone();
    assert_eq!(pool["device_rx_ring"], 256, "{pool:#}");
    assert_eq!(pool["ring_size"], 1024, "{pool:#}");
    let advice = &pool["advice"];
    assert_eq!(advice["resize_suspect"], 1024, "{advice:#}");
    let evidence = advice["evidence"].to_string();
    assert!(evidence.contains("did not rebuild the pool"), "{evidence}");
    assert!(
        evidence.contains("builds it when the device probes"),
        "{evidence}"
    );
}

/// Values of the `name{labels} value` lines whose labels contain every one of `labels`.
fn metric_values(text: &str, name: &str, labels: &[&str]) -> Vec<f64> {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect()
}

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_agent_exports_the_full_histogram_set_and_agrees_with_diagnose() {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/agent-lab.sh"));
    run.args = vec!["fentry".into(), "3".into()];
    let tool = std::path::PathBuf::from(env!("CARGO_BIN_EXE_devmem-dontneed"));
    run.extra.push((tool, "devmem-dontneed".into()));
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let metrics = section(&out.output, "metrics");
    let diag: Value = serde_json::from_str(section(&out.output, "diag")).unwrap();
    assert!(
        out.output.contains("@@agent-exit 0"),
        "SIGTERM must exit 0:\n{}",
        out.output
    );

    // The histograms: slow path per pool, SO_DEVMEM_DONTNEED, with cumulative buckets.
    for family in [
        "ppscope_page_pool_slow_path_seconds",
        "ppscope_devmem_dontneed_seconds",
    ] {
        let inf = metric_values(metrics, &format!("{family}_bucket"), &["le=\"+Inf\""]);
        assert!(!inf.is_empty(), "{family} missing:\n{metrics}");
        let count = metric_values(metrics, &format!("{family}_count"), &[]);
        assert_eq!(
            inf.iter().sum::<f64>(),
            count.iter().sum::<f64>(),
            "{family}"
        );
    }
    assert_eq!(
        metric_values(metrics, "ppscope_devmem_dontneed_seconds_count", &[]),
        vec![9.0]
    );
    assert!(metrics.contains("ppscope_hook_attached{hook=\"alloc\",backend=\"fentry\"} 1"));
    assert!(
        metrics.contains("ppscope_detail{level=\"full\"} 1"),
        "{metrics}"
    );

    // The veth pool's counts: the agent (since its start) and diagnose (its window) both
    // cover the pool's whole life.
    let veth = pools_named(&diag, "veth1");
    let total = sum(&veth, &["alloc", "total"]) as f64;
    assert!(total > 1000.0, "too little traffic: {total}");
    for kind in ["cache", "ring", "slow"] {
        let kind_label = format!("kind=\"{kind}\"");
        let agent: f64 = metric_values(
            metrics,
            "ppscope_page_pool_alloc_total",
            &["device=\"veth1\"", &kind_label],
        )
        .iter()
        .sum();
        let diagnose = sum(&veth, &["alloc", kind]) as f64;
        assert!(
            (agent - diagnose).abs() <= 0.02 * total,
            "{kind}: agent {agent} vs diagnose {diagnose} (of {total})"
        );
    }
}

/// `ppscope top` started as a newcomer would, one frame at a time (`--once`): live on the
/// lab's kernel it shows the virtio pool carrying iperf3 with its figures, and `--connect`
/// shows the same pool through an agent's `/api/v1/snapshot`.
#[test]
#[ignore = "boots a VM (cargo xtask test runs it)"]
fn vm_top_shows_the_virtio_pool_live_and_through_an_agent() {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/top-lab.sh"));
    run.args = vec!["6".into()];
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    for (name, source) in [
        ("live", "live "),
        ("connect", "agent http://127.0.0.1:9464"),
    ] {
        let frame = section(&out.output, name);
        assert!(
            frame.contains(source),
            "the {name} frame names its source ({source}):\n{frame}"
        );
        // top and the agent run light by default: no per-page hook, and the frame says so.
        assert!(
            frame.contains("detail light"),
            "the {name} frame names its detail level:\n{frame}"
        );
        // The table's row (under the column titles; the advice line above the table names
        // the pool too) carries measured figures, read under their own titles: allocations
        // per second (a rate above zero) and the ring hit rate (a percentage, not '?' or '-').
        let mut lines = frame.lines();
        let header = lines
            .find(|l| l.contains("ALLOC/s") && l.contains("HIT%"))
            .unwrap_or_else(|| panic!("no column titles in the {name} frame:\n{frame}"));
        let row = lines
            .find(|l| l.contains("vnet1"))
            .unwrap_or_else(|| panic!("no vnet1 pool row in the {name} frame:\n{frame}"));
        let allocs = cell(header, row, "ALLOC/s");
        let per_s = ppscope::testing::parse_rate(allocs)
            .unwrap_or_else(|| panic!("{name}: ALLOC/s {allocs:?} is not a rate: {row}"));
        assert!(per_s > 0.0, "{name}: no allocations measured: {row}");
        let hit = cell(header, row, "HIT%");
        let pct: f64 = hit
            .strip_suffix('%')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: HIT% {hit:?} is not a measured share: {row}"));
        assert!((0.0..=100.0).contains(&pct), "{name}: HIT% {hit}: {row}");
    }
}

/// The cell of `row` under the column titled `title` in `header` (columns are left-aligned
/// under their titles; positions in characters, the frame's borders being multi-byte).
fn cell<'a>(header: &str, row: &'a str, title: &str) -> &'a str {
    let at = header[..header.find(title).expect("title in header")]
        .chars()
        .count();
    let start = row.char_indices().nth(at).map_or(row.len(), |(i, _)| i);
    row[start..].split_whitespace().next().unwrap_or("")
}

/// gve leaves and comes back while the agent runs (`rmmod`/`insmod`, twice): its hooks go
/// with the module, come back with it, and each change is one log line, not a storm.
#[test]
#[ignore = "boots a VM (cargo xtask test runs it)"]
fn vm_gve_hooks_follow_the_module_across_rmmod_and_insmod() {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/gve-reload.sh"));
    run.args = vec!["kprobe".into()];
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let attached = |name: &str| -> Vec<(String, String)> {
        section(&out.output, name)
            .lines()
            .filter_map(|l| {
                let hook = l.split("hook=\"").nth(1)?.split('"').next()?.to_string();
                let value = l.rsplit(' ').next()?.trim().to_string();
                Some((hook, value))
            })
            .collect()
    };
    for (phase, want) in [
        ("loaded", "1"),
        ("unloaded", "0"),
        ("reloaded", "1"),
        ("twice", "1"),
    ] {
        let hooks = attached(phase);
        assert_eq!(hooks.len(), 3, "three gve hooks {phase}:\n{}", out.output);
        for (hook, value) in hooks {
            assert_eq!(value, want, "{hook} {phase}:\n{}", out.output);
        }
    }
    let log = section(&out.output, "agent-err");
    let changes = log.lines().filter(|l| l.contains("gve ")).count();
    assert!(
        (3..=4).contains(&changes),
        "one line per module change (unloaded, loaded, then one or two for the fast reload):\n{log}"
    );
    assert!(!log.contains("collection failed"), "{log}");
}

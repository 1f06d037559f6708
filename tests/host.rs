//! Host tests: the `ppscope` binary as a user runs it, on this machine's kernel, against a
//! real veth + XDP page_pool in network namespaces the test creates and removes.
//!
//! They need root (namespaces, BPF), so they are `#[ignore]`d for a plain `cargo test`;
//! `cargo xtask test` runs them. Traffic stays between the test's own namespaces
//! (198.18.0.0/15, the benchmark range).
use std::{
    fs,
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

mod common;

use common::{metric_series, metric_sum, run, AgentProc, Prometheus, VethLab, PPSCOPE};

/// Starts `ppscope diagnose` and returns once it says it is watching.
fn start_diagnose(args: &[&str]) -> Child {
    let mut child = Command::new(PPSCOPE)
        .arg("diagnose")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ppscope diagnose");
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("watching page_pools"),
        "diagnose said: {line:?}"
    );
    child
}

fn finish_json(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "diagnose failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("diagnose --json prints JSON")
}

/// No kernel address in `text`: none written as `0xffff…` (or `ffff…` at a word's start),
/// and no decimal number as large as a kernel address (a recording's JSON numbers).
fn assert_no_kernel_address(what: &str, text: &str) {
    let lower = text.to_ascii_lowercase();
    assert!(
        !lower.contains("0xffff"),
        "{what} holds a kernel address: {text}"
    );
    for word in lower.split(|c: char| !c.is_ascii_alphanumeric()) {
        assert!(!word.starts_with("ffff8"), "{what} holds {word}: {text}");
        if let Ok(n) = word.parse::<u64>() {
            assert!(n < 0xffff_0000_0000_0000, "{what} holds {n:#x}: {text}");
        }
    }
}

fn host_has_kprobes() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn tracepoints_see_slow_path_pages_on_a_veth_xdp_pool() {
    let mut lab = VethLab::new("a", 20);
    let rx_packets = |lab: &VethLab| -> u64 {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &lab.ns_rx, "cat"])
            .arg(format!(
                "/sys/class/net/{}/statistics/rx_packets",
                lab.dev_rx
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let diag = start_diagnose(&["--duration", "6s", "--json", "--backend", "tracepoint"]);
    let rx_before = rx_packets(&lab);
    lab.attach_xdp();
    lab.traffic(2);
    let report = finish_json(diag);
    let received = rx_packets(&lab) - rx_before;

    assert_eq!(
        report["backends"]["page_hold"]["backend"], "tracepoint",
        "{report:#}"
    );
    assert_eq!(report["backends"]["page_release"]["backend"], "tracepoint");
    let pools = report["pools"].as_array().expect("pools array");
    let pool = pools
        .iter()
        .find(|p| p["ifname"] == lab.dev_rx.as_str())
        .unwrap_or_else(|| panic!("no pool named {} in {report:#}", lab.dev_rx));
    let allocated = pool["pages"]["allocated"].as_u64().unwrap();
    assert!(
        allocated > 0,
        "no slow-path pages on the veth pool: {pool:#}"
    );
    // The pool was created inside the window, from nothing: every page came from the allocator.
    assert_eq!(
        pool["pool_size"], 256,
        "veth pools are VETH_RING_SIZE: {pool:#}"
    );
    // Around the pool: the veth's NAPI polls, lined up per step with the pages it took.
    let dev = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["ifname"] == lab.dev_rx.as_str())
        .unwrap_or_else(|| panic!("no device {} in {report:#}", lab.dev_rx));
    assert!(dev["napi"]["polls"].as_u64() > Some(0), "{dev:#}");
    // Every packet the veth received went through its NAPI (XDP is attached): the polls'
    // work adds up to the device's own count (counted per CPU in a slot, folded on a switch).
    let work = dev["napi"]["work"].as_u64().unwrap();
    assert!(
        work.abs_diff(received) <= received / 50 + 20,
        "NAPI work {work} vs rx_packets {received}: {dev:#}"
    );
    assert!(dev["drops_total"].is_u64(), "{dev:#}");
    // The pool carries its device's packets, the health verdict's basis where nothing splits
    // allocations.
    assert_eq!(pool["device_packets"]["packets"], work, "{pool:#}");
    assert!(
        pool["device_packets"]["pools"].as_u64() >= Some(1),
        "{pool:#}"
    );
    // diagnose runs at full: its verdict is read from those packets, not left `?`.
    let view: ppscope::snapshot::PoolView = serde_json::from_value(pool.clone()).unwrap();
    let secs = report["duration_seconds"].as_f64().unwrap();
    let verdict = ppscope::snapshot::health::assess(&view, secs);
    assert_eq!(
        verdict.basis,
        ppscope::snapshot::health::Basis::Packets,
        "{verdict:?}"
    );
    assert_ne!(verdict.health, ppscope::snapshot::health::Health::Unknown);
    let steps_in: u64 = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["devices"].as_array().unwrap())
        .filter(|d| d["ifname"] == lab.dev_rx.as_str())
        .map(|d| d["pages_in"].as_u64().unwrap())
        .sum();
    assert_eq!(
        steps_in, allocated,
        "the timeline's steps add up to the window"
    );
    // Pages leave the pool too: TCP returns them in bursts, and a page whose recycle found
    // the ring full to its producers (its next slot taken) is handed back. Each one's ring
    // fill is in the distribution, whether its program filed it or only counted it
    // (`PoolHot::release_full`, added by the model at the ring's size); no other hook files a
    // fill on this backend. Most found the ring full, in the log2 bucket of its size, not
    // the one below (where the entries behind the consumer alone put them): the count's path,
    // not only the filed.
    let released = pool["pages"]["released"].as_u64().unwrap();
    assert!(released > 0, "no page left the pool: {pool:#}");
    let fill = &pool["bursts"]["ring_fill"];
    assert_eq!(fill["samples"].as_u64(), Some(released), "{pool:#}");
    let ring_size = pool["ring_size"].as_u64().unwrap();
    let at_size = fill["buckets"][ppscope_common::log2_bucket(ring_size)]
        .as_u64()
        .unwrap_or(0);
    assert!(at_size * 2 > released, "{pool:#}");
    // Tracepoints alone cannot split allocations: unknown, never a made-up 0.
    assert!(pool["alloc"]["cache"].is_null(), "{pool:#}");
    assert!(pool["ring_hit_rate"].is_null(), "{pool:#}");
    // The live report keeps the layout the README documents (schema/diagnose.schema.json).
    let errors = ppscope::testing::schema_errors("diagnose.schema.json", &report);
    assert!(errors.is_empty(), "off the schema: {errors:#?}");
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_pool_destroyed_in_the_window_shows_its_release_attempts() {
    let mut lab = VethLab::new("t", 27);
    let diag = start_diagnose(&["--duration", "5s", "--json"]);
    lab.attach_xdp();
    lab.traffic(1);
    // Without XDP, veth tears its page_pools down: the kernel tries to release each.
    lab.detach_xdp();
    let report = finish_json(diag);
    assert_eq!(
        report["backends"]["pool_release"]["backend"], "tracepoint",
        "{report:#}"
    );
    let torn: Vec<&Value> = report["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["teardown"].is_null())
        .collect();
    assert!(!torn.is_empty(), "no pool was seen destroyed: {report:#}");
    for p in &torn {
        assert!(p["teardown"]["attempts"].as_u64() >= Some(1), "{p:#}");
        assert!(p["teardown"]["inflight_pages"].is_i64(), "{p:#}");
    }
    assert!(
        torn.iter().any(|p| p["ifname"] == lab.dev_rx.as_str()),
        "the veth's pools are among them: {torn:#?}"
    );
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn text_report_names_the_pool_and_the_missing_hooks() {
    let mut lab = VethLab::new("b", 21);
    let diag = start_diagnose(&["--duration", "5s", "--dev", &lab.dev_rx.clone()]);
    lab.attach_xdp();
    lab.traffic(2);
    let out = diag.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("pool {}  (", lab.dev_rx)), "{text}");
    // Named by the kernel's netlink id (this kernel has them), not by its address.
    assert!(text.contains(", netlink:"), "{text}");
    assert_no_kernel_address("the text report", &text);
    assert!(text.contains("from allocator"), "{text}");
    assert!(text.contains("page_hold       tracepoint"), "{text}");
    if !host_has_kprobes() {
        assert!(
            text.contains("the kernel has no kprobes (CONFIG_KPROBES is off)"),
            "the report must say why kprobe hooks are missing: {text}"
        );
    }
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn doctor_explains_this_kernel() {
    let out = run(PPSCOPE, &["doctor", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"), "{v:#}");
    // The summary the text opens with, the kernel's own stats included.
    for source in ["fentry/fexit", "kprobes", "tracepoints", "netlink stats"] {
        assert!(v["backends"][source].is_string(), "{source}: {v:#}");
    }
    let text = String::from_utf8(run(PPSCOPE, &["doctor"]).stdout).unwrap();
    let netlink_line = text
        .lines()
        .find(|l| l.starts_with("netlink stats "))
        .unwrap_or_else(|| panic!("no netlink stats line: {text}"));
    assert_eq!(
        netlink_line.trim_start_matches("netlink stats").trim(),
        v["backends"]["netlink stats"].as_str().unwrap()
    );
    let hooks = v["hooks"].as_array().unwrap();
    let hook = |name: &str| hooks.iter().find(|h| h["hook"] == name).unwrap().clone();
    assert_eq!(hook("page_hold")["backend"], "tracepoint");
    // This kernel refuses fentry but takes typed tracepoints: page_release loads as `tp_btf`
    // (its pool's fields plain loads). A typed program the verifier refuses falls back to the
    // raw one with the same figures, only dearer, so nothing else would tell (a change that
    // computed with the typed pool pointer did, and only the benchmark noticed).
    let release = hook("page_release");
    assert!(
        release["targets"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t.as_str().is_some_and(|t| t.ends_with("(tp_btf)")))),
        "{release:#}"
    );
    // What attaching it took, where a slow start went: this kernel (6.18) says how many
    // instructions its verifier walked.
    let load = &hook("page_hold")["load"];
    assert!(load["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{load}");
    assert!(
        load["verified_insns"].as_u64().is_some_and(|n| n > 0),
        "{load}"
    );
    // The verifier's walk is most of the start-up: each hook's programs within the budget
    // (see `WALK_BUDGET`).
    for h in hooks.iter().filter(|h| !h["backend"].is_null()) {
        let walked = h["load"]["verified_insns"].as_u64();
        assert!(walked.is_some_and(|n| n <= common::WALK_BUDGET), "{h:#}");
    }
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("page_hold") && l.contains("ms; verifier: ")),
        "{text}"
    );
    // Under light no recycle hook can attach, so page_release is loaded without what it
    // leaves the recycles (`ProbeConfig::feed_recycles`): the verifier walks less of it.
    let light: Value =
        serde_json::from_slice(&run(PPSCOPE, &["doctor", "--json", "--detail", "light"]).stdout)
            .unwrap();
    let walked = |v: &Value| {
        v["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["hook"] == "page_release")
            .and_then(|h| h["load"]["verified_insns"].as_u64())
            .unwrap_or_else(|| panic!("no page_release walk: {v:#}"))
    };
    assert!(
        walked(&light) < walked(&v),
        "page_release walked {} instructions under light, {} under full",
        walked(&light),
        walked(&v)
    );
    // Which figure comes from where, at each detail level (doctor runs full by default).
    assert_eq!(v["detail"], "full", "{v:#}");
    let figures = v["figures"].as_array().unwrap();
    let figure = |name: &str| {
        figures
            .iter()
            .find(|f| f["figure"] == name)
            .unwrap()
            .clone()
    };
    let recycle = figure("recycle split");
    assert!(
        recycle["light"].as_str().unwrap().contains("page_release"),
        "{recycle}"
    );
    assert!(
        text.contains("figures by detail level (this run: full;"),
        "{text}"
    );
    // At --detail light the per-page hooks are left off, a choice and not a failure: named
    // so, and --strict does not count them as missing.
    let light = run(PPSCOPE, &["doctor", "--json", "--detail", "light"]);
    let lv: Value = serde_json::from_slice(&light.stdout).unwrap();
    assert_eq!(lv["detail"], "light");
    let alloc = lv["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hook"] == "alloc")
        .unwrap()
        .clone();
    assert_eq!(
        alloc["reasons"][0],
        ppscope::snapshot::LEFT_OFF_LIGHT,
        "{alloc:#}"
    );
    let alloc = hook("alloc");
    if alloc["backend"].is_null() {
        // Nothing attached: the user is told why, for fentry and for kprobes in turn.
        let reasons: Vec<&str> = alloc["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert!(reasons.iter().any(|r| r.starts_with("fentry ")), "{alloc}");
        assert!(reasons.iter().any(|r| r.starts_with("kprobe")), "{alloc}");
        if !host_has_kprobes() {
            assert!(
                reasons.iter().any(|r| r.contains("CONFIG_KPROBES")),
                "{alloc}"
            );
        }
        let text = String::from_utf8(run(PPSCOPE, &["doctor"]).stdout).unwrap();
        let on_tracepoints = hooks
            .iter()
            .filter(|h| h["backend"] == "tracepoint")
            .count();
        assert!(
            on_tracepoints >= 4,
            "page_pool hold/release, napi_poll, kfree_skb: {v:#}"
        );
        assert!(
            text.contains(&format!("tracepoints   serve {on_tracepoints} hook(s)")),
            "{text}"
        );
        assert!(text.contains("fentry/fexit  unavailable: "), "{text}");
        assert!(text.contains("kprobes       unavailable: "), "{text}");
    }
    for f in v["fields"].as_array().unwrap() {
        assert!(
            f["offset"].is_u64(),
            "BTF field unresolved on this kernel: {f}"
        );
    }
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn unprivileged_user_gets_one_clear_sentence() {
    // setpriv drops to nobody with no capabilities, as a user without sudo would run it.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            PPSCOPE,
            "diagnose",
            "-d",
            "1",
        ])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("needs root or the capabilities CAP_BPF and CAP_PERFMON"),
        "{err}"
    );
}

/// Exactly when ppscope cannot run here the report is needed: doctor prints it, then the
/// reason in one sentence, and exits 1.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn doctor_reports_even_when_the_backend_is_refused() {
    if Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        eprintln!("this kernel has kprobes: --backend kprobe may serve, nothing to refuse");
    }
    let out = Command::new(PPSCOPE)
        .args(["doctor", "--backend", "kprobe"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\nhooks\n"), "the report: {stdout}");
    assert!(stdout.contains("kernel fields (from BTF)"), "{stdout}");
    if !host_has_kprobes() {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("none of ppscope's page_pool hooks"), "{err}");
        // Each cause once, not once per hook.
        assert_eq!(err.matches("the kernel has no kprobes").count(), 1, "{err}");
    }
    // The preflight for scripts: where a hook is missing (other than one of a kernel module
    // that is not loaded: on a host without kprobes or fentry the alloc and recycle hooks
    // are), the whole report, then exit 1; without --check the same host passes.
    let plain = Command::new(PPSCOPE)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let report: Value = serde_json::from_slice(&plain.stdout).unwrap();
    let hooks: Vec<ppscope::snapshot::HookStatus> =
        serde_json::from_value(report["hooks"].clone()).unwrap();
    let refused: Vec<&str> = hooks
        .iter()
        .filter(|h| !h.attached() && !h.module_absent() && !h.left_off())
        .map(|h| &*h.hook)
        .collect();
    let checked = Command::new(PPSCOPE)
        .args(["doctor", "--check"])
        .output()
        .unwrap();
    assert!(!checked.stdout.is_empty(), "the report first");
    let err = String::from_utf8_lossy(&checked.stderr);
    if refused.is_empty() {
        assert_eq!(checked.status.code(), Some(0), "{err}");
    } else {
        assert_eq!(checked.status.code(), Some(1), "{refused:?}: {err}");
        assert!(err.starts_with("ppscope: --check: "), "{err}");
        for hook in refused {
            assert!(err.contains(hook), "{hook}: {err}");
        }
    }
}

/// One logger for ppscope and the crates under it: RUST_LOG picks, aya's own lines and
/// start-up's phases show when asked for, and by default ppscope's events and nothing below a
/// warning.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn log_lines_follow_rust_log() {
    let stderr = |rust_log: Option<&str>| {
        let mut cmd = Command::new(PPSCOPE);
        cmd.args(["diagnose", "--duration", "1s"])
            .env_remove("RUST_LOG");
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let default = stderr(None);
    assert!(
        default.starts_with("ppscope: watching page_pools for 1s"),
        "{default}"
    );
    assert!(!default.contains("debug"), "{default}");
    let aya = stderr(Some("aya=debug"));
    assert!(aya.contains("ppscope: debug from aya"), "{aya}");
    assert!(!aya.contains("watching page_pools"), "{aya}");
    assert_eq!(stderr(Some("off")), "");
    // Where start-up went, phase by phase and hook by hook, when asked for.
    let startup = stderr(Some("ppscope=info,ppscope::startup=debug"));
    for phase in [
        "kernel BTF indexed",
        "kernel BTF parsed for aya",
        "eBPF loader made",
        "kernel field offsets found",
        "kallsyms read",
        "object loaded",
        "hooks attached",
        "first sample taken",
    ] {
        assert!(
            startup.contains(&format!("ppscope: debug: start-up: {phase}")),
            "{phase}: {startup}"
        );
    }
    let hold = startup
        .lines()
        .find(|l| l.starts_with("ppscope: debug: start-up: hook page_hold: "))
        .unwrap_or_else(|| panic!("no page_hold line: {startup}"));
    assert!(
        hold.contains(" ms, attached (") && hold.ends_with(" instructions verified)"),
        "{hold}"
    );
    assert!(startup.contains("watching page_pools"), "{startup}");
}

/// The kernel programs' own lines (aya-log) come only when asked for: `--bpf-log`, or
/// RUST_LOG naming their target. A veth pool created in the window has its identity read by
/// the programs, one debug line, with no kernel address in it.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn the_programs_log_lines_come_only_when_asked() {
    let run = |args: &[&str], rust_log: Option<&str>, tag: &str, subnet: u8| -> String {
        let mut lab = VethLab::new(tag, subnet);
        let mut cmd = Command::new(PPSCOPE);
        cmd.args(["diagnose", "--duration", "4s", "--backend", "tracepoint"])
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        let mut child = cmd.spawn().unwrap();
        let mut first = String::new();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        stderr.read_line(&mut first).unwrap();
        assert!(first.contains("watching page_pools"), "{first}");
        lab.attach_xdp();
        lab.traffic(1);
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).unwrap();
        assert!(child.wait().unwrap().success(), "{first}{rest}");
        rest
    };
    let identity = "ppscope: debug from ppscope::bpf: pool identity read: ifindex ";
    let asked = run(&["--bpf-log"], None, "la", 45);
    assert!(asked.contains(identity), "--bpf-log: {asked}");
    assert!(asked.contains("pool_size 256 ring_size 256"), "{asked}");
    assert_no_kernel_address("the programs' lines", &asked);
    let by_filter = run(&[], Some("ppscope=info,ppscope::bpf=debug"), "lb", 46);
    assert!(by_filter.contains(identity), "RUST_LOG: {by_filter}");
    let quiet = run(&[], None, "lc", 47);
    assert!(!quiet.contains("ppscope::bpf"), "not asked: {quiet}");
}

/// The kernel's BPF run-time stats are kept for every BPF program on the host, not only
/// ppscope's, so ppscope turns them on only with `--bpf-stats`: without it the process holds
/// no `bpf-stats` descriptor and the report says its own cost is unknown and why (unless the
/// administrator's sysctl keeps the stats on anyway: then the cost is reported).
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn bpf_stats_are_on_only_when_asked() {
    let holds_stats = |pid: u32| {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .any(|fd| {
                fs::read_link(fd.path()).is_ok_and(|l| l == Path::new("anon_inode:bpf-stats"))
            })
    };
    let sysctl_on =
        fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1");
    for (asked, tag, subnet) in [(false, "sa", 48), (true, "sb", 49)] {
        let mut lab = VethLab::new(tag, subnet);
        let dev = lab.dev_rx.clone();
        let mut args = vec!["--duration", "4s", "--backend", "tracepoint", "--dev", &dev];
        if asked {
            args.push("--bpf-stats");
        }
        let diag = start_diagnose(&args);
        assert_eq!(
            holds_stats(diag.id()),
            asked,
            "--bpf-stats {asked}: the stats descriptor"
        );
        lab.attach_xdp();
        lab.traffic(1);
        let out = diag.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("ppscope's own cost: "))
            .unwrap_or_else(|| panic!("no own-cost line: {text}"));
        if asked || sysctl_on {
            assert!(
                line.contains(" program runs, ") && !line.contains("cost: ?"),
                "{line}"
            );
        } else {
            assert!(
                line.starts_with("ppscope's own cost: ? (BPF run-time stats were not on for ppscope: --bpf-stats"),
                "{line}"
            );
        }
    }
    // doctor says which, and what they cost.
    let doctor = |args: &[&str]| -> String {
        let out = run(PPSCOPE, &[&["doctor", "--json"][..], args].concat());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["backends"]["BPF stats"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let unasked = doctor(&[]);
    if sysctl_on {
        assert!(
            unasked.starts_with("on (kernel.bpf_stats_enabled=1)"),
            "{unasked}"
        );
    } else {
        assert!(
            unasked.starts_with("off: ppscope's own cost is '?'"),
            "{unasked}"
        );
    }
    let asked = doctor(&["--bpf-stats"]);
    assert!(asked.starts_with("on (--bpf-stats)"), "{asked}");
}

#[test]
fn bad_duration_is_refused_before_anything_loads() {
    let out = Command::new(PPSCOPE)
        .args(["diagnose", "--duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("try 5s, 500ms, 2m"), "{err}");
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn lab_namespaces_are_removed() {
    let (tx, rx);
    {
        let lab = VethLab::new("c", 22);
        tx = lab.ns_tx.clone();
        rx = lab.ns_rx.clone();
        assert!(Path::new(&format!("/run/netns/{tx}")).exists());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && fs::metadata(format!("/run/netns/{rx}")).is_ok() {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(!Path::new(&format!("/run/netns/{tx}")).exists());
    assert!(!Path::new(&format!("/run/netns/{rx}")).exists());
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_recording_replays_into_the_same_report() {
    let mut lab = VethLab::new("d", 23);
    let dir = std::env::temp_dir().join(format!("ppscope-host-rec-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lab.ppscope");
    let mut rec = Command::new(PPSCOPE)
        // Stopped by Ctrl-C below, once the live report beside it has ended.
        .args(["record", "--duration", "60s", "--interval", "20ms", "-o"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("recording page_pools"), "{line}");
    // A live report beside it: both watch before the pool exists and end after the traffic
    // (the recording starts first and is stopped once the report has ended, however long
    // either took to load), so both saw the pool's whole life.
    let live = start_diagnose(&["--duration", "5s", "--json"]);
    lab.attach_xdp();
    lab.traffic(2);
    let live = finish_json(live);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let stopped = rec.wait().unwrap();
    assert!(stopped.success(), "record stopped by Ctrl-C: {stopped}");
    // One that asks for the addresses: the control, the pools do have them.
    let addressed = start_diagnose(&["--duration", "2s", "--json", "--show-addresses"]);
    lab.traffic(1);
    let addressed = finish_json(addressed);
    // Neither the report nor the file hands out a kernel address unless asked to.
    assert_no_kernel_address("diagnose --json", &live.to_string());
    assert_no_kernel_address(
        "the recording",
        &String::from_utf8_lossy(&fs::read(&file).unwrap()),
    );
    let addresses: Vec<&str> = addressed["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["address"].as_str())
        .collect();
    assert!(
        !addresses.is_empty() && addresses.iter().all(|a| a.starts_with("0xffff")),
        "--show-addresses: {addressed:#}"
    );
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();

    let out = run(
        PPSCOPE,
        &["diagnose", "--json", "--replay", file.to_str().unwrap()],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_no_kernel_address("the replay", &report.to_string());
    // Without the alloc and recycle hooks, said at the start, not found out later: this file
    // cannot feed `simulate`.
    let no_split = report["backends"]["alloc"]["backend"].is_null();
    assert_eq!(
        rest.lines()
            .next()
            .is_some_and(|l| l.contains("cannot feed simulate")),
        no_split,
        "{rest}"
    );
    // The lab's receiving device in one of a report's lists ("pools" or "devices").
    let of_rx = |r: &Value, list: &str| {
        r[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["ifname"] == lab.dev_rx.as_str())
            .unwrap_or_else(|| panic!("no {} in {list} of {r:#}", lab.dev_rx))
            .clone()
    };
    let (replayed, measured) = (of_rx(&report, "pools"), of_rx(&live, "pools"));
    assert_eq!(report["backends"]["page_hold"]["backend"], "tracepoint");
    assert!(
        report["duration_seconds"].as_f64().unwrap() > 4.0,
        "{report:#}"
    );
    // The replay says what the live report of the same window said, within 2%.
    let (rd, ld) = (of_rx(&report, "devices"), of_rx(&live, "devices"));
    // (A healthy pool may release no page in the window; the others must have moved.)
    for (what, r, l, may_be_0) in [
        (
            "pages allocated",
            &replayed["pages"]["allocated"],
            &measured["pages"]["allocated"],
            false,
        ),
        (
            "pages released",
            &replayed["pages"]["released"],
            &measured["pages"]["released"],
            true,
        ),
        (
            "NAPI polls",
            &rd["napi"]["polls"],
            &ld["napi"]["polls"],
            false,
        ),
        ("NAPI work", &rd["napi"]["work"], &ld["napi"]["work"], false),
    ] {
        let (r, l) = (r.as_u64().unwrap(), l.as_u64().unwrap());
        assert!(may_be_0 || l > 0, "live {what} is 0: {measured:#} {ld:#}");
        assert!(
            r.abs_diff(l) * 50 <= l,
            "{what}: replay {r} vs live {l} (more than 2% apart)"
        );
    }
    let errors = ppscope::testing::schema_errors("diagnose.schema.json", &report);
    assert!(
        errors.is_empty(),
        "the replay is off the schema: {errors:#?}"
    );

    // Cut the file inside its last frame (8 bytes of length and checksum and at least one of
    // payload), as a `record` killed while writing leaves it: the samples before the cut are
    // replayed, and the cut is said on standard error (a cut between two frames leaves a
    // shorter recording that reads whole: an idle pool's frames are a few bytes each).
    let bytes = fs::read(&file).unwrap();
    let cut = dir.join("cut.ppscope");
    fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let out = Command::new(PPSCOPE)
        .args(["diagnose", "--json", "--replay"])
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("is cut off") && err.contains("samples before it are replayed"),
        "{err}"
    );
    let shortened: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The same pool, over all but the last sample.
    of_rx(&shortened, "pools");
    let covered = |r: &Value| r["duration_seconds"].as_f64().unwrap();
    assert!(
        covered(&shortened) < covered(&report) && covered(&shortened) > 4.0,
        "cut {} s, whole {} s",
        covered(&shortened),
        covered(&report)
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_seed_scenario_is_advised_16384_and_many_sockets_not_to_grow() {
    let out = run(
        PPSCOPE,
        &["simulate", "--scenario", "gve-devmem-alltoall", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &v["results"][0]["advice"];
    assert_eq!(a["recommended_size"], 16384, "{a:#}");
    assert_eq!(a["pinned_anyway"], true, "{a:#}");
    let summary = v["results"][0]["summary"].as_str().unwrap();
    assert!(summary.contains("4096 → 16384"), "{summary}");

    let out = run(
        PPSCOPE,
        &["simulate", "--scenario", "many-sockets", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &v["results"][0]["advice"];
    assert!(
        a["recommended_size"].as_u64() <= a["current_size"].as_u64(),
        "thousands of sockets must not be told to grow: {a:#}"
    );

    let out = Command::new(PPSCOPE)
        .args(["simulate", "--scenario", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad argument");
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: gve-devmem-alltoall"));
}

/// A plain HTTP GET on loopback: (status, body); None when nothing answers (yet).
fn try_http_get(addr: &str, path: &str, accept: Option<&str>) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

fn http_get(addr: &str, path: &str, accept: Option<&str>) -> (u16, String) {
    try_http_get(addr, path, accept).unwrap_or_else(|| panic!("nothing answers on {addr}"))
}

fn our_programs_loaded() -> usize {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .filter(|p| {
            p.name_as_str()
                // The kernel keeps 15 characters of a program's name.
                .is_some_and(|n| {
                    ["tp_state_hold", "tp_state_releas", "tb_state_releas"].contains(&n)
                })
        })
        .count()
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_real_prometheus_scrapes_the_agent() {
    let mut lab = VethLab::new("e", 24);
    // Programs of the tests before, whose processes just ended, may still be on their way
    // out (the kernel frees a program after its last fd closes, RCU): counted as there
    // before, they made the count at the end look one short of it (a CI run).
    let settle = Instant::now() + Duration::from_secs(10);
    while our_programs_loaded() > 0 && Instant::now() < settle {
        thread::sleep(Duration::from_millis(100));
    }
    let before = our_programs_loaded();
    let mut agent = start_agent(&[]);
    let addr = agent.addr.clone();
    // Busy port: one sentence, non-zero, nothing loaded.
    let out = Command::new(PPSCOPE)
        .args(["agent", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Address already in use"));

    lab.attach_xdp();
    let label = format!("device=\"{}\"", lab.dev_rx);
    // Drops are exported per device and reason, under the device's name: datagrams to a
    // closed port on a device the agent has not seen drop before.
    lab.datagrams_to_a_closed_port(20);
    let drops = "ppscope_drops_total";
    let exported = metrics_until(&addr, Duration::from_secs(8), |m| {
        metric_sum(m, drops, &label) >= 20.0
    });
    assert!(
        metric_sum(&exported, drops, &label) >= 20.0,
        "20 datagrams dropped on {} not exported as {drops}{{{label}}}:\n{}",
        lab.dev_rx,
        exported
            .lines()
            .filter(|l| l.starts_with(drops))
            .collect::<Vec<_>>()
            .join("\n")
    );
    lab.traffic(1);

    // The agent's own answer first: a failure below then says which side lost the pool.
    let family = "ppscope_page_pool_pages_allocated_total";
    let exported = metrics_until(&addr, Duration::from_secs(20), |m| {
        metric_sum(m, family, &label) > 0.0
    });
    let lines: Vec<&str> = exported
        .lines()
        .filter(|l| l.starts_with(family) || l.starts_with("ppscope_page_pool_alloc_total"))
        .collect();
    assert!(
        metric_sum(&exported, family, &label) > 0.0,
        "the agent does not export {family}{{{label}}} > 0 after 1 s of traffic; it exports:\n{}\nits snapshot: {}",
        lines.join("\n"),
        http_get(&addr, "/api/v1/snapshot", None).1
    );

    let mut prom = Prometheus::scraping(&addr, "agent");
    // Summed: a device may have several pools (one per queue), each its own series.
    let series = format!("sum({family}{{{label}}})");
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut first = None;
    while Instant::now() < deadline {
        if let Some(v) = prom.value(&series).filter(|v| *v > 0.0) {
            first = Some(v);
            break;
        }
        thread::sleep(Duration::from_millis(500));
    }
    let Some(first) = first else {
        panic!(
            "Prometheus never saw {series} > 0, which the agent exports:\n{}\n{}",
            lines.join("\n"),
            prom.why_not()
        )
    };
    let query = |q: &str| prom.value(q);
    lab.traffic(1);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut later = first;
    while Instant::now() < deadline && later <= first {
        thread::sleep(Duration::from_millis(500));
        later = query(&series).unwrap_or(first);
    }
    assert!(later > first, "{series} did not grow: {first} → {later}");
    // One query each for "which pool's ring is overflowing" and "its slow-path p99".
    assert!(query("topk(1, rate(ppscope_page_pool_pages_released_total[1m]))").is_some());
    drop(prom);

    // The 0.0.4 exposition passes promtool; the OpenMetrics one ends with its EOF (below).
    let (status, body) = http_get(&addr, "/metrics", None);
    assert_eq!(status, 200);
    if let Err(refused) = common::promtool_check_metrics(&body) {
        panic!("promtool check metrics: {refused}");
    }
    assert!(
        body.contains("ppscope_map_capacity 4096"),
        "self-metrics: {body}"
    );
    assert!(body.contains("ppscope_hook_attached{hook=\"page_hold\",backend=\"tracepoint\"} 1"));
    // This kernel counts the runs it skips of tracepoint programs (6.7+, from its BTF): the
    // attached tracepoint hooks have the series, read from the kernel's per-program info.
    assert_eq!(
        metric_series(&body, "ppscope_skipped_runs_total", "hook=\"page_hold\""),
        1,
        "{}",
        body.lines()
            .filter(|l| l.contains("skipped_runs"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (_, om) = http_get(
        &addr,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    let (status, snap) = http_get(&addr, "/api/v1/snapshot", None);
    assert_eq!(status, 200);
    assert_no_kernel_address("/metrics", &body);
    assert_no_kernel_address("/api/v1/snapshot", &snap);
    let snap: Value = serde_json::from_str(&snap).unwrap();
    assert!(snap["pools"].is_array() && snap["backends"].is_object());
    assert_eq!(http_get(&addr, "/healthz", None).0, 200);

    // SIGTERM: exit 0, and none of its programs stay loaded.
    agent.signal(libc::SIGTERM);
    let status = agent.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // The kernel frees a program shortly after its last fd closes (RCU): give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while our_programs_loaded() > before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(our_programs_loaded(), before, "programs left behind");
}

/// The agent's `/metrics` once `done` says so, or the last answer after `within`.
fn metrics_until(addr: &str, within: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        let exported = http_get(addr, "/metrics", None).1;
        if done(&exported) || Instant::now() >= deadline {
            return exported;
        }
        thread::sleep(Duration::from_millis(300));
    }
}

/// Starts `ppscope agent` on a free loopback port, collecting every 300 ms, with `args`.
fn start_agent(args: &[&str]) -> AgentProc {
    AgentProc::start(None, &[&["--interval", "300ms"], args].concat())
}

/// A NAPI instance first seen after the agent started has its polls exported within seconds:
/// its new key has the devices' identities read again (`probes/kept_devices.rs`) instead of
/// waiting for the next whole read, every 60 collections (18 s at this interval), before its
/// polls can be given to a device.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_napi_instance_polling_after_the_agent_started_is_exported_within_seconds() {
    let mut lab = VethLab::new("k", 28);
    let agent = start_agent(&["--detail", "full"]);
    let addr = &agent.addr;
    // A few collections without it first.
    thread::sleep(Duration::from_secs(1));
    lab.attach_xdp();
    lab.traffic(1);
    let name = "ppscope_napi_polls_total";
    let label = format!("device=\"{}\"", lab.dev_rx);
    let exported = metrics_until(addr, Duration::from_secs(6), |m| {
        metric_sum(m, name, &label) > 0.0
    });
    assert!(
        metric_sum(&exported, name, &label) > 0.0,
        "no {name}{{{label}}} > 0 within 6 s of the traffic:\n{}",
        exported
            .lines()
            .filter(|l| l.starts_with(name))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn two_agents_side_by_side_count_the_same() {
    let mut lab = VethLab::new("f", 25);
    let (a, b) = (start_agent(&[]), start_agent(&[]));
    let (addr_a, addr_b) = (&a.addr, &b.addr);
    lab.attach_xdp();
    lab.traffic(1);
    thread::sleep(Duration::from_millis(1200));
    let label = format!("device=\"{}\"", lab.dev_rx);
    let name = "ppscope_page_pool_pages_allocated_total";
    let a = metric_sum(&http_get(addr_a, "/metrics", None).1, name, &label);
    let b = metric_sum(&http_get(addr_b, "/metrics", None).1, name, &label);
    assert!(a > 0.0, "agent A saw nothing");
    assert!((a - b).abs() <= 0.02 * a, "agents disagree: {a} vs {b}");
}

/// `ppscope top --once` on this kernel (tracepoints): the frame a person would see lists the
/// veth pool that carried traffic during the interval, with its figures; `--dev` keeps only it.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn top_once_shows_a_live_veth_pool_with_its_figures() {
    let mut lab = VethLab::new("g", 26);
    lab.attach_xdp();
    let mut top = Command::new(PPSCOPE)
        .args(["top", "--once", "--interval", "5s", "--size", "120x30"])
        .args(["--backend", "tracepoint", "--dev", &lab.dev_rx])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ppscope top");
    let mut line = String::new();
    BufReader::new(top.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("one frame of 5s from live"),
        "top said: {line:?}"
    );
    lab.traffic(2);
    let out = top.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "top --once failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frame = String::from_utf8(out.stdout).unwrap();
    assert_eq!(frame.lines().count(), 30, "one 120x30 frame:\n{frame}");
    assert_no_kernel_address("top --once", &frame);
    let row = frame
        .lines()
        .find(|l| l.contains(lab.dev_rx.as_str()) && l.contains('%'))
        .unwrap_or_else(|| panic!("no row for {} in:\n{frame}", lab.dev_rx));
    // Tracepoints alone see pages entering and leaving the pool, and its identity: veth's
    // pools have 256 entries.
    assert!(row.contains("256/256"), "the row has no pool size: {row}");
    // The detail pane (the only pool is selected) gives the measured rate of pages taken from
    // the allocator: a number, not '?', and a real one for 2 s of iperf3 in a 5 s frame.
    let rate = frame
        .lines()
        .find_map(|l| l.split("pages from allocator ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no 'pages from allocator' figure:\n{frame}"));
    let per_s = ppscope::testing::parse_rate(rate)
        .unwrap_or_else(|| panic!("not a rate: {rate:?}\n{frame}"));
    assert!(per_s >= 100.0, "pages from allocator {rate}:\n{frame}");
    assert!(
        frame.contains("tracepoint"),
        "footer names the backend:\n{frame}"
    );
    // top's default level: no per-page hook, and the frame says so.
    assert!(
        frame.contains("detail light"),
        "footer names the detail level:\n{frame}"
    );
    // Nothing splits allocations and light counts no packets, yet the pool has a verdict:
    // veth + XDP cycles thousands of pages a second through the allocator on a 256-entry
    // ring. The row shows it and the detail pane says how it was reached.
    assert!(row.contains("warn"), "no health verdict in the row: {row}");
    assert!(
        frame.contains("health warn (churn):"),
        "the detail pane says how the verdict was reached:\n{frame}"
    );

    // Not a terminal and no --once: one sentence, not a garbled screen.
    let out = Command::new(PPSCOPE)
        .args(["top", "--sim", "healthy"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
}

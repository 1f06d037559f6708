//! Host tests: the `ppscope` binary as a user runs it, on this machine's kernel, against a
//! real veth + XDP page_pool in network namespaces the test creates and removes.
//!
//! They need root (namespaces, BPF), so they are `#[ignore]`d for a plain `cargo test`;
//! `cargo xtask test` runs them. Traffic stays between the test's own namespaces
//! (198.18.0.0/15, the benchmark range).
use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

mod common;

use common::{run, VethLab, PPSCOPE};

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

fn host_has_kprobes() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn tracepoints_see_slow_path_pages_on_a_veth_xdp_pool() {
    let mut lab = VethLab::new("a", 20);
    let diag = start_diagnose(&["--duration", "6s", "--json", "--backend", "tracepoint"]);
    lab.attach_xdp();
    lab.traffic(2);
    let report = finish_json(diag);

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
    assert!(dev["drops_total"].is_u64(), "{dev:#}");
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
    // Tracepoints alone cannot split allocations: unknown, never a made-up 0.
    assert!(pool["alloc"]["cache"].is_null(), "{pool:#}");
    assert!(pool["ring_hit_rate"].is_null(), "{pool:#}");
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
    let hooks = v["hooks"].as_array().unwrap();
    let hook = |name: &str| hooks.iter().find(|h| h["hook"] == name).unwrap().clone();
    assert_eq!(hook("page_hold")["backend"], "tracepoint");
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
        .args(["record", "--duration", "5s", "--interval", "20ms", "-o"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(rec.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("recording page_pools"), "{line}");
    lab.attach_xdp();
    lab.traffic(2);
    assert!(rec.wait().unwrap().success());

    let out = run(
        PPSCOPE,
        &["diagnose", "--json", "--replay", file.to_str().unwrap()],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pool = report["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == lab.dev_rx.as_str())
        .unwrap_or_else(|| panic!("no {} in the replay: {report:#}", lab.dev_rx))
        .clone();
    assert!(pool["pages"]["allocated"].as_u64() > Some(0), "{pool:#}");
    assert_eq!(report["backends"]["page_hold"]["backend"], "tracepoint");
    assert!(
        report["duration_seconds"].as_f64().unwrap() > 4.0,
        "{report:#}"
    );

    // Cut the file: one sentence naming the damage, exit 1, nothing else printed.
    let bytes = fs::read(&file).unwrap();
    let cut = dir.join("cut.ppscope");
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = Command::new(PPSCOPE)
        .args(["diagnose", "--replay"])
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("truncated"), "{err}");
    assert!(out.stdout.is_empty());
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
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there are: gve-devmem-alltoall"));
}

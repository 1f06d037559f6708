//! VM lab tests: ppscope on a current Debian kernel (kprobes, BTF, page_pool stats on), booted
//! under QEMU by `cargo xtask vm`. Numbers are checked against the kernel's own counters.
//!
//! `#[ignore]`d for a plain `cargo test` (they need root, QEMU and a kernel download);
//! `cargo xtask test` runs them.
use std::collections::HashMap;

use serde_json::Value;
use xtask::{
    vm::{run_script, VmRun},
    workspace_root,
};

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

fn lab_run(backend: &str) -> (Value, HashMap<String, u64>, String) {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/diagnose-lab.sh"));
    run.args = vec![backend.into(), "4".into()];
    let out = run_script(&run).expect("the VM lab runs");
    assert_eq!(out.status, 0, "lab script failed:\n{}", out.output);
    let diag: Value = serde_json::from_str(section(&out.output, "diag"))
        .unwrap_or_else(|e| panic!("diagnose JSON: {e}\n{}", out.output));
    let stats = ethtool_stats(section(&out.output, "ethtool-veth1"));
    (diag, stats, out.output)
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

#[test]
#[ignore = "boots the VM lab: run through `cargo xtask test`"]
fn vm_kprobe_counts_match_the_kernel_page_pool_stats() {
    let (diag, k, output) = lab_run("kprobe");
    for hook in ["alloc", "refill", "slow_path", "recycle"] {
        assert_eq!(
            diag["backends"][hook]["backend"], "kprobe",
            "{hook}: {:#}",
            diag["backends"]
        );
    }

    // virtio-net: the receiving NIC's pool is reported, by name, with allocations.
    let virtio = pools_named(&diag, "vnet1");
    assert!(!virtio.is_empty(), "no vnet1 pool:\n{output}");
    let allocs = sum(&virtio, &["alloc", "total"]);
    assert!(allocs > 1000, "vnet1 allocations {allocs}:\n{output}");
    let split = sum(&virtio, &["alloc", "cache"])
        + sum(&virtio, &["alloc", "ring"])
        + sum(&virtio, &["alloc", "slow"]);
    assert_eq!(split, allocs, "cache + ring + slow must add up");
    assert!(
        virtio.iter().all(|p| p["pool_size"].as_u64() == Some(256)),
        "QEMU's default vring is 256"
    );

    // veth + XDP: ppscope saw the pool's whole life; the kernel's counters cover the same.
    let veth = pools_named(&diag, "veth1");
    assert!(!veth.is_empty(), "no veth1 pool:\n{output}");
    let kernel_allocs = k["rx_pp_alloc_fast"]
        + k["rx_pp_alloc_refill"]
        + k["rx_pp_alloc_slow"]
        + k["rx_pp_alloc_slow_ho"];
    let kernel_recycles = k["rx_pp_recycle_cached"]
        + k["rx_pp_recycle_ring"]
        + k["rx_pp_recycle_ring_full"]
        + k["rx_pp_recycle_released_ref"];
    assert!(
        kernel_allocs > 1000,
        "too little veth traffic to compare: {k:?}"
    );
    eprintln!("veth1 kernel stats: {k:?}");
    eprintln!("veth1 ppscope: {:#}", serde_json::to_string(&veth).unwrap());
    assert_close(
        "alloc total",
        sum(&veth, &["alloc", "total"]),
        kernel_allocs,
        kernel_allocs,
    );
    assert_close(
        "alloc cache",
        sum(&veth, &["alloc", "cache"]),
        k["rx_pp_alloc_fast"],
        kernel_allocs,
    );
    assert_close(
        "alloc ring",
        sum(&veth, &["alloc", "ring"]),
        k["rx_pp_alloc_refill"],
        kernel_allocs,
    );
    assert_close(
        "alloc slow",
        sum(&veth, &["alloc", "slow"]),
        k["rx_pp_alloc_slow"] + k["rx_pp_alloc_slow_ho"],
        kernel_allocs,
    );
    assert_close(
        "alloc ring_empty",
        sum(&veth, &["alloc", "ring_empty"]),
        k["rx_pp_alloc_empty"],
        kernel_allocs,
    );
    assert_close(
        "recycle total",
        sum(&veth, &["recycle", "total"]),
        kernel_recycles,
        kernel_recycles,
    );
    assert_close(
        "recycle cached",
        sum(&veth, &["recycle", "cached"]),
        k["rx_pp_recycle_cached"],
        kernel_recycles,
    );
    assert_close(
        "recycle ring",
        sum(&veth, &["recycle", "ring"]),
        k["rx_pp_recycle_ring"],
        kernel_recycles,
    );
    assert_close(
        "recycle ring_full",
        sum(&veth, &["recycle", "ring_full"]),
        k["rx_pp_recycle_ring_full"] + k["rx_pp_recycle_released_ref"],
        kernel_recycles,
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

//! Reliability in the VM lab (a current Debian kernel with fentry and kprobes): kernel-side
//! changes while the agent is attached, and a soak of lab traffic with the agent scraped
//! every second, checked against the kernel's own page_pool counters.
//!
//! `#[ignore]`d for a plain `cargo test` (root, QEMU, a kernel download); `cargo xtask test`
//! runs the short versions, `cargo xtask soak` the long ones (`PPSCOPE_SOAK_SECONDS`,
//! `PPSCOPE_CHURN_CYCLES`). gve rmmod/insmod is `vm_gve_hooks_follow_the_module_across_rmmod_and_insmod`
//! in `vm.rs`.
use std::collections::HashMap;

use xtask::{
    soak::{self, SoakCheck},
    vm::{run_script, VmRun},
    workspace_root,
};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The text between `@@name` and the next `@@` line, trimmed.
fn section<'a>(output: &'a str, name: &str) -> &'a str {
    soak::section(output, name).unwrap_or_else(|| panic!("no @@{name} in:\n{output}"))
}

fn number(output: &str, name: &str) -> f64 {
    section(output, name)
        .split_whitespace()
        .last()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("@@{name} is not a number in:\n{output}"))
}

/// `name value` lines.
fn pairs(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().rsplit_once(' ')?;
            Some((k.trim().to_string(), v.parse().ok()?))
        })
        .collect()
}

#[test]
#[ignore = "boots a VM (cargo xtask test runs it)"]
fn vm_reliability_kernel_changes_while_the_agent_is_attached() {
    let cycles = env_u64("PPSCOPE_CHURN_CYCLES", 1000) / 5;
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/churn-kernel.sh"));
    run.args = vec!["auto".into(), cycles.to_string()];
    run.timeout = std::time::Duration::from_secs(900);
    let out = run_script(&run).expect("the VM lab runs");
    let o = &out.output;
    assert_eq!(out.status, 0, "lab script failed:\n{o}");
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };

    // 1. Churn: the agent kept collecting, its map did not fill, its memory did not run.
    let churned = pairs(section(o, "self-churned"));
    let (entries, capacity) = (
        churned["ppscope_map_entries"],
        churned["ppscope_map_capacity"],
    );
    check(
        churned["ppscope_collection_errors_total"] == 0.0,
        format!("collection errors during churn: {churned:?}"),
    );
    check(
        entries < capacity,
        format!("map filled during churn: {entries}/{capacity}"),
    );
    let (rss0, rss1) = (number(o, "rss-before"), number(o, "rss-churned"));
    check(
        rss1 < rss0 + 16.0 * 1024.0,
        format!("RSS {rss0} → {rss1} KiB over {cycles} cycles"),
    );
    check(
        number(o, "veth1-pages") > 0.0,
        "the churned veth1 pools never held pages".into(),
    );

    // 2. vnet1 down and up: its pool keeps counting.
    let (before, after) = (number(o, "vnet1-before"), number(o, "vnet1-after"));
    check(
        after > before,
        format!("vnet1 stopped counting after down/up: {before} → {after}"),
    );

    // 3. Renamed: the traffic after the rename is shown under the new name, nothing under
    //    the old one once the grace period passed.
    check(
        number(o, "renamed-new") >= 1.0 && number(o, "renamed-pages-new") > 0.0,
        format!(
            "no pool under the new name vren1 ({} series, {} allocations)",
            number(o, "renamed-new"),
            number(o, "renamed-pages-new")
        ),
    );
    check(
        number(o, "renamed-old") == 0.0,
        format!(
            "{} pool(s) still under the old name vnet1",
            number(o, "renamed-old")
        ),
    );

    // 4. netns deleted with its pools: they leave once the kernel has destroyed them and stay
    //    gone, and one still listed past its grace is one the agent knows is being destroyed
    //    (its teardown figures show), not a live pool under the old name.
    check(
        number(o, "ns-before") >= 1.0,
        "veth1's pools never showed before the netns went".into(),
    );
    let grace = number(o, "grace");
    match section(o, "ns-gone-after").trim().parse::<f64>() {
        Err(_) => check(
            false,
            format!(
                "veth1's pools still listed a minute after the netns went:\n{}",
                section(o, "ns-listed")
            ),
        ),
        Ok(secs) if secs > grace => check(
            section(o, "ns-listed").contains("ppscope_page_pool_teardown_attempts_total{"),
            format!(
                "veth1's pools listed {secs} s after the netns went (grace {grace} s) with no \
                 teardown figures:\n{}",
                section(o, "ns-listed")
            ),
        ),
        Ok(_) => {}
    }
    check(
        number(o, "ns-later") == 0.0,
        format!("veth1's pools back {} later", number(o, "ns-later")),
    );

    // Throughout: still healthy, no error storm, a clean exit.
    check(
        section(o, "healthz").trim() == "ok",
        format!("healthz: {}", section(o, "healthz")),
    );
    let end = pairs(section(o, "self-end"));
    check(
        end["ppscope_collection_errors_total"] == 0.0,
        format!("collection errors: {end:?}"),
    );
    let log = section(o, "agent-err");
    check(
        log.lines().count() <= 6,
        format!("agent log is a storm:\n{log}"),
    );
    check(
        section(o, "agent-exit").trim() == "0",
        "agent did not exit 0 on SIGTERM".into(),
    );
    eprintln!(
        "reliability: VM kernel changes: {} (kernel {}); RSS {rss0} → {rss1} → {} KiB; map {entries}/{capacity}; netns pools gone after {} s",
        section(o, "churn").trim(),
        out.kernel_version,
        number(o, "rss-end"),
        section(o, "ns-gone-after").trim()
    );
    assert!(failures.is_empty(), "{}\n\n{o}", failures.join("\n"));
}

#[test]
#[ignore = "boots a VM (cargo xtask test runs it)"]
fn vm_reliability_soak_agrees_with_the_kernel_and_stays_flat() {
    let secs = env_u64("PPSCOPE_SOAK_SECONDS", 90);
    let step = env_u64("PPSCOPE_SOAK_STEP", 30);
    let report = soak::vm_soak(secs, step, "auto").expect("the VM soak runs");
    eprintln!("{}", report.summary());
    let problems = report.problems();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        report.checks.len() as u64 >= secs / step,
        "too few checks: {:?}",
        report
            .checks
            .iter()
            .map(|c: &SoakCheck| c.elapsed)
            .collect::<Vec<_>>()
    );
}

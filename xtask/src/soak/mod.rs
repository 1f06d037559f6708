//! `cargo xtask soak`: the long versions of the reliability suite (RELIABILITY.md).
//!
//! The same tests CI runs short, run long through their knobs: each fuzz target for minutes
//! (`PPSCOPE_FUZZ_SECONDS`), thousands more pool churn cycles and fault rounds on the host
//! (`PPSCOPE_CHURN_CYCLES`, `PPSCOPE_FAULT_ROUNDS`), the VM kernel-change run, and the VM
//! soak: lab traffic for `--minutes` with the agent scraped every second, its veth counters
//! checked against the kernel's own at every step. A summary in Markdown goes to
//! `target/reliability/soak-<unix time>.md` for RELIABILITY.md.
use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::{
    cargo,
    vm::{run_script, VmRun},
    workspace_root,
};

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Minutes of VM lab traffic with the agent scraped every second.
    #[arg(long, default_value_t = 30)]
    pub minutes: u64,
    /// Seconds between checks against the kernel's counters during the VM soak.
    #[arg(long, default_value_t = 60)]
    pub step: u64,
    /// Minutes of fuzzing per target (4 targets).
    #[arg(long, default_value_t = 5)]
    pub fuzz_minutes: u64,
    /// Pool create/destroy cycles on the host (the VM runs a fifth of them).
    #[arg(long, default_value_t = 20_000)]
    pub churn_cycles: u64,
    /// Kill/restart rounds per signal.
    #[arg(long, default_value_t = 25)]
    pub fault_rounds: u64,
    /// Probe backend in the VM (auto, fentry, kprobe).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    #[arg(long)]
    pub skip_fuzz: bool,
    #[arg(long)]
    pub skip_host: bool,
    #[arg(long)]
    pub skip_vm: bool,
}

/// The text between `@@name` and the next `@@` line.
pub fn section<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    let start = output.find(&format!("@@{name}\n"))? + name.len() + 3;
    let end = output[start..]
        .find("\n@@")
        .map_or(output.len(), |i| start + i + 1);
    Some(&output[start..end])
}

/// One step of the VM soak: the agent's veth1 counters next to the kernel's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SoakCheck {
    pub elapsed: u64,
    pub rss_kib: u64,
    pub ours_alloc: u64,
    pub kernel_alloc: u64,
    pub ours_recycle: u64,
    pub kernel_recycle: u64,
    pub collection_errors: u64,
    pub collections: u64,
    pub map_entries: u64,
    pub map_capacity: u64,
}

impl SoakCheck {
    /// Parses one `@@check N` section of soak-lab.sh.
    pub fn parse(text: &str) -> Self {
        let mut c = SoakCheck::default();
        let mut kernel: std::collections::HashMap<String, u64> = Default::default();
        for line in text.lines() {
            let line = line.trim();
            let Some((key, value)) = line.rsplit_once([' ', ':']) else {
                continue;
            };
            let Ok(v) = value.trim().parse::<f64>() else {
                continue;
            };
            let v = v as u64;
            let name = key
                .split('{')
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches(':');
            match name {
                "elapsed" => c.elapsed = v,
                "rss_kib" => c.rss_kib = v,
                "ppscope_page_pool_alloc_total" => c.ours_alloc += v,
                "ppscope_page_pool_recycle_total" => c.ours_recycle += v,
                "ppscope_collection_errors_total" => c.collection_errors = v,
                "ppscope_collections_total" => c.collections = v,
                "ppscope_map_entries" => c.map_entries = v,
                "ppscope_map_capacity" => c.map_capacity = v,
                k if k.starts_with("rx_pp_") => {
                    kernel.insert(k.to_string(), v);
                }
                _ => {}
            }
        }
        let k = |n: &str| kernel.get(n).copied().unwrap_or(0);
        // The same mapping as the VM lab's kernel cross-check (xtask/tests/vm.rs).
        c.kernel_alloc = k("rx_pp_alloc_fast")
            + k("rx_pp_alloc_refill")
            + k("rx_pp_alloc_slow")
            + k("rx_pp_alloc_slow_ho");
        c.kernel_recycle = k("rx_pp_recycle_cached")
            + k("rx_pp_recycle_ring")
            + k("rx_pp_recycle_ring_full")
            + k("rx_pp_recycle_released_ref");
        c
    }

    /// Relative difference of ours against the kernel's, allocations and recycles.
    pub fn drift(&self) -> (f64, f64) {
        let rel = |a: u64, b: u64| a.abs_diff(b) as f64 / b.max(1) as f64;
        (
            rel(self.ours_alloc, self.kernel_alloc),
            rel(self.ours_recycle, self.kernel_recycle),
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    pub seconds: u64,
    pub kernel: String,
    pub checks: Vec<SoakCheck>,
    pub scrapes_ok: u64,
    pub scrapes_failed: u64,
    pub agent_exit: String,
    pub agent_log: String,
    pub wall: Duration,
}

/// Largest drift against the kernel's counters accepted at any step (the VM lab's bound).
pub const MAX_DRIFT: f64 = 0.02;
/// RSS growth accepted from the first check to the last.
pub const MAX_RSS_GROWTH_KIB: u64 = 4096;

impl SoakReport {
    pub fn parse(output: &str, seconds: u64, kernel: String, wall: Duration) -> Self {
        let checks = (0..)
            .map_while(|i| section(output, &format!("check {i}")))
            .map(SoakCheck::parse)
            .collect();
        let scrapes = section(output, "scrapes").unwrap_or("");
        let count = |what: &str| {
            scrapes
                .lines()
                .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
                .unwrap_or(0)
        };
        SoakReport {
            seconds,
            kernel,
            checks,
            scrapes_ok: count("ok "),
            scrapes_failed: count("fail "),
            agent_exit: section(output, "agent-exit").unwrap_or("?").trim().into(),
            agent_log: section(output, "agent-err").unwrap_or("").into(),
            wall,
        }
    }

    /// What went wrong, one sentence each; empty when nothing did.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.checks.is_empty() {
            p.push("no check ran".into());
        }
        for c in &self.checks {
            let (a, r) = c.drift();
            if c.kernel_alloc < 1000 {
                p.push(format!(
                    "t={}s: too little traffic to compare ({c:?})",
                    c.elapsed
                ));
            }
            if a > MAX_DRIFT || r > MAX_DRIFT {
                p.push(format!(
                    "t={}s: drift against the kernel: allocations {:.2}% ({} vs {}), recycles {:.2}% ({} vs {})",
                    c.elapsed,
                    a * 100.0,
                    c.ours_alloc,
                    c.kernel_alloc,
                    r * 100.0,
                    c.ours_recycle,
                    c.kernel_recycle
                ));
            }
            if c.collection_errors > 0 {
                p.push(format!(
                    "t={}s: {} collection errors",
                    c.elapsed, c.collection_errors
                ));
            }
            if c.map_capacity > 0 && c.map_entries >= c.map_capacity {
                p.push(format!("t={}s: the pool map is full", c.elapsed));
            }
        }
        if let (Some(first), Some(last)) = (self.checks.first(), self.checks.last()) {
            if last.rss_kib > first.rss_kib + MAX_RSS_GROWTH_KIB {
                p.push(format!(
                    "RSS grew {} → {} KiB over the soak",
                    first.rss_kib, last.rss_kib
                ));
            }
        }
        if self.scrapes_failed > 0 {
            p.push(format!("{} scrapes failed", self.scrapes_failed));
        }
        // One scrape a second for the whole soak (TCG makes the loop a little slower).
        if self.scrapes_ok < self.seconds / 2 {
            p.push(format!(
                "only {} scrapes in {} s",
                self.scrapes_ok, self.seconds
            ));
        }
        if self.agent_exit != "0" {
            p.push(format!("the agent exited {} on SIGTERM", self.agent_exit));
        }
        let log_lines = self.agent_log.lines().count();
        if log_lines > 4 {
            p.push(format!(
                "agent log has {log_lines} lines:\n{}",
                self.agent_log
            ));
        }
        p
    }

    /// Markdown: one row per check.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "VM soak: {} s of lab traffic (wall {:.0?}), kernel {}, agent scraped every second: {} scrapes ok, {} failed; agent exit {}\n\n",
            self.seconds, self.wall, self.kernel, self.scrapes_ok, self.scrapes_failed, self.agent_exit
        );
        s += "| t (s) | RSS (KiB) | allocs ppscope | allocs kernel | drift | recycles ppscope | recycles kernel | drift | collections | errors | map |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &self.checks {
            let (a, r) = c.drift();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.3}% | {} | {} | {:.3}% | {} | {} | {}/{} |",
                c.elapsed,
                c.rss_kib,
                c.ours_alloc,
                c.kernel_alloc,
                a * 100.0,
                c.ours_recycle,
                c.kernel_recycle,
                r * 100.0,
                c.collections,
                c.collection_errors,
                c.map_entries,
                c.map_capacity
            );
        }
        s
    }
}

/// Boots the lab and soaks for `seconds`, checking every `step` seconds.
pub fn vm_soak(seconds: u64, step: u64, backend: &str) -> Result<SoakReport> {
    let mut run = VmRun::new(workspace_root().join("xtask/vm-tests/soak-lab.sh"));
    run.args = vec![seconds.to_string(), step.to_string(), backend.to_string()];
    // TCG: boot, set-up and the soak itself, with room to spare.
    run.timeout = Duration::from_secs(seconds * 2 + 900);
    let started = Instant::now();
    let out = run_script(&run).context("the VM soak")?;
    anyhow::ensure!(
        out.status == 0,
        "soak-lab.sh failed ({}):\n{}",
        out.status,
        out.output
    );
    Ok(SoakReport::parse(
        &out.output,
        seconds,
        out.kernel_version,
        started.elapsed(),
    ))
}

/// Runs `cargo test ARGS -- --ignored --nocapture --test-threads=1 FILTER` with `envs`.
fn cargo_test(what: &str, args: &[&str], filter: &[&str], envs: &[(&str, String)]) -> bool {
    println!("\n==> soak: {what}");
    let mut cmd = cargo();
    cmd.current_dir(workspace_root())
        .arg("test")
        .args(args)
        .args(["--", "--ignored", "--nocapture", "--test-threads=1"])
        .args(filter);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
    println!(
        "==> soak: {what}: {} in {:.0?}",
        if ok { "passed" } else { "FAILED" },
        started.elapsed()
    );
    ok
}

pub fn run(args: &SoakArgs) -> Result<i32> {
    let started = Instant::now();
    let mut md = String::from("# Soak run\n\n");
    let mut failed = Vec::new();
    let mut step = |name: &str, ok: bool, md: &mut String| {
        let _ = writeln!(md, "- {name}: {}", if ok { "passed" } else { "FAILED" });
        if !ok {
            failed.push(name.to_string());
        }
    };
    if !args.skip_fuzz {
        let secs = args.fuzz_minutes * 60;
        let ok = cargo_test(
            "fuzzing",
            &["--test", "reliability_fuzz"],
            &["fuzz_each_target_for_a_fixed_time"],
            &[("PPSCOPE_FUZZ_SECONDS", secs.to_string())],
        );
        step(&format!("fuzz, {secs} s per target"), ok, &mut md);
    }
    if !args.skip_host {
        let ok = cargo_test(
            "host churn, faults, privilege, endpoint",
            &["--test", "reliability", "--test", "reliability_http"],
            &[],
            &[
                ("PPSCOPE_CHURN_CYCLES", args.churn_cycles.to_string()),
                ("PPSCOPE_FAULT_ROUNDS", args.fault_rounds.to_string()),
            ],
        );
        step(
            &format!(
                "host: {} churn cycles, {} fault rounds per signal",
                args.churn_cycles, args.fault_rounds
            ),
            ok,
            &mut md,
        );
    }
    if !args.skip_vm {
        let ok = cargo_test(
            "VM kernel changes",
            &["-p", "xtask", "--test", "vm_reliability"],
            &["vm_reliability_kernel_changes"],
            &[("PPSCOPE_CHURN_CYCLES", args.churn_cycles.to_string())],
        );
        step(
            &format!("VM kernel changes, {} churn cycles", args.churn_cycles / 5),
            ok,
            &mut md,
        );
        println!("\n==> soak: VM soak, {} min", args.minutes);
        match vm_soak(args.minutes * 60, args.step, &args.backend) {
            Ok(report) => {
                let problems = report.problems();
                println!("{}", report.summary());
                md += "\n";
                md += &report.summary();
                for p in &problems {
                    println!("soak problem: {p}");
                    let _ = writeln!(md, "\n- problem: {p}");
                }
                step(
                    &format!("VM soak, {} min", args.minutes),
                    problems.is_empty(),
                    &mut md,
                );
            }
            Err(e) => {
                println!("soak: {e:#}");
                step(&format!("VM soak ({e:#})"), false, &mut md);
            }
        }
    }
    let dir = workspace_root().join("target/reliability");
    std::fs::create_dir_all(&dir)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = dir.join(format!("soak-{now}.md"));
    let _ = writeln!(md, "\nWall time: {:.0?}", started.elapsed());
    std::fs::write(&path, &md)?;
    println!("\nsoak: report in {}", path.display());
    if failed.is_empty() {
        println!("soak: everything passed in {:.0?}", started.elapsed());
        Ok(0)
    } else {
        println!("soak: FAILED: {}", failed.join("; "));
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "noise\n@@check 0\nelapsed 30\nrss_kib 20000\n\
ppscope_page_pool_alloc_total{device=\"veth1\",queue=\"0\",pool=\"7\",kind=\"cache\"} 900\n\
ppscope_page_pool_alloc_total{device=\"veth1\",queue=\"0\",pool=\"7\",kind=\"ring\"} 90\n\
ppscope_page_pool_alloc_total{device=\"veth1\",queue=\"0\",pool=\"7\",kind=\"slow\"} 10\n\
ppscope_page_pool_recycle_total{device=\"veth1\",queue=\"0\",pool=\"7\",kind=\"cached\"} 800\n\
ppscope_collection_errors_total 0\nppscope_collections_total 31\nppscope_map_entries 3\nppscope_map_capacity 4096\n\
     rx_pp_alloc_fast: 900\n     rx_pp_alloc_slow: 10\n     rx_pp_alloc_slow_ho: 0\n     rx_pp_alloc_refill: 95\n\
     rx_pp_recycle_cached: 800\n     rx_pp_recycle_ring: 0\n\
@@check 1\nelapsed 60\nrss_kib 30000\nppscope_collection_errors_total 2\n\
@@scrapes\nok 58\nfail 1\n@@agent-exit\n0\n@@agent-err\nppscope: agent serving\n@@end\n";

    #[test]
    fn parses_checks_and_finds_every_problem() {
        let r = SoakReport::parse(OUT, 60, "7.2".into(), Duration::from_secs(1));
        assert_eq!(r.checks.len(), 2);
        let c = &r.checks[0];
        assert_eq!((c.ours_alloc, c.kernel_alloc), (1000, 1005));
        assert_eq!((c.ours_recycle, c.kernel_recycle), (800, 800));
        assert_eq!(
            (c.collections, c.map_entries, c.map_capacity),
            (31, 3, 4096)
        );
        assert!(c.drift().0 < 0.01);
        assert_eq!((r.scrapes_ok, r.scrapes_failed), (58, 1));
        let p = r.problems().join("\n");
        assert!(p.contains("t=60s: 2 collection errors"), "{p}");
        assert!(p.contains("RSS grew 20000 → 30000"), "{p}");
        assert!(p.contains("1 scrapes failed"), "{p}");
        assert!(p.contains("t=60s: too little traffic"), "{p}");
        assert!(!p.contains("t=30s"), "{p}");
        assert!(r.summary().contains("| 30 | 20000 | 1000 | 1005 |"));
    }
}

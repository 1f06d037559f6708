//! Benchmarks in the VM lab (`xtask/vm-tests/bench-vm.sh`): fentry and kprobe probe cost,
//! workload slowdown, start-up with kprobes, and the agent on pools it sees move. The guest's CPUs are emulated (TCG): the
//! figures compare configurations within one run; they say nothing of real hardware speed.
use anyhow::Result;
use std::time::Duration;

use super::report::{AgentVmWindow, StartupRow, WorkloadRow, VM_NOTE};
use super::{host, BenchArgs, Results, Spread, Tools, FLOOR_COPIES};
use crate::vm::{run_script, which, with_libs, Ppscope, VmRun};

pub fn run(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    let mut phases = Vec::new();
    if args.wants("probe-cost") {
        phases.push("floor");
    }
    if args.wants("workload") {
        phases.push("workload");
    }
    if args.wants("startup") {
        phases.push("startup");
    }
    if args.wants("agent-vm") {
        phases.push("agent");
    }
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 3 });
    let floor_rounds = if args.quick { rounds } else { 2 * rounds };
    let secs = if args.quick { 2 } else { 4 };
    let mut configs = vec!["none", "fentry", "kprobe", "light"];
    let mut run = VmRun::new(crate::workspace_root().join("xtask/vm-tests/bench-vm.sh"));
    run.ppscope = Ppscope::Path(tools.ppscope.clone());
    run.extra
        .push((tools.bench_probe.clone(), "/lab/bench-probe".into()));
    run.extra.push((tools.bursty.clone(), "/lab/bursty".into()));
    run.extra
        .push((tools.object.clone(), "/lab/ppscope.o".into()));
    // The whole bench took 31 min, most of it here, once the probe cost's windows ran
    // ppscope in copies (2026-12-06): room for a slower boot.
    // The agent phase adds about 12 min: 1,000 veth pairs made and torn down under TCG,
    // seven windows of about 40 s, and before each still window the wait (up to 5 min) for
    // the agent's advice window to empty.
    run.timeout = Duration::from_secs(if args.quick { 900 } else { 3300 });
    // bpftrace brings ~200 MB of LLVM and clang: the smoke run leaves the alternatives out.
    if !args.quick {
        match which("bpftrace") {
            Some(bt) => {
                run.extra.extend(with_libs(&bt, "/usr/sbin/bpftrace")?);
                configs.push("bpftrace");
            }
            None => res.workload_notes.push(
                "bpftrace is not installed on the host (`cargo xtask setup` installs it): no bpftrace rows.".into(),
            ),
        }
        match which("funclatency") {
            Some(fl) => {
                run.extra.extend(with_libs(&fl, "/usr/sbin/funclatency")?);
                configs.push("funclatency");
            }
            None => res.workload_notes.push(
                "libbpf-tools' funclatency is not installed on the host: no funclatency rows."
                    .into(),
            ),
        }
        run.memory = "3G".into();
    }
    run.args = vec![
        rounds.to_string(),
        secs.to_string(),
        phases.join(","),
        configs.join(","),
        // Start-ups per tool: in two guest runs of one binary a single fentry start took
        // anywhere from 1.8 to 2.9 s (STARTUP_WHY in report.rs), so a median of three moved
        // by more than most changes to the start-up do.
        (if args.quick { 1 } else { 5 }).to_string(),
        // Probe-cost windows: twice the rounds. One window's ratio moved by about ±0.25 from
        // the next under TCG (more on the kprobe pair), within a boot as between boots
        // (2026-12-05: three boots of two windows each), where the targets are decided by a
        // few hundredths; a window of the three backends takes about 75 s. The smoke run
        // keeps the rounds' count.
        floor_rounds.to_string(),
        // ppscope's side in as many loads as the floor's (see the script).
        FLOOR_COPIES.to_string(),
        // The agent phase: the 1,000 pools (20 in the smoke run), each window 30 s
        // (5 s).
        (if args.quick { 20 } else { 1000 }).to_string(),
        (if args.quick { 5 } else { 30 }).to_string(),
    ];
    eprintln!(
        "bench: VM lab ({}), {rounds} round(s) of {secs} s ({} of probe cost), configs {}",
        phases.join(", "),
        floor_rounds,
        configs.join(", ")
    );
    let out = run_script(&run)?;
    res.vm_kernel = Some(out.kernel_version.clone());
    parse(&out.output, &configs, res);
    if out.status != 0 {
        res.workload_notes
            .push(format!("The VM script exited with status {}.", out.status));
    }
    Ok(())
}

/// The bodies of every `floor-begin BACKEND` … `floor-end BACKEND` window, in order.
fn floor_windows<'a>(output: &'a str, backend: &str) -> Vec<&'a str> {
    let (begin, end) = (
        format!("floor-begin {backend}\n"),
        format!("floor-end {backend}"),
    );
    let mut windows = Vec::new();
    let mut rest = output;
    while let Some(i) = rest.find(&begin) {
        rest = &rest[i + begin.len()..];
        let j = rest.find(&end).unwrap_or(rest.len());
        windows.push(&rest[..j]);
        rest = &rest[j..];
    }
    windows
}

/// Reads the script's lines into the results.
pub fn parse(output: &str, configs: &[&str], res: &mut Results) {
    // Probe cost: the lines between floor-begin and floor-end of each backend, one window per
    // round of the floor phase. --detail light: all of ppscope's programs per page against the
    // empty fentry programs on the per-page functions (allocation and recycle), over the same
    // packets.
    for backend in ["fentry", "kprobe", "light"] {
        let windows = floor_windows(output, backend);
        if windows.is_empty() {
            continue;
        }
        let mut missing: Vec<&str> = windows
            .iter()
            .flat_map(|w| w.lines().filter(|l| l.starts_with("floor-missing")))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for l in missing {
            res.probe_cost_notes.push(format!("VM, {backend}: {l}"));
        }
        let windows: Vec<String> = windows.into_iter().map(str::to_string).collect();
        if backend == "light" {
            host::light_cost_row("VM (TCG)", &windows, res);
        } else {
            host::cost_rows("VM (TCG)", backend, &windows, res);
        }
    }
    // (workload, config, round, Mbit/s, CPU %)
    let mut samples: Vec<(String, String, String, f64, f64)> = Vec::new();
    for l in output.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["result", w, c, round, mbps, cpu] => samples.push((
                w.to_string(),
                c.to_string(),
                round.to_string(),
                mbps.parse().unwrap_or(f64::NAN),
                cpu.parse().unwrap_or(f64::NAN),
            )),
            ["tool-error", what, rest @ ..] => {
                let note = format!("`{what}` failed in the guest: {}", rest.join(" "));
                if what.starts_with("startup") {
                    res.startup_notes.push(note);
                } else if what.starts_with("floor") {
                    res.probe_cost_notes.push(note);
                } else if *what == "agent-vm" {
                    res.agent_notes.push(format!("{VM_NOTE}{note}"));
                } else if !res.workload_notes.contains(&note) {
                    res.workload_notes.push(note);
                }
            }
            _ => {}
        }
    }
    for w in ["virtio", "veth", "bursty"] {
        for c in configs {
            let mine: Vec<_> = samples.iter().filter(|s| s.0 == w && s.1 == *c).collect();
            let mbps: Vec<f64> = mine.iter().map(|s| s.3).collect();
            let cpu: Vec<f64> = mine.iter().map(|s| s.4).collect();
            // Paired with the no-probes run of the same round.
            let ratios: Vec<f64> = mine
                .iter()
                .filter_map(|s| {
                    let base = samples
                        .iter()
                        .find(|b| b.0 == w && b.1 == "none" && b.2 == s.2)?;
                    (base.3 > 0.0).then(|| s.3 / base.3)
                })
                .collect();
            if let (Some(m), Some(cpu)) = (Spread::of(&mbps), Spread::of(&cpu)) {
                res.workload.push(WorkloadRow {
                    workload: w.to_string(),
                    config: c.to_string(),
                    mbps: m,
                    cpu,
                    ratio: if *c == "none" {
                        None
                    } else {
                        Spread::of(&ratios)
                    },
                });
            }
        }
    }
    for tool in [
        "ppscope-fentry",
        "ppscope-kprobe",
        "ppscope-light",
        "bpftrace",
    ] {
        let v: Vec<f64> = output
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("startup {tool} ")))
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        if let Some(s) = Spread::of(&v) {
            res.startup.push(StartupRow {
                place: "VM (TCG)".into(),
                tool: match tool {
                    "ppscope-fentry" => "ppscope diagnose (auto: fentry)".into(),
                    "ppscope-kprobe" => "ppscope diagnose --backend kprobe".into(),
                    "ppscope-light" => {
                        "ppscope diagnose --detail light (agent and top's level)".into()
                    }
                    _ => "bpftrace, same hooks (kprobes)".into(),
                },
                ms: s,
            });
        }
    }
    res.startup_notes.dedup();
    for l in output.lines().filter(|l| l.starts_with("agent-vm ")) {
        match agent_window(l) {
            Some(w) => res.agent_vm.push(w),
            None => res.agent_notes.push(format!(
                "{VM_NOTE}an agent window's line did not parse: {l}"
            )),
        }
    }
}

/// An `agent-vm MODE ROUND POOLS_MADE POOLS_PER_INTERVAL CPU_TICKS SECONDS RSS_KIB` line.
fn agent_window(line: &str) -> Option<AgentVmWindow> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let ["agent-vm", mode, round, made, seen, ticks, secs, rss_kib] = f.as_slice() else {
        return None;
    };
    let (moving, light) = match *mode {
        "still" => (false, false),
        "moving" => (true, false),
        "light-moving" => (true, true),
        _ => return None,
    };
    let secs: f64 = secs.parse().ok().filter(|s| *s > 0.0)?;
    Some(AgentVmWindow {
        moving,
        light,
        round: round.parse().ok()?,
        secs,
        pools_made: made.parse().ok()?,
        pools_per_interval: seen.parse().ok()?,
        // USER_HZ ticks (100 a second) per second: % of a core.
        cpu: ticks.parse::<f64>().ok()? / secs,
        rss_mb: rss_kib.parse::<f64>().ok()? / 1024.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_script_output() {
        let out = "floor-begin fentry\nfloor-attached alloc page_pool_alloc_netmems\nfloor-ready\n\
prog fe_alloc 1000 200000\nprog bench_fe_alloc 1000 100000\nfloor-end fentry\n\
result veth none 1 100.0 150.0\nresult veth none 2 110.0 150.0\nresult veth fentry 1 99.0 151.0\n\
tool-error bpftrace ERROR: boom\nstartup ppscope-fentry 812.5\n\
tool-error floor-copies-kprobe instance 2 did not start\n";
        let mut r = Results::default();
        parse(out, &["none", "fentry", "bpftrace"], &mut r);
        let alloc = r.probe_cost.iter().find(|p| p.hook == "alloc").unwrap();
        assert_eq!(alloc.ours.median, 200.0);
        assert_eq!(alloc.floor.median, 100.0);
        assert_eq!(r.workload.len(), 2);
        assert_eq!(r.workload[0].mbps.median, 105.0);
        // fentry's round-1 run against none's round-1 run: 99 / 100.
        assert!((r.workload[1].ratio.unwrap().median - 0.99).abs() < 1e-9);
        assert!(r.workload[0].ratio.is_none());
        assert!(r.workload_notes.iter().any(|n| n.contains("boom")));
        // An instance of ppscope that did not start beside the floors is the probe cost's.
        assert!(r.probe_cost_notes.iter().any(|n| n.contains("instance 2")));
        assert!(!r.workload_notes.iter().any(|n| n.contains("instance 2")));
        assert_eq!(r.startup[0].ms.median, 812.5);
    }

    #[test]
    fn the_agents_windows_are_read_as_percent_of_a_core() {
        let out = "agent-vm still 1 1000 0 150 30.00 40960\n\
agent-vm moving 1 1000 1000 300 30.00 51200\nagent-vm moving 2 1000 x 300 30.00 51200\n\
agent-vm light-moving 1 1000 3 60 30.00 30720\nagent-vm still 2 1000 0 150 30.00\n\
tool-error agent-vm xdp on 1000 devices: boom\n";
        let mut r = Results::default();
        parse(out, &[], &mut r);
        assert_eq!(r.agent_vm.len(), 3);
        let (still, moving, light) = (&r.agent_vm[0], &r.agent_vm[1], &r.agent_vm[2]);
        assert!(!still.moving && moving.moving && !moving.light);
        assert!(light.moving && light.light && light.cpu == 2.0);
        assert_eq!(
            r.agent_notes
                .iter()
                .filter(|n| n.contains("did not parse"))
                .count(),
            2,
            "{:?}",
            r.agent_notes
        );
        assert_eq!((still.cpu, moving.cpu), (5.0, 10.0));
        assert_eq!((moving.pools_per_interval, moving.round), (1000, 1));
        assert_eq!(moving.rss_mb, 50.0);
        assert!(r.agent_notes.iter().any(|n| n.contains("boom")));
        assert!(r.workload_notes.is_empty(), "{:?}", r.workload_notes);
    }

    /// The light window: every ppscope program of the object counts, per page (the empty
    /// alloc program's calls), the lab's XDP and the floors themselves do not.
    #[test]
    fn the_light_row_sums_ppscope_programs_per_page() {
        let out = "floor-begin light\nppscope-prog fx_refill\nppscope-prog tp_state_releas\n\
ppscope-prog fx_slow_exit\nppscope-prog fx_put_exit\nfloor-ready\n\
prog bench_fe_alloc 1000 100000\nprog bench_fe_put 1000 120000\nprog xdp_pass 5000 900000\n\
prog fx_refill 16 8000\nprog tp_state_releas 10 2000\nprog fx_slow_exit 2 4000\n\
prog bench_fx_refill 16 1600\nprog bench_tp_drops 200 4400\nfloor-end light\n";
        let mut r = Results::default();
        parse(out, &[], &mut r);
        let light = &r.light_cost[0];
        assert_eq!(light.pages, 1000);
        assert_eq!(light.ours.median, 14.0);
        assert_eq!(light.floor.median, 220.0);
        // The empty programs on light's own hooks: (1,600 + 4,400) ns over 1,000 pages.
        assert_eq!(light.hooks_floor.as_ref().map(|h| h.median), Some(6.0));
        // ppscope's programs, busiest per page first, with their cost a run.
        let names: Vec<&str> = light.programs.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["fx_refill", "fx_slow_exit", "tp_state_releas"]);
        assert_eq!(light.programs[0].1, 8.0);
        assert_eq!(light.programs[0].2, 500.0);

        // Two rounds: one row of two windows (the median of each), programs summed over both.
        let second = out
            .replace("bench_fe_alloc 1000 100000", "bench_fe_alloc 3000 300000")
            .replace("fx_refill 16 8000", "fx_refill 48 96000");
        let mut r = Results::default();
        parse(&format!("{out}{second}"), &[], &mut r);
        assert_eq!(r.light_cost.len(), 1);
        let light = &r.light_cost[0];
        assert_eq!((light.pages, light.ours.n), (4000, 2));
        // fx_refill: 104,000 ns over 4,000 pages and 64 runs.
        assert_eq!(light.programs[0].0, "fx_refill");
        assert_eq!(light.programs[0].1, 26.0);
        assert_eq!(light.programs[0].2, 1625.0);

        // The floors in copies (`FLOOR_COPIES`, each printed): the same row, as their mean.
        let copies = out
            .replace(
                "prog bench_fe_alloc 1000 100000\n",
                "prog bench_fe_alloc 1000 90000\nprog bench_fe_alloc 1000 100000\n\
                 prog bench_fe_alloc 1000 110000\n",
            )
            .replace(
                "prog bench_fx_refill 16 1600\n",
                "prog bench_fx_refill 16 1000\nprog bench_fx_refill 16 2200\n",
            );
        let mut r = Results::default();
        parse(&copies, &[], &mut r);
        let light = &r.light_cost[0];
        assert_eq!(light.pages, 1000);
        assert_eq!(light.ours.median, 14.0);
        assert_eq!(light.floor.median, 220.0);
        assert_eq!(light.hooks_floor.as_ref().map(|h| h.median), Some(6.0));

        // ppscope in copies too (one per instance, `OURS_COPIES` in the script): one
        // instance's cost, their mean, not their sum.
        let ours = out.replace(
            "prog fx_refill 16 8000\n",
            "prog fx_refill 16 6000\nprog fx_refill 16 8000\nprog fx_refill 16 10000\n",
        );
        let mut r = Results::default();
        parse(&ours, &[], &mut r);
        let light = &r.light_cost[0];
        assert_eq!((light.pages, light.ours.median), (1000, 14.0));
        assert_eq!(light.programs[0].0, "fx_refill");
        assert_eq!((light.programs[0].1, light.programs[0].2), (8.0, 500.0));
    }
}

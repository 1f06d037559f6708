//! `cargo xtask bench`: what ppscope costs, side by side with the alternatives, written to
//! `BENCHMARKS.md`. Benchmarks print figures; they never fail on a slow machine (only on a
//! broken set-up). See the README section "Benchmarks".
//!
//! 1. `probe-cost`: BPF run time per call of ppscope's hot-path programs next to an empty
//!    program on the same hook (fentry and kprobe in the VM lab, tracepoint on the host).
//! 2. `workload`: throughput and CPU of three VM lab workloads with no probes, ppscope
//!    (fentry, kprobe), bpftrace and libbpf-tools funclatency, alternating rounds.
//! 3. `agent`: CPU share and RSS of `ppscope agent` with 1, 100, 1,000 and 10,000 veth + XDP
//!    pools, and of `ppscope top` on 1,000 and 10,000.
//! 4. `agent-vm`: the agent in the VM lab on 1,000 pools it sees move (`--detail full`), in
//!    windows with and without traffic, then a window at `--detail light`.
//! 5. `startup`: exec to first snapshot, ppscope vs bpftrace attaching the same hooks.
//! 6. `simulator`: burst-profile replay speed and advice time.
//!
//! Each runs in `host` (this kernel) or `vm` (the lab, TCG); [`report`] writes the file.

mod host;
pub mod report;
mod stats;
mod vm;

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::Stdio;

pub use stats::Spread;

pub const NAMES: &[&str] = &[
    "probe-cost",
    "workload",
    "agent",
    "agent-vm",
    "startup",
    "simulator",
];

/// How many copies of each empty (and counting) program `bench-probe floor` runs in a window,
/// each from its own load of the object; the floor is their mean. In the VM lab (TCG,
/// 2026-12-05: three hooks of each of fentry and kprobe, four windows each, so 24 hook
/// windows) the dearest of three copies of one empty program, over the same calls of one
/// window, cost a median 1.17× the cheapest, 1.92× at most, and no place in the hook's list
/// of programs was the dearer across windows: under TCG what a program costs depends on
/// where it was loaded, which changes with every load.
pub const FLOOR_COPIES: usize = 3;

#[derive(Args, Debug, Default, Clone)]
pub struct BenchArgs {
    /// A seconds-scale smoke run of each benchmark (short windows, one round, fewer pools).
    #[arg(long)]
    pub quick: bool,
    /// Run only these benchmarks (comma list of probe-cost, workload, agent, agent-vm,
    /// startup, simulator).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Use this ppscope binary instead of building one (`cargo build --release`; its eBPF object is looked up beside
    /// it, or given with --object).
    #[arg(long, value_name = "PATH")]
    pub ppscope: Option<PathBuf>,
    /// The eBPF object to load the empty floor programs from.
    #[arg(long, value_name = "PATH")]
    pub object: Option<PathBuf>,
    /// Where to write the report (default: BENCHMARKS.md at the workspace root; with --quick,
    /// nothing is written unless this is given).
    #[arg(long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Alternating rounds of the workload benchmark (default 3; 1 with --quick); the VM
    /// lab's probe cost runs twice as many windows (as many with --quick).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// The agent benchmark's pool counts (default 1,100,1000,10000; 1,10 with --quick): one
    /// row re-measured alone while working on it. The report then lacks the other rows.
    #[arg(long, value_delimiter = ',', value_name = "N")]
    pub pools: Vec<usize>,
    /// Only what runs on this host's kernel (no VM lab: no fentry/kprobe figures, no
    /// workload slowdown).
    #[arg(long)]
    pub no_vm: bool,
}

impl BenchArgs {
    pub fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

/// The binaries a run needs.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ppscope: PathBuf,
    pub object: PathBuf,
    pub bench_probe: PathBuf,
    pub bursty: PathBuf,
}

/// Everything the report shows, filled by the benchmarks that ran.
#[derive(Debug, Default)]
pub struct Results {
    pub probe_cost: Vec<report::ProbeCostRow>,
    pub probe_cost_notes: Vec<String>,
    pub light_cost: Vec<report::LightCostRow>,
    /// An empty program's run with the kernel's BPF run-time stats off and on (host).
    pub stats_cost: Option<report::StatsCost>,
    pub workload: Vec<report::WorkloadRow>,
    pub workload_notes: Vec<String>,
    pub agent: Vec<report::AgentRow>,
    pub agent_notes: Vec<String>,
    pub top: Vec<report::TopRow>,
    /// The agent in the VM lab, on pools it sees move each interval and on the same pools
    /// still, window by window.
    pub agent_vm: Vec<report::AgentVmWindow>,
    pub startup: Vec<report::StartupRow>,
    pub startup_notes: Vec<String>,
    pub simulator: Vec<report::SimRow>,
    pub simulator_notes: Vec<String>,
    pub vm_kernel: Option<String>,
}

pub fn run(args: &BenchArgs) -> Result<i32> {
    let started = std::time::Instant::now();
    let res = collect(args)?;
    let text = report::render(args, &res, started.elapsed());
    println!("{text}");
    let out = match (&args.output, args.quick) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(crate::workspace_root().join("BENCHMARKS.md")),
        (None, true) => None,
    };
    if let Some(out) = out {
        std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("bench: wrote {}", out.display());
    }
    Ok(0)
}

/// Runs the benchmarks `args` selects and returns their figures (the smoke test checks them).
pub fn collect(args: &BenchArgs) -> Result<Results> {
    for o in &args.only {
        if !NAMES.contains(&o.as_str()) {
            bail!(
                "--only {o}: no such benchmark (one of {})",
                NAMES.join(", ")
            );
        }
    }
    if !crate::setup::is_root()? {
        bail!("the benchmarks load BPF programs and build network namespaces: run as root");
    }
    let tools = tools(args)?;
    let mut res = Results::default();
    if args.wants("probe-cost") {
        host::stats_cost(args, &tools, &mut res)?;
        host::tracepoint_cost(args, &tools, &mut res)?;
    }
    // The agent benchmark leaves a recording of its 1,000 pools for the simulator's.
    if args.wants("agent") {
        host::agent(args, &tools, &mut res)?;
    }
    if args.wants("simulator") {
        host::simulator(args, &tools, &mut res)?;
    }
    if args.wants("startup") {
        host::startup(args, &tools, &mut res)?;
    }
    let vm_wanted = args.wants("probe-cost")
        || args.wants("workload")
        || args.wants("startup")
        || args.wants("agent-vm");
    if vm_wanted && !args.no_vm {
        vm::run(args, &tools, &mut res)?;
    }
    Ok(res)
}

/// Builds (or takes) ppscope, finds its eBPF object, and builds the bench helpers.
fn tools(args: &BenchArgs) -> Result<Tools> {
    let ppscope = match &args.ppscope {
        Some(p) => p.clone(),
        None => crate::vm::build_ppscope_profile(true)?,
    };
    let object = match &args.object {
        Some(o) => o.clone(),
        None => find_object(&ppscope)?,
    };
    let bins = build_xtask_bins(&["bench-probe", "bursty"])?;
    Ok(Tools {
        ppscope,
        object,
        bench_probe: bins[0].clone(),
        bursty: bins[1].clone(),
    })
}

/// The newest eBPF object built by agent/build.rs in the target dir of `ppscope`.
fn find_object(ppscope: &Path) -> Result<PathBuf> {
    let build = ppscope
        .parent()
        .context("ppscope has no parent folder")?
        .join("build");
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in std::fs::read_dir(&build)
        .with_context(|| format!("reading {} (use --object)", build.display()))?
        .flatten()
    {
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with("ppscope-agent-")
        {
            continue;
        }
        let p = e
            .path()
            .join("out/ebpf-target/bpfel-unknown-none/release/ppscope");
        if let Ok(m) = p.metadata().and_then(|m| m.modified()) {
            if best.as_ref().is_none_or(|(t, _)| m > *t) {
                best = Some((m, p));
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no eBPF object under {} (use --object)", build.display()))
}

fn build_xtask_bins(names: &[&str]) -> Result<Vec<PathBuf>> {
    let mut cmd = crate::cargo();
    cmd.current_dir(crate::workspace_root()).args([
        "build",
        "-p",
        "xtask",
        "--message-format=json-render-diagnostics",
    ]);
    for n in names {
        cmd.args(["--bin", n]);
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("cargo build (bench helpers)")?;
    if !out.status.success() {
        bail!("building {} failed", names.join(", "));
    }
    let mut found = vec![None; names.len()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(i), Some(exe)) = (
            names.iter().position(|n| v["target"]["name"] == *n),
            v["executable"].as_str(),
        ) {
            found[i] = Some(PathBuf::from(exe));
        }
    }
    found
        .into_iter()
        .zip(names)
        .map(|(p, n)| p.with_context(|| format!("cargo did not report the {n} executable")))
        .collect()
}

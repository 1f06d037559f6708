//! Benchmarks on this host's kernel: tracepoint probe cost, agent cost with many real pools,
//! start-up, and the simulator. Traffic only crosses namespaces made here (198.19.0.0/16,
//! inside the 198.18.0.0/15 benchmark range), bounded in time, removed afterwards.
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::report::{
    agent_target, AgentRow, LightCostRow, ProbeCostRow, SimRow, StartupRow, StatsCost, TopRow,
};
use super::{stats::mean, BenchArgs, Results, Spread, Tools};

const NS_A: &str = "ppbench-a";
const NS_B: &str = "ppbench-b";

/// Two namespaces, removed (with every veth in them) and helper processes killed on drop.
struct Lab {
    children: Vec<Child>,
}

impl Lab {
    fn new() -> Result<Lab> {
        for ns in [NS_A, NS_B] {
            let _ = sh("ip", &["netns", "del", ns]);
            sh("ip", &["netns", "add", ns])?;
            sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            // The traffic is IPv4. With IPv6 on, every new veth sends router solicitations
            // and the peer routes each through a table of thousands of link routes, in
            // softirq time the kernel charges to whichever process it interrupts: at 10,000
            // pairs `perf` found a tenth of the agent's measured CPU there (`__find_rr_leaf`).
            // A kernel without IPv6 has nothing to turn off.
            for key in ["all", "default"] {
                let _ = sh(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        ns,
                        "sysctl",
                        "-qw",
                        &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                    ],
                );
            }
        }
        Ok(Lab {
            children: Vec::new(),
        })
    }

    /// `n` veth pairs `pa<i>` (in A) ↔ `pb<i>` (in B), each on its own /30; returns B's
    /// addresses. One `ip -batch` per namespace: 1,000 pairs take seconds, not minutes.
    ///
    /// Each end knows the other's MAC address as a permanent neighbour: the kernel's IPv4
    /// neighbour table is one for all namespaces and holds 1,024 resolved entries by default
    /// (`gc_thresh3`), so past that most pairs never resolved and never received (10,000
    /// pairs: about 1,100 pools moved). Permanent entries are outside that limit.
    fn pairs(&self, n: usize) -> Result<Vec<String>> {
        let addr = |i: usize, host: usize| format!("198.19.{}.{}", i / 64, (i % 64) * 4 + host);
        let mac =
            |i: usize, side: u8| format!("02:0{side:x}:00:00:{:02x}:{:02x}", i >> 8, i & 0xff);
        let mut root = String::new();
        for i in 0..n {
            root.push_str(&format!(
                "link add pa{i} address {} netns {NS_A} type veth peer name pb{i} address {} netns {NS_B}\n",
                mac(i, 0xa),
                mac(i, 0xb)
            ));
        }
        batch(None, &root)?;
        let (mut a, mut b) = (String::new(), String::new());
        for i in 0..n {
            a.push_str(&format!(
                "addr add {}/30 dev pa{i}\nlink set pa{i} up\nneigh add {} lladdr {} dev pa{i} nud permanent\n",
                addr(i, 1),
                addr(i, 2),
                mac(i, 0xb)
            ));
            b.push_str(&format!(
                "addr add {}/30 dev pb{i}\nlink set pb{i} up\nneigh add {} lladdr {} dev pb{i} nud permanent\n",
                addr(i, 2),
                addr(i, 1),
                mac(i, 0xa)
            ));
        }
        batch(Some(NS_A), &a)?;
        batch(Some(NS_B), &b)?;
        Ok((0..n).map(|i| addr(i, 2)).collect())
    }

    /// XDP on every B end (veth builds its page_pools when XDP is attached).
    fn xdp(&mut self, tools: &Tools, devs: &[String]) -> Result<()> {
        // One link fd per device: 10,000 pairs need more than the default 1,024 descriptors.
        let mut c = Command::new("sh")
            .args(["-c", "ulimit -n \"$(ulimit -Hn)\" && exec \"$@\"", "sh"])
            .args(["ip", "netns", "exec", NS_B])
            .arg(&tools.bench_probe)
            .arg("xdp")
            .arg(&tools.object)
            .args(devs)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("bench-probe xdp")?;
        let mut out = c.stdout.take().context("stdout")?;
        self.children.push(c);
        let mut buf = [0u8; 64];
        let n = out.read(&mut buf).unwrap_or(0);
        if !String::from_utf8_lossy(&buf[..n]).starts_with("attached") {
            bail!("bench-probe xdp did not attach");
        }
        Ok(())
    }

    fn spawn(&mut self, cmd: &mut Command) -> Result<u32> {
        let c = cmd.spawn().context("spawning a benchmark process")?;
        let id = c.id();
        self.children.push(c);
        Ok(id)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [NS_A, NS_B] {
            let _ = sh("ip", &["netns", "del", ns]);
        }
    }
}

fn sh(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .with_context(|| format!("running {prog}"))?;
    if !out.status.success() {
        bail!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmds` through `ip -batch`, a few hundred lines per process: `ip` opens the named
/// netns of every `link add … netns NAME` line and keeps it open, so one process for 10,000
/// pairs runs out of file descriptors ("Invalid netns value").
fn batch(ns: Option<&str>, cmds: &str) -> Result<()> {
    let lines: Vec<&str> = cmds.lines().collect();
    for chunk in lines.chunks(400) {
        let mut c = Command::new("ip");
        if let Some(ns) = ns {
            c.args(["-n", ns]);
        }
        let mut child = c
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .context("ip -batch")?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all((chunk.join("\n") + "\n").as_bytes())?;
        if !child.wait()?.success() {
            bail!("ip -batch failed");
        }
    }
    Ok(())
}

/// Per-call BPF run time of one hook: ppscope's programs (summed: an entry/exit pair is one
/// event) and the empty programs on the same hook.
pub struct HookProgs {
    pub backend: &'static str,
    pub hook: &'static str,
    pub ours: &'static [&'static str],
    pub floor: &'static [&'static str],
    /// One per-CPU count on the hook (`bench_c…` in `ebpf/src/bench.rs`), summed like
    /// `ours`: the kprobe recycle's is a pair whose entry hands the return its arguments.
    pub counting: &'static [&'static str],
}

/// Kernel program names are cut to 15 bytes. The floor and counting programs named here are
/// the ones `bench-probe floor` attaches (its table in `xtask/src/bin/bench-probe.rs`).
pub const HOOK_PROGS: &[HookProgs] = &[
    HookProgs {
        backend: "fentry",
        hook: "alloc",
        ours: &["fe_alloc"],
        floor: &["bench_fe_alloc"],
        counting: &["bench_cfe_alloc"],
    },
    HookProgs {
        backend: "fentry",
        hook: "alloc_frag",
        ours: &["fe_alloc_frag"],
        floor: &["bench_fe_frag"],
        counting: &["bench_cfe_frag"],
    },
    // fexit alone carries the recycle (it sees the arguments): set against an empty fexit.
    HookProgs {
        backend: "fentry",
        hook: "recycle",
        ours: &["fx_put_exit"],
        floor: &["bench_fx_put"],
        counting: &["bench_cfx_put"],
    },
    HookProgs {
        backend: "kprobe",
        hook: "alloc",
        ours: &["pp_alloc"],
        floor: &["bench_kp_alloc"],
        counting: &["bench_ckp_alloc"],
    },
    HookProgs {
        backend: "kprobe",
        hook: "alloc_frag",
        ours: &["pp_alloc_frag"],
        floor: &["bench_kp_frag"],
        counting: &["bench_ckp_frag"],
    },
    HookProgs {
        backend: "kprobe",
        hook: "recycle",
        ours: &["pp_put_entry", "pp_put_exit"],
        floor: &["bench_kp_put", "bench_krp_put"],
        counting: &["bench_ckp_put", "bench_ckrp_put"],
    },
    HookProgs {
        backend: "tracepoint",
        hook: "page_hold",
        ours: &["tp_state_hold"],
        floor: &["bench_tp_hold"],
        counting: &["bench_ctp_hold"],
    },
    HookProgs {
        backend: "tracepoint",
        hook: "page_release",
        // As tp_btf (typed pool), which this host's kernel allows; the raw program serves
        // where a kernel refuses tracing programs.
        ours: &["tb_state_releas"],
        floor: &["bench_tb_releas"],
        counting: &["bench_ctb_rel"],
    },
];

/// A window's programs by name: (runs, ns) of each program of that name, in the order
/// `bench-probe` printed them (the order they were loaded: the floors' copies one after the
/// other).
pub type ProgRuns = std::collections::HashMap<String, Vec<(u64, u64)>>;

/// `prog NAME RUNS RUN_NS` lines of `bench-probe floor`.
pub fn parse_prog_lines(text: &str) -> ProgRuns {
    let mut m = ProgRuns::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["prog", name, runs, ns] = f.as_slice() {
            if let (Ok(r), Ok(n)) = (runs.parse::<u64>(), ns.parse::<u64>()) {
                m.entry(name.to_string()).or_default().push((r, n));
            }
        }
    }
    m
}

/// Calls and ns per call summed over `names`: each name's copies taken together (`FLOOR_COPIES`:
/// one program's figure moves with where it was loaded; in the VM lab ppscope's programs come
/// in as many copies, one per instance, on the host in one),
/// its calls the copies' mean and its ns per call their total over their calls (the copies'
/// mean, as they run over the same calls); the calls are the fewest of `names`'. None when
/// there are no names or one of them never ran.
pub fn per_call(m: &ProgRuns, names: &[&str]) -> Option<(u64, f64)> {
    if names.is_empty() {
        return None;
    }
    let mut total = 0.0;
    let mut calls = u64::MAX;
    for n in names {
        let copies = m.get(*n)?;
        let (runs, ns) = copies_total(copies);
        if runs == 0 {
            return None;
        }
        total += ns as f64 / runs as f64;
        calls = calls.min(runs / copies.len() as u64);
    }
    Some((calls, total))
}

/// One name's copies taken together: their runs and their ns, each summed.
fn copies_total(copies: &[(u64, u64)]) -> (u64, u64) {
    copies
        .iter()
        .fold((0, 0), |(runs, ns), c| (runs + c.0, ns + c.1))
}

/// The dearest of `names`' copies against the cheapest, ns per call (copy `k` of each name
/// summed: a pair's entry and return were loaded together); None with fewer than two copies.
pub fn copies_spread(m: &ProgRuns, names: &[&str]) -> Option<f64> {
    let copies = names.iter().map(|n| m.get(*n).map_or(0, Vec::len)).min()?;
    if copies < 2 {
        return None;
    }
    let per_copy: Vec<f64> = (0..copies)
        .map(|k| {
            names
                .iter()
                .map(|n| {
                    let (runs, ns) = m[*n][k];
                    ns as f64 / runs.max(1) as f64
                })
                .sum()
        })
        .collect();
    let (lo, hi) = per_copy
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    (lo > 0.0).then_some(hi / lo)
}

/// The `--detail light` row from windows where it ran beside the fentry floors: the run time
/// of every ppscope program per page allocated (the floor's allocation calls) against the
/// empty fentry programs on the allocation and recycle functions, per page.
pub fn light_cost_row(place: &str, windows: &[String], res: &mut Results) {
    let (mut ours, mut floor, mut hooks_floor, mut pages) =
        (Vec::new(), Vec::new(), Vec::new(), 0u64);
    // Per program over all windows: (runs, ns).
    let mut by_program: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for w in windows {
        // ppscope's programs, as `bench-probe` read them from the object.
        let ours_names: Vec<&str> = w
            .lines()
            .filter_map(|l| l.strip_prefix("ppscope-prog "))
            .collect();
        let m = parse_prog_lines(w);
        let (Some((allocs, alloc_ns)), Some((_, put_ns))) = (
            per_call(&m, &["bench_fe_alloc"]),
            per_call(&m, &["bench_fe_put"]),
        ) else {
            continue;
        };
        // Each program's copies (one per ppscope instance) as their mean: one instance's cost.
        let ran: Vec<(&String, (u64, u64))> = m
            .iter()
            .filter(|(name, _)| ours_names.contains(&name.as_str()))
            .map(|(name, c)| {
                let (runs, ns) = copies_total(c);
                let n = c.len() as u64;
                (name, (runs / n, ns / n))
            })
            .collect();
        let total_ns: u64 = ran.iter().map(|(_, (_, ns))| ns).sum();
        for (name, (runs, ns)) in ran {
            let p = by_program.entry(name.clone()).or_default();
            p.0 += runs;
            p.1 += ns;
        }
        // The empty programs on light's own hooks, per page (both must have run).
        // (The mean of each program's copies.)
        let empty = ["bench_fx_refill", "bench_tp_drops"]
            .map(|p| m.get(p).map(|c| copies_total(c).1 as f64 / c.len() as f64));
        if let [Some(refill), Some(drops)] = empty {
            hooks_floor.push((refill + drops) / allocs as f64);
        }
        ours.push(total_ns as f64 / allocs as f64);
        floor.push(alloc_ns + put_ns);
        pages += allocs;
    }
    let mut programs: Vec<(String, f64, f64)> = by_program
        .into_iter()
        .map(|(name, (runs, ns))| {
            let per_page = ns as f64 / pages.max(1) as f64;
            (name, per_page, ns as f64 / runs.max(1) as f64)
        })
        .collect();
    programs.sort_by(|a, b| b.1.total_cmp(&a.1));
    match (Spread::of(&ours), Spread::of(&floor)) {
        (Some(o), Some(f)) => res.light_cost.push(LightCostRow {
            place: place.to_string(),
            pages,
            ours: o,
            floor: f,
            hooks_floor: Spread::of(&hooks_floor),
            programs,
        }),
        _ => res.probe_cost_notes.push(format!(
            "{place}, --detail light: the empty fentry programs on allocation and recycle saw no calls"
        )),
    }
}

/// Collects rows for `backend` from several windows of `bench-probe floor` output.
pub fn cost_rows(place: &str, backend: &str, windows: &[String], res: &mut Results) {
    for h in HOOK_PROGS.iter().filter(|h| h.backend == backend) {
        let (mut ours, mut floor, mut counting, mut calls) =
            (Vec::new(), Vec::new(), Vec::new(), 0u64);
        let (mut ratio, mut counting_ratio, mut copies) = (Vec::new(), Vec::new(), Vec::new());
        for w in windows {
            let m = parse_prog_lines(w);
            if let (Some((c, o)), Some((_, f))) = (per_call(&m, h.ours), per_call(&m, h.floor)) {
                ours.push(o);
                floor.push(f);
                // Paired: ppscope and the floor over the same calls of the same window.
                ratio.push(o / f);
                calls += c;
                if let Some((_, n)) = per_call(&m, h.counting) {
                    counting.push(n);
                    counting_ratio.push(n / f);
                }
                copies.extend(copies_spread(&m, h.floor));
            }
        }
        match (Spread::of(&ours), Spread::of(&floor), Spread::of(&ratio)) {
            (Some(o), Some(f), Some(r)) => res.probe_cost.push(ProbeCostRow {
                place: place.to_string(),
                backend: backend.to_string(),
                hook: h.hook.to_string(),
                calls,
                ours: o,
                floor: f,
                ratio: r,
                counting: Spread::of(&counting),
                counting_ratio: Spread::of(&counting_ratio),
                floor_copies: Spread::of(&copies),
            }),
            _ => res.probe_cost_notes.push(format!(
                "{place}, {backend}, {}: no calls seen by both ppscope ({}) and the floor ({}) — the hook did not fire or did not attach",
                h.hook,
                h.ours.join("+"),
                h.floor.join("+")
            )),
        }
    }
}

fn wait_line(path: &Path, pat: &str, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(pat)) {
            return true;
        }
        sleep(Duration::from_millis(100));
    }
    false
}

/// What the kernel's BPF run-time stats cost every program while they are on: the empty XDP
/// program in the kernel's test-run loop, stats off and on in alternating windows.
pub fn stats_cost(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    eprintln!("bench: probe-cost (BPF run-time stats, host)");
    let rounds = if args.quick { 2 } else { 9 };
    let out = Command::new(&tools.bench_probe)
        .arg("stats-cost")
        .arg(&tools.object)
        .arg(rounds.to_string())
        .output()?;
    if !out.status.success() {
        res.probe_cost_notes.push(format!(
            "host, BPF run-time stats: bench-probe stats-cost failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return Ok(());
    }
    let (mut off, mut on, mut runs) = (Vec::new(), Vec::new(), 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["stats-cost", "runs", n] => runs = n.parse().unwrap_or(0),
            ["stats-cost", "off", ns] => off.extend(ns.parse::<f64>().ok()),
            ["stats-cost", "on", ns] => on.extend(ns.parse::<f64>().ok()),
            _ => {}
        }
    }
    if let (Some(off), Some(on)) = (Spread::of(&off), Spread::of(&on)) {
        res.stats_cost = Some(StatsCost { off, on, runs });
    }
    Ok(())
}

/// Backend 3 on this host: ppscope's tracepoint programs next to empty raw tracepoints, over
/// veth + XDP iperf3 traffic (a 256-entry pool churning through the allocator).
pub fn tracepoint_cost(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    eprintln!("bench: probe-cost (tracepoint, host)");
    let secs: u64 = if args.quick { 2 } else { 5 };
    let windows = if args.quick { 1 } else { 3 };
    let mut lab = Lab::new()?;
    batch(
        None,
        &format!("link add pt0 netns {NS_A} type veth peer name pt1 netns {NS_B}\n"),
    )?;
    batch(
        Some(NS_A),
        "addr add 198.19.200.1/24 dev pt0\nlink set pt0 up\n",
    )?;
    batch(
        Some(NS_B),
        "addr add 198.19.200.2/24 dev pt1\nlink set pt1 up\n",
    )?;
    lab.xdp(tools, &["pt1".to_string()])?;
    lab.spawn(
        Command::new("ip")
            .args(["netns", "exec", NS_B, "iperf3", "-s", "-1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let dir = tempdir("probe-cost")?;
    let log = dir.join("diag.err");
    let diag = lab.spawn(
        Command::new(&tools.ppscope)
            .args([
                "diagnose",
                "--duration",
                "1h",
                "--json",
                "--backend",
                "tracepoint",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?),
    )?;
    if !wait_line(&log, "watching page_pools", Duration::from_secs(60)) {
        bail!(
            "ppscope diagnose did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let total = windows as u64 * (secs + 1) + 2;
    let iperf = Command::new("ip")
        .args(["netns", "exec", NS_A, "iperf3", "-c", "198.19.200.2", "-t"])
        .arg(total.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut outs = Vec::new();
    sleep(Duration::from_secs(1));
    for _ in 0..windows {
        let out = Command::new(&tools.bench_probe)
            .arg("floor")
            .arg(&tools.object)
            .args(["tracepoint", &secs.to_string()])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            res.probe_cost_notes.push(format!(
                "host, tracepoint: bench-probe failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        outs.push(text);
    }
    let _ = iperf.wait_with_output();
    // SAFETY: kill(2) on a child of ours.
    unsafe { kill(diag as i32, 2) };
    cost_rows("host", "tracepoint", &outs, res);
    drop(lab);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn sysconf(name: i32) -> i64;
}

fn tempdir(what: &str) -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("ppscope-bench-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn status_kb(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How often the agent benchmark scrapes `/metrics` while it measures (a common Prometheus
/// scrape interval).
const SCRAPE_EVERY_S: u64 = 15;

/// CPU share of one core (per cent, one figure per second) and peak RSS (MB) of process `pid`
/// over `window` seconds; `what` names it in the error when it exits.
fn cpu_and_rss(pid: u32, window: u64, what: &str) -> Result<(Vec<f64>, f64)> {
    // SAFETY: sysconf(3) takes a name and reads nothing of ours.
    let hz = unsafe { sysconf(2) }.max(1) as f64; // _SC_CLK_TCK
    let mut per_sec = Vec::new();
    let mut rss_max = 0u64;
    let mut last = cpu_ticks(pid).with_context(|| format!("{what} exited before the window"))?;
    for _ in 0..window {
        sleep(Duration::from_secs(1));
        let now = cpu_ticks(pid).with_context(|| format!("{what} exited during the window"))?;
        per_sec.push((now - last) as f64 / hz * 100.0);
        last = now;
        rss_max = rss_max.max(status_kb(pid, "VmRSS:").unwrap_or(0));
    }
    Ok((per_sec, rss_max as f64 / 1024.0))
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let code = body.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body))
}

/// Distinct `pool="…"` label values in a Prometheus text page.
pub fn pools_in_metrics(text: &str) -> usize {
    let mut set = std::collections::HashSet::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(i) = l.find("pool=\"") {
            let rest = &l[i + 6..];
            if let Some(j) = rest.find('"') {
                set.insert(&rest[..j]);
            }
        }
    }
    set.len()
}

/// How long the agent and `top` run before they are measured: their advice window (61
/// one-second samples) is full by then, so the figures are the steady state, not the fill.
const STEADY_AFTER: Duration = Duration::from_secs(62);

/// The pool map's size for `pools` pools: the default (4,096) where it holds them, as users
/// run it, else the next power of two above twice the count (what README tells users to set).
pub fn map_capacity(pools: usize) -> u32 {
    let default = 4096;
    if pools * 2 <= default {
        default as u32
    } else {
        (pools * 2).next_power_of_two() as u32
    }
}

/// Agent cost with N real pools: CPU per second over a window, RSS, pools it exports; and
/// `top`'s on the same pools where a count has targets.
pub fn agent(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    let counts: &[usize] = if !args.pools.is_empty() {
        &args.pools
    } else if args.quick {
        &[1, 10]
    } else {
        &[1, 100, 1000, 10_000]
    };
    // A minute, as an always-on agent is judged (issue 15's target), every pool receiving.
    let window: u64 = if args.quick { 3 } else { 60 };
    let warm = if args.quick {
        Duration::from_secs(3)
    } else {
        STEADY_AFTER
    };
    for &n in counts {
        eprintln!("bench: agent with {n} pool(s)");
        let mut lab = Lab::new()?;
        let addrs = lab.pairs(n)?;
        let devs: Vec<String> = (0..n).map(|i| format!("pb{i}")).collect();
        let port = 19464;
        let dir = tempdir("agent")?;
        let log = dir.join("agent.err");
        let capacity = map_capacity(n);
        let pid = lab.spawn(
            Command::new(&tools.ppscope)
                .args([
                    "agent",
                    "--interval",
                    "1s",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--map-capacity",
                    &capacity.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?),
        )?;
        let up = Instant::now();
        while http_get(port, "/healthz").is_none_or(|(c, _)| c != 200) {
            if up.elapsed() > Duration::from_secs(60) {
                bail!(
                    "ppscope agent did not come up: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            sleep(Duration::from_millis(200));
        }
        // Pools born after the agent attached: the first packet through each makes it
        // allocate, so the probes see every one.
        lab.xdp(tools, &devs)?;
        let sent = Command::new("ip")
            .args(["netns", "exec", NS_A])
            .arg(&tools.bench_probe)
            .arg("udp")
            .args(&addrs)
            .output()?;
        if !sent.status.success() {
            bail!("bench-probe udp: {}", String::from_utf8_lossy(&sent.stderr));
        }
        sleep(Duration::from_secs(3));
        if n == *counts.last().unwrap() && !args.quick && args.wants("simulator") {
            // A recording of every pool, for the simulator benchmark's replay timing: a
            // second packet through each pool once the recorder has attached, so that it
            // sees them all.
            let mut rec = Command::new(&tools.ppscope)
                .args(["record", "-o"])
                .arg(std::env::temp_dir().join("ppscope-bench-pools.rec"))
                .args(["--duration", "4s", "--interval", "10ms"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            sleep(Duration::from_secs(2));
            let _ = Command::new("ip")
                .args(["netns", "exec", NS_A])
                .arg(&tools.bench_probe)
                .arg("udp")
                .args(&addrs)
                .output();
            let _ = rec.wait();
        }
        // From here every pool keeps receiving (a packet each per second, each taking a
        // fragment of a pool page), as on a busy host. Whether the agent sees them move each
        // interval depends on the kernel: on this host (tracepoints only, no page_pool stats)
        // --detail light sees a pool only when it uses the page allocator (no refill hook
        // attaches there), which one packet a second never makes it do (the row's "pools
        // moving per interval" says what the agent saw; the VM lab's agent phase has pools it
        // sees move).
        let mut feed = Command::new("ip")
            .args(["netns", "exec", NS_A])
            .arg(&tools.bench_probe)
            .args(["udp-every", "1"])
            .args(&addrs)
            .stdout(Stdio::null())
            .spawn()?;
        sleep(warm.saturating_sub(up.elapsed()));
        // Scraped as a Prometheus would be (every 15 s) while measured: the agent assembles
        // its snapshots when asked, so the scrapes are part of its cost.
        let scraping = Arc::new(AtomicBool::new(true));
        let scraper = {
            let scraping = scraping.clone();
            std::thread::spawn(move || {
                let mut scrapes = Vec::new();
                while scraping.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    if http_get(port, "/metrics").is_some_and(|(s, _)| s == 200) {
                        scrapes.push(started.elapsed().as_secs_f64() * 1e3);
                    }
                    for _ in 0..SCRAPE_EVERY_S * 10 {
                        if !scraping.load(Ordering::Relaxed) {
                            break;
                        }
                        sleep(Duration::from_millis(100));
                    }
                }
                scrapes
            })
        };
        let measured = cpu_and_rss(pid, window, "agent");
        scraping.store(false, Ordering::Relaxed);
        let scrapes = scraper.join().unwrap_or_default();
        if scrapes.is_empty() {
            res.agent_notes.push(format!(
                "{n} pools: no scrape of /metrics answered during the window."
            ));
        }
        if measured.is_err() {
            let _ = feed.kill();
            let _ = feed.wait();
        }
        let (per_sec, rss_mb) = measured?;
        let metrics = http_get(port, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let pools = pools_in_metrics(&metrics);
        // The snapshot since start lists every pool that moved within the grace period (the
        // metrics stop at `--max-pools`); of an interval's snapshot, the pools whose counters
        // moved in it count (the most of three, read after the measured minute).
        let snapshot = |path: &str| {
            http_get(port, path).and_then(|(_, r)| {
                let (_, body) = r.split_once("\r\n\r\n")?;
                serde_json::from_str::<serde_json::Value>(body).ok()
            })
        };
        let listed = snapshot("/api/v1/snapshot")
            .and_then(|v| v["pools"].as_array().map(Vec::len))
            .unwrap_or(0);
        let per_interval = (0..3)
            .map(|i| {
                if i > 0 {
                    sleep(Duration::from_millis(1100));
                }
                snapshot("/api/v1/snapshot?window=interval").map_or(0, |v| pools_moved(&v))
            })
            .max()
            .unwrap_or(0);
        res.agent.push(AgentRow {
            pools_made: n,
            pools_listed: listed,
            pools_per_interval: per_interval,
            pools_exported: pools,
            cpu: Spread::of(&per_sec).context("no CPU samples")?,
            cpu_mean: mean(&per_sec),
            rss_mb,
            scrape_ms: Spread::of(&scrapes),
        });
        // SAFETY: kill(2) on the agent this benchmark started.
        unsafe { kill(pid as i32, 15) };
        if agent_target(n).is_some() || n == *counts.last().unwrap() {
            // The dashboard on the same pools, alone (the agent has stopped): a real terminal
            // (tmux, 120×40), live source, 1 s refresh; at each pool count with targets.
            match top_cost(tools, n, warm, window, capacity) {
                Ok(row) => res.top.push(row),
                Err(e) => res.agent_notes.push(format!(
                    "`ppscope top` on {n} pools could not be measured: {e:#}"
                )),
            }
        }
        let _ = feed.kill();
        let _ = feed.wait();
        drop(lab);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// CPU per second (median, range, mean) and peak RSS of `ppscope top` in a detached tmux, on
/// the `pools_made` pools of the agent's row.
fn top_cost(
    tools: &Tools,
    pools_made: usize,
    warm: Duration,
    window: u64,
    capacity: u32,
) -> Result<TopRow> {
    let server = format!("ppbench-top-{}", std::process::id());
    let cmd = format!(
        "exec {} top --interval 1s --map-capacity {capacity}",
        tools.ppscope.display()
    );
    let out = Command::new("tmux")
        .args(["-L", &server, "new-session", "-d", "-x", "120", "-y", "40"])
        .args(["-P", "-F", "#{pane_pid}", &cmd])
        .output()
        .context("running tmux (installed by cargo xtask setup)")?;
    let kill_server = || {
        let _ = Command::new("tmux")
            .args(["-L", &server, "kill-server"])
            .output();
    };
    let pid: u32 = match String::from_utf8_lossy(&out.stdout).trim().parse() {
        Ok(p) => p,
        Err(_) => {
            kill_server();
            bail!(
                "tmux did not start top: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    let result = (|| {
        sleep(warm);
        let (per_sec, rss_mb) = cpu_and_rss(pid, window, "top")?;
        // What the dashboard showed at the end of its window: its title's pool count.
        let screen = Command::new("tmux")
            .args(["-L", &server, "capture-pane", "-p"])
            .output()
            .context("tmux capture-pane")?;
        Ok(TopRow {
            pools_made,
            pools_shown: pools_in_title(&String::from_utf8_lossy(&screen.stdout)),
            cpu: Spread::of(&per_sec).context("no CPU samples")?,
            cpu_mean: mean(&per_sec),
            rss_mb,
        })
    })();
    kill_server();
    result
}

/// The pools of a snapshot (JSON) whose counters moved: a positive count among its
/// allocations, recycles, or pages taken from and given back to the page allocator. An
/// interval's snapshot also lists a pool that did not move in it while it has advice.
pub(super) fn pools_moved(snapshot: &serde_json::Value) -> usize {
    let moved = |p: &serde_json::Value| {
        ["alloc", "recycle", "pages"].iter().any(|k| {
            p[k].as_object()
                .is_some_and(|o| o.values().any(|v| v.as_u64().is_some_and(|n| n > 0)))
        })
    };
    snapshot["pools"]
        .as_array()
        .map_or(0, |pools| pools.iter().filter(|p| moved(p)).count())
}

/// The pool count in `ppscope top`'s title line (" ppscope top kernel K │ 12 pools │ …").
fn pools_in_title(screen: &str) -> Option<usize> {
    let title = screen.lines().find(|l| l.contains("ppscope top"))?;
    title.split('│').find_map(|part| {
        // "12 pools", or "12 pools, 3 starving, 1 warn".
        let part = part.split(',').next()?.trim();
        let n = part
            .strip_suffix(" pools")
            .or_else(|| part.strip_suffix(" pool"))?;
        n.trim().parse().ok()
    })
}

fn bench_startup(tools: &Tools, pattern: &str, cmd: &[&str]) -> Result<f64, String> {
    let out = Command::new(&tools.bench_probe)
        .args(["startup", "120", pattern])
        .args(cmd)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("startup-ms "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(300)
                .collect()
        })
}

/// bpftrace on the host's hooks (the same four tracepoints ppscope uses here). bpftrace needs
/// tracefs for tracepoint formats; it is mounted in a private mount namespace only.
pub const HOST_BT: &str =
    "tracepoint:page_pool:page_pool_state_hold { @hold[args->pool] = count(); } \
tracepoint:page_pool:page_pool_state_release { @rel[args->pool] = count(); } \
tracepoint:napi:napi_poll { @polls[args->napi] = count(); } \
tracepoint:skb:kfree_skb { @drops[args->reason] = count(); } \
BEGIN { printf(\"bpftrace-ready\\n\"); }";

pub fn startup(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    eprintln!("bench: startup (host)");
    let n = if args.quick { 1 } else { 5 };
    let pp = tools.ppscope.to_string_lossy().into_owned();
    let bt = format!("mount -t tracefs nodev /sys/kernel/tracing && exec bpftrace -e '{HOST_BT}'");
    let has_bt = Command::new("bpftrace").arg("--version").output().is_ok();
    #[derive(Clone, Copy)]
    enum Tool {
        Ppscope,
        Bpftrace,
    }
    let start = |tool: Tool| match tool {
        Tool::Ppscope => Some(bench_startup(
            tools,
            "watching page_pools",
            &[&pp, "diagnose", "--duration", "1h"],
        )),
        Tool::Bpftrace if has_bt => Some(bench_startup(
            tools,
            "bpftrace-ready",
            &["unshare", "-m", "sh", "-c", &bt],
        )),
        Tool::Bpftrace => None,
    };
    // One start of each, not counted, first: the agent phase deleted namespaces of up to
    // 10,000 veth pairs, which the kernel unregisters afterwards under the RTNL lock, and a
    // start then waits for it (HOST_SLOW_START in report.rs); it also warms the page cache for
    // both tools alike.
    for tool in [Tool::Ppscope, Tool::Bpftrace] {
        let _ = start(tool);
    }
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..n {
        // Alternating: each tool starts first in every other round.
        let order = if round % 2 == 0 {
            [Tool::Ppscope, Tool::Bpftrace]
        } else {
            [Tool::Bpftrace, Tool::Ppscope]
        };
        for tool in order {
            let (samples, name) = match tool {
                Tool::Ppscope => (&mut ours, "ppscope"),
                Tool::Bpftrace => (&mut theirs, "bpftrace"),
            };
            match start(tool) {
                Some(Ok(ms)) => samples.push(ms),
                Some(Err(e)) => res.startup_notes.push(format!("host, {name}: {e}")),
                None => {}
            }
        }
    }
    if let Some(s) = Spread::of(&ours) {
        res.startup.push(StartupRow {
            place: "host".into(),
            tool: "ppscope diagnose (tracepoints)".into(),
            ms: s,
        });
    }
    if let Some(s) = Spread::of(&theirs) {
        res.startup.push(StartupRow {
            place: "host".into(),
            tool: "bpftrace 4 tracepoints".into(),
            ms: s,
        });
    }
    if !has_bt {
        res.startup_notes
            .push("host: bpftrace is not installed (`cargo xtask setup` installs it)".into());
    }
    res.startup_notes.dedup();
    Ok(())
}

/// Events in a simulate --json result: allocations plus frees of the profile at the current
/// size (each candidate ring size replays all of them).
pub fn sim_events(v: &serde_json::Value) -> u64 {
    v["results"].as_array().map_or(0, |rs| {
        rs.iter()
            .map(|r| {
                let c = &r["advice"]["current"];
                let g = |k: &str| c[k].as_u64().unwrap_or(0);
                g("allocs") + g("recycled_cached") + g("recycled_ring") + g("ring_full")
            })
            .sum()
    })
}

pub fn simulator(args: &BenchArgs, tools: &Tools, res: &mut Results) -> Result<()> {
    eprintln!("bench: simulator");
    let n = if args.quick { 1 } else { 5 };
    for scenario in ["gve-devmem-alltoall", "many-sockets", "healthy"] {
        let mut times = Vec::new();
        let mut events = 0;
        for _ in 0..n {
            let t = Instant::now();
            let out = Command::new(&tools.ppscope)
                .args(["simulate", "--scenario", scenario, "--json"])
                .output()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            if !out.status.success() {
                bail!(
                    "ppscope simulate --scenario {scenario}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            events = sim_events(&v);
        }
        let s = Spread::of(&times).context("no timings")?;
        res.simulator.push(SimRow {
            what: format!("simulate --scenario {scenario}"),
            pools: None,
            events,
            ms: s,
        });
    }
    let rec = std::env::temp_dir().join("ppscope-bench-pools.rec");
    // Only this run's recording: one left by an earlier run (`--only agent` makes it and does
    // not consume it) would add a row a quick run never has.
    if !args.quick && args.wants("agent") && rec.is_file() {
        let mut times = Vec::new();
        let mut pools = 0;
        let mut advised = 0;
        for _ in 0..n {
            let t = Instant::now();
            let out = Command::new(&tools.ppscope)
                .args(["diagnose", "--json", "--replay"])
                .arg(&rec)
                .output()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                pools = v["pools"].as_array().map_or(0, |p| p.len());
                advised = v["advice"].as_array().map_or(0, |a| a.len());
            }
        }
        if pools < 1000 {
            res.simulator_notes.push(format!(
                "The recording holds {pools} of the 1,000 pools: on this host only page hold and \
                 release are probed (tracepoints), and a packet through a warm pool fires \
                 neither, so most pools show no event while the recorder runs. No pool has \
                 advice either: advice needs the alloc and recycle hooks (fentry or kprobes), \
                 which this host refuses. Advice time for 1,000 pools is not measured here."
            ));
        }
        res.simulator.push(SimRow {
            what: format!("diagnose --replay (recording of the agent benchmark's pools; {advised} with advice)"),
            pools: Some(pools),
            events: 0,
            ms: Spread::of(&times).context("no timings")?,
        });
        let _ = std::fs::remove_file(&rec);
    } else {
        res.simulator_notes.push("No 1,000-pool recording (the agent benchmark makes it; it did not run or was --quick).".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_moved_when_a_count_of_its_moved() {
        let snap = serde_json::json!({ "pools": [
            // Listed for its advice, nothing counted: a light pool's figures are null.
            { "alloc": { "total": 0, "frag_calls": 0, "cache": null }, "recycle": { "total": null },
              "pages": { "allocated": 0, "released": 0 }, "advice": { "recycled_rate": 1.0 } },
            { "alloc": { "total": 0, "frag_calls": 3 }, "recycle": {}, "pages": {} },
            { "alloc": { "total": null }, "recycle": { "ring": 2 }, "pages": {} },
            { "alloc": {}, "recycle": {}, "pages": { "allocated": 0, "released": 64 } },
        ]});
        assert_eq!(pools_moved(&snap), 3);
        assert_eq!(pools_moved(&serde_json::json!({})), 0);
    }

    #[test]
    fn tops_pool_count_is_read_off_its_title() {
        let screen =
            "\n ppscope top kernel 6.18.44 │ 0 pools │ sort health ↓\nNo page_pool activity";
        assert_eq!(pools_in_title(screen), Some(0));
        let busy = " ppscope top kernel 7.2 │ 10000 pools, 3 starving │ sort health ↓";
        assert_eq!(pools_in_title(busy), Some(10_000));
        assert_eq!(
            pools_in_title(" ppscope top kernel 7.2 │ 1 pool │"),
            Some(1)
        );
        assert_eq!(pools_in_title("Waiting for the first snapshot"), None);
    }

    /// The kprobe recycle's counting column is its pair summed, as ppscope's pair and the
    /// empty pair are; a pair whose return never ran leaves the column blank, not half a pair.
    #[test]
    fn the_kprobe_recycles_counting_pair_is_summed_like_its_other_pairs() {
        let pairs = "prog pp_put_entry 100 30000\nprog pp_put_exit 100 50000\n\
                     prog bench_kp_put 100 12000\nprog bench_krp_put 100 13000\n\
                     prog bench_ckp_put 100 17000\n";
        // bench-probe prints only programs that ran: a return that never ran has no line.
        let window = |count_return_ran: bool| {
            let tail = if count_return_ran {
                "prog bench_ckrp_put 100 16000\n"
            } else {
                ""
            };
            format!("{pairs}{tail}")
        };
        let recycle = |res: &Results| {
            res.probe_cost
                .iter()
                .find(|r| r.hook == "recycle")
                .cloned()
                .expect("a kprobe recycle row")
        };
        let mut res = Results::default();
        cost_rows(
            "VM (TCG)",
            "kprobe",
            &[window(true), window(true)],
            &mut res,
        );
        let row = recycle(&res);
        assert_eq!(row.ours.median, 800.0);
        assert_eq!(row.floor.median, 250.0);
        assert_eq!(row.counting.map(|c| c.median), Some(330.0));

        let mut res = Results::default();
        cost_rows("VM (TCG)", "kprobe", &[window(false)], &mut res);
        assert!(recycle(&res).counting.is_none());
    }

    /// `bench-probe` runs copies of each empty program and prints each (in the order they
    /// were loaded, under the same name): the floor is their mean, the ratio is ppscope
    /// against that floor window by window, and the copies' spread pairs a pair's entry and
    /// return by copy.
    #[test]
    fn the_floor_is_the_mean_of_its_copies_and_the_ratio_is_taken_per_window() {
        let alloc = |ours_ns: u64, floor_ns: [u64; 3]| {
            let copies: String = floor_ns
                .iter()
                .map(|ns| format!("prog bench_fe_alloc 1000 {ns}\n"))
                .collect();
            format!("prog fe_alloc 1000 {ours_ns}\nprog bench_cfe_alloc 1000 120000\n{copies}")
        };
        // Floors of 150, 100 and 200 ns a call (their copies' means); ppscope 2.0, 1.0 and
        // 1.0 times them. Medians taken apart (200 / 150) would say 1.33.
        let windows = [
            alloc(300_000, [100_000, 150_000, 200_000]),
            alloc(100_000, [90_000, 100_000, 110_000]),
            alloc(200_000, [200_000, 200_000, 200_000]),
        ];
        let mut res = Results::default();
        cost_rows("VM (TCG)", "fentry", &windows, &mut res);
        let row = res.probe_cost.iter().find(|r| r.hook == "alloc").unwrap();
        assert_eq!(row.floor.median, 150.0);
        assert_eq!(row.ours.median, 200.0);
        assert_eq!(row.ratio.median, 1.0);
        assert_eq!((row.ratio.min, row.ratio.max), (1.0, 2.0));
        // A copy's calls, not the copies' sum: the events the hook saw.
        assert_eq!(row.calls, 3000);
        // The one count against the same floors: 0.8, 1.2 and 0.6.
        assert_eq!(row.counting_ratio.as_ref().map(|c| c.median), Some(0.8));
        let spread = row.floor_copies.as_ref().unwrap();
        assert_eq!((spread.min, spread.max), (1.0, 2.0));

        // The kprobe recycle's pair: copy k of the entry with copy k of the return.
        let pair = "prog pp_put_entry 100 30000\nprog pp_put_exit 100 50000\n\
                    prog bench_kp_put 100 10000\nprog bench_kp_put 100 20000\n\
                    prog bench_krp_put 100 10000\nprog bench_krp_put 100 10000\n";
        let m = parse_prog_lines(pair);
        assert_eq!(
            copies_spread(&m, &["bench_kp_put", "bench_krp_put"]),
            Some(1.5)
        );
        assert_eq!(
            per_call(&m, &["bench_kp_put", "bench_krp_put"]),
            Some((100, 250.0))
        );
        // One copy: no spread to show.
        assert_eq!(copies_spread(&m, &["pp_put_entry", "pp_put_exit"]), None);
    }
}

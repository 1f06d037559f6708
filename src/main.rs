use std::{
    io::{self, Write},
    path::PathBuf,
    process::ExitCode,
    thread,
    time::Duration,
};

use anyhow::Result;
use clap::{Parser, Subcommand};
use ppscope::{
    advice, advise_pools, btf, kernel,
    kernel_view::{self, KernelSample},
    lab, model,
    model::RawSample,
    probes,
    probes::{Backend, BackendChoice, ProbeOptions, Probes},
    record, report, scenario,
};

#[derive(Parser)]
#[command(
    name = "ppscope",
    version,
    about = "See the Linux page_pool: ring hit rates, slow path, recycling"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Durations and addresses are parsed by the library (`ppscope::args`), where the fuzz
/// targets reach the same code.
use ppscope::args::{parse_duration, parse_listen};

#[derive(clap::Args)]
struct ProbeArgs {
    /// Which probe backend to use: auto picks per hook what this kernel accepts.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Fail when any hook cannot be attached (hooks of a kernel module that is not loaded
    /// are not asked for).
    #[arg(long)]
    strict: bool,
}

impl ProbeArgs {
    fn start(&self) -> Result<Probes> {
        Probes::start(&ProbeOptions {
            backend: self.backend,
            only_ifindex: 0,
            strict: self.strict,
        })
    }
}

#[derive(clap::Args)]
struct DiagnoseArgs {
    /// How long to watch (5, 5s, 500ms, 2m); Ctrl-C ends the window early.
    #[arg(long, short, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Step of the timeline that lines up slow paths, NAPI and drops.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Print JSON (stable layout, see README) instead of text.
    #[arg(long)]
    json: bool,
    /// Only pools of this interface.
    #[arg(long)]
    dev: Option<String>,
    /// Read a recording (`ppscope record`) instead of the live kernel.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(clap::Args)]
struct AgentArgs {
    /// Where to serve /metrics, /api/v1/snapshot and /healthz.
    #[arg(long, default_value = "127.0.0.1:9464", value_parser = parse_listen)]
    listen: std::net::SocketAddr,
    /// Time between collections.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// At most this many pools are exported; the rest are counted in ppscope_series_dropped_total.
    #[arg(long, default_value_t = 2000)]
    max_pools: usize,
    /// A pool whose counters have not moved for this long leaves the metrics.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    grace: Duration,
    #[command(flatten)]
    probe: ProbeArgs,
}

/// `120x40`: columns by rows.
fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not COLSxROWS (e.g. 120x40)");
    let (c, r) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (c, r): (u16, u16) = (c.parse().map_err(|_| bad())?, r.parse().map_err(|_| bad())?);
    if c == 0 || r == 0 {
        return Err(bad());
    }
    Ok((c, r))
}

#[derive(clap::Args)]
struct TopArgs {
    /// Time between refreshes (+/- change it while running).
    #[arg(long, short, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Only pools of this interface.
    #[arg(long)]
    dev: Option<String>,
    /// Play a recording (`ppscope record`) instead of the live kernel.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sim", "connect"])]
    replay: Option<PathBuf>,
    /// Play a built-in scenario instead of the live kernel: gve-devmem-alltoall,
    /// many-sockets, healthy, or all of them.
    #[arg(long, value_name = "SCENARIO", conflicts_with = "connect")]
    sim: Option<String>,
    /// Show a remote `ppscope agent` (http://HOST:PORT) instead of this kernel.
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// Print one frame, one interval from now, as text and exit (scripts, tests, no terminal).
    #[arg(long)]
    once: bool,
    /// The frame size for --once.
    #[arg(long, default_value = "120x40", value_parser = parse_size, requires = "once")]
    size: (u16, u16),
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// A built-in workload: gve-devmem-alltoall, many-sockets, healthy.
    #[arg(long, conflicts_with = "replay")]
    scenario: Option<String>,
    /// Replay a recording's burst profiles at other ring sizes.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Only pools of this interface (with --replay).
    #[arg(long)]
    dev: Option<String>,
    /// The fast-path (recycled) rate a ring must reach.
    #[arg(long, default_value_t = advise_pools::DEFAULT_TARGET)]
    target: f64,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct RecordArgs {
    /// The recording to write.
    #[arg(long, short)]
    output: PathBuf,
    /// How long to record (Ctrl-C stops early; what was written stays readable).
    #[arg(long, short, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Time between samples: the grain a replay or simulation can see.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    interval: Duration,
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Live dashboard: every page_pool, its ring and slow path, and what to do about it.
    Top(TopArgs),
    /// Watch every page_pool for a while and report what it did.
    Diagnose(DiagnoseArgs),
    /// Record what the page_pools do to a file, for diagnose --replay (and simulate).
    Record(RecordArgs),
    /// Replay a burst profile (a scenario or a recording) at other ring sizes, and advise.
    Simulate(SimulateArgs),
    /// Run headless and export metrics for Prometheus (until SIGTERM or Ctrl-C).
    Agent(AgentArgs),
    /// Check what ppscope can measure on this kernel, and why not where it cannot.
    Doctor {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        probe: ProbeArgs,
    },
    /// Lab helpers (used by the VM lab and tests).
    #[command(hide = true)]
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
}

#[derive(Subcommand)]
enum LabCommand {
    /// Attach a pass-everything XDP program to DEV (gives a veth its page_pools) and hold it
    /// until this process is killed.
    Xdp { dev: String },
}

/// SIGINT/SIGTERM as an event: Ctrl-C ends a diagnose window early and the report still
/// comes (the probes detach when the process exits either way).
struct Interrupt {
    rx: std::sync::mpsc::Receiver<()>,
    handle: signal_hook::iterator::Handle,
}

impl Interrupt {
    fn new() -> Result<Self> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let (tx, rx) = std::sync::mpsc::channel();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                let _ = tx.send(());
            }
        });
        Ok(Self { rx, handle })
    }

    /// Sleeps up to `d`; true when interrupted.
    fn wait(&self, d: Duration) -> bool {
        self.rx.recv_timeout(d).is_ok()
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// Samples taken through a window, one per step, folded into timeline steps as they come.
struct Window {
    first: RawSample,
    last: RawSample,
    steps: Vec<model::TimelineStep>,
}

impl Window {
    fn new(first: RawSample) -> Self {
        Self {
            last: first.clone(),
            first,
            steps: Vec::new(),
        }
    }

    fn push(&mut self, cur: RawSample) {
        let netdevs = model::pool_netdevs(&cur);
        self.steps.push(model::timeline_step(
            cur.at.duration_since(self.first.at).as_secs_f64(),
            &self.last,
            &cur,
            &netdevs,
        ));
        self.last = cur;
    }

    /// Timeline steps of `interval` through fine-grained samples (the last always counts).
    fn from_samples(samples: &[RawSample], interval: Duration) -> Self {
        let mut w = Window::new(samples[0].clone());
        for (i, s) in samples.iter().enumerate().skip(1) {
            if s.at.duration_since(w.last.at) >= interval || i == samples.len() - 1 {
                w.push(s.clone());
            }
        }
        w
    }
}

/// What the source was and could measure, whichever source it was.
struct SourceInfo<'a> {
    kernel: String,
    coverage: &'a model::Coverage,
    hooks: &'a [probes::HookStatus],
    drop_reasons: &'a std::collections::HashMap<u32, String>,
}

fn window_snapshot(
    info: &SourceInfo,
    samples: &[RawSample],
    interval: Duration,
    kernel_samples: Option<(KernelSample, KernelSample)>,
    dev: Option<&str>,
) -> model::Snapshot {
    let kernel_samples_live = kernel_samples.is_some();
    let w = Window::from_samples(samples, interval);
    let mut snap = model::snapshot(
        info.kernel.clone(),
        &w.first,
        &w.last,
        info.coverage,
        info.hooks,
    );
    if let Some((a, b)) = kernel_samples {
        kernel_view::merge(&mut snap, &a, &b);
    }
    model::name_drop_reasons(&mut snap, info.drop_reasons);
    snap.timeline = model::keep_steps_of(w.steps, &snap.devices);
    advise_pools::attach(
        &mut snap,
        samples,
        info.coverage,
        advise_pools::DEFAULT_TARGET,
    );
    if kernel_samples_live {
        flag_unrebuilt_pools(&mut snap);
    }
    if let Some(dev) = dev {
        snap.pools.retain(|p| p.ifname.as_deref() == Some(dev));
        snap.devices.retain(|d| d.ifname.as_deref() == Some(dev));
    }
    snap
}

/// A device whose configured rx ring (ethtool -g) no longer matches its pool: the resize did
/// not rebuild the pool (virtio-net builds it once, at probe). Said in the pool's advice.
fn flag_unrebuilt_pools(snap: &mut model::Snapshot) {
    for p in &mut snap.pools {
        let (Some(name), Some(index), Some(driver), Some(ring)) =
            (p.ifname.clone(), p.ifindex, p.driver.clone(), p.ring_size)
        else {
            continue;
        };
        let Some(rx) = ppscope::ethtool::rx_ring(&name, index) else {
            continue;
        };
        p.device_rx_ring = Some(rx);
        match ppscope::ethtool::pool_size_for(&driver, rx) {
            Some(expected) if expected != ring => {
                let note = format!(
                    "{name}'s rx ring is {rx} (ethtool -g) but its page_pool still has {ring} entries: the resize did not rebuild the pool ({driver} builds it when the device probes)"
                );
                if let Some(a) = &mut p.advice {
                    a.evidence.push(note);
                    a.resize_suspect = Some(ring);
                }
            }
            _ => {}
        }
    }
}

/// Fine-grained sampling for burst profiles: 10 ms, coarser for long windows so that a
/// window keeps at most a few thousand samples in memory.
fn profile_interval(duration: Duration) -> Duration {
    Duration::from_millis(10).max(duration / 6000)
}

fn diagnose(opts: &DiagnoseArgs) -> Result<()> {
    let snap = match &opts.replay {
        Some(path) => {
            let rec = record::Recording::read(path)?;
            let samples = rec.samples();
            let info = SourceInfo {
                kernel: rec.header.kernel.clone(),
                coverage: &rec.header.coverage,
                hooks: &rec.header.hooks,
                drop_reasons: &rec.header.drop_reasons,
            };
            window_snapshot(&info, &samples, opts.interval, None, opts.dev.as_deref())
        }
        None => {
            let mut probes = opts.probe.start()?;
            let attached = probes.hooks.iter().filter(|h| h.attached()).count();
            // The signal handler and the baseline come before the message that tells a
            // script the window has started: nothing it does after that can be missed.
            let interrupt = Interrupt::new()?;
            let first = probes.sample()?;
            let kernel_first = KernelSample::read();
            eprintln!(
                "ppscope: watching page_pools for {} ({attached}/{} hooks attached)",
                humantime::format_duration(opts.duration),
                probes.hooks.len()
            );
            let step = profile_interval(opts.duration);
            let mut samples = vec![first];
            loop {
                let elapsed = samples.last().unwrap().at.duration_since(samples[0].at);
                let left = opts.duration.saturating_sub(elapsed);
                let interrupted = left.is_zero() || interrupt.wait(left.min(step));
                for change in probes.refresh_modules() {
                    eprintln!("ppscope: {change}");
                }
                samples.push(probes.sample()?);
                let elapsed = samples.last().unwrap().at.duration_since(samples[0].at);
                if interrupted || elapsed >= opts.duration {
                    break;
                }
            }
            let kernel_last = KernelSample::read();
            let info = SourceInfo {
                kernel: kernel::release(),
                coverage: &probes.coverage,
                hooks: &probes.hooks,
                drop_reasons: &probes.drop_reasons,
            };
            window_snapshot(
                &info,
                &samples,
                opts.interval,
                Some((kernel_first, kernel_last)),
                opts.dev.as_deref(),
            )
        }
    };
    let out = if opts.json {
        serde_json::to_string_pretty(&report::json(&snap))? + "\n"
    } else {
        report::text(&snap)
    };
    print_out(&out)
}

/// `ppscope top`: picks the source; the dashboard does not know which one feeds it.
fn top(opts: &TopArgs) -> Result<()> {
    use ppscope::source::{ConnectSource, LiveSource, OnlyDevice, ReplaySource, SimSource, Source};
    use std::io::IsTerminal;
    if opts.interval < Duration::from_millis(100) {
        anyhow::bail!("--interval must be at least 100ms");
    }
    if !opts.once && !io::stdout().is_terminal() {
        anyhow::bail!("top needs a terminal; use --once for one text frame, or diagnose --json");
    }
    let source: Box<dyn Source> = match (&opts.replay, &opts.sim, &opts.connect) {
        (Some(path), _, _) => Box::new(ReplaySource::open(path)?),
        (_, Some(name), _) => Box::new(SimSource::new(name)?),
        (_, _, Some(url)) => Box::new(ConnectSource::new(url)?),
        _ => Box::new(LiveSource::new(opts.probe.start()?)?),
    };
    let source: Box<dyn Source> = match &opts.dev {
        Some(dev) => Box::new(OnlyDevice {
            inner: source,
            dev: dev.clone(),
        }),
        None => source,
    };
    if opts.once {
        let (cols, rows) = opts.size;
        // After the baseline: a script that starts traffic on this line loses nothing.
        eprintln!(
            "ppscope: top: one frame of {} from {}",
            humantime::format_duration(opts.interval),
            source.describe()
        );
        let frame = ppscope_tui::once(source, opts.interval, cols, rows)?;
        return print_out(&frame);
    }
    ppscope_tui::run(source, opts.interval)
}

fn simulate_cmd(opts: &SimulateArgs) -> Result<()> {
    let mut results = Vec::new();
    match (&opts.scenario, &opts.replay) {
        (Some(name), None) => {
            let sc = scenario::by_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "no scenario named '{name}' (there are: {})",
                    scenario::NAMES.join(", ")
                )
            })?;
            let a = advice::advise(&sc.profile, &sc.context, opts.target);
            results.push(serde_json::json!({
                "scenario": sc.name,
                "description": sc.description,
                "summary": a.summary(),
                "advice": a,
            }));
        }
        (None, Some(path)) => {
            let rec = record::Recording::read(path)?;
            let samples = rec.samples();
            let advice = advise_pools::advise_window(&samples, &rec.header.coverage, opts.target);
            let snap = model::snapshot(
                rec.header.kernel.clone(),
                &samples[0],
                samples.last().unwrap(),
                &rec.header.coverage,
                &rec.header.hooks,
            );
            for p in &snap.pools {
                if opts
                    .dev
                    .as_deref()
                    .is_some_and(|d| p.ifname.as_deref() != Some(d))
                {
                    continue;
                }
                let Some(a) = advice.get(&p.addr) else {
                    continue;
                };
                results.push(serde_json::json!({
                    "pool": p.pool,
                    "ifname": p.ifname,
                    "driver": p.driver,
                    "measured_fast_path_rate": p.fast_path_rate,
                    "summary": a.summary(),
                    "advice": a,
                }));
            }
            if results.is_empty() {
                anyhow::bail!(
                    "no pool in {} has a profile to replay (needs the alloc and recycle probes: kprobes or fentry)",
                    path.display()
                );
            }
        }
        _ => anyhow::bail!("give either --scenario NAME or --replay FILE"),
    }
    let out = if opts.json {
        serde_json::to_string_pretty(&serde_json::json!({ "version": 1, "results": results }))?
            + "\n"
    } else {
        let mut t = String::new();
        for r in &results {
            let name = r["scenario"]
                .as_str()
                .or(r["ifname"].as_str())
                .unwrap_or("pool");
            t += &format!("{name}\n  {}\n", r["summary"].as_str().unwrap_or(""));
            if let Some(ev) = r["advice"]["evidence"].as_array() {
                for e in ev {
                    t += &format!("    - {}\n", e.as_str().unwrap_or(""));
                }
            }
            t += &format!(
                "  confidence: {} ({})\n\n",
                r["advice"]["confidence"]["level"].as_str().unwrap_or("?"),
                r["advice"]["confidence"]["reason"].as_str().unwrap_or("")
            );
        }
        t
    };
    print_out(&out)
}

/// The agent: collect every interval, keep the snapshot since start for the HTTP side, stop
/// cleanly on SIGTERM/SIGINT (the probes detach as the process ends).
fn agent_cmd(opts: &AgentArgs) -> Result<()> {
    use std::{
        collections::{HashMap, HashSet},
        sync::{Arc, Mutex},
        time::Instant,
    };
    let interrupt = Interrupt::new()?;
    // Listen first: a busy port is reported before anything is loaded into the kernel.
    let shared = Arc::new(Mutex::new(ppscope::serve::Shared::default()));
    let server = ppscope::serve::HttpServer::start(
        opts.listen,
        shared.clone(),
        opts.interval,
        opts.max_pools,
    )?;
    let mut live = ppscope::source::LiveSource::new(opts.probe.start()?)?;
    let hooks = live.hooks();
    eprintln!(
        "ppscope: agent serving http://{}/metrics every {} ({}/{} hooks attached)",
        server.addr,
        humantime::format_duration(opts.interval),
        hooks.iter().filter(|h| h.attached()).count(),
        hooks.len()
    );
    let mut last_moved: HashMap<String, (u64, Instant)> = HashMap::new();
    let mut stats = ppscope::exporter::SelfStats::default();
    loop {
        if interrupt.wait(opts.interval) {
            break;
        }
        let started = Instant::now();
        let collection = match live.collect(true) {
            Ok(c) => c,
            Err(e) => {
                // Keep serving the last values; say so in the self-metrics.
                stats.collection_errors += 1;
                eprintln!("ppscope: collection failed: {e:#}");
                shared.lock().expect("not poisoned").stats = stats.clone();
                continue;
            }
        };
        for change in &collection.module_changes {
            eprintln!("ppscope: {change}");
        }
        stats.map_entries = collection.map_entries;
        stats.map_capacity = ppscope_common::MAX_POOLS as usize;
        let mut snap = collection.since_start.expect("asked for");
        // Pools that stopped moving leave the metrics after the grace period.
        let now = Instant::now();
        let listed: HashSet<String> = snap.pools.iter().map(|p| p.pool.clone()).collect();
        snap.pools.retain(|p| {
            let activity = p.activity();
            let entry = last_moved.entry(p.pool.clone()).or_insert((activity, now));
            if entry.0 != activity {
                *entry = (activity, now);
            }
            now.duration_since(entry.1) <= opts.grace
        });
        // Forget only pools the kernel side no longer lists: forgetting a quiet pool that is
        // still listed would make it new again, and bring it back after its grace.
        last_moved.retain(|pool, _| listed.contains(pool));
        stats.collections += 1;
        stats.last_collection_seconds = started.elapsed().as_secs_f64();
        stats.pools_tracked = snap.pools.len();
        let mut sh = shared.lock().expect("not poisoned");
        let last_scrape = sh.stats.last_scrape_seconds;
        sh.stats = stats.clone();
        sh.stats.last_scrape_seconds = last_scrape;
        sh.snapshot = Some(snap);
        // The last interval alone, for remote dashboards (`top --connect`): rates, not totals.
        sh.interval_snapshot = Some(collection.interval);
        sh.last_collection = Some(now);
    }
    server.stop();
    eprintln!("ppscope: agent stopped");
    Ok(())
}

fn record_cmd(opts: &RecordArgs) -> Result<()> {
    let mut probes = opts.probe.start()?;
    let header = record::Header {
        ppscope_version: env!("CARGO_PKG_VERSION").into(),
        kernel: kernel::release(),
        started_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        interval_ns: opts.interval.as_nanos() as u64,
        coverage: probes.coverage,
        hooks: probes.hooks.clone(),
        drop_reasons: probes.drop_reasons.clone(),
    };
    let mut writer = record::Writer::create(&opts.output, &header)?;
    let interrupt = Interrupt::new()?;
    let first = probes.sample()?;
    let start = first.at;
    writer.append(&record::Frame::from_sample(&first, start))?;
    eprintln!(
        "ppscope: recording page_pools to {} for {} (every {})",
        opts.output.display(),
        humantime::format_duration(opts.duration),
        humantime::format_duration(opts.interval)
    );
    let mut frames = 1u64;
    loop {
        let elapsed = start.elapsed();
        let left = opts.duration.saturating_sub(elapsed);
        let interrupted = left.is_zero() || interrupt.wait(left.min(opts.interval));
        for change in probes.refresh_modules() {
            eprintln!("ppscope: {change}");
        }
        let s = probes.sample()?;
        writer.append(&record::Frame::from_sample(&s, start))?;
        frames += 1;
        if interrupted || s.at.duration_since(start) >= opts.duration {
            break;
        }
    }
    eprintln!(
        "ppscope: {frames} samples written to {}",
        opts.output.display()
    );
    Ok(())
}

/// Writes the result; a closed pipe (`| head`) is not an error worth a panic.
fn print_out(text: &str) -> Result<()> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn doctor(json: bool, probe: &ProbeArgs) -> Result<()> {
    let probes = probe.start()?;
    if json {
        let v = serde_json::json!({
            "kernel": kernel::release(),
            "kprobes": kernel::has_kprobe_pmu(),
            "btf": btf::VMLINUX_BTF,
            "hooks": probes.hooks,
            "fields": probes.fields,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("kernel {}", kernel::release());
    let served_by = |b: Backend| probes.hooks.iter().filter(|h| h.backend == Some(b)).count();
    let refused = |what: &str| {
        probes
            .hooks
            .iter()
            .flat_map(|h| &h.reasons)
            .find(|r| r.starts_with(what))
            .cloned()
    };
    for (name, backend, prefix) in [
        ("fentry/fexit", Backend::Fentry, "fentry"),
        ("kprobes", Backend::Kprobe, "kprobe"),
        ("tracepoints", Backend::Tracepoint, "tracepoint"),
    ] {
        let n = served_by(backend);
        let line = if n > 0 {
            format!("serve {n} hook(s)")
        } else if let Some(r) = refused(prefix) {
            format!(
                "unavailable: {}",
                r.split_once(": ").map_or(r.as_str(), |(_, why)| why)
            )
        } else {
            "not used".into()
        };
        println!("{name:<13} {line}");
    }
    println!("\nhooks");
    for h in &probes.hooks {
        match h.backend {
            Some(b) => println!(
                "  {:<15} {:<11} {}",
                h.hook,
                format!("{b:?}").to_lowercase(),
                h.targets.join(", ")
            ),
            None => println!(
                "  {:<15} {:<11} {} (lost: {})",
                h.hook,
                "missing",
                h.reasons.join("; "),
                h.loses
            ),
        }
    }
    println!("\nkernel fields (from BTF)");
    for f in &probes.fields {
        match (&f.path, f.offset) {
            (Some(p), Some(o)) => println!("  {:<16} {p} @ {o}", f.name),
            _ => println!(
                "  {:<16} unknown on this kernel: that column will show '?'",
                f.name
            ),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Top(args) => top(&args),
        Command::Diagnose(args) => diagnose(&args),
        Command::Record(args) => record_cmd(&args),
        Command::Simulate(args) => simulate_cmd(&args),
        Command::Agent(args) => agent_cmd(&args),
        Command::Doctor { json, probe } => doctor(json, &probe),
        Command::Lab {
            command: LabCommand::Xdp { dev },
        } => lab::attach_xdp_pass(&dev).map(|_held| {
            println!("xdp_pass attached to {dev}; it detaches when this process ends");
            loop {
                thread::park();
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ppscope: {e:#}");
            ExitCode::FAILURE
        }
    }
}

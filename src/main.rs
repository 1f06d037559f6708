//! `ppscope`: argument parsing and dispatch. What each command does lives in the library
//! (`agent/`): sources, the pipeline, reports and the agent; the dashboard in `tui/`.
use std::{
    io::{self, Write},
    path::PathBuf,
    process::ExitCode,
    thread,
    time::Duration,
};

mod logging;
mod manual;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ppscope::{
    advice,
    export::agent::{self as agent, AgentOptions},
    host::signals::Interrupt,
    probes::{lab, BackendChoice, ProbeOptions, Probes},
    recording, report,
    snapshot::Detail,
    source::{self, live},
};

#[derive(Parser)]
#[command(
    name = "ppscope",
    version = VERSION,
    about = "See the Linux page_pool: ring hit rates, slow path, recycling"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Whether the command loads the probes with `--bpf-log` (the logger must then show
    /// their lines).
    fn bpf_log(&self) -> bool {
        let probe = match &self.command {
            Command::Top(a) => &a.probe,
            Command::Diagnose(a) => &a.probe,
            Command::Record(a) => &a.probe,
            Command::Agent(a) => &a.probe,
            Command::Doctor { probe, .. } => probe,
            Command::Simulate(_)
            | Command::Completions { .. }
            | Command::ManPages { .. }
            | Command::Lab { .. } => return false,
        };
        probe.bpf_log
    }
}

/// Durations and addresses are parsed by the library (`ppscope::args`), where the fuzz
/// targets reach the same code.
use ppscope::args::{parse_agent_url, parse_duration, parse_listen, parse_size, parse_target};

#[derive(clap::Args)]
struct ProbeArgs {
    /// Which probe backend to use: auto picks per hook what this kernel accepts.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Fail when any hook cannot be attached (hooks of a kernel module that is not loaded
    /// are not asked for).
    #[arg(long)]
    strict: bool,
    /// Pools tracked at once (the kernel maps' size; past it the least recently seen pool
    /// is evicted and counted). Each pool costs about 170 bytes of kernel memory per CPU plus
    /// 1.5 KB; give it about twice the pool count.
    #[arg(long, default_value_t = ppscope_common::MAX_POOLS,
          value_parser = clap::value_parser!(u32).range(2..=1_048_576))]
    map_capacity: u32,
    /// light: no program on the per-page allocation or recycle path, on every NAPI poll or
    /// timing every page's return (the split comes from the kernel's page_pool stats where it
    /// keeps them; ring hit rate, slow path, returned pages and the advice from per-refill
    /// events; NAPI figures and page-return latency '?'). full: every page and poll counted,
    /// exact split on any kernel. Default: light for agent and top, full for diagnose, record
    /// and doctor.
    #[arg(long, value_enum)]
    detail: Option<Detail>,
    /// Show the kernel programs' own log lines (rare events: a map that refused an entry, a
    /// kernel state they do not expect, each pool's identity as first read), as
    /// `ppscope: <level> from ppscope::bpf: …`; also on with RUST_LOG=ppscope::bpf=debug.
    /// Off, they cost nothing: the kernel drops their code at load.
    #[arg(long)]
    bpf_log: bool,
    /// Report ppscope's own cost (its programs' run time) by turning on the kernel's BPF
    /// run-time stats while it runs. They are kept for every BPF program on the host, not
    /// only ppscope's: two clock reads around each run, several times an empty XDP program's
    /// run on the development host. So they are off unless asked. Needs CAP_SYS_ADMIN. Where
    /// kernel.bpf_stats_enabled=1 keeps them on anyway, the cost is reported without this.
    #[arg(long)]
    bpf_stats: bool,
}

impl ProbeArgs {
    /// The probes' options, at `--detail` or else the command's own default level.
    fn options(&self, default_detail: Detail) -> ProbeOptions {
        ProbeOptions {
            backend: self.backend,
            only_ifindex: 0,
            strict: self.strict,
            map_capacity: self.map_capacity,
            detail: self.detail.unwrap_or(default_detail),
            show_addresses: false,
            bpf_log: self.bpf_log,
            bpf_stats: self.bpf_stats,
        }
    }

    fn start(&self, default_detail: Detail) -> Result<Probes> {
        Probes::start(&self.options(default_detail))
    }

    /// As [`Self::start`], pools showing their kernel address if `show_addresses`.
    fn start_showing(&self, default_detail: Detail, show_addresses: bool) -> Result<Probes> {
        Probes::start(&ProbeOptions {
            show_addresses,
            ..self.options(default_detail)
        })
    }
}

/// The help of `--show-addresses` (diagnose and top, live only).
const SHOW_ADDRESSES: &str = "Show each pool's kernel address (its struct page_pool) beside \
its name, to follow it with the kernel's own tools. Off by default: an address hands KASLR to \
whoever reads the output. The agent and recordings never carry one.";

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
    /// Also write the report as one self-contained HTML page (verdict, timeline, histograms,
    /// advice curve) to attach to a ticket.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Only pools of this interface.
    #[arg(long)]
    dev: Option<String>,
    /// Read a recording (`ppscope record`) instead of the live kernel (its window is the
    /// recording's: no --duration, and no probes to choose).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["duration", "backend", "strict", "detail", "map_capacity", "show_addresses", "bpf_log", "bpf_stats"])]
    replay: Option<PathBuf>,
    #[arg(long, help = SHOW_ADDRESSES)]
    show_addresses: bool,
    /// Exit 3 when a pool needs attention (its verdict over the window is warn or starving),
    /// after the report: for scripts and health checks.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(clap::Args)]
struct AgentArgs {
    /// Where to serve /metrics, /api/v1/snapshot and /healthz.
    #[arg(long, default_value = "127.0.0.1:9464", value_parser = parse_listen)]
    listen: std::net::SocketAddr,
    /// Time between collections (at least 100ms).
    #[arg(long, default_value = "1s", value_parser = parse_refresh)]
    interval: Duration,
    /// At most this many pools are exported (at least 1); the rest are counted in
    /// ppscope_series_dropped_total.
    #[arg(long, default_value_t = 2000, value_parser = parse_max_pools)]
    max_pools: usize,
    /// A pool whose counters have not moved for this long leaves the metrics.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    grace: Duration,
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(clap::Args)]
struct TopArgs {
    /// Time between refreshes, at least 100ms (+/- change it while running).
    #[arg(long, short, default_value = "1s", value_parser = parse_refresh)]
    interval: Duration,
    /// Only pools of this interface.
    #[arg(long)]
    dev: Option<String>,
    /// Play a recording (`ppscope record`) instead of the live kernel.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sim", "connect", "backend", "strict", "detail", "map_capacity", "show_addresses", "bpf_log", "bpf_stats"])]
    replay: Option<PathBuf>,
    /// Play a built-in scenario instead of the live kernel (`all`: one pool per scenario; its
    /// devices are examples, so no --dev).
    #[arg(long, value_name = "SCENARIO", conflicts_with_all = ["connect", "dev", "backend", "strict", "detail", "map_capacity", "show_addresses", "bpf_log", "bpf_stats"],
          value_parser = scenario_or_all())]
    sim: Option<String>,
    /// Show a remote `ppscope agent` (http://HOST:PORT) instead of this kernel.
    #[arg(long, value_name = "URL", value_parser = parse_agent_url,
          conflicts_with_all = ["backend", "strict", "detail", "map_capacity", "show_addresses", "bpf_log", "bpf_stats"])]
    connect: Option<String>,
    #[arg(long, help = SHOW_ADDRESSES)]
    show_addresses: bool,
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
#[command(group(clap::ArgGroup::new("profile").required(true).args(["scenario", "replay"])))]
struct SimulateArgs {
    /// A built-in workload.
    #[arg(long, value_parser = scenario_names())]
    scenario: Option<String>,
    /// Replay a recording's burst profiles at other ring sizes.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Only pools of this interface (with --replay; a scenario has its own).
    #[arg(long, conflicts_with = "scenario")]
    dev: Option<String>,
    /// The recycled share a ring must reach, above 0 and below 1 (0.99 is 99%).
    #[arg(long, default_value_t = advice::DEFAULT_TARGET, value_parser = parse_target,
          allow_hyphen_values = true)]
    target: f64,
    /// Print JSON (stable layout, see README) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the advice as one self-contained HTML page (its curve, its evidence).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RecordArgs {
    /// The recording to write.
    #[arg(long, short)]
    output: PathBuf,
    /// How long to record (Ctrl-C stops early; what was written stays readable).
    #[arg(long, short, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Time between samples: the grain a replay or simulation can see (at least 1ms).
    #[arg(long, default_value = "10ms", value_parser = parse_sample_step)]
    interval: Duration,
    #[command(flatten)]
    probe: ProbeArgs,
}

/// The scenarios `simulate --scenario` knows.
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(advice::scenario::NAMES)
}

/// The scenarios `top --sim` knows, and `all`.
fn scenario_or_all() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(advice::scenario::NAMES.iter().copied().chain(["all"]))
}

/// A dashboard refresh: a duration of at least 100 ms.
fn parse_refresh(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!("'{s}' is shorter than 100ms"));
    }
    Ok(d)
}

/// A recording's step: below a millisecond the recorder would do nothing but read the maps
/// (a sample of many pools takes longer), and the file would grow by a frame each time.
fn parse_sample_step(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{s}' is shorter than 1ms"));
    }
    Ok(d)
}

/// At least one pool exported: with none, /metrics would hold no pool however many moved.
fn parse_max_pools(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a count of pools of at least 1")),
    }
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
        /// Print JSON (stable layout, see README) instead of text.
        #[arg(long)]
        json: bool,
        /// A preflight for scripts: exit 1 when any hook cannot be attached (--strict's rule),
        /// after the report.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        probe: ProbeArgs,
    },
    /// Print the shell completion script for SHELL (the package installs bash, zsh and fish's).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages, ppscope.1 and one per command, into DIR (`cargo xtask package`).
    #[command(hide = true)]
    ManPages { dir: PathBuf },
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

fn diagnose(opts: &DiagnoseArgs) -> Result<()> {
    // A path that cannot be written is said before the window, not after it.
    let html = opts.html.as_deref().map(HtmlFile::create).transpose()?;
    let snap = match &opts.replay {
        Some(path) => source::replay::diagnose(
            &read_recording(path, opts.dev.as_deref(), false)?,
            opts.interval,
            opts.dev.as_deref(),
        ),
        None => {
            check_device(opts.dev.as_deref())?;
            let mut probes = opts
                .probe
                .start_showing(Detail::Full, opts.show_addresses)?;
            let hooks = &probes.facts.hooks;
            let (attached, all) = (hooks.iter().filter(|h| h.attached()).count(), hooks.len());
            let detail = probes.facts.detail.name();
            // The signal handler and the baseline come before the message that tells a
            // script the window has started: nothing it does after that can be missed.
            let interrupt = Interrupt::new()?;
            let watch = live::DiagnoseOptions {
                duration: opts.duration,
                interval: opts.interval,
                only_dev: opts.dev.as_deref(),
            };
            live::diagnose(
                &mut probes,
                &watch,
                |d| interrupt.wait(d),
                || {
                    log::info!(
                        "watching page_pools for {} (--detail {detail}, {attached}/{all} hooks attached)",
                        humantime::format_duration(opts.duration),
                    )
                },
            )?
        }
    };
    let out = if opts.json {
        serde_json::to_string_pretty(&report::json(&snap))? + "\n"
    } else {
        report::text(&snap)
    };
    // The text first: if the page cannot be written, the window's report is not lost.
    print_out(&out)?;
    if let Some(file) = html {
        file.finish(&report::html::diagnose(&snap))?;
    }
    let findings = ppscope::snapshot::health::findings(&snap);
    if opts.check && !findings.is_empty() {
        let named: Vec<String> = findings
            .iter()
            .map(|(p, h)| {
                let dev = p.ifname.as_deref().unwrap_or("a pool");
                format!("{dev} ({}) {}", p.pool, h.name())
            })
            .collect();
        return Err(Exit::findings(format!(
            "{} pool(s) need attention: {}",
            findings.len(),
            named.join(", ")
        ))
        .into());
    }
    Ok(())
}

/// A new temporary file in the directory of `path` (the file a command will write, named by
/// `flag`), readable by all: a path that cannot take a file is a bad argument (exit 2), said
/// before any work. Never an existing file or a link followed.
fn temp_beside(flag: &str, path: &std::path::Path) -> Result<tempfile::NamedTempFile> {
    if path.is_dir() {
        return Err(Exit::bad_argument(format!(
            "{flag} {}: a directory, not a file",
            path.display()
        ))
        .into());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    // In the file's own directory, so a rename stays on one file system; readable by all,
    // like any report meant to be shared (tempfile's own default is the owner only).
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(".ppscope-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|e| {
            let why = if dir.is_dir() {
                // The OS's reason (permissions, a read-only file system), without the
                // error's number or tempfile's name for the file it tried ("Permission denied
                // (os error 13) at path …").
                let text = e.to_string();
                let end = [" (os error", " at path"]
                    .iter()
                    .filter_map(|cut| text.find(cut))
                    .min()
                    .unwrap_or(text.len());
                text[..end].to_lowercase()
            } else {
                "no such directory".into()
            };
            Exit::bad_argument(format!(
                "{flag} {}: cannot create a file in {}: {why}",
                path.display(),
                dir.display(),
            ))
            .into()
        })
}

/// An HTML report being written: a temporary file made beside it before the work (a path
/// that cannot be written fails first), filled and moved into place at the end, so a reader
/// never sees half a page and a failed run leaves nothing behind (tempfile removes it).
struct HtmlFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl HtmlFile {
    /// A path that cannot take the report is a bad argument (exit 2), said before any work.
    fn create(path: &std::path::Path) -> Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            tmp: temp_beside("--html", path)?,
        })
    }

    fn finish(mut self, html: &str) -> Result<()> {
        let cannot = || format!("cannot write the HTML report to {}", self.path.display());
        self.tmp
            .write_all(html.as_bytes())
            .and_then(|()| self.tmp.as_file().sync_all())
            .with_context(cannot)?;
        self.tmp
            .persist(&self.path)
            .map_err(|e| e.error)
            .with_context(cannot)?;
        log::info!("wrote the HTML report to {}", self.path.display());
        Ok(())
    }
}

/// `ppscope top`: picks the source; the dashboard does not know which one feeds it.
fn top(opts: &TopArgs) -> Result<()> {
    use ppscope::source::{ConnectSource, LiveSource, OnlyDevice, ReplaySource, SimSource, Source};
    use std::io::IsTerminal;
    if !opts.once && !io::stdout().is_terminal() {
        anyhow::bail!("top needs a terminal; use --once for one text frame, or diagnose --json");
    }
    let source: Box<dyn Source> = match (&opts.replay, &opts.sim, &opts.connect) {
        (Some(path), _, _) => Box::new(ReplaySource::of(
            &read_recording(path, opts.dev.as_deref(), false)?,
            path,
        )),
        (_, Some(name), _) => Box::new(SimSource::new(name)?),
        (_, _, Some(url)) => Box::new(ConnectSource::new(url)?),
        _ => {
            check_device(opts.dev.as_deref())?;
            let probes = opts
                .probe
                .start_showing(Detail::Light, opts.show_addresses)?;
            Box::new(LiveSource::new(probes)?)
        }
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
        log::info!(
            "top: one frame of {} from {}",
            humantime::format_duration(opts.interval),
            source.describe()
        );
        let frame = ppscope_tui::once(source, opts.interval, cols, rows)?;
        return print_out(&frame);
    }
    let _held = logging::Held::new();
    ppscope_tui::run(source, opts.interval)
}

fn simulate_cmd(opts: &SimulateArgs) -> Result<()> {
    use report::simulate;
    let html = opts.html.as_deref().map(HtmlFile::create).transpose()?;
    let results = match (&opts.scenario, &opts.replay) {
        (Some(name), None) => simulate::scenario(name, opts.target)?,
        (None, Some(path)) => {
            let rec = read_recording(path, opts.dev.as_deref(), true)?;
            let name = path.display().to_string();
            simulate::recording(&rec, &name, opts.dev.as_deref(), opts.target)?
        }
        _ => unreachable!("clap requires one of --scenario and --replay"),
    };
    let out = if opts.json {
        serde_json::to_string_pretty(&simulate::json(&results))? + "\n"
    } else {
        simulate::text(&results)
    };
    print_out(&out)?;
    match html {
        Some(file) => file.finish(&report::html::simulate(&results)),
        None => Ok(()),
    }
}

fn agent_cmd(opts: &AgentArgs) -> Result<()> {
    let options = AgentOptions {
        listen: opts.listen,
        interval: opts.interval,
        max_pools: opts.max_pools,
        grace: opts.grace,
    };
    let probes = opts.probe.options(Detail::Light);
    agent::runtime()?.block_on(agent::run(&options, move || Probes::start(&probes)))
}

fn record_cmd(opts: &RecordArgs) -> Result<()> {
    // A path that cannot take the recording is said before the probes load (the file itself
    // is made once they have, so a failed start leaves an earlier recording of that name).
    drop(temp_beside("--output", &opts.output)?);
    let mut probes = opts.probe.start(Detail::Full)?;
    let header = recording::Header::new(&probes.facts, opts.interval);
    let mut writer = recording::Writer::create(&opts.output, &header)?;
    let cannot_simulate = probes.facts.advice_unavailable();
    let interrupt = Interrupt::new()?;
    let recorded = live::record(
        &mut probes,
        &mut writer,
        opts.duration,
        opts.interval,
        |d| interrupt.wait(d),
        || {
            log::info!(
                "recording page_pools to {} for {} (every {})",
                opts.output.display(),
                humantime::format_duration(opts.duration),
                humantime::format_duration(opts.interval)
            );
            if let Some(why) = cannot_simulate {
                log::warn!("this recording will replay in diagnose and top but cannot feed simulate: {why}");
            }
        },
    )?;
    log::info!(
        "{} samples written to {}",
        recorded.samples,
        opts.output.display()
    );
    if let Some(note) = recorded.pace_note(opts.interval) {
        log::warn!("{note}");
    }
    Ok(())
}

/// Writes the result; a closed pipe (`| head`) is not an error worth a panic.
fn print_out(text: &str) -> Result<()> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}

/// The report even when ppscope could not run here (that is when it is needed), then the
/// reason in one sentence and exit 1.
fn doctor(json: bool, check: bool, probe: &ProbeArgs) -> Result<()> {
    let probes = Probes::attach(&probe.options(Detail::Full))?;
    let netlink = ppscope::host::netlink::NetlinkSample::read();
    let out = if json {
        let report = report::doctor::json(&probes.facts, &probes.fields, &netlink);
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        report::doctor::text(&probes.facts, &probes.fields, &netlink)
    };
    print_out(&out)?;
    // The flag that asked for it names the refusal.
    let strict = match (check, probe.strict) {
        (true, _) => Some("--check"),
        (false, true) => Some("--strict"),
        (false, false) => None,
    };
    match probes.refusal(strict) {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// An end with an exit code of its own (README's exit codes), its message one sentence.
#[derive(Debug)]
struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    /// An argument that parsed but names nothing real: exit 2, like clap's own refusals.
    fn bad_argument(message: String) -> Self {
        Self { code: 2, message }
    }

    /// What `diagnose --check` found, after the report: exit 3.
    fn findings(message: String) -> Self {
        Self { code: 3, message }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// A recording to replay, whose devices include `dev` if one is asked for (devices with a pool
/// when `pools_only`: a simulation replays pools): a name it does not hold is a typo to say,
/// not an empty report (exit 2, naming the devices it holds).
fn read_recording(
    path: &std::path::Path,
    dev: Option<&str>,
    pools_only: bool,
) -> Result<recording::Recording> {
    let rec = recording::Recording::read(path)?;
    if let Some(d) = dev {
        let names = rec.device_names(pools_only);
        if !names.contains(d) {
            let held = if names.is_empty() {
                "it names none".to_string()
            } else {
                let names: Vec<String> = names.into_iter().collect();
                format!("it holds {}", names.join(", "))
            };
            let what = if pools_only {
                "pool on a device"
            } else {
                "device"
            };
            return Err(Exit::bad_argument(format!(
                "--dev {d}: no {what} of that name in {} ({held})",
                path.display()
            ))
            .into());
        }
    }
    Ok(rec)
}

/// `--dev` on the live kernel names a device of this or a named network namespace; refused
/// before anything is loaded.
fn check_device(dev: Option<&str>) -> Result<()> {
    match dev {
        Some(d) if !ppscope::host::ethtool::device_exists(d) => Err(Exit::bad_argument(format!(
            "--dev {d}: no device of that name in this or any named network namespace"
        ))
        .into()),
        _ => Ok(()),
    }
}

/// A command-line error from clap in one sentence: its message without the usage block, the
/// `--help` hint or the blank lines; a "did you mean" tip stays, after a semicolon (the tip
/// on passing a dashed word as a value does not: it answers a question nobody asked).
fn usage_sentence(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut message = Vec::new();
    let mut tips = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty()
            || line.starts_with("Usage:")
            || line.starts_with("For more information")
            || line.starts_with("tip: to pass")
        {
            continue;
        }
        match line.strip_prefix("tip: ") {
            Some(tip) => tips.push(tip),
            None => message.push(line),
        }
    }
    let mut sentence = message.join(" ").trim_start_matches("error: ").to_string();
    for tip in tips {
        sentence.push_str("; ");
        sentence.push_str(tip);
    }
    sentence
}

/// `ppscope -V`: the version and the commit it was built from (build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("PPSCOPE_COMMIT"), ")");

/// `ppscope --version`: also what of the kernel this build is made to use.
fn long_version() -> String {
    let mut text = format!(
        "{}\ncommit: {}\nbuilt to use:",
        env!("CARGO_PKG_VERSION"),
        env!("PPSCOPE_COMMIT")
    );
    for line in ppscope::probes::build_features() {
        text.push_str("\n  ");
        text.push_str(&line);
    }
    text
}

/// The command line's definition, as parsing, completions and man pages all see it.
fn cli_definition() -> clap::Command {
    Cli::command().long_version(long_version())
}

fn main() -> ExitCode {
    let cli = cli_definition()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    logging::init(cli.as_ref().is_ok_and(Cli::bpf_log));
    let cli = match cli {
        Ok(cli) => cli,
        // --help and --version print as clap lays them out, and are not errors.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        // `ppscope` alone: the help, laid out, on stderr (not squeezed into one sentence).
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("ppscope: {} (see ppscope --help)", usage_sentence(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Top(args) => top(&args),
        Command::Diagnose(args) => diagnose(&args),
        Command::Record(args) => record_cmd(&args),
        Command::Simulate(args) => simulate_cmd(&args),
        Command::Agent(args) => agent_cmd(&args),
        Command::Doctor { json, check, probe } => doctor(json, check, &probe),
        Command::Completions { shell } => print_out(&manual::completions(shell, cli_definition())),
        Command::ManPages { dir } => manual::man_pages(cli_definition(), &dir),
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
            match e.downcast_ref::<Exit>() {
                Some(exit) => ExitCode::from(exit.code),
                None => ExitCode::FAILURE,
            }
        }
    }
}

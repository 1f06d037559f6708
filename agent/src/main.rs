use std::{
    io::{self, Write},
    process::ExitCode,
    thread,
    time::Duration,
};

use anyhow::Result;
use clap::{Parser, Subcommand};
use ppscope::{
    btf, kernel,
    kernel_view::{self, KernelSample},
    lab, model,
    probes::{Backend, BackendChoice, ProbeOptions, Probes},
    report,
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

/// `5`, `5s`, `500ms`, `2m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs > 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(format!("'{s}' is not a positive duration"));
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("'{s}': {e} (try 5s, 500ms, 2m)"))?;
    if d.is_zero() {
        return Err(format!("'{s}' is not a positive duration"));
    }
    Ok(d)
}

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
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Watch every page_pool for a while and report what it did.
    Diagnose(DiagnoseArgs),
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

fn diagnose(opts: &DiagnoseArgs) -> Result<()> {
    let probes = opts.probe.start()?;
    let attached = probes.hooks.iter().filter(|h| h.attached()).count();
    eprintln!(
        "ppscope: watching page_pools for {} ({attached}/{} hooks attached)",
        humantime::format_duration(opts.duration),
        probes.hooks.len()
    );
    let interrupt = Interrupt::new()?;
    let first = probes.sample()?;
    let kernel_first = KernelSample::read();
    // Step through the window so the report can line the chain up in time.
    let mut steps = Vec::new();
    let mut prev = first.clone();
    loop {
        let left = opts
            .duration
            .saturating_sub(prev.at.duration_since(first.at));
        let interrupted = left.is_zero() || interrupt.wait(left.min(opts.interval));
        let cur = probes.sample()?;
        let netdevs = model::pool_netdevs(&cur);
        steps.push(model::timeline_step(
            cur.at.duration_since(first.at).as_secs_f64(),
            &prev,
            &cur,
            &netdevs,
        ));
        prev = cur;
        if interrupted || prev.at.duration_since(first.at) >= opts.duration {
            break;
        }
    }
    let kernel_last = KernelSample::read();
    let mut snap = model::snapshot(
        kernel::release(),
        &first,
        &prev,
        &probes.coverage,
        &probes.hooks,
    );
    kernel_view::merge(&mut snap, &kernel_first, &kernel_last);
    model::name_drop_reasons(&mut snap, &probes.drop_reasons);
    snap.timeline = model::keep_steps_of(steps, &snap.devices);
    if let Some(dev) = &opts.dev {
        snap.pools
            .retain(|p| p.ifname.as_deref() == Some(dev.as_str()));
        snap.devices
            .retain(|d| d.ifname.as_deref() == Some(dev.as_str()));
    }
    let out = if opts.json {
        serde_json::to_string_pretty(&report::json(&snap))? + "\n"
    } else {
        report::text(&snap)
    };
    print_out(&out)
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
        Command::Diagnose(args) => diagnose(&args),
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

//! `cargo xtask vm`: the VM lab. A Debian kernel (fetched and cached, see [`kernel`]) boots
//! under QEMU (TCG) with a Rust-built initramfs (see [`initramfs`]) whose `/init` builds the
//! lab topology and runs a script:
//!
//! - netns `ppa`: `vnet0` (virtio-net, 52:54:00:00:00:01) 198.18.0.1/24
//! - netns `ppb`: `vnet1` (virtio-net, 52:54:00:00:00:02) 198.18.0.2/24, same QEMU hub as vnet0
//! - netns `ppc`: `veth0` 198.18.1.1/24 ↔ netns `ppd`: `veth1` 198.18.1.2/24
//!
//! The script runs as `sh /lab/script ARGS...` in `/lab` with `PPSCOPE_VM=1` and
//! `PPSCOPE_VM_KERNEL=$(uname -r)`; its output goes to the guest's ttyS1 and is streamed
//! here; the kernel console goes to a log shown when something fails. Every run also ships
//! the helpers the lab scripts share (`xtask/vm-tests/lib.sh`) as `/lab/lib.sh`, which a
//! script sources with `. /lab/lib.sh`.
//!
//! Library use (integration tests): [`VmRun`], [`run_script`], [`VmOutcome`].

pub mod initramfs;
pub mod kernel;
pub mod qemu;

pub use kernel::{cache_dir, fetch as fetch_kernel, Kernel, KernelChoice};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct VmArgs {
    #[command(subcommand)]
    command: VmCommand,
}

#[derive(Subcommand, Debug)]
enum VmCommand {
    /// Boot the lab and run a script in it; exits with the script's status.
    Run(RunArgs),
    /// Fetch (or find in the cache) a kernel and print its version and paths.
    Fetch(FetchArgs),
    /// Boot the lab with an interactive shell on this terminal.
    Shell(ShellArgs),
}

#[derive(Args, Debug)]
struct FetchArgs {
    /// sid (default), trixie, or a version such as 7.2.13 or 6.12.117+deb13-amd64.
    #[arg(long, default_value = "sid")]
    kernel: KernelChoice,
}

#[derive(Args, Debug)]
struct MachineArgs {
    /// sid (default), trixie, or a version such as 7.2.13 or 6.12.117+deb13-amd64.
    #[arg(long, default_value = "sid")]
    kernel: KernelChoice,
    /// virtio-net rx ring size (QEMU rx_queue_size): a power of two, 256..=1024.
    #[arg(long, default_value_t = 256)]
    rx_queue_size: u16,
    /// Guest memory (QEMU -m).
    #[arg(long, default_value = "2G")]
    memory: String,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// Copy a host file or directory into the guest (default guest path: /lab/NAME;
    /// relative guest paths are under /lab).
    #[arg(long = "add", value_name = "HOST_PATH[:GUEST_PATH]")]
    add: Vec<String>,
    /// Use this ppscope binary instead of building ppscope-agent.
    #[arg(long, value_name = "PATH", conflicts_with = "no_ppscope")]
    ppscope: Option<PathBuf>,
    /// Do not put ppscope in the guest (no build).
    #[arg(long)]
    no_ppscope: bool,
    /// Extra kernel modules to load (with dependencies), after virtio_net, veth and gve.
    #[arg(long = "module", value_name = "NAME")]
    modules: Vec<String>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The script to run in the guest (with sh).
    #[arg(long)]
    script: PathBuf,
    #[command(flatten)]
    machine: MachineArgs,
    /// Seconds before the guest is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Also echo the guest's kernel console to stderr.
    #[arg(long)]
    console: bool,
    /// Arguments for the script.
    #[arg(last = true)]
    args: Vec<String>,
}

#[derive(Args, Debug)]
struct ShellArgs {
    #[command(flatten)]
    machine: MachineArgs,
}

/// Where the ppscope binary in the guest comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Ppscope {
    /// `cargo build -p ppscope --bin ppscope` (debug), then strip.
    #[default]
    Build,
    /// This binary (stripped of debug info on the way in).
    Path(PathBuf),
    /// No ppscope in the guest.
    None,
}

/// One lab run. [`VmRun::new`] gives the defaults of `cargo xtask vm run`.
#[derive(Clone, Debug)]
pub struct VmRun {
    pub kernel: KernelChoice,
    pub script: PathBuf,
    pub args: Vec<String>,
    /// virtio-net rx_queue_size (None: QEMU's default, 256).
    pub rx_queue_size: Option<u16>,
    /// (host path, guest path) pairs; a relative guest path is under /lab.
    pub extra: Vec<(PathBuf, String)>,
    pub ppscope: Ppscope,
    /// Extra modules to load (virtio_net, veth and gve always are).
    pub modules: Vec<String>,
    pub timeout: Duration,
    pub memory: String,
    pub cpus: u32,
    /// Echo the guest's kernel console to stderr as it comes.
    pub console: bool,
}

impl VmRun {
    pub fn new(script: impl Into<PathBuf>) -> VmRun {
        VmRun {
            kernel: KernelChoice::Sid,
            script: script.into(),
            args: Vec::new(),
            rx_queue_size: None,
            extra: Vec::new(),
            ppscope: Ppscope::Build,
            modules: Vec::new(),
            timeout: Duration::from_secs(600),
            memory: "2G".into(),
            cpus: 2,
            console: std::env::var_os("PPSCOPE_VM_CONSOLE")
                .is_some_and(|v| !v.is_empty() && v != "0"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct VmOutcome {
    /// The script's exit status.
    pub status: i32,
    /// The script's stdout+stderr (no kernel console, no markers).
    pub output: String,
    /// The guest's `uname -r`.
    pub kernel_version: String,
}

pub fn main(args: VmArgs) -> Result<i32> {
    match args.command {
        VmCommand::Fetch(a) => {
            let k = kernel::fetch(&a.kernel)?;
            println!("version:         {}", k.version);
            println!("package version: {}", k.package_version);
            println!("suite:           {}", k.suite);
            println!("vmlinuz:         {}", k.vmlinuz.display());
            println!("modules:         {}", k.modules_dir.display());
            if let Some(c) = &k.config {
                println!("config:          {}", c.display());
            }
            if let Some(s) = &k.system_map {
                println!("System.map:      {}", s.display());
            }
            Ok(0)
        }
        VmCommand::Run(a) => {
            let mut run = a.machine.into_run(a.script)?;
            run.args = a.args;
            run.timeout = Duration::from_secs(a.timeout);
            run.console |= a.console;
            Ok(run_script(&run)?.status)
        }
        VmCommand::Shell(a) => {
            let run = a.machine.into_run(PathBuf::from("/dev/null"))?;
            let prep = prepare(&run, true)?;
            let r = qemu::shell(&prep.machine());
            prep.cleanup(r.is_ok());
            r
        }
    }
}

impl MachineArgs {
    fn into_run(self, script: PathBuf) -> Result<VmRun> {
        let mut run = VmRun::new(script);
        run.kernel = self.kernel;
        run.rx_queue_size = Some(self.rx_queue_size);
        run.memory = self.memory;
        run.cpus = self.cpus;
        run.modules = self.modules;
        run.ppscope = match (self.ppscope, self.no_ppscope) {
            (_, true) => Ppscope::None,
            (Some(p), _) => Ppscope::Path(p),
            (None, false) => Ppscope::Build,
        };
        for a in self.add {
            run.extra.push(parse_add(&a)?);
        }
        Ok(run)
    }
}

/// `HOST[:GUEST]` → (host, guest absolute path).
fn parse_add(spec: &str) -> Result<(PathBuf, String)> {
    let (host, guest) = match spec.split_once(':') {
        Some((h, g)) => (h, g.to_string()),
        None => (spec, String::new()),
    };
    let host = PathBuf::from(host);
    let guest = if guest.is_empty() {
        let name = host
            .file_name()
            .with_context(|| format!("--add {spec}: no file name"))?;
        format!("/lab/{}", name.to_string_lossy())
    } else {
        guest
    };
    Ok((host, guest))
}

fn guest_path(g: &str) -> String {
    if g.starts_with('/') {
        g.to_string()
    } else {
        format!("/lab/{g}")
    }
}

/// A host binary and the libraries ldd names, as (host, guest) pairs for `VmRun::extra`.
pub fn with_libs(bin: &Path, guest: &str) -> Result<Vec<(PathBuf, String)>> {
    let mut v = vec![(bin.to_path_buf(), guest.to_string())];
    let out = Command::new("ldd").arg(bin).output().context("ldd")?;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)"
        if let Some(path) = l
            .split("=>")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
        {
            if path.starts_with('/') {
                let g = path.strip_prefix("/usr").unwrap_or(path);
                v.push((PathBuf::from(path), format!("/usr{g}")));
            }
        }
    }
    Ok(v)
}

/// A program on `PATH` (or in the sbin folders), for shipping into the guest.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Boot the lab, run the script, stream its output, return its status and output.
pub fn run_script(run: &VmRun) -> Result<VmOutcome> {
    // Two TCG guests at once on a small machine have hung a boot and skew every timing:
    // runs from any process (tests, benchmarks, soak) take turns.
    let _turn = lab_turn()?;
    let prep = prepare(run, false)?;
    let mut r = qemu::run(&prep.machine(), &prep.dir, run.timeout, run.console);
    if let Err(e) = &r {
        if e.downcast_ref::<qemu::BootHang>().is_some() {
            eprintln!("vm: warning: {e:#}\nvm: booting once more");
            r = qemu::run(&prep.machine(), &prep.dir, run.timeout, run.console);
        }
    }
    prep.cleanup(r.is_ok());
    let out = r?;
    Ok(VmOutcome {
        status: out.status,
        output: out.output,
        kernel_version: prep.kernel.version.clone(),
    })
}

/// An exclusive lock on the VM lab, held for one run; released when dropped (or when the
/// process dies, so a killed run never blocks the next one).
fn lab_turn() -> Result<fs::File> {
    let dir = cache_dir();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("lab.lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!("vm: another VM lab run is in progress; waiting for it to finish");
        f.lock()
            .with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(f)
}

/// A kernel plus an initramfs written to a per-run directory.
struct Prepared {
    kernel: Kernel,
    dir: PathBuf,
    initrd: PathBuf,
    memory: String,
    cpus: u32,
    rx_queue_size: u16,
}

impl Prepared {
    fn machine(&self) -> qemu::Machine<'_> {
        qemu::Machine {
            vmlinuz: &self.kernel.vmlinuz,
            initrd: &self.initrd,
            memory: &self.memory,
            cpus: self.cpus,
            rx_queue_size: self.rx_queue_size,
        }
    }
    /// Remove the run directory; on failure keep the console log for a look.
    fn cleanup(&self, ok: bool) {
        let _ = fs::remove_file(&self.initrd);
        let _ = fs::remove_file(self.dir.join("ppscope"));
        if ok {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn prepare(run: &VmRun, shell: bool) -> Result<Prepared> {
    qemu::qemu_path()?;
    let rxq = run.rx_queue_size.unwrap_or(256);
    qemu::check_rx_queue_size(rxq)?;
    if run.cpus == 0 {
        bail!("cpus must be at least 1");
    }
    if !shell && !run.script.is_file() {
        bail!("script {} not found", run.script.display());
    }
    for (h, _) in &run.extra {
        if !h.exists() {
            bail!("--add: {} does not exist", h.display());
        }
    }
    let kernel = kernel::fetch(&run.kernel)?;
    let dir = cache_dir().join("runs").join(format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    fs::create_dir_all(&dir)?;

    let ppscope = match &run.ppscope {
        Ppscope::None => None,
        Ppscope::Path(p) => Some(strip_into(p, &dir)?),
        Ppscope::Build => Some(strip_into(&build_ppscope()?, &dir)?),
    };
    let mut wanted: Vec<String> = initramfs::DEFAULT_MODULES
        .iter()
        .map(|s| s.to_string())
        .collect();
    wanted.extend(run.modules.iter().cloned());
    let modules = initramfs::resolve_modules(&kernel, &wanted)?;
    let extra: Vec<(PathBuf, String)> = run
        .extra
        .iter()
        .map(|(h, g)| (h.clone(), guest_path(g)))
        .collect();
    let script = if shell {
        PathBuf::from("/dev/null")
    } else {
        run.script.clone()
    };
    let ar = initramfs::build(&initramfs::Contents {
        kernel: &kernel,
        modules: &modules,
        script: &script,
        args: &run.args,
        extra: &extra,
        ppscope: ppscope.as_deref(),
        shell,
        macs: qemu::MACS,
    })?;
    let initrd = dir.join("initrd.cpio");
    let f = fs::File::create(&initrd)?;
    let mut w = BufWriter::new(f);
    ar.write_to(&mut w)?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all().ok();
    eprintln!(
        "vm: kernel {} ({} {}), modules: {}, initramfs {:.1} MiB",
        kernel.version,
        kernel.suite,
        kernel.package_version,
        modules
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        fs::metadata(&initrd)?.len() as f64 / (1 << 20) as f64
    );
    Ok(Prepared {
        kernel,
        dir,
        initrd,
        memory: run.memory.clone(),
        cpus: run.cpus,
        rx_queue_size: rxq,
    })
}

/// Build ppscope (debug) and return the binary's path.
pub fn build_ppscope() -> Result<PathBuf> {
    build_ppscope_profile(false)
}

/// [`build_ppscope`] with `--release` when `release` (the benchmarks: a debug build's
/// user-space figures, start-up and the agent's CPU, say nothing of what users run).
pub fn build_ppscope_profile(release: bool) -> Result<PathBuf> {
    let mut args = vec!["build", "-p", "ppscope", "--bin", "ppscope"];
    if release {
        args.push("--release");
    }
    eprintln!("vm: building ppscope (cargo {})", args.join(" "));
    args.push("--message-format=json-render-diagnostics");
    let out = crate::cargo()
        .current_dir(crate::workspace_root())
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build for ppscope")?;
    if !out.status.success() {
        bail!("building ppscope failed (use --ppscope PATH or --no-ppscope to skip)");
    }
    let mut exe = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] == "compiler-artifact" && v["target"]["name"] == "ppscope" {
            if let Some(p) = v["executable"].as_str() {
                exe = Some(PathBuf::from(p));
            }
        }
    }
    exe.context("cargo build did not report the ppscope executable")
}

/// Copy `bin` into `dir/ppscope` without debug info.
fn strip_into(bin: &Path, dir: &Path) -> Result<PathBuf> {
    if !bin.is_file() {
        bail!("ppscope binary {} not found", bin.display());
    }
    let out = dir.join("ppscope");
    for (prog, args) in [
        ("strip", ["--strip-debug", "-o"]),
        ("objcopy", ["--strip-debug", ""]),
    ] {
        let mut c = Command::new(prog);
        c.arg(args[0]);
        if args[1].is_empty() {
            c.arg(bin).arg(&out);
        } else {
            c.arg(args[1]).arg(&out).arg(bin);
        }
        if c.stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
            return Ok(out);
        }
    }
    eprintln!(
        "vm: warning: could not strip {} (binutils missing?), copying it as is",
        bin.display()
    );
    fs::copy(bin, &out).with_context(|| format!("copying {}", bin.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_spec() {
        assert_eq!(
            parse_add("/x/y.sh").unwrap(),
            (PathBuf::from("/x/y.sh"), "/lab/y.sh".to_string())
        );
        assert_eq!(
            parse_add("a:/opt/a").unwrap(),
            (PathBuf::from("a"), "/opt/a".to_string())
        );
        assert_eq!(guest_path("data/f"), "/lab/data/f");
    }

    #[test]
    fn cli_parses() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            vm: VmArgs,
        }
        let c = Cli::try_parse_from([
            "x",
            "run",
            "--script",
            "s.sh",
            "--kernel",
            "trixie",
            "--rx-queue-size",
            "1024",
            "--add",
            "a:b",
            "--",
            "-x",
            "y",
        ])
        .unwrap();
        match c.vm.command {
            VmCommand::Run(r) => {
                assert_eq!(r.args, vec!["-x", "y"]);
                assert_eq!(r.machine.kernel, KernelChoice::Trixie);
                assert_eq!(r.machine.rx_queue_size, 1024);
            }
            _ => panic!(),
        }
    }
}

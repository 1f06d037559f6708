//! `cargo xtask setup`: install what a fresh Debian 12 (bookworm) machine lacks to build and
//! test ppscope: Debian packages (Debian's `rustc-web` with the prebuilt `core` for
//! `bpfel-unknown-none`, LLVM 22, the lab tools), QEMU >= 10 from bookworm-backports, and
//! `bpf-linker` 0.13 built against LLVM 22.
//!
//! Every step checks its result first and is skipped when already satisfied, so a second run
//! takes well under a second. The system is never upgraded: only missing (or too old) packages
//! from [`PACKAGES`] are installed.
//!
//! Other tasks reuse [`bpf_toolchain`] to find the eBPF build tools.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

/// Debian's rustc (from `rustc-web`); never rustup's proxy in `~/.cargo/bin`.
pub const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
/// The LLVM the Debian rustc and bpf-linker are built with.
pub const LLVM_MAJOR: u32 = 22;
/// Folder holding `llvm-config` and friends for [`LLVM_MAJOR`].
pub const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";
/// The eBPF target whose prebuilt `core` `libstd-rust-web-dev-bpf` ships.
pub const BPF_TARGET: &str = "bpfel-unknown-none";
/// Oldest Debian rustc that builds the eBPF crate.
pub const MIN_RUSTC: (u32, u32) = (1, 96);
/// Oldest QEMU the VM lab works with (bookworm's own 7.2 is too old).
pub const MIN_QEMU_MAJOR: u32 = 10;
/// The bpf-linker series to install (`cargo install --version`).
pub const BPF_LINKER_VERSION: &str = "~0.13";
const BPF_LINKER_PREFIX: &str = "0.13.";
/// The cargo-fuzz series the reliability suite's fuzz targets (`fuzz/`) run with.
pub const CARGO_FUZZ_VERSION: &str = "~0.13";
/// The cargo-deny series `cargo xtask test` checks the dependency graph with (the newest; it
/// needs rustc 1.88).
pub const CARGO_DENY_VERSION: &str = "~0.20";
/// The cargo-deb series `cargo xtask package` is written for (its `[package.metadata.deb]`).
pub const CARGO_DEB_VERSION: &str = "~3.8";

/// The apt source setup writes when no configured source provides bookworm-backports.
pub const BACKPORTS_FILE: &str = "/etc/apt/sources.list.d/ppscope-bookworm-backports.sources";
const BACKPORTS_SUITE: &str = "bookworm-backports";
const BACKPORTS_SOURCE: &str = "\
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
";

/// Width of the step name column in the report.
const STEP_WIDTH: usize = 38;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct SetupArgs {
    /// Only report what is missing (no root needed, changes nothing); exit 1 if anything is.
    #[arg(long, conflicts_with = "dry_run")]
    pub check: bool,
    /// Print the commands setup would run, without running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the Debian package table and exit.
    #[arg(long)]
    pub list: bool,
}

/// Which Debian suite a package is installed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// bookworm, bookworm-updates and bookworm-security (the default apt sources).
    Bookworm,
    /// bookworm-backports (installed with `apt-get install -t bookworm-backports`).
    Backports,
}

impl Suite {
    pub const ALL: [Suite; 2] = [Suite::Bookworm, Suite::Backports];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Bookworm => "bookworm",
            Suite::Backports => BACKPORTS_SUITE,
        }
    }
}

/// One Debian package setup installs when missing.
#[derive(Clone, Copy, Debug)]
pub struct DebPackage {
    pub name: &'static str,
    pub suite: Suite,
    /// Oldest acceptable version (Debian syntax, compared with `dpkg --compare-versions`).
    /// An installed package older than this is upgraded (that package only).
    pub min_version: Option<&'static str>,
    /// What ppscope needs it for (shown by `--list`).
    pub why: &'static str,
}

use Suite::{Backports, Bookworm};

const fn deb(
    name: &'static str,
    suite: Suite,
    min_version: Option<&'static str>,
    why: &'static str,
) -> DebPackage {
    DebPackage {
        name,
        suite,
        min_version,
        why,
    }
}

/// Everything setup installs from Debian. Add a line here to add a package.
#[rustfmt::skip]
pub const PACKAGES: &[DebPackage] = &[
    //  package                    suite      min version    what ppscope needs it for
    deb("rustc-web",               Bookworm,  Some("1.96"),  "Debian rustc (/usr/bin/rustc, LLVM 22) for the eBPF crate"),
    deb("libstd-rust-web-dev-bpf", Bookworm,  Some("1.96"),  "prebuilt core for bpfel-unknown-none"),
    deb("llvm-22-dev",             Bookworm,  None,          "LLVM 22 that bpf-linker links against"),
    deb("libpolly-22-dev",         Bookworm,  None,          "needed to link bpf-linker against LLVM 22"),
    deb("zlib1g-dev",              Bookworm,  None,          "needed to link bpf-linker against LLVM 22"),
    deb("libzstd-dev",             Bookworm,  None,          "needed to link bpf-linker against LLVM 22"),
    deb("busybox-static",          Bookworm,  None,          "the VM lab initramfs"),
    deb("iproute2",                Bookworm,  None,          "ip/tc for the lab topology"),
    deb("iperf3",                  Bookworm,  None,          "traffic for the lab tests"),
    deb("tmux",                    Bookworm,  None,          "the dashboard test drives `ppscope top` in a real terminal"),
    deb("ethtool",                 Bookworm,  None,          "NIC settings in the lab"),
    deb("zstd",                    Bookworm,  None,          "(de)compresses kernel modules and images"),
    deb("xz-utils",                Bookworm,  None,          "(de)compresses kernel modules and images"),
    deb("dash",                    Bookworm,  None,          "the VM lab guest's /bin/sh"),
    deb("util-linux",              Bookworm,  None,          "setpriv for the unprivileged-user tests"),
    deb("debian-archive-keyring",  Bookworm,  None,          "verifies the Debian kernels the VM lab fetches"),
    deb("prometheus",              Bookworm,  None,          "a real Prometheus and promtool for the exporter and deploy tests"),
    deb("python3-yaml",            Bookworm,  None,          "parses the Kubernetes and Prometheus YAML in the deploy tests"),
    deb("systemd",                 Bookworm,  None,          "systemd-analyze verifies the agent's unit"),
    deb("binutils",                Bookworm,  None,          "strip for the lab binaries"),
    deb("bpftrace",                Bookworm,  None,          "the benchmarks' comparison (copied into the VM lab with its libraries)"),
    deb("libbpf-tools",            Bookworm,  None,          "funclatency, the benchmarks' slow-path latency comparison"),
    deb("chromium",                Bookworm,  None,          "headless Chromium renders the HTML report to a PNG in its test"),
    deb("lintian",                 Bookworm,  None,          "judges the Debian package `cargo xtask package` builds"),
    deb("mmdebstrap",              Bookworm,  None,          "a clean Debian chroot the package test installs into"),
    deb("zsh",                     Bookworm,  None,          "checks the package's zsh completion script parses"),
    deb("fish",                    Bookworm,  None,          "runs the package's fish completions in their test"),
    deb("dpkg-dev",                Bookworm,  None,          "dpkg-shlibdeps: the package's library dependencies"),
    deb("qemu-system-x86",         Backports, Some("1:10"),  "the VM lab (>= 10; bookworm's 7.2 is too old)"),
];

/// Where the eBPF build tools are. Get it with [`bpf_toolchain`].
#[derive(Clone, Debug)]
pub struct BpfToolchain {
    /// Debian's `/usr/bin/rustc` (never rustup's proxy).
    pub rustc: PathBuf,
    /// e.g. `1.96.0`.
    pub rustc_version: String,
    /// `$CARGO_HOME/bin/bpf-linker` (or the one on `PATH`).
    pub bpf_linker: PathBuf,
    /// e.g. `0.13.0`.
    pub bpf_linker_version: String,
    /// `/usr/lib/llvm-22/bin`.
    pub llvm_bin: PathBuf,
}

impl BpfToolchain {
    /// A `PATH` for building the eBPF crate: [`Self::llvm_bin`] and bpf-linker's folder put
    /// in front of the current `PATH`.
    pub fn path_env(&self) -> Result<OsString> {
        let mut dirs = vec![self.llvm_bin.clone()];
        if let Some(dir) = self.bpf_linker.parent() {
            dirs.push(dir.to_path_buf());
        }
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(dirs).context("building PATH for the eBPF build")
    }
}

/// Find and check the eBPF build tools (Debian's rustc with the `bpfel-unknown-none` core,
/// bpf-linker 0.13, LLVM 22). Runs `rustc --version`, `rustc --print sysroot` and
/// `bpf-linker --version` (a few milliseconds). The error names what is missing and says to
/// run `cargo xtask setup`.
pub fn bpf_toolchain() -> Result<BpfToolchain> {
    find_bpf_toolchain().map_err(|e| {
        anyhow!(
            "the eBPF toolchain is incomplete: {e:#}; run `cargo xtask setup` as root to install \
             it (`cargo xtask setup --check` lists what is missing)"
        )
    })
}

fn find_bpf_toolchain() -> Result<BpfToolchain> {
    let rustc = PathBuf::from(DEBIAN_RUSTC);
    if !rustc.is_file() {
        bail!("{DEBIAN_RUSTC} is missing (Debian package rustc-web)");
    }
    let rustc_version = rustc_version(&rustc)?;
    let sysroot = capture(&rustc, ["--print", "sysroot"])?;
    let target_dir = Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(BPF_TARGET);
    if !target_dir.is_dir() {
        bail!(
            "{} is missing: no prebuilt core for {BPF_TARGET} (Debian package \
             libstd-rust-web-dev-bpf)",
            target_dir.display()
        );
    }
    let llvm_bin = PathBuf::from(LLVM_BIN);
    if !llvm_bin.join("llvm-config").is_file() {
        bail!("{LLVM_BIN}/llvm-config is missing (Debian package llvm-22-dev)");
    }
    let (bpf_linker, bpf_linker_version) = match check_bpf_linker() {
        LinkerState::Ok { path, version, .. } => (path, version),
        LinkerState::Missing => bail!(
            "bpf-linker is not installed (looked in {} and PATH)",
            cargo_home().join("bin").display()
        ),
        LinkerState::Bad { path, reason } => bail!("{}: {reason}", path.display()),
    };
    Ok(BpfToolchain {
        rustc,
        rustc_version,
        bpf_linker,
        bpf_linker_version,
        llvm_bin,
    })
}

/// `$CARGO_HOME`, by default `~/.cargo`.
pub fn cargo_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CARGO_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cargo")
}

/// Run `cargo xtask setup`; returns the exit code.
pub fn run(args: &SetupArgs) -> Result<i32> {
    if args.list {
        print_list();
        return Ok(0);
    }
    let mode = if args.check {
        Mode::Check
    } else if args.dry_run {
        Mode::DryRun
    } else {
        Mode::Install
    };
    if mode == Mode::Install && !is_root()? {
        eprintln!(
            "cargo xtask setup installs Debian packages with apt-get, so it needs root.\n\
             Run it as root (e.g. `sudo -E cargo xtask setup`), or run \
             `cargo xtask setup --check` (or `--dry-run`) to only see what is missing."
        );
        return Ok(1);
    }
    let mut setup = Setup {
        mode,
        pending: Vec::new(),
        apt_updated: false,
    };
    let start = Instant::now();
    let steps: [(&str, StepFn); 7] = [
        ("system is Debian 12 (bookworm)", Setup::step_system),
        (
            "apt source bookworm-backports",
            Setup::step_backports_source,
        ),
        ("Debian packages", Setup::step_packages),
        ("bpf-linker 0.13 (LLVM 22)", Setup::step_bpf_linker),
        ("cargo-fuzz (reliability suite)", Setup::step_cargo_fuzz),
        ("cargo-deny (dependency policy)", Setup::step_cargo_deny),
        ("cargo-deb (cargo xtask package)", Setup::step_cargo_deb),
    ];
    for (name, step) in steps {
        let outcome = step(&mut setup);
        if !setup.report(name, outcome) {
            return Ok(1);
        }
    }

    let verify = "verify toolchain";
    if !setup.pending.is_empty() {
        report_line(verify, "skipped (something above is missing)");
        return Ok(match mode {
            Mode::Check => {
                println!(
                    "missing: {}; run `cargo xtask setup` as root",
                    setup.pending.join(", ")
                );
                1
            }
            _ => 0,
        });
    }
    match verify_chain() {
        Ok(summary) => {
            report_line(verify, "ok");
            println!(
                "setup: ok in {:.1}s: {summary}, {} Debian packages",
                start.elapsed().as_secs_f64(),
                PACKAGES.len()
            );
            Ok(0)
        }
        Err(e) => {
            report_line(verify, format!("FAILED: {e:#}"));
            println!("    fix: run `cargo xtask setup` as root, then `cargo xtask setup --check`");
            Ok(1)
        }
    }
}

fn print_list() {
    println!("{:<26} {:<20} {:<8} purpose", "package", "suite", "min");
    for p in PACKAGES {
        println!(
            "{:<26} {:<20} {:<8} {}",
            p.name,
            p.suite.name(),
            p.min_version.unwrap_or("-"),
            p.why
        );
    }
    println!(
        "{:<26} {:<20} {:<8} eBPF linker, built against LLVM {LLVM_MAJOR}",
        "bpf-linker (cargo)", "crates.io", BPF_LINKER_VERSION
    );
    for tool in &CARGO_TOOLS {
        println!(
            "{:<26} {:<20} {:<8} {}",
            format!("{} (cargo)", tool.krate),
            "crates.io",
            tool.version,
            tool.why
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Report only.
    Check,
    /// Print the commands only.
    DryRun,
    /// Do it.
    Install,
}

type StepFn = fn(&mut Setup) -> Result<Outcome, Failure>;

/// What a step did.
enum Outcome {
    /// Already satisfied.
    Ok(String),
    /// Installed now.
    Installed(String),
    /// `--check`: missing; `--dry-run`: would be installed.
    Pending(String),
}

/// A failed step: why, and the command to run by hand.
struct Failure {
    error: anyhow::Error,
    fix: String,
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure {
            error,
            fix: "fix the error above, then re-run `cargo xtask setup`".into(),
        }
    }
}

fn failure(error: anyhow::Error, fix: impl fmt::Display) -> Failure {
    Failure {
        error,
        fix: fix.to_string(),
    }
}

fn report_line(step: &str, status: impl fmt::Display) {
    println!("{step:<STEP_WIDTH$} {status}");
}

fn with_detail(word: &str, detail: &str) -> String {
    if detail.is_empty() {
        word.to_string()
    } else {
        format!("{word} ({detail})")
    }
}

struct Setup {
    mode: Mode,
    /// What `--check` found missing / `--dry-run` would install.
    pending: Vec<String>,
    apt_updated: bool,
}

impl Setup {
    /// Print the step's line; false when setup must stop.
    fn report(&mut self, step: &str, outcome: Result<Outcome, Failure>) -> bool {
        match outcome {
            Ok(Outcome::Ok(detail)) => report_line(step, with_detail("ok", &detail)),
            Ok(Outcome::Installed(detail)) => report_line(step, with_detail("installed", &detail)),
            Ok(Outcome::Pending(detail)) => {
                let word = match self.mode {
                    Mode::Check => "MISSING",
                    _ => "would install",
                };
                report_line(step, format!("{word}: {detail}"));
                self.pending.push(detail);
            }
            Err(Failure { error, fix }) => {
                report_line(step, format!("FAILED: {error:#}"));
                println!("    fix: run by hand: {fix}");
                println!("    then re-run: cargo xtask setup");
                return false;
            }
        }
        true
    }

    /// Run (or, with `--dry-run`, print) a command that changes the system.
    fn execute(&self, cmd: &Cmd) -> Result<(), Failure> {
        println!("  $ {cmd}");
        if self.mode == Mode::DryRun {
            return Ok(());
        }
        cmd.run().map_err(|e| failure(e, cmd))
    }

    fn step_system(&mut self) -> Result<Outcome, Failure> {
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let field = |key: &str| {
            os_release.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|v| v.strip_prefix('='))
                    .map(|v| v.trim_matches('"').to_string())
            })
        };
        let codename = field("VERSION_CODENAME").unwrap_or_default();
        if field("ID").as_deref() == Some("debian") && codename == "bookworm" {
            return Ok(Outcome::Ok(String::new()));
        }
        let name = field("PRETTY_NAME").unwrap_or_else(|| "an unknown system".into());
        Err(failure(
            anyhow!("this setup targets Debian 12 (bookworm), this is {name}"),
            "the equivalents of `cargo xtask setup --list` with your system's package manager",
        ))
    }

    fn step_backports_source(&mut self) -> Result<Outcome, Failure> {
        if !PACKAGES.iter().any(|p| p.suite == Suite::Backports) {
            return Ok(Outcome::Ok("not needed".into()));
        }
        if backports_configured()? {
            return Ok(Outcome::Ok(String::new()));
        }
        let by_hand = format!(
            "printf '{}' > {BACKPORTS_FILE}",
            BACKPORTS_SOURCE.replace('\n', "\\n")
        );
        match self.mode {
            Mode::Check => {
                return Ok(Outcome::Pending(format!(
                    "no apt source provides {BACKPORTS_SUITE} (setup writes {BACKPORTS_FILE})"
                )))
            }
            Mode::DryRun => {
                println!("  $ {by_hand}");
                return Ok(Outcome::Pending(format!("write {BACKPORTS_FILE}")));
            }
            Mode::Install => {}
        }
        std::fs::write(BACKPORTS_FILE, BACKPORTS_SOURCE)
            .with_context(|| format!("writing {BACKPORTS_FILE}"))
            .map_err(|e| failure(e, &by_hand))?;
        if !backports_configured()? {
            return Err(failure(
                anyhow!("wrote {BACKPORTS_FILE} but apt still does not list {BACKPORTS_SUITE}"),
                format!("apt-get indextargets | grep {BACKPORTS_SUITE}"),
            ));
        }
        Ok(Outcome::Installed(BACKPORTS_FILE.into()))
    }

    fn step_packages(&mut self) -> Result<Outcome, Failure> {
        let states = query_packages()?;
        let missing: Vec<&PkgState> = states.iter().filter(|s| !s.ok).collect();
        if missing.is_empty() {
            return Ok(Outcome::Ok(format!("{} installed", states.len())));
        }
        let describe = |list: &[&PkgState]| {
            list.iter()
                .map(|s| s.describe())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.mode == Mode::Check {
            return Ok(Outcome::Pending(describe(&missing)));
        }

        self.apt_update()?;
        for suite in Suite::ALL {
            let names: Vec<&str> = missing
                .iter()
                .filter(|s| s.pkg.suite == suite)
                .map(|s| s.pkg.name)
                .collect();
            if !names.is_empty() {
                self.execute(&apt_install(suite, &names))?;
            }
        }
        if self.mode == Mode::DryRun {
            return Ok(Outcome::Pending(describe(&missing)));
        }

        // Check the result: apt may have picked a version that is still too old.
        let after = query_packages()?;
        let still: Vec<&PkgState> = after.iter().filter(|s| !s.ok).collect();
        if let Some(first) = still.first() {
            return Err(failure(
                anyhow!(
                    "still missing after apt-get install: {}{}",
                    describe(&still),
                    if still.iter().any(|s| s.pkg.suite == Suite::Backports) {
                        format!(
                            " (is {BACKPORTS_SUITE} reachable? `apt-cache policy {}`)",
                            first.pkg.name
                        )
                    } else {
                        String::new()
                    }
                ),
                apt_install(first.pkg.suite, &[first.pkg.name]),
            ));
        }
        let done: Vec<String> = missing
            .iter()
            .map(|m| {
                let version = after
                    .iter()
                    .find(|a| a.pkg.name == m.pkg.name)
                    .and_then(|a| a.installed.clone())
                    .unwrap_or_default();
                format!("{} {version}", m.pkg.name)
            })
            .collect();
        Ok(Outcome::Installed(done.join(", ")))
    }

    /// `apt-get update`, once per run.
    fn apt_update(&mut self) -> Result<(), Failure> {
        if self.apt_updated {
            return Ok(());
        }
        self.execute(&apt_get(["update"]))?;
        self.apt_updated = true;
        Ok(())
    }

    fn step_bpf_linker(&mut self) -> Result<Outcome, Failure> {
        let state = check_bpf_linker();
        let force = match &state {
            LinkerState::Ok {
                path,
                version,
                llvm,
            } => return Ok(Outcome::Ok(linker_detail(path, version, *llvm))),
            LinkerState::Missing => false,
            LinkerState::Bad { .. } => true,
        };
        let why = match &state {
            LinkerState::Bad { path, reason } => format!("{}: {reason}", path.display()),
            _ => format!("not installed in {}", cargo_home().join("bin").display()),
        };
        if self.mode == Mode::Check {
            return Ok(Outcome::Pending(format!("bpf-linker ({why})")));
        }
        let cmd = cargo_install_bpf_linker(force)?;
        if self.mode == Mode::Install && !Path::new(LLVM_BIN).join("llvm-config").is_file() {
            return Err(failure(
                anyhow!("{LLVM_BIN}/llvm-config is missing, bpf-linker cannot be built"),
                apt_install(Suite::Bookworm, &["llvm-22-dev"]),
            ));
        }
        println!("  (bpf-linker: {why}; building it takes a few minutes)");
        self.execute(&cmd)?;
        if self.mode == Mode::DryRun {
            return Ok(Outcome::Pending("bpf-linker".into()));
        }
        match check_bpf_linker() {
            LinkerState::Ok {
                path,
                version,
                llvm,
            } => Ok(Outcome::Installed(linker_detail(&path, &version, llvm))),
            LinkerState::Missing => Err(failure(
                anyhow!(
                    "cargo install succeeded but bpf-linker is not in {}",
                    cargo_home().join("bin").display()
                ),
                cmd,
            )),
            LinkerState::Bad { path, reason } => Err(failure(
                anyhow!("{}: {reason}", path.display()),
                cargo_install_bpf_linker(true)?,
            )),
        }
    }
}

/// A cargo subcommand the tests run, installed from crates.io with `cargo install --locked`.
pub struct CargoTool {
    /// The crate, and the subcommand after `cargo` (`cargo-fuzz` → `cargo fuzz`).
    pub krate: &'static str,
    pub version: &'static str,
    pub why: &'static str,
}

/// The cargo subcommands the tests need, in the order setup installs them.
pub const CARGO_TOOLS: [CargoTool; 3] = [
    CargoTool {
        krate: "cargo-fuzz",
        version: CARGO_FUZZ_VERSION,
        why: "fuzz targets of the reliability suite (fuzz/)",
    },
    CargoTool {
        krate: "cargo-deny",
        version: CARGO_DENY_VERSION,
        why: "licenses, bans and sources of every dependency (deny.toml)",
    },
    CargoTool {
        krate: "cargo-deb",
        version: CARGO_DEB_VERSION,
        why: "builds the Debian package (`cargo xtask package`)",
    },
];

impl CargoTool {
    /// `cargo-fuzz 0.13.1`, None when it is not installed.
    pub fn installed_version(&self) -> Option<String> {
        let sub = self.krate.strip_prefix("cargo-").unwrap_or(self.krate);
        let out = crate::cargo().args([sub, "--version"]).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Setup {
    /// A cargo subcommand the tests need (cargo-fuzz runs with stable rustc and
    /// RUSTC_BOOTSTRAP=1 for `-Zsanitizer`).
    fn step_cargo_tool(&mut self, tool: &CargoTool) -> Result<Outcome, Failure> {
        if let Some(v) = tool.installed_version() {
            return Ok(Outcome::Ok(v));
        }
        if self.mode == Mode::Check {
            return Ok(Outcome::Pending(tool.krate.into()));
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd =
            Cmd::new(cargo).args(["install", tool.krate, "--version", tool.version, "--locked"]);
        // Outside the workspace, so its .cargo/config.toml does not apply.
        cmd.cwd = Some(std::env::temp_dir());
        println!(
            "  ({}: not installed; building it takes a few minutes)",
            tool.krate
        );
        self.execute(&cmd)?;
        if self.mode == Mode::DryRun {
            return Ok(Outcome::Pending(tool.krate.into()));
        }
        tool.installed_version()
            .map(Outcome::Installed)
            .ok_or_else(|| {
                failure(
                    anyhow!(
                        "cargo install succeeded but `cargo {} --version` does not answer",
                        tool.krate
                    ),
                    &cmd,
                )
            })
    }

    fn step_cargo_fuzz(&mut self) -> Result<Outcome, Failure> {
        self.step_cargo_tool(&CARGO_TOOLS[0])
    }

    fn step_cargo_deny(&mut self) -> Result<Outcome, Failure> {
        self.step_cargo_tool(&CARGO_TOOLS[1])
    }

    fn step_cargo_deb(&mut self) -> Result<Outcome, Failure> {
        self.step_cargo_tool(&CARGO_TOOLS[2])
    }
}

fn linker_detail(path: &Path, version: &str, llvm: Option<u32>) -> String {
    let llvm = match llvm {
        Some(major) => format!("LLVM {major}"),
        None => "LLVM linked statically".into(),
    };
    format!("{version}, {llvm}, {}", path.display())
}

/// Step 5: the whole chain works.
fn verify_chain() -> Result<String> {
    let tc = bpf_toolchain()?;
    let qemu = qemu_version()?;
    Ok(format!(
        "rustc {} ({}), {BPF_TARGET} core, bpf-linker {} ({}), LLVM {LLVM_MAJOR}, QEMU {qemu}",
        tc.rustc_version,
        tc.rustc.display(),
        tc.bpf_linker_version,
        tc.bpf_linker.display(),
    ))
}

fn qemu_version() -> Result<String> {
    let out = capture(Path::new("qemu-system-x86_64"), ["--version"])
        .context("qemu-system-x86_64 (Debian package qemu-system-x86 from bookworm-backports)")?;
    // "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"
    let version = out
        .split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .ok_or_else(|| anyhow!("cannot parse `qemu-system-x86_64 --version`: {out:?}"))?;
    let major: u32 = leading_number(version);
    if major < MIN_QEMU_MAJOR {
        bail!("qemu-system-x86_64 is {version}, the VM lab needs >= {MIN_QEMU_MAJOR} (bookworm-backports)");
    }
    Ok(version.to_string())
}

fn rustc_version(rustc: &Path) -> Result<String> {
    let out = capture(rustc, ["--version"])?;
    // "rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)"
    let version = out
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("cannot parse `{} --version`: {out:?}", rustc.display()))?;
    let mut parts = version.split('.');
    let major = parts.next().map(leading_number).unwrap_or(0);
    let minor = parts.next().map(leading_number).unwrap_or(0);
    if (major, minor) < MIN_RUSTC {
        bail!(
            "{} is {version}, the eBPF build needs >= {}.{} (Debian package rustc-web from \
             bookworm-security)",
            rustc.display(),
            MIN_RUSTC.0,
            MIN_RUSTC.1
        );
    }
    Ok(version.to_string())
}

fn leading_number(s: &str) -> u32 {
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(0)
}

/// Does any configured apt source (as apt itself parses them) provide bookworm-backports?
/// `indextargets --no-release-info` lists configured targets even before `apt-get update`.
fn backports_configured() -> Result<bool> {
    let out = capture(
        Path::new("apt-get"),
        [
            "indextargets",
            "--no-release-info",
            "--format",
            "$(RELEASE) $(TARGET_OF)",
        ],
    )?;
    Ok(out.lines().any(|l| {
        let mut words = l.split_whitespace();
        words.next() == Some(BACKPORTS_SUITE) && words.next() == Some("deb")
    }))
}

struct PkgState {
    pkg: &'static DebPackage,
    /// Installed version, if installed.
    installed: Option<String>,
    /// Installed and recent enough.
    ok: bool,
}

impl PkgState {
    fn describe(&self) -> String {
        match (&self.installed, self.pkg.min_version) {
            (Some(have), Some(min)) if !self.ok => {
                format!("{} ({have} < {min})", self.pkg.name)
            }
            _ => self.pkg.name.to_string(),
        }
    }
}

/// The state of every package in [`PACKAGES`], with one `dpkg-query` call.
fn query_packages() -> Result<Vec<PkgState>> {
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package}\t${Status}\t${Version}\n")
        .args(PACKAGES.iter().map(|p| p.name))
        .output()
        .context("running dpkg-query (is this Debian?)")?;
    // Exit status 1 just means some package is unknown; those are simply absent below.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut states = Vec::with_capacity(PACKAGES.len());
    for pkg in PACKAGES {
        let installed = stdout.lines().find_map(|line| {
            let mut fields = line.split('\t');
            let name = fields.next()?;
            let status = fields.next()?;
            let version = fields.next()?;
            (name == pkg.name && status.split_whitespace().nth(2) == Some("installed"))
                .then(|| version.to_string())
        });
        let ok = match (&installed, pkg.min_version) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(have), Some(min)) => version_at_least(have, min)?,
        };
        states.push(PkgState { pkg, installed, ok });
    }
    Ok(states)
}

fn version_at_least(have: &str, min: &str) -> Result<bool> {
    let status = Command::new("dpkg")
        .args(["--compare-versions", have, "ge", min])
        .status()
        .context("running dpkg --compare-versions")?;
    Ok(status.success())
}

enum LinkerState {
    Ok {
        path: PathBuf,
        version: String,
        /// LLVM major it links dynamically, `None` when linked statically.
        llvm: Option<u32>,
    },
    Missing,
    Bad {
        path: PathBuf,
        reason: String,
    },
}

/// `$CARGO_HOME/bin/bpf-linker`, else the first one on `PATH`.
fn find_bpf_linker() -> Option<PathBuf> {
    let in_home = cargo_home().join("bin/bpf-linker");
    if in_home.is_file() {
        return Some(in_home);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bpf-linker"))
        .find(|p| p.is_file())
}

fn check_bpf_linker() -> LinkerState {
    let Some(path) = find_bpf_linker() else {
        return LinkerState::Missing;
    };
    let bad = |reason: String| LinkerState::Bad {
        path: path.clone(),
        reason,
    };
    let out = match capture(&path, ["--version"]) {
        Ok(out) => out,
        Err(e) => return bad(format!("does not run: {e:#}")),
    };
    // "bpf-linker 0.13.0"
    let version = out
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    if !version.starts_with(BPF_LINKER_PREFIX) {
        return bad(format!("is {:?}, need {BPF_LINKER_VERSION}", out.trim()));
    }
    // Which LLVM it loads: "libLLVM.so.22.1 => /usr/lib/llvm-22/lib/libLLVM.so.22.1 (0x...)".
    let ldd = capture(Path::new("ldd"), [&path]).unwrap_or_default();
    let mut llvm = None;
    for line in ldd.lines().map(str::trim) {
        let Some(rest) = line
            .strip_prefix("libLLVM.so.")
            .or_else(|| line.strip_prefix("libLLVM-"))
        else {
            continue;
        };
        if line.contains("not found") {
            return bad(format!("cannot find its LLVM: {line}"));
        }
        llvm = Some(leading_number(rest));
    }
    match llvm {
        Some(major) if major != LLVM_MAJOR => bad(format!(
            "built against LLVM {major}, need LLVM {LLVM_MAJOR}"
        )),
        _ => LinkerState::Ok {
            path,
            version,
            llvm,
        },
    }
}

fn cargo_install_bpf_linker(force: bool) -> Result<Cmd> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut path = vec![PathBuf::from(LLVM_BIN)];
    if let Some(p) = std::env::var_os("PATH") {
        path.extend(std::env::split_paths(&p));
    }
    let path = std::env::join_paths(path).context("building PATH")?;
    let mut cmd = Cmd::new(cargo)
        .env("PATH", path, format!("{LLVM_BIN}:$PATH"))
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--locked",
            "--no-default-features",
            "--features",
            "llvm-22",
        ]);
    if force {
        cmd = cmd.args(["--force"]);
    }
    // Outside the workspace, so its .cargo/config.toml (build target, aliases) does not apply.
    cmd.cwd = Some(std::env::temp_dir());
    Ok(cmd)
}

fn apt_get<'a>(args: impl IntoIterator<Item = &'a str>) -> Cmd {
    Cmd::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive", "noninteractive".into())
        .args(["-q", "-o", "DPkg::Lock::Timeout=120"])
        .args(args)
}

fn apt_install(suite: Suite, names: &[&str]) -> Cmd {
    let cmd = apt_get(["install", "-y", "--no-install-recommends"]);
    let cmd = match suite {
        Suite::Bookworm => cmd,
        Suite::Backports => cmd.args(["-t", BACKPORTS_SUITE]),
    };
    cmd.args(names.iter().copied())
}

pub fn is_root() -> Result<bool> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    // "Uid:\t<real>\t<effective>\t<saved>\t<fs>"
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .ok_or_else(|| anyhow!("no Uid line in /proc/self/status"))?;
    Ok(euid == "0")
}

/// Run a read-only probe and return its stdout; error when it cannot run or fails.
fn capture<I, S>(program: &Path, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command that changes the system, printable exactly as one would type it.
struct Cmd {
    /// (name, value, how to show it).
    env: Vec<(&'static str, OsString, String)>,
    program: OsString,
    args: Vec<String>,
    cwd: Option<PathBuf>,
}

impl Cmd {
    fn new(program: impl Into<OsString>) -> Self {
        Cmd {
            env: Vec::new(),
            program: program.into(),
            args: Vec::new(),
            cwd: None,
        }
    }

    fn env(mut self, name: &'static str, value: impl Into<OsString>, shown: String) -> Self {
        self.env.push((name, value.into(), shown));
        self
    }

    fn args<'a>(mut self, args: impl IntoIterator<Item = &'a str>) -> Self {
        self.args.extend(args.into_iter().map(String::from));
        self
    }

    fn run(&self) -> Result<()> {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        for (name, value, _) in &self.env {
            command.env(name, value);
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        let status = command
            .status()
            .with_context(|| format!("cannot run {}", self.program.to_string_lossy()))?;
        if !status.success() {
            bail!("{} failed ({status})", self.program.to_string_lossy());
        }
        Ok(())
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, _, shown) in &self.env {
            write!(f, "{name}={shown} ")?;
        }
        write!(f, "{}", shell_quote(&self.program.to_string_lossy()))?;
        for arg in &self.args {
            write!(f, " {}", shell_quote(arg))?;
        }
        Ok(())
    }
}

fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=+,@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_table_is_sane() {
        for (i, p) in PACKAGES.iter().enumerate() {
            assert!(!p.name.is_empty() && !p.why.is_empty());
            assert!(
                PACKAGES[..i].iter().all(|q| q.name != p.name),
                "{} listed twice",
                p.name
            );
        }
        assert!(PACKAGES.iter().any(|p| p.suite == Suite::Backports));
    }

    #[test]
    fn commands_print_as_typed() {
        let cmd = apt_install(Suite::Backports, &["qemu-system-x86"]);
        assert_eq!(
            cmd.to_string(),
            "DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 install -y \
             --no-install-recommends -t bookworm-backports qemu-system-x86"
        );
        assert_eq!(shell_quote("~0.13"), "'~0.13'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn numbers() {
        assert_eq!(leading_number("10.0.2"), 10);
        assert_eq!(leading_number("96-beta"), 96);
        assert_eq!(leading_number("x"), 0);
    }
}

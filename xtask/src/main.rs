use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "ppscope project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install everything a fresh machine lacks (Debian packages, BPF toolchain, QEMU).
    Setup(xtask::setup::SetupArgs),
    /// Run every test: unit, host (root) and VM lab.
    Test(xtask::test::TestArgs),
    /// The VM lab: boot a Debian kernel under QEMU with the lab topology and run a script.
    Vm(xtask::vm::VmArgs),
    /// The long reliability suite (RELIABILITY.md): fuzzing, churn, faults and a VM soak.
    Soak(xtask::soak::SoakArgs),
    /// Run the overhead benchmarks and write BENCHMARKS.md (see the README, "Benchmarks").
    Bench(xtask::bench::BenchArgs),
    /// Build the Debian package (target/debian/ppscope_VERSION-1_amd64.deb) with cargo-deb.
    Package(xtask::package::PackageArgs),
    /// Set up, build and run ppscope with the given arguments (default: `diagnose`).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn run_ppscope(mut args: Vec<String>) -> anyhow::Result<i32> {
    let code = xtask::setup::run(&xtask::setup::SetupArgs::default())?;
    if code != 0 {
        return Ok(code);
    }
    let binary = xtask::vm::build_ppscope()?;
    if args.is_empty() {
        args.push("diagnose".into());
    }
    let status = std::process::Command::new(&binary).args(&args).status()?;
    Ok(status.code().unwrap_or(1))
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup(args) => xtask::setup::run(&args),
        Command::Test(args) => xtask::test::run(&args),
        Command::Vm(args) => xtask::vm::main(args),
        Command::Soak(args) => xtask::soak::run(&args),
        Command::Bench(args) => xtask::bench::run(&args),
        Command::Package(args) => xtask::package::run(&args),
        Command::Run { args } => run_ppscope(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::exit(1);
        }
    }
}

//! `cargo xtask test`: every test layer, in the order a failure is cheapest to find.
//!
//! Set-up (idempotent: seconds when done), then format and lint, then `cargo test` over the
//! workspace including the ignored tests: unit (no privileges), host (root: namespaces, BPF on
//! this kernel) and VM lab (QEMU with a current Debian kernel).
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{setup, workspace_root};

#[derive(clap::Args, Default)]
pub struct TestArgs {
    /// Skip the VM lab tests (quicker local runs; CI runs everything).
    #[arg(long)]
    pub no_vm: bool,
    /// Skip set-up (when you know the machine is ready).
    #[arg(long)]
    pub no_setup: bool,
}

fn step(name: &str, cmd: &mut Command) -> Result<()> {
    println!("\n==> {name}");
    let status = cmd
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

pub fn run(args: &TestArgs) -> Result<i32> {
    if !setup::is_root()? {
        bail!("the host and VM tests need root (network namespaces, BPF, apt): run `sudo cargo xtask test`");
    }
    if !args.no_setup {
        println!("==> cargo xtask setup");
        let code = setup::run(&setup::SetupArgs::default())?;
        if code != 0 {
            bail!("set-up failed");
        }
    }
    // Fail early with the set-up hint rather than deep inside a build script.
    setup::bpf_toolchain()?;

    step(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--check"]),
    )?;
    step(
        "cargo fmt --check (ebpf)",
        cargo().args(["fmt", "--check", "--manifest-path", "ebpf/Cargo.toml"]),
    )?;
    step(
        "cargo clippy -D warnings",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;

    let mut test = cargo();
    test.args(["test", "--workspace", "--", "--include-ignored"]);
    if args.no_vm {
        test.args(["--skip", "vm_"]);
    }
    step("cargo test (unit, host, VM lab)", &mut test)?;
    println!("\nall test layers passed");
    Ok(0)
}

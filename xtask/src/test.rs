//! `cargo xtask test`: every test layer, in the order a failure is cheapest to find.
//!
//! Set-up (idempotent: seconds when done), then format and lint, the dependency policy
//! (`cargo deny`, deny.toml), then `cargo test` over the workspace including the ignored
//! tests: unit (no privileges), host (root: namespaces, BPF on this kernel) and VM lab (QEMU
//! with a current Debian kernel).
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, setup, workspace_root};

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
    // The docs are the developers' map (the crates' overviews name every file): a link that
    // no longer resolves fails here, as a lint does above.
    step(
        "cargo doc -D warnings",
        cargo()
            .args([
                "doc",
                "--workspace",
                "--no-deps",
                "--document-private-items",
            ])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;

    // The dependency policy (deny.toml) for both workspaces that ship code: licenses, bans,
    // sources, from what is on disk (every package fetched first, the other platforms'
    // included, since the graph holds them).
    for manifest in ["Cargo.toml", "ebpf/Cargo.toml"] {
        step(
            &format!("cargo fetch ({manifest})"),
            cargo().args(["fetch", "--manifest-path", manifest]),
        )?;
        step(
            &format!("cargo deny check ({manifest})"),
            cargo().args([
                "deny",
                "--offline",
                // Every member is a root of the graph (xtask too), not only the package the
                // root manifest also is.
                "--workspace",
                "--manifest-path",
                manifest,
                "check",
                "licenses",
                "bans",
                "sources",
            ]),
        )?;
    }

    let mut test = cargo();
    // One test at a time: two TCG guests on a 2-core machine starve each other.
    test.args([
        "test",
        "--workspace",
        "--",
        "--include-ignored",
        "--test-threads=1",
    ]);
    if args.no_vm {
        test.args(["--skip", "vm_"]);
    }
    // setup installed tmux: here the dashboard's terminal test must run, not skip.
    test.env("PPSCOPE_REQUIRE_TMUX", "1");
    println!("\n==> cargo test (unit, host, VM lab)");
    let tally = run_counting(&mut test)?;
    // One closing line for the whole run: cargo's own last line is often an empty doc-test
    // binary's "0 passed", which says nothing about the run.
    println!("\n{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed > 0 || !tally.success {
        bail!("cargo test failed");
    }
    Ok(0)
}

#[derive(Default)]
struct Tally {
    passed: u64,
    failed: u64,
    success: bool,
}

/// Runs `cargo test`, echoing its output, and adds up every `test result:` line.
fn run_counting(cmd: &mut Command) -> Result<Tally> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .current_dir(workspace_root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let mut tally = Tally::default();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        add_result_line(&mut tally, &line);
    }
    tally.success = child.wait()?.success();
    Ok(tally)
}

/// `test result: ok. 17 passed; 0 failed; 1 ignored; ...`
fn add_result_line(tally: &mut Tally, line: &str) {
    let Some(rest) = line.strip_prefix("test result: ") else {
        return;
    };
    for part in rest.split(';') {
        let words: Vec<&str> = part.split_whitespace().collect();
        if let [.., n, what] = words[..] {
            let n: u64 = n.parse().unwrap_or(0);
            match what {
                "passed" => tally.passed += n,
                "failed" => tally.failed += n,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_cargo_result_lines() {
        let mut t = Tally::default();
        add_result_line(&mut t, "test result: ok. 17 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.57s");
        add_result_line(
            &mut t,
            "test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        add_result_line(&mut t, "running 3 tests");
        assert_eq!((t.passed, t.failed), (22, 1));
    }
}

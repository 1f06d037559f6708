//! Builds the eBPF object (`ebpf/`) and hands its path to the agent, which embeds it.
//!
//! Stable Rust cannot target BPF here (no rust-src), so this uses Debian's `rustc` (which ships
//! a prebuilt `core` for `bpfel-unknown-none`) and `bpf-linker`, both installed by
//! `cargo xtask setup`. Missing pieces stop the build with the command that fixes it.
use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";

fn find_bpf_linker() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = env::var_os("CARGO_HOME") {
        dirs.push(Path::new(&home).join("bin"));
    }
    if let Some(home) = env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
}

fn fail(what: &str) -> ! {
    panic!("\n\nppscope: cannot build the eBPF programs: {what}.\nRun `cargo xtask setup` once (as root) to install the BPF toolchain.\n\n");
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let ebpf_dir = manifest.parent().unwrap().join("ebpf");
    let common_dir = manifest.parent().unwrap().join("common");
    for p in ["src", "build.rs", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", ebpf_dir.join(p).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        common_dir.join("src").display()
    );

    if !Path::new(DEBIAN_RUSTC).is_file() {
        fail("Debian's rustc (package rustc-web) is not installed at /usr/bin/rustc");
    }
    let Some(linker) = find_bpf_linker() else {
        fail("bpf-linker is not installed");
    };
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let target_dir = out_dir.join("ebpf-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let path = format!(
        "{LLVM_BIN}:{}:{}",
        linker.parent().unwrap().display(),
        env::var("PATH").unwrap_or_default()
    );

    let mut cmd = Command::new(cargo);
    cmd.current_dir(&ebpf_dir)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "bpfel-unknown-none",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTC", DEBIAN_RUSTC)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("PATH", path)
        .env("CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER", &linker)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "-Cdebuginfo=2\x1f-Clink-arg=--btf",
        )
        // The outer build's settings are for the host, never for the BPF target.
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTDOC");
    // The programs run on the agent's kernel: aya-ebpf and the crate read a kprobe's
    // registers by that architecture (`bpf_target_arch`), which would otherwise be taken
    // from the build machine's (a cross-built agent).
    println!("cargo:rerun-if-env-changed=CARGO_CFG_TARGET_ARCH");
    if let Ok(arch) = env::var("CARGO_CFG_TARGET_ARCH") {
        cmd.env("AYA_BPF_TARGET_ARCH", arch);
    }
    for (k, _) in env::vars() {
        if k.starts_with("CARGO_FEATURE_") || k.starts_with("CARGO_CFG_") {
            cmd.env_remove(k);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}")));
    if !status.success() {
        fail("the eBPF crate failed to compile (see the errors above)");
    }
    let object = target_dir.join("bpfel-unknown-none/release/ppscope");
    if !object.is_file() {
        fail(&format!("{} was not produced", object.display()));
    }
    println!("cargo:rustc-env=PPSCOPE_EBPF_OBJECT={}", object.display());
}

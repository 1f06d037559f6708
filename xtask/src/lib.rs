//! Project tasks: toolchain set-up, the VM lab and the test runner. Not shipped in the product.
//!
//! The library half exists so that integration tests (`xtask/tests/`) can boot the VM lab
//! and read what ran inside it.

pub mod bench;
pub mod package;
pub mod setup;
pub mod soak;
pub mod test;
pub mod vm;

use std::{
    path::PathBuf,
    process::{Command, Output},
};

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// `cargo`: the one that runs xtask (`CARGO`), else the one on `PATH`.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// A finished command's status and both outputs, for a failure message.
pub fn output_text(out: &Output) -> String {
    format!(
        "status: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

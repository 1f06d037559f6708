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

use std::path::PathBuf;

/// The workspace root (the folder holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

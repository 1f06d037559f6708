//! Names the commit the binary is built from, for `ppscope --version`
//! (`PPSCOPE_COMMIT`): the checkout's `HEAD`, with `-dirty` when tracked files differ from
//! it. A build outside a git checkout (a source tarball) may set `PPSCOPE_COMMIT` itself;
//! without either it says `unknown`.
use std::{path::Path, process::Command};

fn git(args: &[&str]) -> Option<String> {
    // `safe.directory`: root building a checkout another user owns (CI) still gets its name;
    // this build already runs the checkout's own code, so git's check protects nothing here.
    // `--no-optional-locks`: `git status` must not refresh the index, which this script
    // watches (it would rerun itself on every build).
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "--no-optional-locks"])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=PPSCOPE_COMMIT");
    let commit = match std::env::var("PPSCOPE_COMMIT") {
        Ok(given) if !given.is_empty() => given,
        _ => from_git().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=PPSCOPE_COMMIT={commit}");
}

fn from_git() -> Option<String> {
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    // What the name depends on: a commit moves HEAD or the branch it names (a loose ref or
    // packed-refs), staging changes the index, an edit changes a source file. Only paths
    // that exist are named: cargo reruns a script on every build for a missing one.
    let mut watched: Vec<String> = ["src", "agent", "common", "tui", "ebpf/src", "Cargo.toml"]
        .map(String::from)
        .to_vec();
    let mut git_files = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    git_files.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for file in git_files {
        watched.extend(git(&["rev-parse", "--git-path", &file]));
    }
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some(if dirty { format!("{head}-dirty") } else { head })
}

//! Names the commit the binary is built from, for `ppscope --version`
//! (`PPSCOPE_COMMIT`): the checkout's `HEAD`, with `-dirty` when tracked files differ from
//! it. A build outside a git checkout (a source tarball) may set `PPSCOPE_COMMIT` itself;
//! without either it says `unknown`.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    // `safe.directory`: root building a checkout another user owns (CI) still gets its name;
    // this build already runs the checkout's own code, so git's check protects nothing here.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
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
    // A new commit moves HEAD or the branch it names; an edit changes the index's stat data
    // once git looks (`git status` refreshes it), so these cover what the name depends on.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for file in ["HEAD", "index", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{file}");
        }
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some(if dirty { format!("{head}-dirty") } else { head })
}

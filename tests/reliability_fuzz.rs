//! Reliability: fuzzing everything ppscope reads from outside (recordings, BTF, netlink
//! answers, command-line durations and addresses). The targets live in `fuzz/` (cargo-fuzz,
//! their own workspace); what each does with an input is `fuzz/src/lib.rs`, included here so
//! that a plain `cargo test` replays the whole corpus and every kept crash through the same
//! code, without cargo-fuzz or a sanitizer.
//!
//! - `fuzz_corpus_and_kept_crashes_replay`: every file under `fuzz/corpus/<target>/` and
//!   `fuzz/regressions/<target>/` (crashes and hangs found so far), each within a time limit.
//! - `fuzz_each_target_for_a_fixed_time` (root/CI, `cargo xtask test`): runs each target for
//!   `PPSCOPE_FUZZ_SECONDS` (default 20) with libFuzzer; a crash, hang or memory blow-up
//!   fails the test and its input is written to `fuzz/regressions/<target>/`, where the replay
//!   test keeps failing on it until the bug is fixed. `cargo xtask soak` runs it longer.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Runs `f(input)` on its own thread; Err when it panics or takes longer than `limit`.
fn run_limited(f: targets::Target, input: Vec<u8>, limit: Duration) -> Result<Duration, String> {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let r = std::panic::catch_unwind(|| f(&input));
            let _ = tx.send(r.is_ok());
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(true) => Ok(started.elapsed()),
        Ok(false) => Err("panicked".into()),
        Err(_) => Err(format!("did not finish within {limit:?}")),
    }
}

#[test]
fn fuzz_corpus_and_kept_crashes_replay() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, f) in targets::TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty");
        let kept = inputs(&fuzz_dir().join("regressions").join(name));
        for path in corpus.iter().chain(&kept) {
            let bytes = std::fs::read(path).unwrap();
            replayed += 1;
            if let Err(why) = run_limited(*f, bytes, Duration::from_secs(10)) {
                failures.push(format!("{name}: {} {why}", path.display()));
            }
        }
    }
    eprintln!("reliability: {replayed} fuzz inputs replayed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Where cargo-fuzz builds: beside the main build, never inside it (other RUSTFLAGS).
fn fuzz_target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("fuzz")
}

/// Runs one target for `secs` seconds; the error names the kept input.
pub fn fuzz_for(name: &str, secs: u64) -> Result<u64, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let work = std::env::temp_dir().join(format!("ppscope-fuzz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let regressions = fuzz_dir().join("regressions").join(name);
    std::fs::create_dir_all(&regressions).unwrap();
    let before = inputs(&regressions);
    let out = Command::new(&cargo)
        .current_dir(fuzz_dir())
        // cargo-fuzz asks for -Zsanitizer; stable rustc takes it with RUSTC_BOOTSTRAP.
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "--target-dir"])
        .arg(fuzz_target_dir())
        .arg(name)
        // New finds go to the scratch folder (first); the repo's corpus is only read.
        .arg(&work)
        .arg(fuzz_dir().join("corpus").join(name))
        .arg("--")
        .arg(format!("-max_total_time={secs}"))
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg(format!("-artifact_prefix={}/", regressions.display()))
        .output()
        .map_err(|e| format!("cannot run cargo fuzz ({e}): run `cargo xtask setup`"))?;
    let _ = std::fs::remove_dir_all(&work);
    let log = String::from_utf8_lossy(&out.stderr);
    let runs = log
        .lines()
        .find_map(|l| {
            l.strip_prefix("Done ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    if out.status.success() {
        return Ok(runs);
    }
    let kept: Vec<PathBuf> = inputs(&regressions)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    Err(format!(
        "fuzz target {name} failed ({}); input kept: {kept:?}\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

#[test]
#[ignore = "needs cargo-fuzz and a few minutes: run through `cargo xtask test`"]
fn fuzz_each_target_for_a_fixed_time() {
    let secs: u64 = std::env::var("PPSCOPE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut failures = Vec::new();
    for (name, _) in targets::TARGETS {
        let started = Instant::now();
        match fuzz_for(name, secs) {
            // A run that read no "Done N runs" line, or ran a handful, fuzzed nothing.
            Ok(runs) if runs < 1_000 => failures.push(format!(
                "fuzz target {name} ran {runs} inputs in {:.0?}: it did not fuzz",
                started.elapsed()
            )),
            Ok(runs) => eprintln!(
                "reliability: fuzz {name}: {runs} inputs in {:.0?}, no crash",
                started.elapsed()
            ),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

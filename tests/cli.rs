//! What a user sees on the command line before anything is loaded: every bad argument is one
//! sentence on stderr and exit 2 (README: 0 ok, 1 error, 2 bad arguments). No root needed.
use std::process::{Command, Output};

const PPSCOPE: &str = env!("CARGO_BIN_EXE_ppscope");

fn ppscope(args: &[&str]) -> Output {
    Command::new(PPSCOPE)
        .args(args)
        .output()
        .expect("run ppscope")
}

/// Exit 2, nothing on stdout, one line on stderr that contains `says`.
fn refused(args: &[&str], says: &str) {
    let out = ppscope(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one sentence, got: {err}");
    assert!(err.starts_with("ppscope: "), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn out_of_range_values_are_refused() {
    let sc = ["simulate", "--scenario", "healthy", "--target"];
    for (target, says) in [
        ("99", "for 99% write 0.99"),
        ("1.5", "not a share between 0 and 1"),
        ("-1", "not a share between 0 and 1"),
        ("NaN", "not a share between 0 and 1"),
        ("0", "not a share between 0 and 1"),
        ("1.0", "every page be recycled"),
        ("100", "every page be recycled"),
    ] {
        let args: Vec<&str> = sc.iter().copied().chain([target]).collect();
        refused(&args, says);
    }
    refused(
        &["diagnose", "--duration", "10000000000000s"],
        "longer than a year",
    );
    refused(
        &["top", "--interval", "50ms", "--once"],
        "shorter than 100ms",
    );
    // Checked before anything loads, so no root is needed to see them refused.
    refused(&["agent", "--interval", "1ns"], "shorter than 100ms");
    refused(
        &[
            "record",
            "-o",
            "/tmp/never-written.ppscope",
            "--interval",
            "1us",
        ],
        "shorter than 1ms",
    );
    refused(&["agent", "--max-pools", "0"], "at least 1");
    refused(
        &["top", "--connect", "http://127.0.0.1:99999", "--once"],
        "invalid port number",
    );
}

#[test]
fn a_mistyped_command_or_flag_is_answered_with_the_likely_one() {
    refused(&["diagnos"], "a similar subcommand exists: 'diagnose'");
    refused(
        &["diagnose", "--jsno"],
        "a similar argument exists: '--json'",
    );
}

/// `ppscope` alone: the help as clap lays it out (one command a line), on stderr, exit 2.
#[test]
fn no_command_shows_the_commands() {
    let out = ppscope(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty());
    for command in ["top", "diagnose", "record", "simulate", "agent", "doctor"] {
        assert!(
            err.lines().any(|l| l.trim_start().starts_with(command)),
            "{command}: {err}"
        );
    }
}

/// A closed or full standard output ends the script quietly or with one sentence, never a
/// panic (clap_complete's own writer panicked on it).
#[test]
fn completions_survive_a_full_standard_output() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(PPSCOPE)
        .args(["completions", "bash"])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot write to standard output") && !err.contains("panicked"),
        "{err}"
    );
}

/// `diagnose --check`: the report as always, then, where a pool's verdict over the window is
/// warn or starving, one sentence naming it and exit 3 (README's exit codes).
#[test]
fn diagnose_check_exits_3_after_the_report_when_a_pool_needs_attention() {
    let dir = std::env::temp_dir().join(format!("ppscope-cli-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("starving.ppscope");
    ppscope::testing::write_starving_recording(&path);
    let file = path.to_str().unwrap();
    let plain = ppscope(&["diagnose", "--replay", file]);
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let checked = ppscope(&["diagnose", "--replay", file, "--check"]);
    let err = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(3), "{err}");
    assert_eq!(checked.stdout, plain.stdout, "the same report first");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("1 pool(s) need attention: veth1 (") && err.contains(") starving"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replay's `--dev` must name a device the recording holds: a typo is said with the names
/// it has, not reported as a quiet host.
#[test]
fn a_replay_of_a_device_the_recording_lacks_is_refused_naming_those_it_holds() {
    use ppscope::testing;
    use ppscope_common::PoolCounters;
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("ppscope-cli-dev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("veth1.ppscope");
    let t0 = Instant::now();
    let samples = (0..3u64).map(|i| {
        let c = PoolCounters {
            alloc_calls: 100 * i,
            ..Default::default()
        };
        let at = t0 + Duration::from_millis(10 * i);
        testing::one_pool_sample(at, 0x1000, c, testing::identity("veth1"))
    });
    let facts = testing::facts("6.12-test", ppscope::model::Coverage::per_page());
    testing::write_recording(&path, &facts, Duration::from_millis(10), t0, samples);
    let file = path.to_str().unwrap();
    for command in [
        &["diagnose", "--replay", file][..],
        &["simulate", "--replay", file],
        &["top", "--once", "--replay", file],
    ] {
        let args: Vec<&str> = command.iter().copied().chain(["--dev", "veth2"]).collect();
        refused(&args, "--dev veth2: no ");
        refused(&args, " of that name in ");
        refused(&args, "(it holds veth1)");
    }
    // The device it holds is replayed.
    let out = ppscope(&["diagnose", "--replay", file, "--dev", "veth1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("veth1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_and_unknown_sources_are_bad_arguments() {
    // Either source, named both ways: no hint that --scenario is the only one.
    refused(&["simulate"], "--scenario <SCENARIO>|--replay <FILE>");
    refused(
        &["simulate", "--scenario", "nope"],
        "possible values: gve-devmem-alltoall, many-sockets, healthy",
    );
    refused(&["top", "--sim", "nope", "--once"], "all");
    refused(
        &["top", "--connect", "127.0.0.1:9464", "--once"],
        "not an http:// URL",
    );
    refused(
        &["agent", "--listen", "localhost:9464x"],
        "not a listen address",
    );
}

#[test]
fn flags_a_replay_cannot_honour_are_refused() {
    for flag in [
        &["--strict"][..],
        &["--backend", "kprobe"],
        &["--duration", "3s"],
        &["--bpf-stats"],
        &["--bpf-log"],
    ] {
        let args: Vec<&str> = ["diagnose", "--replay", "r.ppscope"]
            .into_iter()
            .chain(flag.iter().copied())
            .collect();
        refused(&args, "cannot be used with");
    }
    // top reads a simulation, a recording or another agent the same way: none loads a
    // program, so none can turn on the kernel's stats or the programs' log.
    for source in [
        &["--sim", "healthy"][..],
        &["--replay", "r.ppscope"],
        &["--connect", "http://127.0.0.1:9464"],
    ] {
        for flag in ["--backend=kprobe", "--bpf-stats", "--bpf-log"] {
            let args: Vec<&str> = ["top"]
                .into_iter()
                .chain(source.iter().copied())
                .chain([flag, "--once"])
                .collect();
            refused(&args, "cannot be used with");
        }
    }
    refused(
        &["simulate", "--scenario", "healthy", "--dev", "eth0"],
        "cannot be used with",
    );
    // A scenario's devices are examples in top too; a replay or another agent has no map.
    refused(
        &["top", "--sim", "healthy", "--dev", "eth0", "--once"],
        "cannot be used with",
    );
    refused(
        &["diagnose", "--replay", "r.ppscope", "--map-capacity", "8"],
        "cannot be used with",
    );
    refused(
        &[
            "top",
            "--replay",
            "r.ppscope",
            "--map-capacity",
            "8",
            "--once",
        ],
        "cannot be used with",
    );
}

#[test]
fn an_html_report_that_cannot_be_written_is_said_before_the_work() {
    let dir = std::env::temp_dir();
    refused(
        &[
            "simulate",
            "--scenario",
            "healthy",
            "--html",
            dir.to_str().unwrap(),
        ],
        "a directory, not a file",
    );
    refused(
        &[
            "diagnose",
            "--duration",
            "1h",
            "--html",
            "/ppscope-no-such-dir/report.html",
        ],
        "cannot create a file in /ppscope-no-such-dir: no such directory",
    );
    // A recording too, before its probes load (without root this would otherwise end on
    // missing privileges, exit 1).
    refused(
        &["record", "-o", "/ppscope-no-such-dir/r.ppscope"],
        "--output /ppscope-no-such-dir/r.ppscope: cannot create a file in /ppscope-no-such-dir",
    );
    refused(
        &["record", "-o", dir.to_str().unwrap()],
        "a directory, not a file",
    );
    // The OS's own reason, in words (not the kind's "entity not found", nor a temporary
    // file's name): /proc takes no new file.
    refused(
        &[
            "simulate",
            "--scenario",
            "healthy",
            "--html",
            "/proc/ppscope.html",
        ],
        "--html /proc/ppscope.html: cannot create a file in /proc: no such file or directory",
    );
}

#[test]
fn a_device_that_does_not_exist_is_said_before_anything_loads() {
    refused(
        &["diagnose", "--dev", "ppscope-none0", "--duration", "1s"],
        "no device of that name",
    );
    refused(
        &["top", "--dev", "ppscope-none0", "--once"],
        "no device of that name",
    );
}

#[test]
fn help_and_version_are_not_errors() {
    for args in [&["--help"][..], &["--version"], &["simulate", "--help"]] {
        let out = ppscope(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn an_unreachable_agent_is_named_once() {
    // Port 9 on loopback (discard): nothing listens there in the test namespace.
    let out = ppscope(&[
        "top",
        "--connect",
        "http://127.0.0.1:9",
        "--once",
        "--interval",
        "100ms",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let failure = err
        .lines()
        .find(|l| l.contains("failed"))
        .unwrap_or_else(|| panic!("no failure line: {err}"));
    assert_eq!(failure.matches("127.0.0.1:9").count(), 1, "{failure}");
    assert!(failure.to_lowercase().contains("refused"), "{failure}");
}

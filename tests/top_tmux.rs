//! `ppscope top` as a person sees it: the real binary in a detached tmux session of fixed
//! size, keys sent with `send-keys`, the screen read with `capture-pane`. The session runs on
//! its own tmux server (`-L`), killed by a Drop guard whatever happens, so a user's tmux is
//! never touched.
use std::{
    process::{Command, Output},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let out = self.cmd(&["send-keys", "-t", "top", k]);
            assert!(out.status.success(), "send-keys {k}: {out:?}");
        }
    }

    /// The pid of `ppscope top`: the child of the pane's shell.
    fn top_pid(&self) -> u32 {
        let out = self.cmd(&["list-panes", "-t", "top", "-F", "#{pane_pid}"]);
        let shell = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .expect("the pane's shell lists its children");
        children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the pane's shell {shell} has no child"))
    }

    /// Waits until the screen satisfies `ok` (the dashboard redraws when a key, a resize or a
    /// snapshot arrives).
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// User and system CPU a process has used, in seconds (`/proc/PID/stat`, clock ticks).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')').expect("a command in parentheses") + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().expect("a tick count"))
        .collect();
    let tck = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf runs");
    let per_second: f64 = String::from_utf8_lossy(&tck.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK");
    (f[0] + f[1]) as f64 / per_second
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn top_in_tmux_sort_filter_select_help_quit() {
    if !have_tmux() {
        assert!(
            std::env::var_os("PPSCOPE_REQUIRE_TMUX").is_none(),
            "tmux is required (PPSCOPE_REQUIRE_TMUX is set) but not installed"
        );
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmux = Tmux {
        socket: format!("ppscope-top-test-{}-{nanos}", std::process::id()),
    };
    // After ppscope exits, the shell reports its exit status and whether the terminal was
    // left in canonical (cooked) mode, then stays so the pane can still be read.
    let script = format!(
        "{} top --sim gve-devmem-alltoall --interval 200ms; echo EXIT=$?; \
         case \"$(stty -a)\" in *-icanon*) echo TTY=raw;; *) echo TTY=sane;; esac; sleep 60",
        env!("CARGO_BIN_EXE_ppscope")
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "40",
        "-s",
        "top",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");

    // The starving pool, first, with the advice to grow its ring.
    let s = tmux.wait("the pool row and its advice", |s| {
        s.contains("STARV") && s.contains("eth1 q0") && s.contains("grow eth1's ring")
    });
    assert!(s.contains("sort health"), "{s}");
    assert!(
        s.contains("sim gve-devmem-alltoall"),
        "footer names the source:\n{s}"
    );

    // Sort: s moves to the next column.
    tmux.keys(&["s"]);
    tmux.wait("sort by pool", |s| s.contains("sort pool"));

    // Filter: a text that matches nothing empties the table, Esc clears it.
    tmux.keys(&["/", "nomatch"]);
    tmux.wait("the filter prompt", |s| {
        s.contains("filter: nomatch_") && s.contains("no pool matches the filter")
    });
    tmux.keys(&["Escape", "/", "eth1", "Enter"]);
    tmux.wait("the filter kept", |s| {
        s.contains("filter: eth1 ") && s.contains("(1 of 1)") && s.contains("STARV")
    });

    // Select and open the detail full screen, then back.
    tmux.keys(&["j", "Enter"]);
    tmux.wait("the zoomed detail", |s| {
        s.contains("eth1 q0 detail") && !s.contains("pools 1/1") && s.contains("advice grow")
    });
    tmux.keys(&["Enter"]);
    tmux.wait("the table again", |s| s.contains("pools 1/1"));

    // Help overlay, from the key table.
    tmux.keys(&["?"]);
    tmux.wait("the help overlay", |s| {
        s.contains("keys (? or Esc closes)")
            && s.contains("sort by the next column")
            && s.contains("pause / resume")
    });
    tmux.keys(&["Escape"]);
    tmux.wait("the help closed", |s| !s.contains("keys (? or Esc closes)"));

    // Paused, the dashboard waits for a key: it does not spin (it once took a core, its nap
    // zero long while paused). Two seconds of it cost far less than a second of CPU.
    tmux.keys(&["space"]);
    tmux.wait("paused", |s| s.contains("paused"));
    let pid = tmux.top_pid();
    let before = cpu_seconds(pid);
    thread::sleep(Duration::from_secs(2));
    let spent = cpu_seconds(pid) - before;
    assert!(spent < 0.5, "paused, top used {spent:.2} s of CPU in 2 s");
    // No snapshot redraws the frame now; a smaller terminal still gets one drawn to its size
    // (the table's right border at the new last column), from the resize alone.
    let out = tmux.cmd(&["resize-window", "-t", "top", "-x", "100", "-y", "30"]);
    assert!(out.status.success(), "tmux resize-window: {out:?}");
    let s = tmux.wait("the frame drawn at 100×30", |s| {
        s.lines()
            .any(|l| l.contains("HEALTH") && l.ends_with('│') && l.chars().count() == 100)
    });
    assert!(s.contains("paused"), "{s}");
    tmux.keys(&["space"]);
    tmux.wait("running again", |s| s.contains("running"));

    // q quits, exit status 0, terminal back in cooked mode and off the alternate screen.
    tmux.keys(&["q"]);
    let s = tmux.wait("ppscope to exit", |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
    let s = tmux.wait("the terminal check", |s| s.contains("TTY="));
    assert!(s.contains("TTY=sane"), "{s}");
    assert!(!s.contains("STARV"), "the alternate screen was left:\n{s}");
}

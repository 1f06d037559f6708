//! Boot QEMU (TCG) with the lab's two virtio-net NICs on a private hub and collect what the
//! guest prints. ttyS0 = kernel console (to a log file), ttyS1 = the lab script's output
//! (QEMU's stdout, read here line by line).

use anyhow::{bail, Context, Result};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const QEMU: &str = "qemu-system-x86_64";
pub const MACS: [&str; 2] = ["52:54:00:00:00:01", "52:54:00:00:00:02"];
pub const START_MARKER: &str = "PPSCOPE-VM-START";
pub const EXIT_MARKER: &str = "PPSCOPE-VM-EXIT ";
pub const SETUP_FAILED_MARKER: &str = "PPSCOPE-VM-SETUP-FAILED ";

pub struct Machine<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    pub memory: &'a str,
    pub cpus: u32,
    pub rx_queue_size: u16,
}

pub fn qemu_path() -> Result<PathBuf> {
    super::initramfs::which(QEMU).with_context(|| {
        format!("{QEMU} is not installed: run `cargo xtask setup` (Debian package qemu-system-x86)")
    })
}

pub fn check_rx_queue_size(n: u16) -> Result<()> {
    if !(256..=1024).contains(&n) || !n.is_power_of_two() {
        bail!(
            "--rx-queue-size must be a power of two between 256 and 1024 (QEMU's limit), not {n}"
        );
    }
    Ok(())
}

fn base_command(m: &Machine) -> Result<Command> {
    let mut c = Command::new(qemu_path()?);
    c.args(["-accel", "tcg,thread=multi", "-cpu", "max"])
        .args(["-m", m.memory, "-smp", &m.cpus.to_string()])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(m.vmlinuz)
        .arg("-initrd")
        .arg(m.initrd)
        .args([
            "-append",
            "console=ttyS0 panic=-1 quiet loglevel=4 8250.nr_uarts=2 rdinit=/init",
        ]);
    // Only hub ports: the NICs can talk to each other and nothing else.
    for (i, mac) in MACS.iter().enumerate() {
        c.args(["-netdev", &format!("hubport,id=n{i},hubid=0")]);
        c.args([
            "-device",
            &format!(
                "virtio-net-pci,netdev=n{i},mac={mac},rx_queue_size={}",
                m.rx_queue_size
            ),
        ]);
    }
    Ok(c)
}

/// Interactive: the console on this terminal.
pub fn shell(m: &Machine) -> Result<i32> {
    let mut c = base_command(m)?;
    c.args(["-serial", "mon:stdio"]);
    eprintln!("vm: booting (Ctrl-A X quits QEMU)");
    let st = c.status().context("starting QEMU")?;
    Ok(st.code().unwrap_or(1))
}

pub struct Outcome {
    pub status: i32,
    pub output: String,
}

/// Run a lab VM whose /init runs the script; stream its output (print!, so test harnesses
/// capture it), return its exit status.
pub fn run(m: &Machine, run_dir: &Path, timeout: Duration, echo_console: bool) -> Result<Outcome> {
    let console_log = run_dir.join("console.log");
    let mut c = base_command(m)?;
    c.arg("-chardev")
        .arg(format!("file,id=con,path={}", console_log.display()))
        .args(["-serial", "chardev:con"])
        .args([
            "-chardev",
            "stdio,id=out,signal=off",
            "-serial",
            "chardev:out",
        ]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().context("starting QEMU")?;
    let _stdin = child.stdin.take(); // kept open (and never written) until we return

    let (tx, rx) = mpsc::channel::<Option<String>>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).replace('\r', "");
                    if tx
                        .send(Some(line.trim_end_matches('\n').to_string()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(None);
    });
    let qemu_stderr = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let err_buf = qemu_stderr.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            // Expected: the hub deliberately has no host backend.
            if line.contains("is not connected to host network") {
                continue;
            }
            eprintln!("qemu: {line}");
            err_buf.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    if echo_console {
        let (path, stop) = (console_log.clone(), stop.clone());
        std::thread::spawn(move || tail_file(&path, &stop));
    }

    let result = collect(&rx, &mut child, started, timeout);
    stop.store(true, Ordering::Relaxed);
    let finish = |child: &mut Child| -> Option<ExitStatus> {
        // After the marker the guest powers off at once; give it a moment, then insist.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    match result {
        Collected::Exit { status, output } => {
            finish(&mut child);
            eprintln!(
                "vm: guest finished in {:.1} s, script exit status {status}",
                started.elapsed().as_secs_f64()
            );
            Ok(Outcome { status, output })
        }
        Collected::SetupFailed { what, output } => {
            let st = finish(&mut child);
            bail!(
                "the guest's lab setup failed ({what}); QEMU {}\n{}",
                fmt_status(st),
                diagnostics(&console_log, &qemu_stderr, &output)
            )
        }
        Collected::Eof { output } => {
            let st = finish(&mut child);
            bail!(
                "the guest died without the exit marker (QEMU {}, after {:.1} s)\n{}",
                fmt_status(st),
                started.elapsed().as_secs_f64(),
                diagnostics(&console_log, &qemu_stderr, &output)
            )
        }
        Collected::NoBoot { output } => {
            let _ = child.kill();
            let _ = child.wait();
            Err(anyhow::Error::new(BootHang).context(format!(
                "the guest did not bring the lab up within {} s (killed QEMU)\n{}",
                BOOT_TIMEOUT.min(timeout).as_secs(),
                diagnostics(&console_log, &qemu_stderr, &output)
            )))
        }
        Collected::Timeout { output } => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "guest timed out after {} s (killed QEMU)\n{}",
                timeout.as_secs(),
                diagnostics(&console_log, &qemu_stderr, &output)
            )
        }
    }
}

/// The lab is up in 4-9 s on an idle machine; far beyond that the boot has hung (seen once
/// with an empty console while another TCG guest ran beside it).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(150);

/// Marks an error as "the guest never booted", which `run_script` retries once.
#[derive(Debug)]
pub struct BootHang;

impl std::fmt::Display for BootHang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the guest's boot hung")
    }
}

impl std::error::Error for BootHang {}

enum Collected {
    Exit {
        status: i32,
        output: String,
    },
    /// The lab never came up (no start marker in time): a hung boot, worth one retry.
    NoBoot {
        output: String,
    },
    SetupFailed {
        what: String,
        output: String,
    },
    Eof {
        output: String,
    },
    Timeout {
        output: String,
    },
}

fn collect(
    rx: &mpsc::Receiver<Option<String>>,
    _child: &mut Child,
    started: Instant,
    timeout: Duration,
) -> Collected {
    let mut output = String::new();
    let deadline = started + timeout;
    let boot_deadline = started + BOOT_TIMEOUT.min(timeout);
    let mut up = false;
    let mut out = std::io::stdout();
    loop {
        let until = if up { deadline } else { boot_deadline };
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(line)) => {
                if line.trim() == START_MARKER {
                    up = true;
                    eprintln!(
                        "vm: lab up after {:.1} s, running the script",
                        started.elapsed().as_secs_f64()
                    );
                    continue;
                }
                if let Some(code) = line.trim().strip_prefix(EXIT_MARKER.trim_end()) {
                    if let Ok(status) = code.trim().parse() {
                        return Collected::Exit { status, output };
                    }
                }
                if let Some(what) = line.trim().strip_prefix(SETUP_FAILED_MARKER.trim_end()) {
                    return Collected::SetupFailed {
                        what: what.trim().to_string(),
                        output,
                    };
                }
                println!("{line}");
                let _ = out.flush();
                output.push_str(&line);
                output.push('\n');
            }
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Collected::Eof { output }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !up => return Collected::NoBoot { output },
            Err(mpsc::RecvTimeoutError::Timeout) => return Collected::Timeout { output },
        }
    }
}

fn fmt_status(st: Option<ExitStatus>) -> String {
    match st {
        Some(s) => format!("exited with {s}"),
        None => "status unknown".into(),
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn diagnostics(console_log: &Path, qemu_stderr: &Mutex<String>, output: &str) -> String {
    let console = fs::read(console_log)
        .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
        .unwrap_or_default();
    let mut s = format!(
        "--- last lines of the guest console ({}) ---\n{}\n",
        console_log.display(),
        last_lines(&console, 40)
    );
    if !output.is_empty() {
        s += &format!(
            "--- last lines of the script output ---\n{}\n",
            last_lines(output, 10)
        );
    }
    let err = qemu_stderr.lock().unwrap();
    if !err.is_empty() {
        s += &format!("--- QEMU stderr ---\n{}", last_lines(&err, 20));
    }
    s
}

/// Echo a growing file to stderr until told to stop.
fn tail_file(path: &Path, stop: &AtomicBool) {
    let mut pos = 0usize;
    let mut buf = Vec::new();
    loop {
        let done = stop.load(Ordering::Relaxed);
        if let Ok(mut f) = fs::File::open(path) {
            buf.clear();
            if f.read_to_end(&mut buf).is_ok() && buf.len() > pos {
                let text = String::from_utf8_lossy(&buf[pos..]).replace('\r', "");
                eprint!("{text}");
                pos = buf.len();
            }
        }
        if done {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

//! The one logger: `log` records from ppscope and from the crates it uses (aya says through
//! `log` when it cannot load a program's BTF, for one) go to standard error, one line each.
//!
//! `RUST_LOG` picks what is shown (env_logger's syntax); without it, ppscope's own events
//! (`info`) and everyone's warnings and errors. ppscope's own lines read as they always did
//! (`ppscope: …`), so scripts that wait for a line keep working; another crate's name its
//! level and origin.
//!
//! While the dashboard owns the terminal a line on standard error would be drawn over it and
//! stay until the next full redraw, so [`Held`] keeps lines back and prints them when the
//! dashboard has given the terminal back.
use std::{
    io::{self, Write},
    sync::{Mutex, MutexGuard},
};

use log::Level;

/// What is shown without `RUST_LOG`.
const DEFAULT_FILTER: &str = "warn,ppscope=info";

/// Lines kept back while the terminal is the dashboard's (`None`: write straight through).
static HELD: Mutex<Option<Vec<u8>>> = Mutex::new(None);

fn held() -> MutexGuard<'static, Option<Vec<u8>>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Standard error, or the held lines while the dashboard runs.
struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match held().as_mut() {
            Some(lines) => {
                lines.extend_from_slice(buf);
                Ok(buf.len())
            }
            None => io::stderr().lock().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Installs the logger; once, first thing in `main` after the arguments are read.
/// `bpf_lines`: the kernel programs' lines are asked for (`--bpf-log`), so their target is
/// shown down to debug whatever RUST_LOG says.
pub fn init(bpf_lines: bool) {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_FILTER));
    if bpf_lines {
        builder.filter_module(ppscope::probes::bpf_log::TARGET, log::LevelFilter::Debug);
    }
    builder
        .format(|out, record| {
            // The kernel programs' lines say where they came from, as another crate's do.
            let own = record.target().split("::").next() == Some("ppscope")
                && record.target() != ppscope::probes::bpf_log::TARGET;
            let level = record.level().as_str().to_ascii_lowercase();
            match (own, record.level()) {
                (true, Level::Info) => writeln!(out, "ppscope: {}", record.args()),
                (true, _) => writeln!(out, "ppscope: {level}: {}", record.args()),
                (false, _) => writeln!(
                    out,
                    "ppscope: {level} from {}: {}",
                    record.target(),
                    record.args()
                ),
            }
        })
        .target(env_logger::Target::Pipe(Box::new(Stderr)))
        .init();
}

/// Keeps log lines back until dropped, then prints them.
pub struct Held(());

impl Held {
    pub fn new() -> Self {
        *held() = Some(Vec::new());
        Held(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(lines) = held().take() {
            let _ = io::stderr().lock().write_all(&lines);
        }
    }
}

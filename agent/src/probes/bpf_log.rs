//! The programs' own log lines (aya-log; `ebpf/src/log.rs` writes them at rare sites only),
//! read from their ring buffer on a thread of their own and handed to the `log` logger under
//! the target [`TARGET`]. Off unless asked: the programs are loaded with aya-log's level at 0,
//! which the verifier turns into dead code at every site.
use std::{
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
};

use anyhow::{Context, Result};
use aya::Ebpf;

/// The target of the programs' lines (`RUST_LOG=ppscope::bpf=debug` asks for them).
pub const TARGET: &str = "ppscope::bpf";

/// How often the reader looks for lines when none woke it (and checks it is to stop).
const POLL_MS: i32 = 250;

/// The level the programs are loaded with (aya-log's `AYA_LOG_LEVEL`): debug when `asked`
/// or when the logger shows [`TARGET`]'s debug lines, else 0 (every site off).
pub fn level(asked: bool) -> u8 {
    if asked || log::log_enabled!(target: TARGET, log::Level::Debug) {
        aya_log::Level::Debug as u8
    } else {
        0
    }
}

/// Reads the programs' lines until dropped.
pub struct BpfLog {
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl BpfLog {
    /// Starts reading the lines of the programs in `ebpf` (which must have been loaded with a
    /// [`level`] above 0 for there to be any).
    pub fn start(ebpf: &mut Ebpf) -> Result<Self> {
        let mut logger = aya_log::EbpfLogger::init(ebpf)
            .context("cannot read the programs' log lines (aya-log)")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let reader = std::thread::Builder::new()
            .name("ppscope-bpf-log".into())
            .spawn(move || {
                let fd = logger.as_raw_fd();
                while !stopping.load(Ordering::Relaxed) {
                    let mut ready = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call; the fd is the
                    // ring buffer's, owned by `logger`, which outlives the loop.
                    unsafe { libc::poll(&mut ready, 1, POLL_MS) };
                    logger.flush();
                }
                logger.flush();
            })
            .context("cannot start the thread that reads the programs' log lines")?;
        Ok(Self {
            stop,
            reader: Some(reader),
        })
    }
}

impl Drop for BpfLog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

//! SIGINT/SIGTERM as an event: Ctrl-C ends a diagnose window or a recording early and the
//! result still comes; the agent stops cleanly (the probes detach when they are dropped).
use std::{sync::mpsc, thread, time::Duration};

use anyhow::Result;
use signal_hook::{
    consts::{SIGINT, SIGTERM},
    iterator::{Handle, Signals},
};

/// Catches SIGINT and SIGTERM while it lives.
pub struct Interrupt {
    rx: mpsc::Receiver<()>,
    handle: Handle,
}

impl Interrupt {
    pub fn new() -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let mut signals = Signals::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                let _ = tx.send(());
            }
        });
        Ok(Self { rx, handle })
    }

    /// Sleeps up to `d`; true when interrupted.
    pub fn wait(&self, d: Duration) -> bool {
        self.rx.recv_timeout(d).is_ok()
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.handle.close();
    }
}

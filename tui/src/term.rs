//! The terminal side: a worker thread that owns the source, a thread that reads the terminal's
//! input, the UI loop, and restoring the terminal on every way out (normal exit, error, panic:
//! ratatui's own init and restore).
//!
//! Nothing wakes on a timer to look for work: the worker sleeps until its next sample or until
//! the UI lets go of it, and the UI thread blocks until a snapshot or a key arrives. A
//! dashboard left open on a busy host then costs its samples and frames, not sixty wake-ups a
//! second: a 25 ms nap and a 50 ms input poll were about a third of `top`'s CPU at 10,000
//! pools on the development host (0.95–1.20% of a core, 0.60–0.63% without them).
use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use ppscope::{snapshot::Snapshot, source::Source};
use ratatui::{
    backend::TestBackend,
    crossterm::event::{self, Event},
    DefaultTerminal, Terminal,
};

use crate::{app::App, ui};

/// What the UI thread waits for: the worker's news and the terminal's input, in one channel.
enum Msg {
    /// The snapshot and the source's description after it (a replay's position moves).
    Snapshot(Box<Snapshot>, String),
    Error(String),
    Ended,
    /// A key, a resize, or any other terminal event.
    Input(Event),
    /// Reading the terminal failed: the dashboard cannot go on.
    InputFailed(std::io::Error),
}

/// What the UI thread tells the worker. Quitting is the other half: dropping the sender the
/// worker waits on.
struct Shared {
    interval_ms: AtomicU64,
    paused: AtomicBool,
}

/// Sleeps `total`, or less when the UI lets go of `stop`'s sender (quitting). Returns false
/// when asked to stop.
fn nap(stop: &mpsc::Receiver<()>, total: Duration) -> bool {
    matches!(
        stop.recv_timeout(total),
        Err(mpsc::RecvTimeoutError::Timeout)
    )
}

fn worker(
    mut source: Box<dyn Source>,
    shared: Arc<Shared>,
    stop: mpsc::Receiver<()>,
    tx: mpsc::Sender<Msg>,
) {
    let mut spent = Duration::ZERO;
    loop {
        let interval = Duration::from_millis(shared.interval_ms.load(Ordering::Relaxed));
        // The time `next` took counts against the interval (bpftop subtracts the sampler's
        // own time), so a slow source still refreshes at the chosen pace.
        if !nap(&stop, interval.saturating_sub(spent)) {
            return;
        }
        if shared.paused.load(Ordering::Relaxed) {
            // A paused replay or simulation must not advance; a live source's next snapshot
            // then covers the pause (rates divide by its real duration).
            spent = interval;
            continue;
        }
        let started = Instant::now();
        let msg = match source.next(interval) {
            Ok(Some(s)) => Msg::Snapshot(Box::new(s), source.describe()),
            Ok(None) => Msg::Ended,
            Err(e) => Msg::Error(format!("{e:#}")),
        };
        spent = started.elapsed();
        let ended = matches!(msg, Msg::Ended);
        if tx.send(msg).is_err() || ended {
            return;
        }
    }
}

/// Hands every terminal event to the UI thread as it comes. It blocks in `read` for as long as
/// the dashboard runs, so it is never joined: it ends with the process, or at its next event
/// once the UI thread has gone.
fn read_input(tx: mpsc::Sender<Msg>) {
    loop {
        let msg = match event::read() {
            Ok(e) => Msg::Input(e),
            Err(e) => Msg::InputFailed(e),
        };
        let failed = matches!(msg, Msg::InputFailed(_));
        if tx.send(msg).is_err() || failed {
            return;
        }
    }
}

/// Restores the terminal when dropped, whichever way `run` returns (a panic is ratatui's
/// hook's: it restores, then prints the message on the normal screen).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Interactive dashboard until `q`, `Esc` or `Ctrl-C`.
pub fn run(source: Box<dyn Source>, interval: Duration) -> Result<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("cannot take over the terminal: stdout is not a terminal (try --once)");
    }
    let mut app = App::new(source.describe(), interval);
    let shared = Arc::new(Shared {
        interval_ms: AtomicU64::new(interval.as_millis().max(1) as u64),
        paused: AtomicBool::new(false),
    });
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    {
        let shared = shared.clone();
        let tx = tx.clone();
        thread::Builder::new()
            .name("ppscope-top-source".into())
            .spawn(move || {
                worker(source, shared, stop_rx, tx);
                let _ = done_tx.send(());
            })
            .context("cannot start the source thread")?;
    }

    let result = (|| -> Result<()> {
        // Before init: try_init turns raw mode on first, and returns an error without turning
        // it off when the alternate screen then fails. (Restoring writes to stdout: it is a
        // terminal, checked first.)
        let _restore = Restore;
        let mut terminal = ratatui::try_init().context("cannot take over the terminal")?;
        terminal.clear()?;
        // After init, so that the terminal is in raw mode before the first key is read.
        thread::Builder::new()
            .name("ppscope-top-input".into())
            .spawn(move || read_input(tx))
            .context("cannot start the input thread")?;
        ui_loop(&mut terminal, &mut app, &shared, &rx)
    })();
    drop(stop_tx);
    // Give the worker a moment to drop the source (detach probes) cleanly; a source stuck in
    // `next` is left to the process exit, which closes its fds anyway.
    let _ = done_rx.recv_timeout(Duration::from_millis(500));
    result
}

fn ui_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    shared: &Shared,
    rx: &mpsc::Receiver<Msg>,
) -> Result<()> {
    // Drawn first, then only when something changed: ratatui diffs the buffers, and an idle
    // dashboard then writes nothing to the terminal.
    terminal.draw(|f| ui::render(f, app))?;
    // The input thread holds a sender as long as it runs, so the channel never closes first.
    while let Ok(first) = rx.recv() {
        let mut dirty = false;
        // Everything that has arrived, then one frame.
        for msg in std::iter::once(first).chain(rx.try_iter()) {
            match msg {
                Msg::Snapshot(s, source) => {
                    app.set_source(source);
                    app.on_snapshot(*s)
                }
                Msg::Error(e) => app.on_error(e),
                Msg::Ended => app.on_end(),
                Msg::Input(Event::Key(k)) => {
                    if app.on_key(k) {
                        return Ok(());
                    }
                    shared
                        .interval_ms
                        .store(app.interval().as_millis() as u64, Ordering::Relaxed);
                    shared.paused.store(app.paused(), Ordering::Relaxed);
                }
                Msg::Input(Event::Resize(..)) => {}
                Msg::Input(_) => continue,
                Msg::InputFailed(e) => {
                    return Err(anyhow::Error::new(e).context("cannot read the terminal"))
                }
            }
            dirty = true;
        }
        if dirty {
            terminal.draw(|f| ui::render(f, app))?;
        }
    }
    Ok(())
}

/// Renders one frame of `app` at the given size as plain text.
pub fn frame_text(app: &App, width: u16, height: u16) -> Result<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height))?;
    terminal.draw(|f| ui::render(f, app))?;
    Ok(ui::buffer_text(terminal.backend().buffer()))
}

/// One interval, one snapshot, one frame as text (`ppscope top --once`).
pub fn once(
    mut source: Box<dyn Source>,
    interval: Duration,
    width: u16,
    height: u16,
) -> Result<String> {
    let mut app = App::new(source.describe(), interval);
    thread::sleep(interval);
    match source.next(interval) {
        Ok(Some(s)) => {
            app.set_source(source.describe());
            app.on_snapshot(s)
        }
        Ok(None) => app.on_end(),
        Err(e) => return Err(e.context("the source failed")),
    }
    frame_text(&app, width, height)
}

//! The terminal side: a worker thread that owns the source, the UI loop, and restoring the
//! terminal on every way out (normal exit, error, panic: ratatui's own init and restore).
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

enum Msg {
    /// The snapshot and the source's description after it (a replay's position moves).
    Snapshot(Box<Snapshot>, String),
    Error(String),
    Ended,
}

/// What the UI thread tells the worker.
struct Shared {
    interval_ms: AtomicU64,
    paused: AtomicBool,
    stop: AtomicBool,
}

/// Sleeps `total` in short steps so that quitting, pausing or a new interval is seen quickly.
/// Returns false when asked to stop.
fn nap(shared: &Shared, total: Duration) -> bool {
    let end = Instant::now() + total;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        thread::sleep((end - now).min(Duration::from_millis(25)));
    }
}

fn worker(mut source: Box<dyn Source>, shared: Arc<Shared>, tx: mpsc::Sender<Msg>) {
    let mut spent = Duration::ZERO;
    loop {
        let interval = Duration::from_millis(shared.interval_ms.load(Ordering::Relaxed));
        // The time `next` took counts against the interval (bpftop subtracts the sampler's
        // own time), so a slow source still refreshes at the chosen pace.
        if !nap(&shared, interval.saturating_sub(spent)) {
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
        stop: AtomicBool::new(false),
    });
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    {
        let shared = shared.clone();
        thread::Builder::new()
            .name("ppscope-top-source".into())
            .spawn(move || {
                worker(source, shared, tx);
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
        ui_loop(&mut terminal, &mut app, &shared, &rx)
    })();
    shared.stop.store(true, Ordering::Relaxed);
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
    let mut dirty = true;
    loop {
        // Draw only when something changed: ratatui diffs the buffers, and an idle
        // dashboard then writes nothing to the terminal.
        if dirty {
            terminal.draw(|f| ui::render(f, app))?;
            dirty = false;
        }
        if event::poll(Duration::from_millis(50))? {
            match event::read()? {
                Event::Key(k) => {
                    if app.on_key(k) {
                        return Ok(());
                    }
                    shared
                        .interval_ms
                        .store(app.interval().as_millis() as u64, Ordering::Relaxed);
                    shared.paused.store(app.paused(), Ordering::Relaxed);
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        loop {
            match rx.try_recv() {
                Ok(Msg::Snapshot(s, source)) => {
                    app.set_source(source);
                    app.on_snapshot(*s)
                }
                Ok(Msg::Error(e)) => app.on_error(e),
                Ok(Msg::Ended) => app.on_end(),
                Err(_) => break,
            }
            dirty = true;
        }
    }
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

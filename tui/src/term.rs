//! The terminal side: a worker thread that owns the source, a thread that reads the terminal's
//! input, the UI loop, and restoring the terminal on every way out (normal exit, error, panic:
//! ratatui's own init and restore).
//!
//! Nothing wakes on a timer to look for work: the worker sleeps until its next sample or until
//! the UI tells it something (a new interval, pause, resume, or quitting), and the UI thread
//! blocks until a snapshot or a key arrives. A dashboard left open on a busy host then costs
//! its samples and frames, not sixty wake-ups a second: a 25 ms nap and a 50 ms input poll
//! were about a third of `top`'s CPU in the agent benchmark's lab on the development host
//! (0.95–1.20% of a core, 0.60–0.63% without them; a `top` there shows none of the lab's
//! 10,000 pools, see BENCHMARKS.md, but reads the maps and 10,000 devices' drops). A paused dashboard costs nothing (the nap it took while
//! paused was zero long, so it spun a core).
//!
//! The input thread holds crossterm's event reader for as long as it waits on a key, so the
//! UI thread must not ask the terminal anything that reads its answer as an event
//! (`cursor::position`, `supports_keyboard_enhancement`, ratatui's `Viewport::Inline`): it
//! would wait two seconds for the reader and fail.
use std::{
    sync::mpsc,
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

/// How the worker samples, as the keys last set it: the UI thread sends it when it changes.
/// Dropping the sender is quitting.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pace {
    interval: Duration,
    paused: bool,
}

fn worker(
    mut source: Box<dyn Source>,
    mut pace: Pace,
    control: mpsc::Receiver<Pace>,
    tx: mpsc::Sender<Msg>,
) {
    // The next sample is due an interval after the last one started: the time `next` took
    // counts against the interval (bpftop subtracts the sampler's own time), so a slow source
    // still refreshes at the chosen pace. A new interval counts from the same start.
    let mut last = Instant::now();
    loop {
        let told = if pace.paused {
            // A paused replay or simulation must not advance, and nothing is due until the UI
            // says otherwise; a live source's next snapshot then covers the pause (rates
            // divide by its real duration).
            control.recv().map(Some).map_err(|_| ())
        } else {
            let due = (last + pace.interval).saturating_duration_since(Instant::now());
            match control.recv_timeout(due) {
                Ok(p) => Ok(Some(p)),
                Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => Err(()),
            }
        };
        match told {
            Err(()) => return,
            Ok(Some(p)) => {
                pace = p;
                continue;
            }
            Ok(None) => {}
        }
        last = Instant::now();
        let msg = match source.next(pace.interval) {
            Ok(Some(s)) => Msg::Snapshot(Box::new(s), source.describe()),
            Ok(None) => Msg::Ended,
            Err(e) => Msg::Error(format!("{e:#}")),
        };
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
    let pace = Pace {
        interval: app.interval(),
        paused: app.paused(),
    };
    let (tx, rx) = mpsc::channel();
    let (control_tx, control_rx) = mpsc::channel::<Pace>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    {
        let tx = tx.clone();
        thread::Builder::new()
            .name("ppscope-top-source".into())
            .spawn(move || {
                worker(source, pace, control_rx, tx);
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
        ui_loop(&mut terminal, &mut app, pace, &control_tx, &rx)
    })();
    // The worker's cue to stop.
    drop(control_tx);
    // Give the worker a moment to drop the source (detach probes) cleanly; a source stuck in
    // `next` is left to the process exit, which closes its fds anyway.
    let _ = done_rx.recv_timeout(Duration::from_millis(500));
    result
}

fn ui_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    mut pace: Pace,
    control: &mpsc::Sender<Pace>,
    rx: &mpsc::Receiver<Msg>,
) -> Result<()> {
    // Drawn first, then only when something changed: ratatui diffs the buffers, and an idle
    // dashboard then writes nothing to the terminal.
    terminal.draw(|f| ui::render(f, app))?;
    // The input thread holds a sender as long as it runs: the channel closes only if it died
    // without a word (a panic) after the worker ended.
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
                    let now = Pace {
                        interval: app.interval(),
                        paused: app.paused(),
                    };
                    if now != pace {
                        pace = now;
                        // The worker is gone only once its source ended: nothing to tell.
                        let _ = control.send(pace);
                    }
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
    anyhow::bail!("the terminal's input is no longer read")
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

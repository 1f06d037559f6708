//! `ppscope top`: the page_pool dashboard (ratatui), fed a [`ppscope::source::Source`].
//!
//! One job per file, as in bpftop: `app` holds the state and the bounded per-pool history,
//! `health` the per-pool figures and the verdict that colours a row, `ui` renders an `App`
//! (pure, no I/O), `keys` is the one key table (input and help), `term` the terminal, the
//! source thread and restoring the terminal on every exit path.
mod app;
mod fmt;
mod health;
pub mod keys;
mod term;
mod ui;

pub use app::{App, Pane, SortKey, StreamState, HISTORY_LEN, INTERVALS_MS};
pub use health::{health, Health, Metrics};
pub use term::{frame_text, once, run};
pub use ui::{buffer_text, render};

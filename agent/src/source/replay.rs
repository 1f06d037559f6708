//! A recording (`ppscope record`) played back at the consumer's pace.
use std::{path::Path, time::Duration};

use anyhow::Result;

use super::Source;
use crate::{
    model::{RawSample, SourceFacts},
    pipeline::{self, Window},
    recording::Recording,
    snapshot::Snapshot,
};

/// Recorded time the replay's advice looks back over.
const REPLAY_ADVICE_WINDOW: Duration = Duration::from_secs(10);

/// A recording played back: each call advances the recording's own clock by `interval`.
pub struct ReplaySource {
    name: String,
    facts: SourceFacts,
    samples: Vec<RawSample>,
    /// Index of the sample the previous snapshot ended at.
    at: usize,
}

impl ReplaySource {
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self::of(&Recording::read(path)?, path))
    }

    /// The recording read from `path`.
    pub fn of(rec: &Recording, path: &Path) -> Self {
        // Recording::read refuses a file of fewer than two samples: there is a window.
        let samples = rec.samples();
        // A dashboard covers the warning `Recording::read` gave: its footer says it too.
        let cut = if rec.cut_off.is_some() {
            ", cut off"
        } else {
            ""
        };
        Self {
            name: format!("{}{cut}", path.display()),
            facts: rec.header.facts(),
            samples,
            at: 0,
        }
    }

    /// Recorded time covered so far and in all.
    fn position(&self) -> (Duration, Duration) {
        let start = self.samples[0].at;
        (
            self.samples[self.at].at.duration_since(start),
            self.samples[self.samples.len() - 1]
                .at
                .duration_since(start),
        )
    }
}

impl Source for ReplaySource {
    fn describe(&self) -> String {
        let (now, all) = self.position();
        format!(
            "replay {} ({:.1}/{:.1} s, kernel {})",
            self.name,
            now.as_secs_f64(),
            all.as_secs_f64(),
            self.facts.kernel
        )
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        let last = self.samples.len() - 1;
        if self.at >= last {
            return Ok(None);
        }
        let from = self.at;
        let until = self.samples[from].at + interval;
        let to = (from + 1..=last)
            .find(|&i| self.samples[i].at >= until)
            .unwrap_or(last);
        // The advice gets the recording's fine-grained samples of the last few seconds.
        let since = self.samples[to]
            .at
            .checked_sub(REPLAY_ADVICE_WINDOW)
            .unwrap_or(self.samples[0].at);
        let first = self.samples[..=to]
            .iter()
            .position(|s| s.at >= since)
            .unwrap_or(0);
        let mut w = Window::over(&self.facts, &self.samples[first..=to]);
        (w.earlier, w.later) = (&self.samples[from], &self.samples[to]);
        let snap = pipeline::assemble(&w);
        self.at = to;
        Ok(Some(snap))
    }
}

/// `diagnose --replay`: the whole recording as one window, with its timeline in steps of
/// `step` and the advice from all its samples.
pub fn diagnose(rec: &Recording, step: Duration, only_dev: Option<&str>) -> Snapshot {
    let samples = rec.samples();
    let facts = rec.header.facts();
    let mut w = Window::over(&facts, &samples);
    w.timeline = Some((&samples, step));
    w.only_dev = only_dev;
    pipeline::assemble(&w)
}

//! The dashboard's state: the last snapshot, what the person chose (sort, filter, selection,
//! pane, pause, interval) and a bounded history per pool. Rendering reads it and nothing else,
//! so tests drive the whole dashboard through `on_snapshot` and `on_key` without a terminal.
use std::{
    cmp::Ordering,
    collections::{HashMap, VecDeque},
    time::Duration,
};

use ppscope::snapshot::Snapshot;
use ratatui::crossterm::event::KeyEvent;

use crate::{
    health::{Health, Metrics},
    keys::{action_of, Action, Key},
};

/// Points kept per pool: four minutes at the default 1 s interval.
pub const HISTORY_LEN: usize = 240;
/// A pool unseen for this many snapshots loses its history.
const HISTORY_STALE: u64 = 600;
/// At most this many pools keep history (thousands of queues must not grow memory unbounded).
const HISTORY_POOLS: usize = 4096;
/// The refresh intervals `+` and `-` step through.
pub const INTERVALS_MS: [u64; 8] = [100, 200, 500, 1000, 2000, 5000, 10_000, 30_000];
const PAGE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Worst health first, then the most slow-path and ring-full traffic.
    Health,
    Pool,
    Alloc,
    Fast,
    Hit,
    Slow,
    Full,
    P99,
    Inflight,
}

impl SortKey {
    pub const ALL: [SortKey; 9] = [
        SortKey::Health,
        SortKey::Pool,
        SortKey::Alloc,
        SortKey::Fast,
        SortKey::Hit,
        SortKey::Slow,
        SortKey::Full,
        SortKey::P99,
        SortKey::Inflight,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Health => "health",
            SortKey::Pool => "pool",
            SortKey::Alloc => "alloc/s",
            SortKey::Fast => "fast %",
            SortKey::Hit => "ring hit %",
            SortKey::Slow => "slow/s",
            SortKey::Full => "ring full/s",
            SortKey::P99 => "slow p99",
            SortKey::Inflight => "inflight",
        }
    }

    fn next(self) -> SortKey {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Pools,
    Detail,
    /// devmem and gve, when the snapshot has either.
    System,
}

/// One pool's recent past, for the sparklines. Rates are per mille so they fit `u64` bars.
#[derive(Debug, Clone)]
pub struct History {
    last_seen: u64,
    pub hit: VecDeque<Option<u64>>,
    pub fast: VecDeque<Option<u64>>,
    pub slow: VecDeque<Option<u64>>,
}

impl History {
    fn new() -> Self {
        History {
            last_seen: 0,
            hit: VecDeque::with_capacity(HISTORY_LEN),
            fast: VecDeque::with_capacity(HISTORY_LEN),
            slow: VecDeque::with_capacity(HISTORY_LEN),
        }
    }

    fn push(&mut self, m: &Metrics) {
        let permille = |r: Option<f64>| r.map(|r| (r * 1000.0).round() as u64);
        for (q, v) in [
            (&mut self.hit, permille(m.hit)),
            (&mut self.fast, permille(m.fast)),
            (&mut self.slow, m.slow_s.map(|s| s.round() as u64)),
        ] {
            if q.len() == HISTORY_LEN {
                q.pop_front();
            }
            q.push_back(v);
        }
    }
}

/// Where the stream stands, for the footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamState {
    Waiting,
    Running,
    /// The source has no more snapshots (a replay at its end): the last frame stays.
    Ended,
}

pub struct App {
    source: String,
    pub(crate) snap: Option<Snapshot>,
    /// Per pool of `snap`, in its order.
    pub(crate) metrics: Vec<Metrics>,
    /// Indices into `snap.pools` that pass the filter, in display order.
    pub(crate) rows: Vec<usize>,
    /// A snapshot that arrived while paused (shown on resume).
    held: Option<Snapshot>,
    pub(crate) state: StreamState,
    pub(crate) error: Option<String>,
    pub(crate) interval: Duration,
    pub(crate) paused: bool,
    pub(crate) sort: SortKey,
    pub(crate) reverse: bool,
    pub(crate) filter: String,
    pub(crate) editing: bool,
    /// The pool the person picked (by its name, `pool`), followed across snapshots and re-sorts.
    /// None: follow the first row, the worst pool in the default order.
    picked: Option<String>,
    pub(crate) cursor: usize,
    pub(crate) focus: Pane,
    pub(crate) zoom: bool,
    pub(crate) help: bool,
    pub(crate) detail_scroll: u16,
    pub(crate) system_scroll: u16,
    pub(crate) history: HashMap<String, History>,
    seq: u64,
}

impl App {
    /// `source` is the source's description (shown in the footer); `interval` the starting
    /// refresh interval.
    /// The source's description as of its last snapshot (a replay's position moves).
    pub fn set_source(&mut self, source: String) {
        self.source = source;
    }

    pub fn new(source: impl Into<String>, interval: Duration) -> Self {
        App {
            source: source.into(),
            snap: None,
            metrics: Vec::new(),
            rows: Vec::new(),
            held: None,
            state: StreamState::Waiting,
            error: None,
            interval,
            paused: false,
            sort: SortKey::Health,
            reverse: false,
            filter: String::new(),
            editing: false,
            picked: None,
            cursor: 0,
            focus: Pane::Pools,
            zoom: false,
            help: false,
            detail_scroll: 0,
            system_scroll: 0,
            history: HashMap::new(),
            seq: 0,
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snap.as_ref()
    }

    /// Labels of the visible rows, in order (for tests and scripts).
    pub fn visible(&self) -> Vec<&str> {
        self.rows
            .iter()
            .map(|&i| self.metrics[i].label.as_str())
            .collect()
    }

    /// The selected pool's index into the snapshot's pools.
    pub fn selected(&self) -> Option<usize> {
        self.rows.get(self.cursor).copied()
    }

    pub fn focus(&self) -> Pane {
        self.focus
    }

    pub fn help_shown(&self) -> bool {
        self.help
    }

    pub fn has_system(&self) -> bool {
        self.snap
            .as_ref()
            .is_some_and(|s| s.devmem.is_some() || s.gve.is_some())
    }

    /// A new snapshot from the source. While paused it is held, so the frame does not change.
    pub fn on_snapshot(&mut self, snap: Snapshot) {
        self.state = StreamState::Running;
        if self.paused {
            self.held = Some(snap);
            return;
        }
        self.error = None;
        self.apply(snap);
    }

    /// The source failed this time; the last frame stays and the footer says why.
    pub fn on_error(&mut self, err: impl Into<String>) {
        self.error = Some(err.into());
    }

    /// The source has ended.
    pub fn on_end(&mut self) {
        self.state = StreamState::Ended;
    }

    fn apply(&mut self, snap: Snapshot) {
        self.seq += 1;
        let secs = snap.duration_seconds;
        self.metrics.clear();
        self.metrics
            .extend(snap.pools.iter().map(|p| Metrics::of(p, secs)));
        for (p, m) in snap.pools.iter().zip(&self.metrics) {
            if let Some(h) = self.history.get_mut(&p.pool) {
                h.last_seen = self.seq;
                h.push(m);
            } else if self.history.len() < HISTORY_POOLS {
                let mut h = History::new();
                h.last_seen = self.seq;
                h.push(m);
                self.history.insert(p.pool.clone(), h);
            }
        }
        let seq = self.seq;
        self.history
            .retain(|_, h| seq.saturating_sub(h.last_seen) <= HISTORY_STALE);
        self.snap = Some(snap);
        if !self.has_system() && self.focus == Pane::System {
            self.focus = Pane::Pools;
        }
        self.reorder();
    }

    /// Recomputes the visible rows (filter, sort) and puts the cursor back on the picked pool.
    fn reorder(&mut self) {
        self.rows.clear();
        let needle = self.filter.to_lowercase();
        self.rows.extend(
            self.metrics
                .iter()
                .enumerate()
                .filter(|(_, m)| needle.is_empty() || m.search.contains(&needle))
                .map(|(i, _)| i),
        );
        let (metrics, sort, reverse) = (&self.metrics, self.sort, self.reverse);
        // Stable sort: equal pools keep the source's order (busiest first).
        self.rows
            .sort_by(|&a, &b| compare(sort, reverse, &metrics[a], &metrics[b]));
        let found = self.picked.as_ref().and_then(|want| {
            let pools = &self.snap.as_ref()?.pools;
            self.rows.iter().position(|&i| &pools[i].pool == want)
        });
        self.cursor = match found {
            Some(i) => i,
            None if self.picked.is_some() => self.cursor.min(self.rows.len().saturating_sub(1)),
            None => 0,
        };
    }

    fn pick(&mut self, cursor: usize) {
        self.cursor = cursor.min(self.rows.len().saturating_sub(1));
        self.picked = self
            .selected()
            .and_then(|i| self.snap.as_ref().map(|s| s.pools[i].pool.clone()));
        self.detail_scroll = 0;
    }

    fn panes(&self) -> &'static [Pane] {
        if self.has_system() {
            &[Pane::Pools, Pane::Detail, Pane::System]
        } else {
            &[Pane::Pools, Pane::Detail]
        }
    }

    fn move_by(&mut self, delta: isize) {
        match self.focus {
            Pane::Pools => {
                let to = self.cursor.saturating_add_signed(delta);
                self.pick(to);
            }
            Pane::Detail => {
                self.detail_scroll = self.detail_scroll.saturating_add_signed(delta as i16);
            }
            Pane::System => {
                self.system_scroll = self.system_scroll.saturating_add_signed(delta as i16);
            }
        }
    }

    /// One key press; true when the dashboard should quit.
    pub fn on_key(&mut self, ev: KeyEvent) -> bool {
        let Some(key) = Key::from_event(&ev) else {
            return false;
        };
        if self.editing {
            match key {
                Key::Ctrl('c') => return true,
                Key::Enter => self.editing = false,
                Key::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                Key::Backspace => {
                    self.filter.pop();
                }
                Key::Char(c) => self.filter.push(c),
                Key::Up => self.move_by(-1),
                Key::Down => self.move_by(1),
                _ => return false,
            }
            self.reorder();
            return false;
        }
        let Some(action) = action_of(key) else {
            return false;
        };
        self.act(action)
    }

    /// What each action of the key table does; true to quit.
    pub fn act(&mut self, action: Action) -> bool {
        match action {
            Action::Quit => return true,
            Action::Back => {
                if self.help {
                    self.help = false;
                } else if self.zoom {
                    self.zoom = false;
                } else if !self.filter.is_empty() {
                    self.filter.clear();
                    self.reorder();
                } else {
                    return true;
                }
            }
            Action::Help => self.help = !self.help,
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::PageUp => self.move_by(-(PAGE as isize)),
            Action::PageDown => self.move_by(PAGE as isize),
            Action::First => match self.focus {
                Pane::Pools => {
                    // Back to following the worst pool.
                    self.picked = None;
                    self.cursor = 0;
                    self.detail_scroll = 0;
                }
                Pane::Detail => self.detail_scroll = 0,
                Pane::System => self.system_scroll = 0,
            },
            Action::Last => match self.focus {
                Pane::Pools => self.pick(usize::MAX),
                Pane::Detail => self.detail_scroll = u16::MAX / 2,
                Pane::System => self.system_scroll = u16::MAX / 2,
            },
            Action::NextPane | Action::PrevPane => {
                let panes = self.panes();
                let i = panes.iter().position(|p| *p == self.focus).unwrap_or(0);
                let n = panes.len();
                let j = if action == Action::NextPane {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                };
                self.focus = panes[j];
            }
            Action::Zoom => self.zoom = !self.zoom,
            Action::SortNext => {
                self.sort = self.sort.next();
                self.reverse = false;
                self.reorder();
            }
            Action::SortReverse => {
                self.reverse = !self.reverse;
                self.reorder();
            }
            Action::Filter => self.editing = true,
            Action::Pause => {
                self.paused = !self.paused;
                if !self.paused {
                    if let Some(s) = self.held.take() {
                        self.error = None;
                        self.apply(s);
                    }
                }
            }
            Action::Slower => {
                let ms = self.interval.as_millis() as u64;
                let next = INTERVALS_MS.iter().copied().find(|&s| s > ms);
                self.interval = Duration::from_millis(next.unwrap_or(INTERVALS_MS[7]));
            }
            Action::Faster => {
                let ms = self.interval.as_millis() as u64;
                let next = INTERVALS_MS.iter().rev().copied().find(|&s| s < ms);
                self.interval = Duration::from_millis(next.unwrap_or(INTERVALS_MS[0]));
            }
        }
        false
    }

    /// Pools per health, worst first: (starving, warn).
    pub fn counts(&self) -> (usize, usize) {
        let n = |h| self.metrics.iter().filter(|m| m.health == h).count();
        (n(Health::Starving), n(Health::Warn))
    }
}

/// Unknown values go last whatever the direction: a `?` is never the worst or the best.
fn cmp_opt<T: PartialOrd>(a: Option<T>, b: Option<T>, descending: bool) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => {
            let o = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
            if descending {
                o.reverse()
            } else {
                o
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Each column's natural order puts the worst (or busiest) first; `reverse` flips it.
fn compare(key: SortKey, reverse: bool, a: &Metrics, b: &Metrics) -> Ordering {
    let pressure = |m: &Metrics| {
        (m.slow_s.is_some() || m.full_s.is_some())
            .then(|| m.slow_s.unwrap_or(0.0) + m.full_s.unwrap_or(0.0))
    };
    let flip = |o: Ordering| if reverse { o.reverse() } else { o };
    match key {
        SortKey::Health => {
            flip(b.health.cmp(&a.health)).then_with(|| cmp_opt(pressure(a), pressure(b), !reverse))
        }
        SortKey::Pool => flip(a.label.cmp(&b.label)),
        SortKey::Alloc => cmp_opt(a.alloc_s, b.alloc_s, !reverse),
        SortKey::Fast => cmp_opt(a.fast, b.fast, reverse),
        SortKey::Hit => cmp_opt(a.hit, b.hit, reverse),
        SortKey::Slow => cmp_opt(a.slow_s, b.slow_s, !reverse),
        SortKey::Full => cmp_opt(a.full_s, b.full_s, !reverse),
        SortKey::P99 => cmp_opt(a.p99_ns, b.p99_ns, !reverse),
        SortKey::Inflight => cmp_opt(a.inflight_bytes, b.inflight_bytes, !reverse),
    }
}

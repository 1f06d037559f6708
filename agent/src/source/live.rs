//! The kernel, through the probes: what `top` shows by default, what the agent collects, and
//! the sampling loop `diagnose` and `record` watch a window with.
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, OnceLock},
    time::Duration,
};

use anyhow::Result;
use ppscope_common::PoolIdentity;

use super::Source;
use crate::{
    advice::window::{AdviceWindow, LIVE_SAMPLES},
    host::{ethtool, netlink::NetlinkSample},
    model::{self, c_name, RawSample, SourceFacts},
    pipeline::{self, AdviceFrom, Window},
    probes::{Probes, Unmatched},
    snapshot::{Advice, Detail, HookStatus, PoolKey, Snapshot},
};

/// The kernel, through the probes: one snapshot per call, covering the time since the last.
pub struct LiveSource {
    probes: Probes,
    /// The baseline, for totals since the start (the agent's `/metrics`). Shared with the
    /// collections handed out, as the previous sample is: nothing is copied per interval.
    first: Arc<RawSample>,
    netlink_first: Arc<NetlinkSample>,
    prev: Arc<RawSample>,
    netlink_prev: Arc<NetlinkSample>,
    /// The advice reads burst profiles from this (one sample per step); None where the
    /// hooks cannot make a profile (no advice is possible: a minute of samples for nothing
    /// was most of the agent's memory at 10,000 pools on a tracepoint-only kernel).
    window: Option<AdviceWindow>,
    /// The advice of a source without a window: none.
    no_advice: Arc<HashMap<u64, Advice>>,
    /// The last module change (gve loaded, unloaded, reloaded), shown with the source.
    module_note: Option<String>,
}

/// What one collection read: the samples its snapshots are assembled from, when someone asks
/// for them. The agent collects every second but is scraped every 15 s or more, and at
/// 10,000 pools assembling the two snapshots was half its time (BENCHMARKS.md).
pub struct Collected {
    facts: SourceFacts,
    first: Arc<RawSample>,
    prev: Arc<RawSample>,
    cur: Arc<RawSample>,
    netlink_first: Arc<NetlinkSample>,
    netlink_prev: Arc<NetlinkSample>,
    netlink_now: Arc<NetlinkSample>,
    /// The same advice for the interval and the totals: computing it twice would cost twice.
    advice: Arc<HashMap<u64, Advice>>,
    /// The two snapshots, once assembled.
    since_start: OnceLock<Arc<Snapshot>>,
    interval: OnceLock<Arc<Snapshot>>,
}

impl Collected {
    /// A collection from its samples: the baseline, the previous and the current one (and
    /// netlink's answers at each), with the advice of the current window.
    pub fn new(
        facts: SourceFacts,
        [first, prev, cur]: [Arc<RawSample>; 3],
        [netlink_first, netlink_prev, netlink_now]: [Arc<NetlinkSample>; 3],
        advice: Arc<HashMap<u64, Advice>>,
    ) -> Self {
        Self {
            facts,
            first,
            prev,
            cur,
            netlink_first,
            netlink_prev,
            netlink_now,
            advice,
            since_start: OnceLock::new(),
            interval: OnceLock::new(),
        }
    }

    /// [`Collected::since_start`], assembled on the first call (then `finish`ed: the agent
    /// drops the pools past their grace) and shared by every later one.
    pub fn since_start_once(&self, finish: impl FnOnce(&mut Snapshot)) -> &Arc<Snapshot> {
        self.since_start.get_or_init(|| {
            let mut snap = self.since_start();
            finish(&mut snap);
            Arc::new(snap)
        })
    }

    /// [`Collected::interval`], assembled on the first call and shared by every later one.
    pub fn interval_once(&self) -> &Arc<Snapshot> {
        self.interval.get_or_init(|| Arc::new(self.interval()))
    }

    /// The pools that moved since the previous collection (what the agent retires by; `top`
    /// retires nothing and does not pay for it).
    pub fn moved(&self) -> HashSet<PoolKey> {
        model::moved_pools(
            &self.prev,
            &self.cur,
            Some((&self.netlink_prev, &self.netlink_now)),
        )
    }

    /// What happened since the previous collection, with the advice.
    pub fn interval(&self) -> Snapshot {
        self.assemble(&self.prev, &self.netlink_prev)
    }

    /// Everything since the source started, with the same advice.
    pub fn since_start(&self) -> Snapshot {
        self.assemble(&self.first, &self.netlink_first)
    }

    fn assemble(&self, earlier: &RawSample, netlink_earlier: &NetlinkSample) -> Snapshot {
        let mut w = Window::between(&self.facts, earlier, &self.cur);
        w.netlink = Some((netlink_earlier, &self.netlink_now));
        w.advice = AdviceFrom::Given(&self.advice);
        pipeline::assemble(&w)
    }
}

/// One collection of a live source.
pub struct Collection {
    /// The samples, shared: snapshots are assembled from them when asked for.
    pub collected: Arc<Collected>,
    /// Pools in the kernel's per-pool map, its capacity, and the pools it evicted because it
    /// was full (since the start).
    pub map_entries: usize,
    pub map_capacity: usize,
    pub map_evictions: u64,
    /// Per attached hook that pairs an entry and an exit on some backend: returns that found
    /// another call's frame (since the start).
    pub unmatched_returns: Vec<Unmatched>,
    /// Whether the recycle pair lost more of its calls than it counted (warned of once).
    pub recycle_pair_lost: bool,
}

impl LiveSource {
    /// Takes the baseline sample: the first snapshot covers the time from here.
    pub fn new(mut probes: Probes) -> Result<Self> {
        let first = Arc::new(probes.sample()?);
        check_losses(&mut probes, &first, &first);
        let netlink_first = Arc::new(NetlinkSample::read());
        Ok(Self {
            window: probes
                .facts
                .coverage
                .profile_basis()
                .map(|_| AdviceWindow::new(LIVE_SAMPLES, &first)),
            no_advice: Arc::default(),
            prev: first.clone(),
            netlink_prev: netlink_first.clone(),
            first,
            netlink_first,
            probes,
            module_note: None,
        })
    }

    pub fn hooks(&self) -> &[HookStatus] {
        &self.probes.facts.hooks
    }

    /// The detail level the probes were attached at.
    pub fn detail(&self) -> Detail {
        self.probes.facts.detail
    }

    /// Reads the probes: what the interval since the previous call and the totals since the
    /// baseline are assembled from. On an error nothing moves: the next call covers both
    /// intervals.
    pub fn collect(&mut self) -> Result<Collection> {
        // Modules that came, went or came back (their hooks re-attached or dropped).
        for change in self.probes.refresh_modules() {
            log::info!("{change}");
            self.module_note = Some(change);
        }
        let cur = Arc::new(self.probes.sample()?);
        // Before the facts are cloned below: each hook's status carries what its programs
        // missed at this check (the reports and /metrics read it there).
        let unmatched_returns = check_losses(&mut self.probes, &self.prev, &cur);
        let netlink_now = Arc::new(NetlinkSample::read());
        let facts = &self.probes.facts;
        let target = crate::advice::DEFAULT_TARGET;
        let advice = match &mut self.window {
            Some(window) => {
                window.push(&cur);
                window
                    .current_advice(&facts.coverage, facts.page_size, target)
                    .clone()
            }
            None => self.no_advice.clone(),
        };
        let map_entries = cur.pools.len();
        let map_evictions = self
            .probes
            .pools_added()?
            .saturating_sub(map_entries as u64);
        let collected = Arc::new(Collected::new(
            facts.clone(),
            [
                self.first.clone(),
                std::mem::replace(&mut self.prev, cur.clone()),
                cur,
            ],
            [
                self.netlink_first.clone(),
                std::mem::replace(&mut self.netlink_prev, netlink_now.clone()),
                netlink_now,
            ],
            advice,
        ));
        Ok(Collection {
            collected,
            map_entries,
            map_capacity: self.probes.map_capacity as usize,
            map_evictions,
            unmatched_returns,
            recycle_pair_lost: self.probes.recycle_pair_lost(),
        })
    }
}

impl Source for LiveSource {
    fn describe(&self) -> String {
        let hooks = &self.probes.facts.hooks;
        let attached = hooks.iter().filter(|h| h.attached()).count();
        let note = self
            .module_note
            .as_ref()
            .map_or(String::new(), |n| format!("; {n}"));
        // Not the kernel: the dashboard's header names it, and in a 120-column footer a
        // longer kernel release pushed the hooks' backends off the end.
        format!(
            "live (--detail {}, {attached}/{} hooks{note})",
            self.probes.facts.detail.name(),
            hooks.len()
        )
    }

    fn next(&mut self, _interval: Duration) -> Result<Option<Snapshot>> {
        Ok(Some(self.collect()?.collected.interval()))
    }
}

/// What the probes lost between two samples, each warned of once as it shows: returns that
/// found another call's frame ([`Probes::check_unmatched`]; a failed read is logged and loses
/// nothing else: none), returned, and events the kernel says the programs missed
/// ([`Probes::check_skipped`]), written into the hooks' status.
fn check_losses(probes: &mut Probes, earlier: &RawSample, now: &RawSample) -> Vec<Unmatched> {
    let unmatched = probes.check_unmatched(earlier, now).unwrap_or_else(|e| {
        log::warn!("returns that found another call's frame not read: {e:#}");
        Vec::new()
    });
    probes.check_skipped();
    unmatched
}

/// Samples the probes from now on, every `step`, until `duration` has passed or `wait` (which
/// sleeps up to the time it is given) says the run was interrupted; the last sample is always
/// taken. Every sample, the first included, goes to `each`; module changes are logged.
fn sample_for(
    probes: &mut Probes,
    duration: Duration,
    step: Duration,
    mut wait: impl FnMut(Duration) -> bool,
    mut each: impl FnMut(&RawSample) -> Result<()>,
) -> Result<()> {
    let first = probes.sample()?;
    check_losses(probes, &first, &first);
    let start = first.at;
    each(&first)?;
    loop {
        let left = duration.saturating_sub(start.elapsed());
        let interrupted = left.is_zero() || wait(left.min(step));
        for change in probes.refresh_modules() {
            log::info!("{change}");
        }
        let s = probes.sample()?;
        each(&s)?;
        if interrupted || s.at.duration_since(start) >= duration {
            // At the end, over the whole window: the warning (if any) comes before the report
            // it qualifies.
            check_losses(probes, &first, &s);
            return Ok(());
        }
    }
}

/// Fine-grained sampling for burst profiles: 10 ms, coarser for long windows so that a
/// window keeps at most a few thousand samples in memory.
fn profile_interval(duration: Duration) -> Duration {
    Duration::from_millis(10).max(duration / 6000)
}

/// What `diagnose` watches on the live kernel, and how.
pub struct DiagnoseOptions<'a> {
    pub duration: Duration,
    /// The timeline's step.
    pub interval: Duration,
    pub only_dev: Option<&'a str>,
}

/// Watches a window on the live kernel (sampled every [`profile_interval`]) and assembles its
/// snapshot with every stage: kernel stats, timeline, advice from the window's samples and the
/// ring check. `started` runs once the baseline is taken (a script that starts traffic then
/// loses nothing).
pub fn diagnose(
    probes: &mut Probes,
    opts: &DiagnoseOptions,
    wait: impl FnMut(Duration) -> bool,
    started: impl FnOnce(),
) -> Result<Snapshot> {
    let netlink_first = NetlinkSample::read();
    let mut samples = Vec::new();
    let mut started = Some(started);
    sample_for(
        probes,
        opts.duration,
        profile_interval(opts.duration),
        wait,
        |s| {
            samples.push(s.clone());
            if let Some(started) = started.take() {
                started();
            }
            Ok(())
        },
    )?;
    let netlink_last = NetlinkSample::read();
    let rx_rings = rx_rings(samples.last().expect("sample_for takes two at least"));
    Ok(diagnose_window(
        &probes.facts,
        &samples,
        Some((&netlink_first, &netlink_last)),
        Some(&rx_rings),
        opts,
    ))
}

/// The snapshot of a live diagnose's window from its samples: every stage but the kernel
/// reads (`diagnose` takes netlink's answers and the rx rings around the window). A
/// recording of the same samples replays into the same advice (`replay::diagnose`), bar the
/// ring check, which needs the rx rings of the live kernel.
pub(crate) fn diagnose_window(
    facts: &SourceFacts,
    samples: &[RawSample],
    netlink: Option<(&NetlinkSample, &NetlinkSample)>,
    rx_rings: Option<&HashMap<u32, u32>>,
    opts: &DiagnoseOptions,
) -> Snapshot {
    let mut w = Window::over(facts, samples);
    w.netlink = netlink;
    w.timeline = Some((samples, opts.interval));
    w.rx_rings = rx_rings;
    w.only_dev = opts.only_dev;
    pipeline::assemble(&w)
}

/// The configured rx ring (`ethtool -g`) of every pool's device that reports one, by ifindex:
/// the ring check's input. Up to a thread per network namespace per device, so read once per
/// window, not every interval.
fn rx_rings(sample: &RawSample) -> HashMap<u32, u32> {
    let mut rings = HashMap::new();
    for id in sample.pools.values().filter_map(|p| p.identity.as_ref()) {
        let known = PoolIdentity::KNOWN_IFNAME | PoolIdentity::KNOWN_IFINDEX;
        if id.known & known != known || rings.contains_key(&id.ifindex) {
            continue;
        }
        let (Some(name), Some(_driver)) = (c_name(&id.ifname), c_name(&id.driver)) else {
            continue;
        };
        // Only pools that name their driver can be checked (`_driver`).
        if let Some(rx) = ethtool::rx_ring(&name, id.ifindex) {
            rings.insert(id.ifindex, rx);
        }
    }
    rings
}

/// What `ppscope record` wrote: how many samples, and `span` from the first to the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub samples: u64,
    pub span: Duration,
}

impl Recorded {
    /// Says so when the samples came more than 1.5 times slower than `asked`. Each sample
    /// waits the interval and then reads every pool, and with many pools or a slow machine the
    /// reads add up (a debug build on a 2-core host kept one every ~50 ms when asked for
    /// 10 ms; the VM lab's emulated guests about one a second). The recording stays true,
    /// since a replay steps by the times the samples were taken, but its steps are coarser
    /// than asked, and so is the burst profile the advice replays.
    pub fn pace_note(&self, asked: Duration) -> Option<String> {
        let gaps = u128::from(self.samples.checked_sub(1).filter(|&g| g > 0)?);
        if self.span.as_nanos() * 2 <= asked.as_nanos() * 3 * gaps {
            return None;
        }
        let mean = Duration::from_nanos((self.span.as_nanos() / gaps) as u64);
        // Whole milliseconds, or microseconds below one: the figure, not its noise.
        let mean = if mean >= Duration::from_millis(1) {
            Duration::from_millis(mean.as_millis() as u64)
        } else {
            Duration::from_micros(mean.as_micros() as u64)
        };
        Some(format!(
            "one sample every {} on average, not every {}: reading every pool after each wait \
             took too long to keep that pace, so the recording's steps (and the advice's burst \
             profile) are that coarse",
            humantime::format_duration(mean),
            humantime::format_duration(asked)
        ))
    }
}

/// `ppscope record`: samples every `interval` for `duration` (or until `wait` says it was
/// interrupted) into `writer`, each sample timed from the first.
pub fn record(
    probes: &mut Probes,
    writer: &mut crate::recording::Writer,
    duration: Duration,
    interval: Duration,
    wait: impl FnMut(Duration) -> bool,
    started: impl FnOnce(),
) -> Result<Recorded> {
    let mut start = None;
    let mut started = Some(started);
    let mut recorded = Recorded {
        samples: 0,
        span: Duration::ZERO,
    };
    sample_for(probes, duration, interval, wait, |s| {
        let start = *start.get_or_insert(s.at);
        writer.append(s, start)?;
        recorded.samples += 1;
        recorded.span = s.at.duration_since(start);
        if let Some(started) = started.take() {
            started();
        }
        Ok(())
    })?;
    Ok(recorded)
}

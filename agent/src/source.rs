//! Sources of the snapshot stream (DESIGN.md: source → snapshot → consumers). `top` reads
//! one of these without knowing which: the live kernel, a recording, a simulated scenario or a
//! remote agent's `/api/v1/snapshot`.
use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use ppscope_common::{site_stat, PoolCounters, PoolIdentity, PoolState, SiteStats};

use crate::{
    advice, advise_pools, kernel,
    kernel_view::{self, KernelSample},
    model::{self, Coverage, RawPool, RawSample, Snapshot},
    probes::{HookStatus, Probes},
    record, scenario,
    sim::{self, Replay},
    window::{self, AdviceWindow},
};

/// Yields snapshots, each covering what happened since the previous one.
pub trait Source: Send {
    /// What feeds the stream, for a footer: `live`, `replay FILE`, `sim NAME`, `agent URL`.
    fn describe(&self) -> String;

    /// The snapshot of everything since the previous call (the first call: since the source
    /// started). Live sources and remote agents cover the wall time that passed; a replay or
    /// a simulation advances by `interval` of its own time. `Ok(None)`: the source has ended
    /// (a replay at the end of its file).
    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>>;
}

/// The kernel, through the probes: what `ppscope top` shows by default, and what the agent
/// collects.
pub struct LiveSource {
    probes: Probes,
    kernel: String,
    /// The baseline, for totals since the start (the agent's `/metrics`).
    first: RawSample,
    kernel_first: KernelSample,
    prev: RawSample,
    kernel_prev: KernelSample,
    /// The advice reads burst profiles from this (one sample per step).
    window: AdviceWindow,
    /// The last module change (gve loaded, unloaded, reloaded), shown with the source.
    module_note: Option<String>,
    /// Module changes seen by a collection that then failed: reported by the next one.
    unreported_changes: Vec<String>,
}

/// One collection of a live source.
pub struct Collection {
    /// What happened since the previous collection, with the advice.
    pub interval: Snapshot,
    /// Everything since the source started, with the same advice; only when asked for.
    pub since_start: Option<Snapshot>,
    /// Pools in the kernel's per-pool map.
    pub map_entries: usize,
    /// Modules that came, went or came back since the previous collection (their hooks
    /// were re-attached or dropped), in words.
    pub module_changes: Vec<String>,
}

impl LiveSource {
    /// Takes the baseline sample: the first snapshot covers the time from here.
    pub fn new(probes: Probes) -> Result<Self> {
        let first = probes.sample()?;
        let kernel_first = KernelSample::read();
        Ok(Self {
            kernel: kernel::release(),
            window: AdviceWindow::new(window::LIVE_SAMPLES, &first),
            prev: first.clone(),
            kernel_prev: kernel_first.clone(),
            first,
            kernel_first,
            probes,
            module_note: None,
            unreported_changes: Vec::new(),
        })
    }

    pub fn hooks(&self) -> &[HookStatus] {
        &self.probes.hooks
    }

    fn snapshot(&self, from: &RawSample, to: &RawSample, kernel: [&KernelSample; 2]) -> Snapshot {
        let mut snap = model::snapshot(
            self.kernel.clone(),
            from,
            to,
            &self.probes.coverage,
            &self.probes.hooks,
        );
        kernel_view::merge(&mut snap, kernel[0], kernel[1]);
        model::name_drop_reasons(&mut snap, &self.probes.drop_reasons);
        snap
    }

    /// Reads the probes: the interval since the previous call and, with `since_start`, the
    /// totals since the baseline. On an error nothing moves: the next call covers both
    /// intervals.
    pub fn collect(&mut self, since_start: bool) -> Result<Collection> {
        self.unreported_changes
            .extend(self.probes.refresh_modules());
        if let Some(change) = self.unreported_changes.last() {
            self.module_note = Some(change.clone());
        }
        let cur = self.probes.sample()?;
        let module_changes = std::mem::take(&mut self.unreported_changes);
        let kernel_now = KernelSample::read();
        let mut interval = self.snapshot(&self.prev, &cur, [&self.kernel_prev, &kernel_now]);
        let mut totals = since_start
            .then(|| self.snapshot(&self.first, &cur, [&self.kernel_first, &kernel_now]));
        self.window.push(&cur);
        let (cov, target) = (self.probes.coverage, advise_pools::DEFAULT_TARGET);
        self.window.attach(&mut interval, &cov, target);
        if let Some(totals) = &mut totals {
            let advice: HashMap<u64, _> = interval
                .pools
                .iter()
                .filter_map(|p| Some((p.addr, p.advice.clone()?)))
                .collect();
            for p in &mut totals.pools {
                p.advice = advice.get(&p.addr).cloned();
            }
        }
        let map_entries = cur.pools.len();
        self.prev = cur;
        self.kernel_prev = kernel_now;
        Ok(Collection {
            interval,
            since_start: totals,
            map_entries,
            module_changes,
        })
    }
}

impl Source for LiveSource {
    fn describe(&self) -> String {
        let attached = self.probes.hooks.iter().filter(|h| h.attached()).count();
        let note = self
            .module_note
            .as_ref()
            .map_or(String::new(), |n| format!("; {n}"));
        format!(
            "live {} ({attached}/{} hooks{note})",
            self.kernel,
            self.probes.hooks.len()
        )
    }

    fn next(&mut self, _interval: Duration) -> Result<Option<Snapshot>> {
        Ok(Some(self.collect(false)?.interval))
    }
}

/// Recorded time the replay's advice looks back over.
const REPLAY_ADVICE_WINDOW: Duration = Duration::from_secs(10);

/// A recording (`ppscope record`) played back at the consumer's pace: each call advances the
/// recording's own clock by `interval`.
pub struct ReplaySource {
    name: String,
    kernel: String,
    coverage: Coverage,
    hooks: Vec<HookStatus>,
    drop_reasons: HashMap<u32, String>,
    samples: Vec<RawSample>,
    /// Index of the sample the previous snapshot ended at.
    at: usize,
}

impl ReplaySource {
    pub fn open(path: &Path) -> Result<Self> {
        let rec = record::Recording::read(path)?;
        let samples = rec.samples();
        if samples.len() < 2 {
            bail!(
                "{} holds {} sample(s): nothing to replay (a recording needs two)",
                path.display(),
                samples.len()
            );
        }
        Ok(Self {
            name: path.display().to_string(),
            kernel: rec.header.kernel.clone(),
            coverage: rec.header.coverage,
            hooks: rec.header.hooks.clone(),
            drop_reasons: rec.header.drop_reasons.clone(),
            samples,
            at: 0,
        })
    }

    /// Recorded time covered so far and in all.
    pub fn position(&self) -> (Duration, Duration) {
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
            self.kernel
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
        let mut snap = model::snapshot(
            self.kernel.clone(),
            &self.samples[from],
            &self.samples[to],
            &self.coverage,
            &self.hooks,
        );
        model::name_drop_reasons(&mut snap, &self.drop_reasons);
        // The advice gets the recording's fine-grained samples of the last few seconds.
        let since = self.samples[to]
            .at
            .checked_sub(REPLAY_ADVICE_WINDOW)
            .unwrap_or(self.samples[0].at);
        let first = self.samples[..=to]
            .iter()
            .position(|s| s.at >= since)
            .unwrap_or(0);
        advise_pools::attach(
            &mut snap,
            &self.samples[first..=to],
            &self.coverage,
            advise_pools::DEFAULT_TARGET,
        );
        self.at = to;
        Ok(Some(snap))
    }
}

/// One simulated pool: a scenario's profile replayed through the simulator in a loop.
struct SimPool {
    addr: u64,
    scenario: scenario::Scenario,
    replay: Replay,
    /// Next profile step to play.
    step: usize,
    identity: PoolIdentity,
    advice: advice::Advice,
}

/// Built-in scenarios (`ppscope simulate --scenario`) played as live pools: deterministic, no
/// kernel needed. Each call advances every pool by `interval` of simulated time; a profile
/// that ends starts over (the pool keeps its state). Latencies are not simulated: they show
/// as unknown.
pub struct SimSource {
    name: String,
    pools: Vec<SimPool>,
    prev: RawSample,
    clock: Instant,
    /// devmem sites of the provider pools, cumulative: calls and frags, no time.
    sites: [SiteStats; site_stat::COUNT as usize],
}

/// Tokens an application returns per `SO_DEVMEM_DONTNEED` call in the scenarios (NCCL's
/// batches; the kernel takes up to 1024).
pub const SIM_DONTNEED_TOKENS: u64 = 128;

/// log2 bucket of `v` (> 0), as the kernel side fills value histograms.
fn log2_bucket(v: u64) -> usize {
    ((63 - v.max(1).leading_zeros()) as usize).min(ppscope_common::LATENCY_BUCKETS - 1)
}

fn fixed_name(s: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(s.bytes().take(15)) {
        *o = b;
    }
    out
}

impl SimSource {
    /// A scenario by name (see [`scenario::NAMES`]), or `all` for one pool per scenario.
    pub fn new(name: &str) -> Result<Self> {
        let scenarios = if name == "all" {
            scenario::all()
        } else {
            vec![scenario::by_name(name).ok_or_else(|| {
                anyhow!(
                    "no scenario named '{name}' (there are: {}, or all)",
                    scenario::NAMES.join(", ")
                )
            })?]
        };
        let pools = scenarios
            .into_iter()
            .enumerate()
            .map(|(i, sc)| {
                let ctx = &sc.context;
                let ifname = ctx.ifname.clone().unwrap_or_else(|| format!("sim{i}"));
                let mut id = PoolIdentity::EMPTY;
                id.netdev = 0x5100_0000 + i as u64 * 0x1000;
                id.ifindex = 100 + i as u32;
                // Scenarios share device names (eth0): one queue each keeps them apart.
                id.queue_idx = i as u32;
                id.ring_size = ctx.ring_size;
                id.pool_size = ctx.ring_size;
                id.order = 0;
                id.has_memory_provider = u32::from(sc.profile.provider);
                id.ifname = fixed_name(&ifname);
                id.driver = fixed_name(ctx.driver.as_deref().unwrap_or("sim"));
                id.known = PoolIdentity::KNOWN_IFINDEX
                    | PoolIdentity::KNOWN_QUEUE
                    | PoolIdentity::KNOWN_POOL_SIZE
                    | PoolIdentity::KNOWN_RING_SIZE
                    | PoolIdentity::KNOWN_ORDER
                    | PoolIdentity::KNOWN_MEMORY_PROVIDER
                    | PoolIdentity::KNOWN_IFNAME;
                let advice = advice::advise(&sc.profile, &sc.context, advise_pools::DEFAULT_TARGET);
                SimPool {
                    addr: 0xffff_5100_0000_0000 + (i as u64) * 0x1_0000,
                    replay: Replay::new(&sim::SimParams::for_ring(
                        ctx.ring_size,
                        sc.profile.provider,
                    )),
                    step: 0,
                    identity: id,
                    advice,
                    scenario: sc,
                }
            })
            .collect();
        let clock = Instant::now();
        Ok(Self {
            name: name.to_string(),
            pools,
            prev: RawSample::empty(clock),
            clock,
            sites: Default::default(),
        })
    }

    fn coverage(provider: bool) -> Coverage {
        Coverage {
            alloc: true,
            refill: true,
            slow: true,
            recycle: true,
            hold: true,
            release: true,
            cache_layout: true,
            provider_alloc: provider,
            dontneed: provider,
            devmem_free: provider,
            ..Coverage::default()
        }
    }
}

/// Cumulative counters as the probes would have counted the simulated pool.
fn counters_of(o: &sim::SimOutcome, provider: bool) -> PoolCounters {
    PoolCounters {
        alloc_calls: o.allocs,
        refill_calls: o.ring_refills + o.empty_refills,
        refill_empty: o.empty_refills,
        refill_pages: o.ring_pages,
        slow_calls: if provider { 0 } else { o.slow_calls },
        mp_alloc_calls: if provider { o.slow_calls } else { 0 },
        put_calls: o.recycled_cached + o.recycled_ring + o.ring_full,
        put_cached: o.recycled_cached,
        put_released: o.ring_full,
        hold_pages: o.pages_from_slow,
        release_pages: o.ring_full,
        ..PoolCounters::default()
    }
}

impl Source for SimSource {
    fn describe(&self) -> String {
        format!(
            "sim {} (simulated: no kernel, latencies not modeled)",
            self.name
        )
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        let interval_ns = interval.as_nanos().max(1) as u64;
        self.clock += interval;
        let mut cur = RawSample::empty(self.clock);
        let any_provider = self.pools.iter().any(|p| p.scenario.profile.provider);
        let (mut provider_calls, mut dmabuf_frees) = (0, 0);
        for p in &mut self.pools {
            let profile = &p.scenario.profile;
            if profile.steps.is_empty() {
                continue;
            }
            let steps = (interval_ns / profile.step_ns.max(1)).max(1);
            for _ in 0..steps {
                let step = &profile.steps[p.step];
                p.replay.step(step);
                p.step = (p.step + 1) % profile.steps.len();
                if profile.provider && step.ring_frees > 0 {
                    // The application returns its tokens in calls of SIM_DONTNEED_TOKENS.
                    let d = &mut self.sites[site_stat::DONTNEED as usize];
                    let (full, rest) = (
                        step.ring_frees / SIM_DONTNEED_TOKENS,
                        step.ring_frees % SIM_DONTNEED_TOKENS,
                    );
                    d.calls += full + u64::from(rest > 0);
                    d.value_sum += step.ring_frees;
                    d.value_hist[log2_bucket(SIM_DONTNEED_TOKENS)] += full;
                    if rest > 0 {
                        d.value_hist[log2_bucket(rest)] += 1;
                    }
                }
            }
            let o = p.replay.outcome();
            if profile.provider {
                // One provider call per buffer; every ring-full free goes back to the dmabuf.
                provider_calls += o.slow_calls;
                dmabuf_frees += o.ring_full;
            }
            cur.pools.insert(
                p.addr,
                RawPool {
                    counters: counters_of(&o, profile.provider),
                    identity: Some(p.identity),
                    gve_queue: None,
                    state: Some(PoolState {
                        stamp_ns: 0,
                        ring_fill: p.replay.ring_fill().min(u64::from(u32::MAX)) as u32,
                        inflight: p.replay.held().min(u64::from(u32::MAX)) as u32,
                        known: 3,
                        _pad: 0,
                    }),
                },
            );
        }
        self.sites[site_stat::PROVIDER_ALLOC as usize].calls = provider_calls;
        self.sites[site_stat::DEVMEM_FREE as usize].calls = dmabuf_frees;
        cur.sites = self.sites;
        let mut snap = model::snapshot(
            format!("simulation ({})", self.name),
            &self.prev,
            &cur,
            &Self::coverage(any_provider),
            &[],
        );
        for view in &mut snap.pools {
            if let Some(p) = self.pools.iter().find(|p| p.addr == view.addr) {
                view.advice = Some(p.advice.clone());
                // Provider pools hand out net_iovs of the context's size, not pages.
                if let Some(pages) = view.inflight_pages {
                    view.inflight_bytes = Some(u64::from(pages) * p.scenario.context.page_bytes);
                }
            }
        }
        self.prev = cur;
        Ok(Some(snap))
    }
}

/// A remote `ppscope agent`: its last interval, through `/api/v1/snapshot?window=interval`.
pub struct ConnectSource {
    url: String,
    agent: ureq::Agent,
}

impl ConnectSource {
    /// `URL` is the agent's base (`http://host:9464`) or the snapshot endpoint itself.
    pub fn new(url: &str) -> Result<Self> {
        let base = url.trim_end_matches('/');
        let base = base.strip_suffix("/api/v1/snapshot").unwrap_or(base);
        if !base.starts_with("http://") {
            bail!("'{url}' is not an http:// URL of a ppscope agent (e.g. http://127.0.0.1:9464)");
        }
        Ok(Self {
            url: format!("{base}/api/v1/snapshot?window=interval"),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(5))
                .build(),
        })
    }
}

impl Source for ConnectSource {
    fn describe(&self) -> String {
        let base = self.url.split("/api/").next().unwrap_or(&self.url);
        format!("agent {base}")
    }

    fn next(&mut self, _interval: Duration) -> Result<Option<Snapshot>> {
        let resp = match self.agent.get(&self.url).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(503, _)) => {
                bail!("the agent has not collected yet (503); retrying")
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.url)),
        };
        let body = resp
            .into_string()
            .with_context(|| format!("reading {}", self.url))?;
        let snap: Snapshot = serde_json::from_str(&body)
            .with_context(|| format!("{} did not answer with a ppscope snapshot", self.url))?;
        Ok(Some(snap))
    }
}

/// Only the pools (and devices) of one interface, whichever source feeds the stream.
pub struct OnlyDevice<S> {
    pub inner: S,
    pub dev: String,
}

impl<S: Source> Source for OnlyDevice<S> {
    fn describe(&self) -> String {
        format!("{}, only {}", self.inner.describe(), self.dev)
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        Ok(self.inner.next(interval)?.map(|mut snap| {
            snap.pools
                .retain(|p| p.ifname.as_deref() == Some(self.dev.as_str()));
            snap.devices
                .retain(|d| d.ifname.as_deref() == Some(self.dev.as_str()));
            snap
        }))
    }
}

impl Source for Box<dyn Source> {
    fn describe(&self) -> String {
        (**self).describe()
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        (**self).next(interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use std::sync::{Arc, Mutex};

    fn totals(s: &Snapshot) -> (u64, u64) {
        let p = &s.pools[0];
        (p.alloc.total.unwrap(), p.recycle.total.unwrap())
    }

    #[test]
    fn sim_source_plays_the_scenario_at_the_requested_pace() {
        let mut a = SimSource::new("gve-devmem-alltoall").unwrap();
        let mut b = SimSource::new("gve-devmem-alltoall").unwrap();
        for _ in 0..3 {
            let sa = a.next(Duration::from_secs(1)).unwrap().unwrap();
            let sb = b.next(Duration::from_secs(1)).unwrap().unwrap();
            assert_eq!(totals(&sa), totals(&sb), "deterministic");
            let p = &sa.pools[0];
            // 400 buffers per ms for one second of simulated time.
            assert_eq!(p.alloc.total, Some(400_000));
            let (c, r, s) = (
                p.alloc.cache.unwrap(),
                p.alloc.ring.unwrap(),
                p.alloc.slow.unwrap(),
            );
            assert_eq!(c + r + s, 400_000);
            assert!(s > 0, "the default ring starves: provider calls");
            assert_eq!(p.ifname.as_deref(), Some("eth1"));
            assert_eq!(p.ring_size, Some(4096));
            assert!(p.recycle.ring_full.unwrap() > 0);
            let advice = p.advice.as_ref().expect("advice attached");
            assert!(advice.summary().contains("grow"), "{}", advice.summary());
            assert!((sa.duration_seconds - 1.0).abs() < 1e-9);
            // devmem: the frees of the burst in calls of 128 tokens, the ring-full ones
            // back to the dmabuf; no time is simulated.
            let devmem = sa
                .devmem
                .as_ref()
                .expect("a provider pool has a devmem view");
            let dontneed = devmem.dontneed.as_ref().unwrap();
            assert_eq!(dontneed.value_sum, p.recycle.total);
            // Bursts of 12,000 tokens: 93 calls of 128 and one of 96 each.
            assert_eq!(dontneed.calls, dontneed.value_sum.unwrap() / 12_000 * 94);
            assert_eq!(dontneed.latency, None);
            assert_eq!(
                devmem.free.as_ref().unwrap().calls,
                p.recycle.ring_full.unwrap()
            );
            assert_eq!(devmem.provider_alloc.as_ref().unwrap().calls, s);
        }
        // Half the interval, half the allocations.
        let half = a.next(Duration::from_millis(500)).unwrap().unwrap();
        assert_eq!(half.pools[0].alloc.total, Some(200_000));
    }

    #[test]
    fn sim_all_has_one_pool_per_scenario_and_names_are_checked() {
        let mut all = SimSource::new("all").unwrap();
        let snap = all.next(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(snap.pools.len(), scenario::NAMES.len());
        let err = SimSource::new("nope").err().unwrap().to_string();
        assert!(
            err.contains("gve-devmem-alltoall") && err.contains("all"),
            "{err}"
        );
    }

    fn sample(at: Instant, allocs: u64, slow: u64) -> RawSample {
        let counters = PoolCounters {
            alloc_calls: allocs,
            slow_calls: slow,
            ..PoolCounters::default()
        };
        testing::one_pool_sample(
            at,
            0xffff_8880_0000_1000,
            counters,
            testing::identity("veth1"),
        )
    }

    #[test]
    fn replay_source_steps_through_a_recording_and_ends() {
        let dir = std::env::temp_dir().join(format!("ppscope-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.ppr");
        let cov = Coverage {
            alloc: true,
            slow: true,
            refill: true,
            ..Coverage::default()
        };
        let t0 = Instant::now();
        let samples = [(0, 0), (100, 1), (300, 2), (600, 4), (1000, 5)]
            .iter()
            .enumerate()
            .map(|(i, (a, s))| sample(t0 + Duration::from_millis(500 * i as u64), *a, *s));
        testing::write_recording(
            &path,
            "6.18-test",
            Duration::from_millis(500),
            cov,
            t0,
            samples,
        );
        let mut r = ReplaySource::open(&path).unwrap();
        assert!(r.describe().contains("0.0/2.0 s"), "{}", r.describe());
        let one = r.next(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(one.pools[0].alloc.total, Some(300));
        assert_eq!(one.pools[0].alloc.slow, Some(2));
        assert_eq!(one.kernel, "6.18-test");
        let two = r.next(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(two.pools[0].alloc.total, Some(700));
        assert!(r.next(Duration::from_secs(1)).unwrap().is_none(), "ended");
        let mut only = OnlyDevice {
            inner: ReplaySource::open(&path).unwrap(),
            dev: "vnet1".into(),
        };
        assert!(only
            .next(Duration::from_secs(1))
            .unwrap()
            .unwrap()
            .pools
            .is_empty());
        std::fs::write(&path, b"not a recording").unwrap();
        assert!(ReplaySource::open(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn connect_source_reads_an_agents_last_interval_over_http() {
        let shared = Arc::new(Mutex::new(crate::serve::Shared::default()));
        let server = crate::serve::HttpServer::start(
            "127.0.0.1:0".parse().unwrap(),
            shared.clone(),
            Duration::from_secs(1),
            100,
        )
        .unwrap();
        let url = format!("http://{}", server.addr);
        let mut c = ConnectSource::new(&url).unwrap();
        let err = c.next(Duration::from_secs(1)).err().unwrap().to_string();
        assert!(err.contains("not collected yet"), "{err}");
        let mut sim = SimSource::new("all").unwrap();
        let since_start = sim.next(Duration::from_secs(2)).unwrap().unwrap();
        let last = sim.next(Duration::from_secs(1)).unwrap().unwrap();
        {
            let mut sh = shared.lock().unwrap();
            sh.snapshot = Some(since_start);
            sh.interval_snapshot = Some(last.clone());
        }
        let got = c.next(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(got.pools.len(), last.pools.len());
        for (g, w) in got.pools.iter().zip(&last.pools) {
            assert_eq!(g.label(), w.label());
            assert_eq!(g.alloc, w.alloc);
            assert_eq!(g.recycle, w.recycle);
            assert_eq!(g.advice, w.advice);
        }
        assert_eq!(c.describe(), format!("agent {url}"));
        server.stop();
        assert!(ConnectSource::new("ftp://x").is_err());
    }
}

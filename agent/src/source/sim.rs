//! Built-in scenarios played as live pools: the simulator stands in for the kernel.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};
use ppscope_common::{log2_bucket, site_stat, PoolCounters, PoolIdentity, PoolState, SiteStats};

use super::Source;
use crate::{
    advice::{
        self, scenario,
        simulator::{Replay, SimOutcome, SimParams},
    },
    model::{Coverage, RawPool, RawSample, SourceFacts},
    pipeline::{self, AdviceFrom, Window},
    snapshot::{Advice, Snapshot},
};

/// One simulated pool: a scenario's profile replayed through the simulator in a loop.
struct SimPool {
    addr: u64,
    scenario: scenario::Scenario,
    replay: Replay,
    /// Next profile step to play.
    step: usize,
    identity: PoolIdentity,
    advice: Advice,
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

/// Bytes per buffer of every scenario's pools (the page size of [`crate::advice::PoolContext::new`]; a
/// provider's net_iov is the same size in them).
const SIM_BUFFER_BYTES: u64 = 4096;

/// A name as the kernel's `char[16]` holds it (cut to 15 bytes, NUL-padded).
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
                let advice = advice::advise(&sc.profile, &sc.context, advice::DEFAULT_TARGET);
                SimPool {
                    addr: 0xffff_5100_0000_0000 + (i as u64) * 0x1_0000,
                    replay: Replay::new(&SimParams::for_ring(ctx.ring_size, sc.profile.provider)),
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
            provider_alloc: provider,
            dontneed: provider,
            devmem_free: provider,
            ..Coverage::per_page()
        }
    }
}

/// Cumulative counters as the probes would have counted the simulated pool.
fn counters_of(o: &SimOutcome, provider: bool) -> PoolCounters {
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
        for (i, p) in self.pools.iter_mut().enumerate() {
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
                    id: i as u64 + 1,
                    identity: Some(p.identity),
                    gve_queue: None,
                    state: Some(PoolState {
                        stamp_ns: 0,
                        ring_fill: p.replay.ring_fill().min(u64::from(u32::MAX)) as u32,
                        inflight: p.replay.held().min(u64::from(u32::MAX)) as u32,
                        known: 3,
                        _pad: 0,
                    }),
                    ..RawPool::from_counters(counters_of(&o, profile.provider))
                },
            );
        }
        self.sites[site_stat::PROVIDER_ALLOC as usize].calls = provider_calls;
        self.sites[site_stat::DEVMEM_FREE as usize].calls = dmabuf_frees;
        cur.sites = self.sites;
        let facts = SourceFacts {
            kernel: format!("simulation ({})", self.name),
            page_size: SIM_BUFFER_BYTES,
            coverage: Self::coverage(any_provider),
            ..SourceFacts::default()
        };
        let advice: HashMap<u64, Advice> = self
            .pools
            .iter()
            .map(|p| (p.addr, p.advice.clone()))
            .collect();
        let mut w = Window::between(&facts, &self.prev, &cur);
        w.advice = AdviceFrom::Given(&advice);
        let snap = pipeline::assemble(&w);
        self.prev = cur;
        Ok(Some(snap))
    }
}

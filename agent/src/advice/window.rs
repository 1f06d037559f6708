//! The rolling window a live source keeps for the advice: about a minute of samples, each
//! slimmed to the counters a burst profile reads.
//!
//! Why slim: a full [`RawSample`] carries every pool's four 32-bucket histograms (about
//! 1.3 KiB a pool). Kept for 61 steps that was ~80 KiB per pool, ~320 MiB with the pool map
//! full (4,096 pools). The advice reads ten counters per pool per step and the pool's
//! identity once, at the newest step: that is all this keeps (~100 bytes a pool a step,
//! identities only in the newest sample).
//!
//! Why the advice is kept between computations ([`AdviceWindow::current_advice`]): replaying
//! every pool's minute at every ring size is the agent's main cost when many pools move (a
//! fifth of a core at 1,000 pools, recomputed each second), and a verdict over a minute of
//! profile does not change in one second. It is recomputed once the window has moved on by
//! [`ADVICE_EVERY`].
use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use ppscope_common::PoolIdentity;

use super::{
    pools::advise_window,
    profile::{ProfileCounters, ProfileSample},
};
use crate::{
    model::{Coverage, RawSample},
    snapshot::Advice,
};

/// Samples a live source keeps: a minute of one-second steps, and the one before.
pub const LIVE_SAMPLES: usize = 61;

/// How far the window moves on before its advice is computed again.
pub const ADVICE_EVERY: Duration = Duration::from_secs(5);

/// One step of the window.
#[derive(Debug, Clone)]
pub struct SlimSample {
    at: Instant,
    pools: HashMap<u64, ProfileCounters>,
    /// Only in the newest sample: emptied when a newer one arrives.
    identities: HashMap<u64, PoolIdentity>,
}

impl SlimSample {
    fn of(s: &RawSample) -> Self {
        Self {
            at: s.at,
            pools: s.pools.iter().map(|(addr, p)| (*addr, p.into())).collect(),
            identities: s
                .pools
                .iter()
                .filter_map(|(addr, p)| Some((*addr, p.identity?)))
                .collect(),
        }
    }
}

impl ProfileSample for SlimSample {
    fn at(&self) -> Instant {
        self.at
    }

    fn counters(&self, pool: u64) -> Option<ProfileCounters> {
        self.pools.get(&pool).copied()
    }

    fn pools(&self) -> impl Iterator<Item = (u64, ProfileCounters, Option<PoolIdentity>)> + '_ {
        self.pools
            .iter()
            .map(|(addr, c)| (*addr, *c, self.identities.get(addr).copied()))
    }
}

/// The last `capacity` samples, oldest first.
#[derive(Debug, Clone)]
pub struct AdviceWindow {
    samples: VecDeque<SlimSample>,
    capacity: usize,
    /// The last computed advice, per pool address, and the newest sample's time and the
    /// target it was computed for.
    /// Shared with the collections that carry it until the next computation.
    advice: Arc<HashMap<u64, Advice>>,
    advised: Option<(Instant, f64)>,
}

impl AdviceWindow {
    /// A window of `capacity` samples (at least two: a profile is made of differences).
    pub fn new(capacity: usize, first: &RawSample) -> Self {
        let mut w = Self {
            samples: VecDeque::with_capacity(capacity.max(2) + 1),
            capacity: capacity.max(2),
            advice: Arc::default(),
            advised: None,
        };
        w.push(first);
        w
    }

    pub fn push(&mut self, sample: &RawSample) {
        if let Some(newest) = self.samples.back_mut() {
            newest.identities = HashMap::new();
        }
        self.samples.push_back(SlimSample::of(sample));
        while self.samples.len() > self.capacity {
            self.samples.pop_front();
        }
        self.samples.make_contiguous();
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The window's advice: computed again when the newest sample is [`ADVICE_EVERY`] past
    /// the one the last computation saw (or the target changed), the last one otherwise. A
    /// pool that appeared since has none until then.
    pub fn current_advice(
        &mut self,
        cov: &Coverage,
        page_size: u64,
        target: f64,
    ) -> &Arc<HashMap<u64, Advice>> {
        let newest = self.samples.back().map(|s| s.at);
        let due = match (self.advised, newest) {
            (Some((at, t)), Some(now)) => t != target || now.duration_since(at) >= ADVICE_EVERY,
            _ => true,
        };
        if due {
            self.advice = Arc::new(self.advise(cov, page_size, target));
            self.advised = newest.map(|now| (now, target));
        }
        &self.advice
    }

    /// The advice of every pool of the window, per pool address. Borrowed, not cloned: a copy
    /// of the window per tick was most of the agent's CPU at 1,000 pools (BENCHMARKS.md); `push` keeps the samples in one slice for this.
    pub fn advise(&self, cov: &Coverage, page_size: u64, target: f64) -> HashMap<u64, Advice> {
        match self.samples.as_slices() {
            (all, []) => advise_window(all, cov, page_size, target),
            _ => {
                let all: Vec<SlimSample> = self.samples.iter().cloned().collect();
                advise_window(&all, cov, page_size, target)
            }
        }
    }

    /// Bytes the window's samples hold on the heap (hash tables counted at their capacity,
    /// without the allocator's own overhead): what it costs per pool, for the benchmarks and
    /// RELIABILITY.md.
    pub fn heap_bytes(&self) -> usize {
        // A hashbrown table holds one byte of control per bucket next to the entry.
        fn table<K, V>(m: &HashMap<K, V>) -> usize {
            m.capacity() * (std::mem::size_of::<(K, V)>() + 1)
        }
        self.samples.capacity() * std::mem::size_of::<SlimSample>()
            + self
                .samples
                .iter()
                .map(|s| table(&s.pools) + table(&s.identities))
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ppscope_common::PoolCounters;

    use super::*;
    use crate::{
        model::{self, RawPool},
        snapshot::{PoolView, Snapshot},
        testing,
    };

    /// A bursty pool (100 allocations for 15 steps, then the 1,500 pages back at once) next to
    /// a steady one, with identities that give them a ring of 256.
    fn samples(pools: u64, steps: u64) -> Vec<RawSample> {
        let t0 = Instant::now();
        let mut counters: HashMap<u64, PoolCounters> = HashMap::new();
        (0..steps)
            .map(|i| {
                let mut s = RawSample::empty(t0 + Duration::from_secs(i));
                for pool in 0..pools {
                    let c = counters.entry(pool).or_default();
                    if i > 0 {
                        if pool % 2 == 0 && i % 16 == 0 {
                            c.put_calls += 1_500;
                            c.put_released += 1_244;
                        } else if pool % 2 == 0 {
                            c.alloc_calls += 100;
                            c.slow_calls += 1;
                            c.slow_ns_sum += 40_000;
                        } else {
                            c.alloc_calls += 50;
                            c.put_calls += 50;
                            c.put_cached += 40;
                        }
                        c.slow_hist[12] += 1;
                    }
                    let mut id = PoolIdentity::EMPTY;
                    id.ring_size = 256;
                    id.known = PoolIdentity::KNOWN_RING_SIZE;
                    id.netdev = 0x1000 + pool;
                    s.pools.insert(
                        0xff00 + pool,
                        RawPool {
                            counters: *c,
                            identity: Some(id),
                            ..Default::default()
                        },
                    );
                }
                s
            })
            .collect()
    }

    fn coverage() -> Coverage {
        Coverage {
            alloc: true,
            recycle: true,
            slow: true,
            refill: true,
            ..Default::default()
        }
    }

    fn snapshot(first: &RawSample, last: &RawSample) -> Snapshot {
        model::snapshot(&testing::facts("test", coverage()), first, last)
    }

    /// The advice is kept while the window moves less than ADVICE_EVERY, then computed
    /// again: a pool that appears in between gets its advice at the next computation.
    #[test]
    fn the_advice_is_computed_again_once_the_window_moved_on_by_advice_every() {
        let mut all = samples(2, 30);
        let late = 0xff01;
        for s in &mut all[..10] {
            s.pools.remove(&late);
        }
        let target = crate::advice::DEFAULT_TARGET;
        let mut window = AdviceWindow::new(LIVE_SAMPLES, &all[0]);
        let mut seen = Vec::new();
        for s in &all[1..] {
            window.push(s);
            let advice = window.current_advice(&coverage(), 4096, target);
            seen.push(advice.contains_key(&late));
        }
        // Samples are a second apart: computed at t=1, 6, 11, 16, … The late pool is in the
        // window from t=10 and advised from the computation at t=16 on (it needs enough of
        // a profile), never between two computations.
        let first = seen
            .iter()
            .position(|&s| s)
            .expect("the late pool is advised");
        assert_eq!((first + 1) % 5, 1, "advised at t={}: {seen:?}", first + 1);
        assert!(seen[first..].iter().all(|&s| s), "{seen:?}");
        // A new target is a new question: computed at once.
        let before = window.current_advice(&coverage(), 4096, target).clone();
        let other = window.current_advice(&coverage(), 4096, 0.5).clone();
        assert_ne!(
            before.get(&late).map(|a| a.target),
            other.get(&late).map(|a| a.target)
        );
    }

    #[test]
    fn the_slim_window_advises_exactly_what_the_full_samples_do() {
        let all = samples(6, 80);
        let mut window = AdviceWindow::new(LIVE_SAMPLES, &all[0]);
        for s in &all[1..] {
            window.push(s);
        }
        assert_eq!(window.len(), LIVE_SAMPLES);
        let full = &all[all.len() - LIVE_SAMPLES..];

        let target = crate::advice::DEFAULT_TARGET;
        let mut from_window = snapshot(&all[0], all.last().unwrap());
        let mut advice = window.advise(&coverage(), 4096, target);
        for p in &mut from_window.pools {
            p.advice = advice.remove(&p.addr);
        }
        let mut from_full = snapshot(&all[0], all.last().unwrap());
        let mut advice = advise_window(full, &coverage(), 4096, target);
        for p in &mut from_full.pools {
            p.advice = advice.remove(&p.addr);
        }

        assert_eq!(from_window.pools.len(), 6);
        let advised = from_window
            .pools
            .iter()
            .filter(|p| p.advice.is_some())
            .count();
        assert_eq!(advised, 6, "every moving pool with a ring size is advised");
        for (a, b) in from_window.pools.iter().zip(&from_full.pools) {
            assert_eq!(a.addr, b.addr);
            assert_eq!(
                serde_json::to_value(&a.advice).unwrap(),
                serde_json::to_value(&b.advice).unwrap(),
                "pool {:#x}",
                a.addr
            );
        }
        // The bursty pools need more than their 256 entries; the steady ones do not.
        let bursty = from_window.pools.iter().find(|p| p.addr == 0xff00).unwrap();
        let steady = from_window.pools.iter().find(|p| p.addr == 0xff01).unwrap();
        let size = |p: &PoolView| p.advice.as_ref().unwrap().recommended_size;
        assert!(size(bursty) > 256, "{:?}", bursty.advice);
        assert!(size(steady) <= 256, "{:?}", steady.advice);
    }

    #[test]
    fn only_the_newest_sample_keeps_identities() {
        let all = samples(3, 5);
        let mut window = AdviceWindow::new(3, &all[0]);
        for s in &all[1..] {
            window.push(s);
        }
        let with_ids: Vec<usize> = window.samples.iter().map(|s| s.identities.len()).collect();
        assert_eq!(with_ids, vec![0, 0, 3]);
    }

    #[test]
    fn a_full_map_costs_megabytes_not_hundreds() {
        // The pool map's capacity, every pool moving, a full minute of steps.
        let pools = ppscope_common::MAX_POOLS as u64;
        let all = samples(pools, LIVE_SAMPLES as u64 + 2);
        let mut window = AdviceWindow::new(LIVE_SAMPLES, &all[0]);
        for s in &all[1..] {
            window.push(s);
        }
        let per_pool_step = window.heap_bytes() as f64 / (pools as f64 * LIVE_SAMPLES as f64);
        let full = std::mem::size_of::<(u64, RawPool)>();
        eprintln!(
            "window at {pools} pools: {:.1} MiB, {per_pool_step:.0} B per pool per step (a full sample: {full} B)",
            window.heap_bytes() as f64 / (1 << 20) as f64
        );
        // Hash tables at most half empty around the slim entry: a small part of a full one.
        assert!(
            per_pool_step * 4.0 < full as f64,
            "{per_pool_step} B vs {full} B"
        );
    }
}

//! The rolling window a live source keeps for the advice: about a minute of samples, kept per
//! pool as what changed from one sample to the next.
//!
//! Why not the samples: a full [`RawSample`] carries every pool's four 32-bucket histograms
//! (about 1.3 KiB a pool): kept for 61 steps that was ~320 MiB with the pool map full (4,096
//! pools). Slimmed to the twelve counters a burst profile reads, in one hash table per sample,
//! it was still 158 bytes a pool a step: 92 MiB at 10,000 pools, most of the agent's memory
//! (BENCHMARKS.md). A profile reads each pool's steps in order and the counters' sum over the
//! window, never a pool's absolute counters in the middle: so each pool keeps its steps'
//! deltas, packed in 32 bits ([`PackedStep`], 56 bytes a step; a delta that does not fit is
//! kept whole beside), and one copy of its newest counters and identity.
//!
//! The window gives exactly the profiles [`super::profile::profiles`] gives on the same full
//! samples: a pool missing from a sample has zero steps there and counts from zero when it is
//! back (a pool evicted from the kernel's map restarts from zero there too), and only the
//! pools of the newest sample are profiled.
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
    pools::advise_profiles,
    profile::{sort_profiles, step_of_delta, PoolProfile, ProfileCounters, PROFILE_FIELDS},
    simulator::Step,
};
use crate::{
    model::{ByAddr, Coverage, RawSample},
    snapshot::{Advice, ProfileBasis},
};

/// Samples a live source keeps: a minute of one-second steps, and the one before.
pub const LIVE_SAMPLES: usize = 61;

/// How far the window moves on before its advice is computed again.
pub const ADVICE_EVERY: Duration = Duration::from_secs(5);

/// What changed in one pool's counters over one step, each delta in 32 bits, and the ring's
/// fill at the step's end.
#[derive(Debug, Clone, Copy)]
struct PackedStep {
    deltas: [u32; PROFILE_FIELDS],
    /// `NO_FILL`: not read.
    fill: u32,
    /// A delta did not fit in 32 bits: the step is in the track's `wide` steps, whole.
    wide: bool,
}

const NO_FILL: u32 = u32::MAX;

/// One pool's part of the window.
#[derive(Debug, Clone)]
struct Track {
    /// The sample number the track starts at: its first step ends at the next one. Steps
    /// before it are zeros (the pool was not there).
    start: u64,
    /// The ring's fill at `start` (None also when the pool appeared there: it came from zero).
    first_fill: Option<u32>,
    steps: VecDeque<PackedStep>,
    /// The steps marked `wide`, in order.
    wide: VecDeque<ProfileCounters>,
    /// The last sample the pool was in, its counters there (the next step's base) and its
    /// identity.
    seen: u64,
    newest: ProfileCounters,
    identity: Option<PoolIdentity>,
}

impl Track {
    /// A pool first seen in sample `n`: it starts from zero at `n - 1`, or at `n` itself when
    /// `n` is the window's first sample (there is no step before).
    fn new(n: u64, first_of_window: bool, c: ProfileCounters) -> Self {
        let mut t = Self {
            start: n,
            first_fill: c.ring_fill,
            // Grown as steps come, not a minute's room up front: a pool seen once (pools
            // created and torn down, each at a new address) would hold 3.4 KB until forgotten.
            steps: VecDeque::new(),
            wide: VecDeque::new(),
            seen: n,
            newest: c,
            identity: None,
        };
        if !first_of_window {
            t.start = n - 1;
            t.first_fill = None;
            t.push_delta(c);
        }
        t
    }

    /// Adds the steps up to sample `n`, where the pool's counters are `c`. A pool missing
    /// from the samples in between had zero steps there, and counts from zero again.
    fn push(&mut self, n: u64, c: ProfileCounters) {
        if self.seen + 1 < n {
            for _ in self.seen + 1..n {
                self.push_delta(ProfileCounters::default());
            }
            self.push_delta(c);
        } else {
            self.push_delta(c.since(&self.newest));
        }
        self.seen = n;
        self.newest = c;
    }

    fn push_delta(&mut self, d: ProfileCounters) {
        let all = d.to_array();
        let mut deltas = [0u32; PROFILE_FIELDS];
        let mut wide = false;
        for (packed, v) in deltas.iter_mut().zip(all) {
            match u32::try_from(v) {
                Ok(v) => *packed = v,
                Err(_) => wide = true,
            }
        }
        if wide {
            self.wide.push_back(d);
        }
        self.steps.push_back(PackedStep {
            deltas,
            fill: d.ring_fill.unwrap_or(NO_FILL),
            wide,
        });
    }

    /// Forgets the oldest step: the track starts one sample later.
    fn pop(&mut self) {
        if let Some(step) = self.steps.pop_front() {
            if step.wide {
                self.wide.pop_front();
            }
            self.first_fill = (step.fill != NO_FILL).then_some(step.fill);
            self.start += 1;
        }
    }

    /// Each step's deltas (with the fill at its end), oldest first.
    fn deltas(&self) -> impl Iterator<Item = ProfileCounters> + '_ {
        let mut wide = self.wide.iter();
        self.steps.iter().map(move |s| {
            if s.wide {
                if let Some(d) = wide.next() {
                    return *d;
                }
            }
            let fill = (s.fill != NO_FILL).then_some(s.fill);
            ProfileCounters::from_array(s.deltas.map(u64::from), fill)
        })
    }
}

/// The last `capacity` samples, per pool.
#[derive(Debug, Clone)]
pub struct AdviceWindow {
    /// The samples' times, oldest first.
    times: VecDeque<Instant>,
    /// The number of the newest sample (the first is 0).
    newest: u64,
    tracks: ByAddr<u64, Track>,
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
        let capacity = capacity.max(2);
        let mut w = Self {
            times: VecDeque::with_capacity(capacity + 1),
            newest: 0,
            tracks: ByAddr::default(),
            capacity,
            advice: Arc::default(),
            advised: None,
        };
        w.times.push_back(first.at);
        w.take(first, true);
        w
    }

    pub fn push(&mut self, sample: &RawSample) {
        self.newest += 1;
        self.times.push_back(sample.at);
        self.take(sample, false);
        while self.times.len() > self.capacity {
            self.times.pop_front();
            let first = self.first();
            // A pool in none of the window's samples is forgotten: back, it is a new one.
            self.tracks.retain(|_, t| t.seen >= first);
            // The table does not shrink by itself: after a minute of many short-lived pools
            // it would keep their room for good.
            if self.tracks.capacity() > 4 * self.tracks.len().max(64) {
                self.tracks.shrink_to(2 * self.tracks.len());
            }
            for t in self.tracks.values_mut() {
                while t.start < first && !t.steps.is_empty() {
                    t.pop();
                }
            }
        }
    }

    /// The number of the window's oldest sample.
    fn first(&self) -> u64 {
        self.newest + 1 - self.times.len() as u64
    }

    /// Adds the newest sample's step to every pool in it.
    fn take(&mut self, sample: &RawSample, first_of_window: bool) {
        let n = self.newest;
        for (addr, p) in &sample.pools {
            let c = ProfileCounters::from(p);
            let t = match self.tracks.get_mut(addr) {
                Some(t) => {
                    t.push(n, c);
                    t
                }
                None => self
                    .tracks
                    .entry(*addr)
                    .or_insert_with(|| Track::new(n, first_of_window, c)),
            };
            t.identity = p.identity;
        }
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
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
        let newest = self.times.back().copied();
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

    /// The advice of every pool of the window, per pool address.
    pub fn advise(&self, cov: &Coverage, page_size: u64, target: f64) -> HashMap<u64, Advice> {
        match cov.profile_basis() {
            Some(basis) => advise_profiles(&self.profiles(basis), cov, page_size, target),
            None => HashMap::new(),
        }
    }

    /// One profile per pool that moved, on `basis`: what [`super::profile::profiles`] gives
    /// on the window's samples.
    pub fn profiles(&self, basis: ProfileBasis) -> Vec<PoolProfile> {
        let (Some(first_at), Some(last_at)) = (self.times.front(), self.times.back()) else {
            return Vec::new();
        };
        if self.times.len() < 2 {
            return Vec::new();
        }
        let step_ns =
            (last_at.duration_since(*first_at).as_nanos() as u64) / (self.times.len() as u64 - 1);
        let first = self.first();
        let mut out: Vec<PoolProfile> = self
            .tracks
            .iter()
            .filter(|(_, t)| t.seen == self.newest)
            .filter_map(|(&addr, t)| {
                let measured = t
                    .deltas()
                    .fold(ProfileCounters::default(), |sum, d| sum.plus(&d));
                if !measured.moved(basis) {
                    return None;
                }
                let mut steps = vec![Step::default(); (t.start - first) as usize];
                steps.reserve(t.steps.len());
                let (mut fill, mut owed) = (t.first_fill, 0);
                for d in t.deltas() {
                    steps.push(step_of_delta(&d, fill, basis, &mut owed));
                    fill = d.ring_fill;
                }
                Some(PoolProfile::new(
                    addr, t.identity, basis, step_ns, steps, measured,
                ))
            })
            .collect();
        sort_profiles(&mut out, basis);
        out
    }

    /// Bytes the window holds on the heap (the hash table counted at its capacity, without
    /// the allocator's own overhead): what it costs per pool, for the benchmarks and
    /// RELIABILITY.md.
    pub fn heap_bytes(&self) -> usize {
        // A hashbrown table holds one byte of control per bucket next to the entry.
        let table = self.tracks.capacity() * (std::mem::size_of::<(u64, Track)>() + 1);
        let steps: usize = self
            .tracks
            .values()
            .map(|t| {
                t.steps.capacity() * std::mem::size_of::<PackedStep>()
                    + t.wide.capacity() * std::mem::size_of::<ProfileCounters>()
            })
            .sum();
        self.times.capacity() * std::mem::size_of::<Instant>() + table + steps
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ppscope_common::PoolCounters;

    use super::*;
    use crate::{
        advice::{pools::advise_window, profile::profiles},
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
                            identity: Some(id),
                            ..RawPool::from_counters(*c)
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
    fn the_window_advises_exactly_what_the_full_samples_do() {
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

    /// The window's profiles are those of the full samples, step for step, also where the
    /// samples are awkward: a pool missing from some samples, a pool that appears late, a
    /// step too large for 32 bits, a counter that went backwards, a fill not read.
    #[test]
    fn the_window_profiles_exactly_what_the_full_samples_do() {
        let mut all = samples(4, 40);
        let (gappy, late, huge) = (0xff00, 0xff01, 0xff02);
        for s in &mut all[..12] {
            s.pools.remove(&late);
        }
        for s in &mut all[20..23] {
            s.pools.remove(&gappy);
        }
        for (i, s) in all.iter_mut().enumerate() {
            let p = s.pools.get_mut(&huge).unwrap();
            // Ten billion a step: no 32-bit delta holds that.
            p.counters.slow_ns_sum = i as u64 * 10_000_000_000;
            p.counters.refill_pages = i as u64 * 64;
            if i == 30 {
                p.counters.alloc_calls = 3; // the pool was evicted and seen again
            }
            p.state = (i % 3 != 0).then_some(ppscope_common::PoolState {
                ring_fill: i as u32 * 4,
                known: 1,
                ..Default::default()
            });
        }
        for capacity in [2, 7, LIVE_SAMPLES] {
            let mut window = AdviceWindow::new(capacity, &all[0]);
            for (i, s) in all.iter().enumerate().skip(1) {
                window.push(s);
                let full = &all[(i + 1).saturating_sub(capacity)..=i];
                for basis in [ProfileBasis::Pages, ProfileBasis::Refills] {
                    let (a, b) = (window.profiles(basis), profiles(full, basis));
                    let key = |p: &PoolProfile| (p.pool, p.profile.clone(), p.measured, p.identity);
                    assert_eq!(
                        a.iter().map(key).collect::<Vec<_>>(),
                        b.iter().map(key).collect::<Vec<_>>(),
                        "capacity {capacity}, sample {i}, {basis:?}"
                    );
                }
            }
        }
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
        // A packed step (56 bytes) and the pool's share of its one table entry (its newest
        // counters and identity over 61 steps): 72 bytes at most. A hash table per sample of
        // the twelve counters was 158.
        assert!(per_pool_step <= 72.0, "{per_pool_step} B per pool per step");
    }

    #[test]
    fn pools_seen_once_cost_their_one_step_not_a_minute() {
        // Pools created and torn down at every sample, each at a new address (the map full of
        // them): each is kept until the window forgets it, a minute later.
        let pools = ppscope_common::MAX_POOLS as u64;
        let one = samples(pools, 2);
        let sample = |i: u64| {
            let mut s = RawSample::empty(one[1].at + Duration::from_secs(i));
            s.pools = one[1]
                .pools
                .iter()
                .map(|(addr, p)| (addr + (i << 32), p.clone()))
                .collect();
            s
        };
        let mut window = AdviceWindow::new(LIVE_SAMPLES, &sample(0));
        for i in 1..LIVE_SAMPLES as u64 + 2 {
            window.push(&sample(i));
        }
        let tracks = window.tracks.len();
        assert_eq!(
            tracks,
            pools as usize * LIVE_SAMPLES,
            "a minute of pools kept"
        );
        let per_track = window.heap_bytes() as f64 / tracks as f64;
        eprintln!("{tracks} pools seen once: {per_track:.0} B each");
        // The table entry (the pool's newest counters and identity) and a few steps' room,
        // not 61 steps' (3.4 KB).
        let entry = std::mem::size_of::<(u64, Track)>() as f64;
        assert!(
            per_track <= 2.0 * entry + 4.0 * std::mem::size_of::<PackedStep>() as f64 + 8.0,
            "{per_track} B per pool seen once (an entry is {entry} B)"
        );
        // They gone for a minute, the window gives their room back.
        let steady = samples(16, LIVE_SAMPLES as u64 + 2);
        for s in &steady {
            let mut s = s.clone();
            s.at = one[1].at + Duration::from_secs(LIVE_SAMPLES as u64 + 2) + (s.at - steady[0].at);
            window.push(&s);
        }
        assert_eq!(window.tracks.len(), 16);
        assert!(
            window.heap_bytes() < 1 << 20,
            "{} bytes kept for 16 pools after the short-lived ones left",
            window.heap_bytes()
        );
    }
}

//! Burst profiles from samples: what a pool's allocations and recycles did, step by step.
//!
//! A recording's samples (every 10 ms by default) hold cumulative counters; the difference
//! between consecutive samples is one [`Step`]: allocations, recycles that went to (or missed)
//! the ring, and direct recycles into the alloc cache. That is what the simulator replays
//! against other ring sizes. Direct recycles that found the cache full counted as ring frees
//! in the kernel and count so here (the cache size does not change with the ring).
use ppscope_common::{PoolCounters, PoolIdentity};

use crate::{
    model::{delta, RawSample},
    sim::{Profile, Step},
};

/// A pool's profile and what the recording knows about the pool.
#[derive(Debug, Clone)]
pub struct PoolProfile {
    pub pool: u64,
    pub identity: Option<PoolIdentity>,
    pub profile: Profile,
    /// The measured counters over the whole recording (to calibrate the simulation).
    pub measured: PoolCounters,
}

fn step_of(d: &PoolCounters) -> Step {
    let direct = d.put_cached;
    let ring = (d.put_calls.saturating_sub(d.put_cached)) + d.bulk_pages;
    Step {
        allocs: d.alloc_calls,
        ring_frees: ring,
        direct_frees: direct,
    }
}

/// One profile per pool that moved, from consecutive samples (at least two).
pub fn profiles(samples: &[RawSample]) -> Vec<PoolProfile> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Vec::new();
    };
    if samples.len() < 2 {
        return Vec::new();
    }
    let step_ns = (last.at.duration_since(first.at).as_nanos() as u64) / (samples.len() as u64 - 1);
    let zero = PoolCounters::default();
    let mut out: Vec<PoolProfile> = last
        .pools
        .iter()
        .filter_map(|(addr, end)| {
            let start = first.pools.get(addr).map_or(&zero, |p| &p.counters);
            let measured = delta(&end.counters, start);
            if measured.alloc_calls + measured.put_calls == 0 {
                return None;
            }
            let steps = samples
                .windows(2)
                .map(|w| {
                    let a = w[0].pools.get(addr).map_or(&zero, |p| &p.counters);
                    let b = w[1].pools.get(addr).map_or(a, |p| &p.counters);
                    step_of(&delta(b, a))
                })
                .collect();
            let identity = end.identity;
            Some(PoolProfile {
                pool: *addr,
                identity,
                profile: Profile {
                    step_ns: step_ns.max(1),
                    steps,
                    provider: identity.is_some_and(|i| i.has_memory_provider != 0),
                },
                measured,
            })
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.measured.alloc_calls));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RawPool;
    use std::time::{Duration, Instant};

    fn sample(t: Instant, ms: u64, allocs: u64, puts: u64, cached: u64) -> RawSample {
        let mut s = RawSample::empty(t + Duration::from_millis(ms));
        s.pools.insert(
            9,
            RawPool {
                counters: PoolCounters {
                    alloc_calls: allocs,
                    put_calls: puts,
                    put_cached: cached,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        s
    }

    #[test]
    fn steps_are_the_differences_between_samples() {
        let t = Instant::now();
        let samples = [
            sample(t, 0, 100, 100, 50),
            sample(t, 10, 164, 100, 50),
            sample(t, 20, 164, 292, 60),
        ];
        let p = profiles(&samples);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].profile.step_ns, 10_000_000);
        assert_eq!(
            p[0].profile.steps,
            vec![
                Step {
                    allocs: 64,
                    ring_frees: 0,
                    direct_frees: 0
                },
                Step {
                    allocs: 0,
                    ring_frees: 182,
                    direct_frees: 10
                },
            ]
        );
        assert_eq!(p[0].measured.alloc_calls, 64);
    }

    #[test]
    fn idle_pools_and_single_samples_give_nothing() {
        let t = Instant::now();
        assert!(profiles(&[sample(t, 0, 1, 1, 0)]).is_empty());
        assert!(profiles(&[sample(t, 0, 5, 5, 0), sample(t, 10, 5, 5, 0)]).is_empty());
    }
}

//! Burst profiles from samples: what a pool's allocations and recycles did, step by step.
//!
//! A recording's samples (every 10 ms by default) hold cumulative counters; the difference
//! between consecutive samples is one [`Step`]: pages taken, pages offered to the ring, and
//! direct recycles into the alloc cache. That is what the simulator replays against other ring
//! sizes. Two bases ([`ProfileBasis`]), by the hooks that fed the counters:
//!
//! - **pages** (`--detail full`): every allocation call, and every recycle, direct or not.
//!   Direct recycles that found the cache full counted as ring frees in the kernel and count
//!   so here (the cache size does not change with the ring).
//! - **refills** (`--detail light`): the pages a refill moved from the ring into the alloc
//!   cache, pages from the page allocator (`page_pool_state_hold`), pages that left the pool
//!   (`page_pool_state_release`: the ring was full) and the ring's fill at those events. The
//!   pages offered to the ring in a step follow from the ring's books: fill after − fill
//!   before + pages the refills took out, plus the pages that found it full. Demand is what
//!   entered the cache from the ring or the allocator. Direct recycles and the allocations
//!   they serve never touch the ring and are in neither side. Exact at the ring, placed in
//!   time to within 8 refills a CPU (the fill is read at slow paths, returns, empty refills
//!   and one refill in 8 that took pages: `HotSlot::fill_weight`).
use ppscope_common::PoolIdentity;

use super::simulator::{Profile, Step};
use crate::{
    model::{since, PoolCounts, RawPool, RawSample},
    snapshot::ProfileBasis,
};

/// Calls `$m!(field, ...)` with every counter field of [`ProfileCounters`].
macro_rules! profile_fields {
    ($m:ident) => {
        $m!(
            alloc_calls,
            put_calls,
            put_cached,
            bulk_pages,
            slow_calls,
            slow_ns_sum,
            mp_alloc_calls,
            hold_pages,
            put_released,
            bulk_released,
            refill_pages,
            release_pages
        )
    };
}

/// The counters of a pool that its burst profile and the calibration read: all a window of
/// samples has to keep (12 of the 19 counts of [`PoolCounts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfileCounters {
    pub alloc_calls: u64,
    pub put_calls: u64,
    pub put_cached: u64,
    pub bulk_pages: u64,
    pub slow_calls: u64,
    pub slow_ns_sum: u64,
    pub mp_alloc_calls: u64,
    pub hold_pages: u64,
    pub put_released: u64,
    pub bulk_released: u64,
    pub refill_pages: u64,
    pub release_pages: u64,
    /// The ring's fill at the pool's last rare event (a gauge, not a count), when read.
    pub ring_fill: Option<u32>,
}

impl From<&PoolCounts> for ProfileCounters {
    fn from(c: &PoolCounts) -> Self {
        macro_rules! copy {
            ($($f:ident),*) => { Self { $( $f: c.$f, )* ring_fill: None } };
        }
        profile_fields!(copy)
    }
}

impl From<&RawPool> for ProfileCounters {
    fn from(p: &RawPool) -> Self {
        Self {
            ring_fill: p
                .state
                .filter(|st| st.known & 1 != 0)
                .map(|st| st.ring_fill),
            ..(&p.counters).into()
        }
    }
}

/// How many counters [`ProfileCounters`] has (its `ring_fill` gauge aside).
pub(crate) const PROFILE_FIELDS: usize = {
    macro_rules! count {
        ($($f:ident),*) => { [$(stringify!($f)),*].len() };
    }
    profile_fields!(count)
};

impl ProfileCounters {
    /// The counters in [`profile_fields!`] order (`ring_fill` aside).
    pub(crate) fn to_array(self) -> [u64; PROFILE_FIELDS] {
        macro_rules! arr {
            ($($f:ident),*) => { [$(self.$f),*] };
        }
        profile_fields!(arr)
    }

    /// The inverse of [`Self::to_array`], with the ring's fill given.
    pub(crate) fn from_array(a: [u64; PROFILE_FIELDS], ring_fill: Option<u32>) -> Self {
        let mut it = a.into_iter();
        macro_rules! build {
            ($($f:ident),*) => { Self { $( $f: it.next().unwrap_or(0), )* ring_fill } };
        }
        profile_fields!(build)
    }

    /// `self + other`, field by field (wrapping, as the kernel's counters do); the ring fill
    /// is `other`'s.
    pub(crate) fn plus(&self, other: &Self) -> Self {
        macro_rules! add {
            ($($f:ident),*) => {
                Self { $( $f: self.$f.wrapping_add(other.$f), )* ring_fill: other.ring_fill }
            };
        }
        profile_fields!(add)
    }

    /// `self - earlier`, field by field, by the one rule ([`crate::model::since`]); the ring
    /// fill is the later one's.
    pub fn since(&self, earlier: &Self) -> Self {
        macro_rules! sub {
            ($($f:ident),*) => {
                Self { $( $f: since(self.$f, earlier.$f), )* ring_fill: self.ring_fill }
            };
        }
        profile_fields!(sub)
    }

    /// Pages a profile on `basis` counts as taken: allocation calls, or the pages that
    /// entered the alloc cache from the ring or the page allocator.
    pub fn taken(&self, basis: ProfileBasis) -> u64 {
        match basis {
            ProfileBasis::Pages => self.alloc_calls,
            ProfileBasis::Refills => self.refill_pages + self.hold_pages,
        }
    }

    /// Pages that left the pool because the ring was full (or they could not be recycled).
    pub fn ring_full(&self, basis: ProfileBasis) -> u64 {
        match basis {
            ProfileBasis::Pages => self.put_released + self.bulk_released,
            ProfileBasis::Refills => self.release_pages,
        }
    }

    /// Whether the pool moved at all over these counters, as `basis` sees it.
    pub(crate) fn moved(&self, basis: ProfileBasis) -> bool {
        match basis {
            ProfileBasis::Pages => self.alloc_calls + self.put_calls > 0,
            ProfileBasis::Refills => self.taken(basis) + self.release_pages > 0,
        }
    }
}

/// A pool's profile and what the recording knows about the pool.
#[derive(Debug, Clone)]
pub struct PoolProfile {
    pub pool: u64,
    pub identity: Option<PoolIdentity>,
    /// What the profile's steps were made of.
    pub basis: ProfileBasis,
    pub profile: Profile,
    /// The measured counters over the whole window (to calibrate the simulation).
    pub measured: ProfileCounters,
}

impl PoolProfile {
    /// A pool's profile of `steps`, each `step_ns` long (at least 1 ns).
    pub(crate) fn new(
        pool: u64,
        identity: Option<PoolIdentity>,
        basis: ProfileBasis,
        step_ns: u64,
        steps: Vec<Step>,
        measured: ProfileCounters,
    ) -> Self {
        Self {
            pool,
            identity,
            basis,
            profile: Profile {
                step_ns: step_ns.max(1),
                steps,
                provider: identity.is_some_and(|i| i.has_memory_provider != 0),
            },
            measured,
        }
    }
}

/// One step between counters `a` and the later `b`, on `basis` (`owed`: see
/// [`step_of_delta`]).
fn step_of(a: &ProfileCounters, b: &ProfileCounters, basis: ProfileBasis, owed: &mut i64) -> Step {
    step_of_delta(&b.since(a), a.ring_fill, basis, owed)
}

/// One step from what changed over it (`d`, whose `ring_fill` is the fill at its end) and the
/// ring's fill at its start, on `basis`: the one rule for full samples and a live window's
/// deltas (`crate::advice::window`), which call it for a pool's steps in order with one
/// `owed`, starting at 0.
///
/// The fill is the one the pool's last filed event read (`PoolRare::state`), and a refill
/// that took pages files it at one refill in 8 per CPU (`HotSlot::fill_weight`): a reading
/// may be older than refills the step already counts, and the step's books then come out
/// below zero. The shortfall is owed by the next steps rather than dropped, so the steps
/// still add up to what the ring's books say went in over the whole window; a step's share
/// is placed in time to within those refills.
pub(crate) fn step_of_delta(
    d: &ProfileCounters,
    fill_before: Option<u32>,
    basis: ProfileBasis,
    owed: &mut i64,
) -> Step {
    match basis {
        ProfileBasis::Pages => Step {
            allocs: d.alloc_calls,
            ring_frees: d.put_calls.saturating_sub(d.put_cached) + d.bulk_pages,
            direct_frees: d.put_cached,
        },
        ProfileBasis::Refills => {
            // The ring's books: what went in = what it holds more + what refills took out.
            // Without a fill reading on both sides, the refills' pages are all we know went in.
            let into_ring = match (fill_before, d.ring_fill) {
                (Some(before), Some(after)) => {
                    let books =
                        i64::from(after) - i64::from(before) + d.refill_pages as i64 - *owed;
                    *owed = (-books).max(0);
                    books.max(0) as u64
                }
                _ => d.refill_pages,
            };
            Step {
                allocs: d.taken(basis),
                ring_frees: into_ring + d.release_pages,
                direct_frees: 0,
            }
        }
    }
}

/// Busiest pool first, then by address: the same order however the pools were gathered.
pub(crate) fn sort_profiles(profiles: &mut [PoolProfile], basis: ProfileBasis) {
    profiles.sort_by_key(|p| (std::cmp::Reverse(p.measured.taken(basis)), p.pool));
}

/// One profile per pool that moved, from consecutive full samples (at least two: a recording),
/// on `basis`. A live agent keeps its minute as deltas instead (`crate::advice::window`), with
/// the same rules: a pool missing from a sample counts from zero when it is back, only the
/// pools of the last sample are profiled, and what was measured is what the steps add up to.
pub fn profiles(samples: &[RawSample], basis: ProfileBasis) -> Vec<PoolProfile> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Vec::new();
    };
    if samples.len() < 2 {
        return Vec::new();
    }
    let step_ns = (last.at.duration_since(first.at).as_nanos() as u64) / (samples.len() as u64 - 1);
    let zero = ProfileCounters::default();
    let counters = |s: &RawSample, pool: u64| s.pools.get(&pool).map(ProfileCounters::from);
    let mut out: Vec<PoolProfile> = last
        .pools
        .iter()
        .filter_map(|(&addr, p)| {
            // What the steps add up to: a counter that went backwards (the pool was evicted
            // and seen again) counts on both sides, as in the steps the simulator replays.
            let mut measured = zero;
            let mut owed = 0;
            let steps = samples
                .windows(2)
                .map(|w| {
                    let a = counters(&w[0], addr).unwrap_or(zero);
                    let b = counters(&w[1], addr).unwrap_or(a);
                    measured = measured.plus(&b.since(&a));
                    step_of(&a, &b, basis, &mut owed)
                })
                .collect();
            if !measured.moved(basis) {
                return None;
            }
            Some(PoolProfile::new(
                addr, p.identity, basis, step_ns, steps, measured,
            ))
        })
        .collect();
    sort_profiles(&mut out, basis);
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
                counters: PoolCounts {
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

    /// A fill reading older than refills its step already counts (a refill that took pages
    /// files the fill at one in 8): that step's books come out below zero, and the next step
    /// owes the shortfall, so the steps add up to the ring's books over the window instead
    /// of overstating them by it.
    #[test]
    fn a_step_whose_books_go_below_zero_leaves_the_shortfall_to_the_next() {
        let step = |refill_pages, after, before, owed: &mut i64| {
            let d = ProfileCounters {
                refill_pages,
                ring_fill: Some(after),
                ..Default::default()
            };
            step_of_delta(&d, Some(before), ProfileBasis::Refills, owed).ring_frees
        };
        let mut owed = 0;
        // 100 → 40 with no refill counted: the refills that emptied it come in the next step.
        assert_eq!(step(0, 40, 100, &mut owed), 0);
        assert_eq!(owed, 60);
        // The ring's books over both steps: 40 - 100 + 128 = 68, all in the second.
        assert_eq!(step(128, 40, 40, &mut owed), 68);
        assert_eq!(owed, 0);
        // A step with more than it owes keeps the rest; one without fill readings owes
        // nothing new.
        let mut owed = 10;
        assert_eq!(step(64, 0, 0, &mut owed), 54);
        let d = ProfileCounters {
            refill_pages: 64,
            ..Default::default()
        };
        assert_eq!(
            step_of_delta(&d, None, ProfileBasis::Refills, &mut owed).ring_frees,
            64
        );
        assert_eq!(owed, 0);
    }

    #[test]
    fn steps_are_the_differences_between_samples() {
        let t = Instant::now();
        let samples = [
            sample(t, 0, 100, 100, 50),
            sample(t, 10, 164, 100, 50),
            sample(t, 20, 164, 292, 60),
        ];
        let p = profiles(&samples, ProfileBasis::Pages);
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
        assert!(profiles(&[sample(t, 0, 1, 1, 0)], ProfileBasis::Pages).is_empty());
        assert!(profiles(
            &[sample(t, 0, 5, 5, 0), sample(t, 10, 5, 5, 0)],
            ProfileBasis::Pages
        )
        .is_empty());
    }
}

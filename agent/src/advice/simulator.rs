//! Ring-size simulator: replays a recorded (or generated) burst profile through a model of
//! one page_pool — alloc cache + ptr_ring — for any ring size. Pure: no kernel, no I/O.
//!
//! # The model (net/core/page_pool.c)
//! - **alloc cache**: up to [`PP_ALLOC_CACHE_SIZE`] (128) entries, LIFO, consumer side only.
//! - **ptr_ring** of `ring_size` entries, FIFO between producers (recycles) and the consumer
//!   (refills). The kernel clamps `pool_size` to [`KERNEL_MAX_RING`] (16384).
//! - **allocation** (`page_pool_alloc_netmems`): cache non-empty → cache hit (kernel stat
//!   `fast`). Else `page_pool_refill_alloc_cache`: move up to [`PP_ALLOC_CACHE_REFILL`] (64)
//!   pages from the ring into the cache and serve one (`refill`); ring empty (`empty`) → slow
//!   path: `slow_batch` fresh pages (64 from the page allocator; 1 net_iov per call from a
//!   memory provider, `mp_dmabuf_devmem_alloc_netmems`), serve one, the rest into the cache
//!   (`slow`).
//! - **recycle**: direct (NAPI-local, `allow_direct`) → cache if below its size (`cached`), else
//!   the ring; non-direct (process context: `sock_devmem_dontneed`, TCP recvmsg freeing skbs)
//!   → the ring (`ring`); ring full → the page leaves the pool (`ring_full`: page allocator
//!   free, or `net_devmem_free_dmabuf` for devmem).
//!
//! # Time inside a step
//! A [`Step`] holds counts for one recording interval; their order inside it is unknown. The
//! simulator splits each step into `chunks_per_step` equal slices (counts spread with integer
//! rounding so that the slices add up exactly) and, in every slice, applies the **frees first,
//! then the allocations**. Frees-first is the optimistic order for allocations (a page freed in
//! a slice can serve an allocation of the same slice) and the pessimistic one for ring_full
//! (the ring is at its fullest when the frees arrive). More chunks make the order matter less;
//! `advice` brackets the answer with 1 and 64 chunks to see whether it depends on it.
//!
//! Direct frees are the exception: they happen in the consumer's own NAPI poll, interleaved
//! with its allocations packet by packet (XDP_DROP, GRO-merged skbs freed in NAPI). So in a
//! slice, after the ring frees, min(direct, allocs) direct frees and allocations are paired as
//! cache round trips (free into the cache, the next allocation takes it back: `cached` +
//! `fast`; when the cache is full, the first free of the run goes to the ring). The unmatched
//! rest then runs as ordinary direct frees or allocations. Without this, a 10 ms step of 2,000
//! XDP drops would overflow the 128-entry cache on paper though it never does in the kernel.
//!
//! Allocations of a slice are served in closed form (cache hits, then whole refills, then
//! whole slow-path calls), so a replay costs O(steps × chunks) and allocates nothing per step.
//!
//! # Not modelled (documented approximations)
//! - ptr_ring frees consumed slots in batches (`r->batch`, 16 on 64-byte cache lines), so the
//!   usable capacity dips by up to batch − 1 slots just after a refill. Ignored.
//! - NUMA waives (`alloc_stat waive`), pages not recyclable (`released_refcnt`), frag
//!   allocation (count page allocations, not frags), bulk recycling counting ring_full once per
//!   bulk (we count pages).
//! - A slow-path call that gets fewer than `slow_batch` pages (memory pressure).
use serde::{Deserialize, Serialize};

/// What one replay predicts: an output type, part of every advice.
pub use crate::snapshot::SimOutcome;

/// `PP_ALLOC_CACHE_SIZE`.
pub const PP_ALLOC_CACHE_SIZE: u32 = 128;
/// `PP_ALLOC_CACHE_REFILL`: pages per refill and per page-allocator slow-path call.
pub const PP_ALLOC_CACHE_REFILL: u32 = 64;
/// `page_pool_init`: `ring_qsize = min(pool_size, 16384)`.
pub const KERNEL_MAX_RING: u32 = 16384;
/// The ring the kernel builds when the driver passes `pool_size` 0.
pub const KERNEL_DEFAULT_RING: u32 = 1024;
/// Smallest ring size the advice considers.
pub const MIN_CANDIDATE: u32 = 64;
/// Default interleaving granularity inside a step.
pub const DEFAULT_CHUNKS: u32 = 16;

/// Counts in one time step; their order inside the step is unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Page allocations (`page_pool_alloc_netmems` calls, not frag calls).
    pub allocs: u64,
    /// Non-direct recycles: into the ring (or out of the pool when it is full).
    pub ring_frees: u64,
    /// Direct (NAPI-local) recycles: into the cache, overflow into the ring.
    pub direct_frees: u64,
}

/// A pool's burst profile: per-step counts, cheap to record and to replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub step_ns: u64,
    pub steps: Vec<Step>,
    /// Memory-provider pool (devmem, io_uring zcrx): the slow path is one page per call.
    pub provider: bool,
}

impl Profile {
    pub fn duration_ns(&self) -> u64 {
        self.step_ns.saturating_mul(self.steps.len() as u64)
    }

    pub fn duration_s(&self) -> f64 {
        self.duration_ns() as f64 / 1e9
    }

    /// Sum of all steps.
    pub fn totals(&self) -> Step {
        self.steps.iter().fold(Step::default(), |a, s| Step {
            allocs: a.allocs + s.allocs,
            ring_frees: a.ring_frees + s.ring_frees,
            direct_frees: a.direct_frees + s.direct_frees,
        })
    }

    /// Largest ring-free count in one step: how far one burst can overrun a ring.
    pub fn peak_ring_frees(&self) -> u64 {
        self.steps.iter().map(|s| s.ring_frees).max().unwrap_or(0)
    }
}

/// Pool parameters of one simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimParams {
    pub ring_size: u32,
    /// `PP_ALLOC_CACHE_SIZE`, 128.
    pub cache_size: u32,
    /// `PP_ALLOC_CACHE_REFILL`, 64.
    pub refill_batch: u32,
    /// Pages per slow-path call: 64 from the page allocator, 1 from a memory provider.
    pub slow_batch: u32,
    /// Pages in the ring at the start (clamped to `ring_size`).
    pub initial_ring_fill: u32,
    /// Pages in the alloc cache at the start (clamped to `cache_size`).
    pub initial_cache: u32,
    /// Interleaving granularity inside a step (0 is taken as 1).
    pub chunks_per_step: u32,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams::for_ring(KERNEL_DEFAULT_RING, false)
    }
}

impl SimParams {
    /// Kernel constants, an empty pool, [`DEFAULT_CHUNKS`] slices per step.
    pub fn for_ring(ring_size: u32, provider: bool) -> Self {
        SimParams {
            ring_size,
            cache_size: PP_ALLOC_CACHE_SIZE,
            refill_batch: PP_ALLOC_CACHE_REFILL,
            slow_batch: if provider { 1 } else { PP_ALLOC_CACHE_REFILL },
            initial_ring_fill: 0,
            initial_cache: 0,
            chunks_per_step: DEFAULT_CHUNKS,
        }
    }

    /// The same parameters with another ring size.
    pub fn with_ring(&self, ring_size: u32) -> Self {
        SimParams { ring_size, ..*self }
    }
}

/// The pool state a replay walks through.
#[derive(Clone)]
struct Pool {
    ring_size: u64,
    cache_size: u64,
    refill_batch: u64,
    slow_batch: u64,
    cache: u64,
    ring: u64,
    /// Pages out of the pool with the driver or application (allocated, not yet freed).
    held: u64,
    out: SimOutcome,
}

impl Pool {
    fn new(p: &SimParams) -> Self {
        let cache_size = u64::from(p.cache_size.max(1));
        let refill_batch = u64::from(p.refill_batch.clamp(1, p.cache_size.max(1)));
        let slow_batch = u64::from(p.slow_batch.clamp(1, p.cache_size.max(1)));
        let ring_size = u64::from(p.ring_size);
        let mut pool = Pool {
            ring_size,
            cache_size,
            refill_batch,
            slow_batch,
            cache: u64::from(p.initial_cache).min(cache_size),
            ring: u64::from(p.initial_ring_fill).min(ring_size),
            held: 0,
            out: SimOutcome::default(),
        };
        pool.note_peaks();
        pool
    }

    fn note_peaks(&mut self) {
        self.out.peak_ring_fill = self.out.peak_ring_fill.max(self.ring as u32);
        self.out.pages_in_pool_max = self
            .out
            .pages_in_pool_max
            .max(self.cache + self.ring + self.held);
    }

    /// `f` pages offered to the ring; the ones that do not fit leave the pool.
    fn offer_to_ring(&mut self, f: u64) {
        let fit = f.min(self.ring_size - self.ring);
        self.ring += fit;
        self.out.recycled_ring += fit;
        self.out.ring_full += f - fit;
    }

    fn free(&mut self, direct: u64, ring: u64) {
        // A free with nothing held is a page allocated before the profile began.
        self.held = self.held.saturating_sub(direct + ring);
        let cached = direct.min(self.cache_size - self.cache);
        self.cache += cached;
        self.out.recycled_cached += cached;
        self.offer_to_ring(direct - cached + ring);
        self.note_peaks();
    }

    /// One slice: ring frees, then NAPI-local direct frees paired with allocations, then the
    /// unmatched rest (see the module notes).
    fn slice(&mut self, allocs: u64, ring_frees: u64, direct_frees: u64) {
        self.free(0, ring_frees);
        let pairs = allocs.min(direct_frees);
        if pairs > 0 {
            if self.cache == self.cache_size {
                // The first free of the run finds the cache full; its allocation makes room.
                self.offer_to_ring(1);
                self.out.recycled_cached += pairs - 1;
                self.cache -= 1;
            } else {
                self.out.recycled_cached += pairs;
            }
            self.out.cache_hits += pairs;
            self.out.allocs += pairs;
            self.note_peaks();
        }
        self.free(direct_frees - pairs, 0);
        self.alloc(allocs - pairs);
    }

    fn alloc(&mut self, k: u64) {
        if k == 0 {
            return;
        }
        self.out.allocs += k;
        self.held += k;
        // Cache hits.
        let hits = k.min(self.cache);
        self.cache -= hits;
        self.out.cache_hits += hits;
        let mut k = k - hits;
        // Cache empty: refills of `refill_batch`, each serving one and leaving the rest.
        if k > 0 && self.ring > 0 {
            let served = k.min(self.ring);
            let refills = served.div_ceil(self.refill_batch);
            let taken = (refills * self.refill_batch).min(self.ring);
            self.ring -= taken;
            self.cache = taken - served;
            self.out.ring_refills += refills;
            self.out.ring_pages += taken;
            self.out.cache_hits += served - refills;
            k -= served;
        }
        // Cache and ring empty: slow-path calls of `slow_batch` pages.
        if k > 0 {
            let calls = k.div_ceil(self.slow_batch);
            let pages = calls * self.slow_batch;
            self.out.empty_refills += calls;
            self.out.slow_calls += calls;
            self.out.pages_from_slow += pages;
            self.out.cache_hits += k - calls;
            self.cache = pages - k;
        }
        self.note_peaks();
    }

    fn finish(mut self) -> SimOutcome {
        let o = &mut self.out;
        o.fast_path_rate = if o.allocs == 0 {
            1.0
        } else {
            (o.cache_hits + o.ring_refills) as f64 / o.allocs as f64
        };
        o.ring_hit_rate = if o.ring_refills + o.empty_refills == 0 {
            1.0
        } else {
            o.ring_refills as f64 / (o.ring_refills + o.empty_refills) as f64
        };
        o.recycled_rate = if o.allocs == 0 {
            1.0
        } else {
            1.0 - o.pages_from_slow.min(o.allocs) as f64 / o.allocs as f64
        };
        o.final_ring_fill = self.ring as u32;
        o.final_cache = self.cache as u32;
        self.out
    }
}

/// Share `i` of `c` of `total`, so that the `c` shares add up to `total` exactly.
fn share(total: u64, i: u64, c: u64) -> u64 {
    let t = u128::from(total);
    ((t * u128::from(i + 1) / u128::from(c)) - (t * u128::from(i) / u128::from(c))) as u64
}

/// A replay that advances one step at a time, its state carried over: what a simulated
/// source shows as it goes, and what [`simulate`] runs to the end.
#[derive(Clone)]
pub struct Replay {
    pool: Pool,
    chunks: u64,
}

impl Replay {
    pub fn new(p: &SimParams) -> Self {
        Replay {
            pool: Pool::new(p),
            chunks: u64::from(p.chunks_per_step.max(1)),
        }
    }

    pub fn step(&mut self, s: &Step) {
        let c = self.chunks;
        for i in 0..c {
            self.pool.slice(
                share(s.allocs, i, c),
                share(s.ring_frees, i, c),
                share(s.direct_frees, i, c),
            );
        }
    }

    /// Totals since the start, with the rates, as [`simulate`] reports them.
    pub fn outcome(&self) -> SimOutcome {
        self.pool.clone().finish()
    }

    /// Pages in the ring now.
    pub fn ring_fill(&self) -> u64 {
        self.pool.ring
    }

    /// Pages out of the pool now (with the driver or the application).
    pub fn held(&self) -> u64 {
        self.pool.held
    }
}

/// Replays `profile` through one pool with parameters `p`, from the state `p` gives.
pub fn simulate(profile: &Profile, p: &SimParams) -> SimOutcome {
    let mut replay = Replay::new(p);
    for s in &profile.steps {
        replay.step(s);
    }
    replay.pool.finish()
}

/// `p` with the cache and ring as one replay of `profile` leaves them: the steady state of a
/// pool that has been running this workload, rather than a pool created empty.
pub fn warmed(profile: &Profile, p: &SimParams) -> SimParams {
    let o = simulate(profile, p);
    SimParams {
        initial_ring_fill: o.final_ring_fill,
        initial_cache: o.final_cache,
        ..*p
    }
}

/// A replay from the steady state: one pass to warm up, the second one counted.
pub fn simulate_steady(profile: &Profile, p: &SimParams) -> SimOutcome {
    simulate(profile, &warmed(profile, p))
}

/// [`simulate`] at every size of `sizes`, other parameters from `base`.
pub fn sweep(profile: &Profile, base: &SimParams, sizes: &[u32]) -> Vec<(u32, SimOutcome)> {
    sizes
        .iter()
        .map(|&n| (n, simulate(profile, &base.with_ring(n))))
        .collect()
}

/// [`simulate_steady`] at every size of `sizes`.
pub fn sweep_steady(profile: &Profile, base: &SimParams, sizes: &[u32]) -> Vec<(u32, SimOutcome)> {
    sizes
        .iter()
        .map(|&n| (n, simulate_steady(profile, &base.with_ring(n))))
        .collect()
}

/// Powers of two from [`MIN_CANDIDATE`] (64) up to `max` inclusive.
pub fn candidate_sizes(max: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let mut n = MIN_CANDIDATE;
    while n <= max {
        v.push(n);
        match n.checked_mul(2) {
            Some(next) => n = next,
            None => break,
        }
    }
    v
}

/// Counters measured on the real pool over the same interval as the profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The ring size the pool really has.
    pub ring_size: u32,
    pub allocs: u64,
    /// Kernel `alloc_slow` (page allocator) or provider alloc calls.
    pub slow_calls: u64,
    /// `page_pool_state_hold` pages, when that tracepoint was counted.
    pub pages_from_slow: Option<u64>,
    pub ring_full: u64,
}

impl Measured {
    /// The counters a replay predicts, as if measured (for tests and what-ifs).
    pub fn from_outcome(ring_size: u32, o: &SimOutcome) -> Self {
        Measured {
            ring_size,
            allocs: o.allocs,
            slow_calls: o.slow_calls,
            pages_from_slow: Some(o.pages_from_slow),
            ring_full: o.ring_full,
        }
    }

    /// Per-page recycled share; pages estimated as calls × `slow_batch` without the tracepoint.
    pub fn recycled_rate(&self, slow_batch: u32) -> f64 {
        if self.allocs == 0 {
            return 1.0;
        }
        let pages = self
            .pages_from_slow
            .unwrap_or(self.slow_calls * u64::from(slow_batch.max(1)));
        1.0 - pages.min(self.allocs) as f64 / self.allocs as f64
    }
}

/// How far a replay at the measured ring size is from the measured counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    pub ring_size: u32,
    pub predicted: SimOutcome,
    /// |predicted − measured| of the per-page recycled rate, in rate units (0.01 = 1 point).
    pub recycled_rate_err: f64,
    /// |predicted − measured| slow calls over max(measured, floor).
    pub slow_calls_rel_err: f64,
    /// |predicted − measured| ring_full over max(measured, floor).
    pub ring_full_rel_err: f64,
    /// |predicted − measured| allocations over measured: profile and counters disagree on
    /// the traffic itself when this is large (different intervals, frag calls counted).
    pub allocs_rel_err: f64,
}

impl Calibration {
    /// Largest of the errors, the rate error scaled so that 1 point counts as 10%.
    pub fn worst(&self) -> f64 {
        (self.recycled_rate_err * 10.0)
            .max(self.slow_calls_rel_err)
            .max(self.ring_full_rel_err)
            .max(self.allocs_rel_err)
    }
}

fn rel_err(pred: u64, meas: u64, floor: f64) -> f64 {
    (pred as f64 - meas as f64).abs() / (meas as f64).max(floor).max(1.0)
}

/// Replays `profile` at the measured ring size (other parameters, including the initial
/// state, from `base`) and compares with `measured`. Counts below 0.1% of the allocations are
/// compared against that floor, so that 3 vs 1 ring_full out of a million is not a 200% error.
pub fn calibrate(profile: &Profile, base: &SimParams, measured: &Measured) -> Calibration {
    let predicted = simulate(profile, &base.with_ring(measured.ring_size));
    let floor = measured.allocs as f64 * 0.001;
    Calibration {
        ring_size: measured.ring_size,
        predicted,
        recycled_rate_err: (predicted.recycled_rate - measured.recycled_rate(base.slow_batch))
            .abs(),
        slow_calls_rel_err: rel_err(predicted.slow_calls, measured.slow_calls, floor),
        ring_full_rel_err: rel_err(predicted.ring_full, measured.ring_full, floor),
        allocs_rel_err: rel_err(predicted.allocs, measured.allocs, 0.0),
    }
}

/// The size of `sizes` whose replay best matches `measured` (smallest [`Calibration::worst`]):
/// tells whether the pool really runs with the ring size it reports (e.g. virtio-net keeps
/// the pool it built at probe after `ethtool -G`).
pub fn best_fit_size(
    profile: &Profile,
    base: &SimParams,
    measured: &Measured,
    sizes: &[u32],
) -> Option<(u32, Calibration)> {
    sizes
        .iter()
        .map(|&n| {
            let m = Measured {
                ring_size: n,
                ..*measured
            };
            (n, calibrate(profile, base, &m))
        })
        .min_by(|a, b| a.1.worst().total_cmp(&b.1.worst()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prof(steps: &[(u64, u64, u64)]) -> Profile {
        Profile {
            step_ns: 10_000_000,
            steps: steps
                .iter()
                .map(|&(allocs, ring_frees, direct_frees)| Step {
                    allocs,
                    ring_frees,
                    direct_frees,
                })
                .collect(),
            provider: false,
        }
    }

    fn params(ring: u32) -> SimParams {
        SimParams {
            chunks_per_step: 1,
            ..SimParams::for_ring(ring, false)
        }
    }

    #[test]
    fn sixty_four_allocs_from_empty_pool_is_one_slow_call() {
        let o = simulate(&prof(&[(64, 0, 0)]), &params(1024));
        assert_eq!(o.allocs, 64);
        assert_eq!(o.slow_calls, 1);
        assert_eq!(o.empty_refills, 1);
        assert_eq!(o.cache_hits, 63);
        assert_eq!(o.ring_refills, 0);
        assert_eq!(o.pages_from_slow, 64);
        assert_eq!(o.final_cache, 0);
        // Per call the kernel calls this 63/64 fast; per page nothing was recycled.
        assert_eq!(o.fast_path_rate, 63.0 / 64.0);
        assert_eq!(o.recycled_rate, 0.0);
        assert_eq!(o.ring_hit_rate, 0.0);
        assert_eq!(o.pages_in_pool_max, 64);
    }

    #[test]
    fn sixty_five_allocs_need_a_second_slow_call() {
        let o = simulate(&prof(&[(65, 0, 0)]), &params(1024));
        assert_eq!(o.slow_calls, 2);
        assert_eq!(o.cache_hits, 63);
        assert_eq!(o.pages_from_slow, 128);
        assert_eq!(o.final_cache, 63);
        assert_eq!(o.pages_in_pool_max, 128);
    }

    #[test]
    fn provider_slow_path_is_one_page_per_call() {
        let p = SimParams {
            chunks_per_step: 1,
            ..SimParams::for_ring(1024, true)
        };
        let o = simulate(&prof(&[(100, 0, 0)]), &p);
        assert_eq!(o.slow_calls, 100);
        assert_eq!(o.pages_from_slow, 100);
        assert_eq!(o.cache_hits, 0);
        assert_eq!(o.fast_path_rate, 0.0);
        assert_eq!(o.recycled_rate, 0.0);
    }

    #[test]
    fn ring_free_burst_overflows_by_exactly_the_excess() {
        let n = 256;
        let o = simulate(&prof(&[(0, u64::from(n) + 10, 0)]), &params(n));
        assert_eq!(o.recycled_ring, 256);
        assert_eq!(o.ring_full, 10);
        assert_eq!(o.peak_ring_fill, 256);
    }

    #[test]
    fn refill_of_64_from_a_ring_holding_200() {
        let p = SimParams {
            initial_ring_fill: 200,
            ..params(1024)
        };
        let o = simulate(&prof(&[(1, 0, 0)]), &p);
        assert_eq!(o.ring_refills, 1);
        assert_eq!(o.ring_pages, 64);
        assert_eq!(o.final_ring_fill, 136);
        assert_eq!(o.final_cache, 63);
        assert_eq!(o.slow_calls, 0);
        // 200 allocations: 4 refills (64, 64, 64, 8), 196 cache hits, ring drained, no slow.
        let o = simulate(&prof(&[(200, 0, 0)]), &p);
        assert_eq!(o.ring_refills, 4);
        assert_eq!(o.cache_hits, 196);
        assert_eq!(o.ring_pages, 200);
        assert_eq!((o.final_ring_fill, o.final_cache), (0, 0));
        assert_eq!(o.slow_calls, 0);
        // 201: the 201st finds cache and ring empty → one slow call, 63 left in the cache.
        let o = simulate(&prof(&[(201, 0, 0)]), &p);
        assert_eq!((o.ring_refills, o.empty_refills, o.slow_calls), (4, 1, 1));
        assert_eq!(o.final_cache, 63);
        assert_eq!(o.ring_hit_rate, 0.8);
    }

    #[test]
    fn direct_frees_fill_the_cache_then_the_ring_then_leave() {
        // Cache 128 + ring 64 = 192 places; 200 direct frees → 8 leave the pool.
        let o = simulate(&prof(&[(0, 0, 200)]), &params(64));
        assert_eq!(o.recycled_cached, 128);
        assert_eq!(o.recycled_ring, 64);
        assert_eq!(o.ring_full, 8);
        // Then 130 allocations: 128 cache hits, one refill (64 from the ring), one more hit.
        let p = SimParams {
            initial_cache: 128,
            initial_ring_fill: 64,
            ..params(64)
        };
        let o = simulate(&prof(&[(130, 0, 0)]), &p);
        assert_eq!((o.cache_hits, o.ring_refills), (129, 1));
        assert_eq!((o.final_cache, o.final_ring_fill), (62, 0));
    }

    #[test]
    fn frees_of_a_slice_serve_allocations_of_the_same_slice() {
        // One step: 64 ring frees and 64 allocs. Frees first → all from the ring, no slow.
        let p = SimParams {
            initial_cache: 0,
            ..params(1024)
        };
        let o = simulate(&prof(&[(64, 64, 0)]), &p);
        assert_eq!(o.slow_calls, 0);
        assert_eq!(o.ring_refills, 1);
        assert_eq!(o.recycled_rate, 1.0);
        // With two chunks: 32 frees, 32 allocs (one refill of 32), 32 frees, 32 allocs.
        let o = simulate(
            &prof(&[(64, 64, 0)]),
            &SimParams {
                chunks_per_step: 2,
                ..p
            },
        );
        assert_eq!(o.ring_refills, 2);
        assert_eq!(o.slow_calls, 0);
    }

    #[test]
    fn napi_local_frees_are_cache_round_trips() {
        // 2,000 XDP drops in one step: never more than the cache, nothing to the ring.
        let p = SimParams {
            initial_cache: 10,
            ..params(256)
        };
        let o = simulate(&prof(&[(2000, 0, 2000)]), &p);
        assert_eq!((o.cache_hits, o.recycled_cached), (2000, 2000));
        assert_eq!((o.recycled_ring, o.ring_full, o.slow_calls), (0, 0, 0));
        assert_eq!(o.final_cache, 10);
        // A full cache: the first free of the run goes to the ring, then round trips.
        let p = SimParams {
            initial_cache: 128,
            ..params(256)
        };
        let o = simulate(&prof(&[(100, 0, 100)]), &p);
        assert_eq!(
            (o.recycled_ring, o.recycled_cached, o.cache_hits),
            (1, 99, 100)
        );
        assert_eq!((o.final_cache, o.final_ring_fill), (127, 1));
        // Unmatched allocations after the pairs: 30 more from an empty pool → one slow call.
        let o = simulate(&prof(&[(130, 0, 100)]), &params(256));
        assert_eq!((o.slow_calls, o.cache_hits), (1, 129));
    }

    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 7, 64, 1000, 12345] {
            for c in [1u64, 3, 16, 64] {
                assert_eq!((0..c).map(|i| share(total, i, c)).sum::<u64>(), total);
            }
        }
    }

    #[test]
    fn pages_leave_the_pool_on_ring_full() {
        // 256 allocated (4 slow calls), all freed to a ring of 64: 192 leave.
        let o = simulate(&prof(&[(256, 0, 0), (0, 256, 0)]), &params(64));
        assert_eq!(o.pages_from_slow, 256);
        assert_eq!(o.ring_full, 192);
        assert_eq!(o.pages_in_pool_max, 256);
        assert_eq!(o.final_ring_fill, 64);
    }

    #[test]
    fn candidates_are_powers_of_two() {
        assert_eq!(candidate_sizes(1024), vec![64, 128, 256, 512, 1024]);
        assert_eq!(candidate_sizes(1000), vec![64, 128, 256, 512]);
        assert_eq!(candidate_sizes(16384).len(), 9);
        assert!(candidate_sizes(32).is_empty());
        assert_eq!(candidate_sizes(u32::MAX).last(), Some(&(1 << 31)));
    }

    #[test]
    fn sweep_matches_single_runs() {
        let p = prof(&[(500, 300, 100), (100, 900, 0), (800, 0, 50)]);
        let base = SimParams::default();
        let s = sweep(&p, &base, &[64, 1024]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].1, simulate(&p, &base.with_ring(1024)));
        assert_eq!(s[0].0, 64);
    }

    /// A small deterministic generator (xorshift) for bursty profiles: random scale, bursts
    /// that free everything held, and a random share of direct frees.
    fn bursty(seed: u64, steps: usize, provider: bool) -> Profile {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let scale = [10u64, 100, 300, 3000][(next() % 4) as usize];
        let mut held: u64 = 0;
        let mut v = Vec::with_capacity(steps);
        for _ in 0..steps {
            let allocs = next() % scale;
            held += allocs;
            let free = if next() % 5 == 0 {
                held
            } else {
                held.min(next() % scale)
            };
            held -= free;
            let direct = match next() % 3 {
                0 => 0,
                1 => free,
                _ => next() % (free + 1),
            };
            v.push(Step {
                allocs,
                ring_frees: free - direct,
                direct_frees: direct,
            });
        }
        Profile {
            step_ns: 1_000_000,
            steps: v,
            provider,
        }
    }

    /// From the same start a larger ring is never worse. From each size's own steady state
    /// (a warm-up pass) the pools start with different page counts and the slow path's 64-page
    /// batches can fall one call apart: there the check allows one slow-path call.
    /// Checked over 3,000 seeds while writing this (cold: no exception; steady: 3 comparisons
    /// of ~54,000 one call apart, ring_full never worse); 150 here keep the test quick.
    #[test]
    fn a_larger_ring_never_predicts_worse() {
        for seed in 1..150u64 {
            for provider in [false, true] {
                let p = bursty(seed, 100, provider);
                for chunks in [1, 3, 16] {
                    let base = SimParams {
                        chunks_per_step: chunks,
                        ..SimParams::for_ring(64, provider)
                    };
                    for steady in [false, true] {
                        let sizes = candidate_sizes(KERNEL_MAX_RING);
                        let runs = if steady {
                            sweep_steady(&p, &base, &sizes)
                        } else {
                            sweep(&p, &base, &sizes)
                        };
                        let slack = u64::from(steady);
                        for w in runs.windows(2) {
                            let (small, large) = (&w[0].1, &w[1].1);
                            let at = format!(
                                "seed {seed} provider {provider} chunks {chunks} steady {steady} \
                                 {} → {}",
                                w[0].0, w[1].0
                            );
                            assert!(large.ring_full <= small.ring_full, "ring_full {at}");
                            assert!(large.slow_calls <= small.slow_calls + slack, "slow {at}");
                            assert!(
                                large.pages_from_slow
                                    <= small.pages_from_slow + slack * u64::from(base.slow_batch),
                                "pages {at}"
                            );
                            if !steady {
                                assert!(large.recycled_rate >= small.recycled_rate, "rate {at}");
                                assert!(large.fast_path_rate >= small.fast_path_rate, "fast {at}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn calibration_is_exact_at_the_measured_size() {
        let p = bursty(42, 300, false);
        let base = SimParams::for_ring(1024, false);
        let truth = simulate(&p, &base);
        let m = Measured::from_outcome(1024, &truth);
        let c = calibrate(&p, &base, &m);
        assert_eq!(c.predicted, truth);
        assert_eq!(c.worst(), 0.0);
        // A pool that is really at 256 while we believe 1024: the replay says so.
        let truth256 = simulate(&p, &base.with_ring(256));
        let wrong = calibrate(&p, &base, &Measured::from_outcome(1024, &truth256));
        assert!(wrong.worst() > 0.05, "{wrong:?}");
        let (n, fit) = best_fit_size(
            &p,
            &base,
            &Measured::from_outcome(1024, &truth256),
            &candidate_sizes(16384),
        )
        .unwrap();
        assert_eq!(n, 256);
        assert_eq!(fit.worst(), 0.0);
    }

    #[test]
    fn measured_rate_without_tracepoint_estimates_pages() {
        let m = Measured {
            ring_size: 1024,
            allocs: 6400,
            slow_calls: 10,
            pages_from_slow: None,
            ring_full: 0,
        };
        assert_eq!(m.recycled_rate(64), 0.9);
        assert_eq!(m.recycled_rate(1), 1.0 - 10.0 / 6400.0);
    }

    #[test]
    fn empty_profile_is_harmless() {
        let o = simulate(&Profile::default(), &SimParams::default());
        assert_eq!(o.allocs, 0);
        assert_eq!(o.fast_path_rate, 1.0);
        assert_eq!(o.recycled_rate, 1.0);
        let z = SimParams {
            ring_size: 0,
            chunks_per_step: 0,
            ..SimParams::default()
        };
        let o = simulate(&prof(&[(10, 10, 10)]), &z);
        assert_eq!(o.ring_full, 10);
    }
}

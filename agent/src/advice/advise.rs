//! Ring-size advice: a pure function of a burst profile and what is known about the pool.
//!
//! # The rule
//! Every candidate ring size (powers of two from 64 to the kernel's maximum, 16384) is replayed
//! through [`super::simulator`] from its own steady state ([`sim::simulate_steady`]). A size is
//! **good** when
//! 1. its per-page recycled rate (the share of allocations served by a recycled page) reaches
//!    the target, and
//! 2. it removes most ring_full: at most 10% of the ring_full the current size predicts, or at
//!    most 0.1% of all frees (so a healthy pool with a stray overflow still counts as good).
//!
//! Then:
//! - **Grow(n)**: the current size is not good; `n` is the smallest good candidate above it.
//! - If no candidate up to the maximum is good: **Grow(max)** with Low confidence when the
//!   maximum still improves things, and the evidence says which size would be needed (replayed
//!   up to 4 × the maximum) — that needs a kernel change. Already at the maximum: **Keep**,
//!   knob [`Knob::KernelChange`].
//! - **Keep**: the current size is good and no shrink qualifies.
//! - **Shrink(n)**: the current size is good, the smallest candidate matching it (recycled rate
//!   within 0.1 point, ring_full and slow calls within 0.1% of the traffic) times 2 for
//!   headroom is at most half the current size, and the memory given back —
//!   (current − n) × page × queues — is at least 4 MiB. Never for zero-copy providers: their
//!   buffers are pinned by the dmabuf whatever the ring size. This is the thousands-of-queues
//!   warning: ring memory is per queue.
//!
//! The target applies to the per-page rate, not to the kernel's per-call fast-path rate: a
//! page-allocator slow call brings 64 pages, so the per-call rate never falls below 63/64 and
//! a 0.99 target on it would pass a pool taking a third of its pages from the allocator. For
//! memory-provider pools (one page per call) the two rates are the same number.
use serde::{Deserialize, Serialize};

use super::simulator::{self as sim, Profile, SimOutcome, SimParams};
use crate::{
    snapshot::{
        advice::{ms_per_s, queues_text},
        Advice, Confidence, ConfidenceLevel, CurvePoint, Knob, Verdict,
    },
    units::{bytes, pct},
};

/// Shrink only when it gives back at least this much across the device's queues.
pub const SHRINK_MIN_SAVING_BYTES: u64 = 4 << 20;
/// Ring-full at or below this share of all frees counts as "removed".
pub const RING_FULL_TOLERANCE: f64 = 0.001;
/// A smaller size "predicts the same" when its recycled rate is within this of the current.
pub const RATE_TOLERANCE: f64 = 0.001;

/// Default cost of one page-allocator slow-path call (64 pages bulk-allocated and DMA-mapped):
/// a few µs to tens of µs on bare metal. The VM lab under TCG measured p50 ≈ 0.5 ms; use the
/// measured slow-path latency (p50 of `__page_pool_alloc_netmems_slow`) when there is one.
pub const SLOW_CALL_NS_DEFAULT: f64 = 20_000.0;
/// Default cost of one memory-provider allocation (`mp_dmabuf_devmem_alloc_netmems`: one
/// net_iov from the dmabuf's gen_pool).
/// An assumption (a bitmap search in the gen_pool); replace with the measured latency.
pub const PROVIDER_ALLOC_NS_DEFAULT: f64 = 1_000.0;
/// Default cost of one page leaving a page-allocator pool on ring full (DMA unmap + put_page).
pub const RING_FULL_NS_DEFAULT: f64 = 1_000.0;
/// Default cost of one devmem net_iov leaving on ring full (`net_devmem_free_dmabuf`: a walk of
/// the gen_pool's chunk list, longer the more chunks the dmabuf has). An assumption, twice the
/// provider allocation; replace with the measured `net_devmem_free_dmabuf` latency.
pub const DEVMEM_FREE_NS_DEFAULT: f64 = 2_000.0;

/// What is known about the pool besides its profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolContext {
    pub ifname: Option<String>,
    pub driver: Option<String>,
    /// The ring size the pool has now.
    pub ring_size: u32,
    /// Bytes per pool buffer (PAGE_SIZE << order; the net_iov size for devmem).
    pub page_bytes: u64,
    /// Pools (rx queues) on the device that one setting changes together.
    pub queues_on_device: u32,
    /// Memory-provider pool (devmem, io_uring zcrx): buffers pinned by the provider anyway.
    pub zero_copy_provider: bool,
    /// 16384 in current kernels.
    pub kernel_max_ring: u32,
    /// Cost of one slow-path call (measured p50 when available).
    pub slow_call_ns: f64,
    /// Cost of one page leaving the pool on ring full.
    pub ring_full_ns: f64,
}

impl PoolContext {
    /// A context with the default costs for the pool's kind and one queue of 4 KiB pages.
    pub fn new(ring_size: u32, zero_copy_provider: bool) -> Self {
        PoolContext {
            ifname: None,
            driver: None,
            ring_size,
            page_bytes: 4096,
            queues_on_device: 1,
            zero_copy_provider,
            kernel_max_ring: sim::KERNEL_MAX_RING,
            slow_call_ns: if zero_copy_provider {
                PROVIDER_ALLOC_NS_DEFAULT
            } else {
                SLOW_CALL_NS_DEFAULT
            },
            ring_full_ns: if zero_copy_provider {
                DEVMEM_FREE_NS_DEFAULT
            } else {
                RING_FULL_NS_DEFAULT
            },
        }
    }

    fn name(&self) -> String {
        match &self.ifname {
            Some(n) => format!("{n}'s ring"),
            None => "the pool's ring".to_string(),
        }
    }
}

/// Which knob sets a ring of `size` on this driver.
pub fn knob_for(driver: Option<&str>, dev: Option<&str>, size: u32, max: u32) -> Knob {
    if size > max {
        return Knob::KernelChange;
    }
    match driver.map(|d| d.replace('-', "_")).as_deref() {
        Some("veth") => Knob::DriverFixed,
        Some("virtio_net") => Knob::DeviceQueueSize,
        Some("gve" | "mlx5_core" | "bnxt_en" | "ice" | "idpf" | "mlx4_en" | "fbnic") => match dev {
            Some(d) => Knob::EthtoolRx { dev: d.to_string() },
            None => Knob::Unknown,
        },
        _ => Knob::Unknown,
    }
}

/// `ethtool -G rx` value that gives a pool of `size` on `driver`.
pub fn ethtool_rx_value(driver: Option<&str>, size: u32) -> u32 {
    match driver {
        // GVE_PAGE_POOL_SIZE_MULTIPLIER: pool_size = 4 × rx_desc_cnt.
        Some("gve") => (size / 4).max(1),
        _ => size,
    }
}

/// The knob as a person types it.
pub fn knob_text(knob: &Knob, driver: Option<&str>, size: u32) -> String {
    match knob {
        Knob::EthtoolRx { dev } => {
            let n = ethtool_rx_value(driver, size);
            if driver == Some("gve") {
                // Said so that "rx 4096" does not read as the pool's current size.
                format!(
                    "ethtool -G {dev} rx {n} ({n} rx descriptors; gve's pool = 4 × rx = {size})"
                )
            } else {
                format!("ethtool -G {dev} rx {n}")
            }
        }
        Knob::DeviceQueueSize => {
            let cap = if size > 1024 {
                "; QEMU allows at most 1024"
            } else {
                ""
            };
            format!("QEMU rx_queue_size={size} (virtio-net builds its pool at probe{cap})")
        }
        Knob::DriverFixed => "none: the driver fixes the ring (veth: VETH_RING_SIZE 256)".into(),
        Knob::KernelChange => format!(
            "none: page_pool clamps pool_size to {} (needs a kernel change)",
            sim::KERNEL_MAX_RING
        ),
        Knob::Unknown => "unknown for this driver: look for its rx ring parameter".into(),
    }
}

/// Memory the rings of all queues can hold in addition when going from `from` to `to`.
fn ring_bytes_delta(ctx: &PoolContext, from: u32, to: u32) -> i64 {
    (i64::from(to) - i64::from(from))
        .saturating_mul(ctx.page_bytes as i64)
        .saturating_mul(i64::from(ctx.queues_on_device.max(1)))
}

/// Costs of a replay, ns per second of profile.
fn cost_ns_per_s(o: &SimOutcome, ctx: &PoolContext, secs: f64) -> (f64, f64) {
    (
        SimOutcome::per_s(o.slow_calls, secs) * ctx.slow_call_ns,
        SimOutcome::per_s(o.ring_full, secs) * ctx.ring_full_ns,
    )
}

struct Judge {
    target: f64,
    ring_full_ok: f64,
}

impl Judge {
    fn good(&self, o: &SimOutcome) -> bool {
        o.recycled_rate >= self.target && o.ring_full as f64 <= self.ring_full_ok
    }
}

/// [`advise_with`] without measured counters (confidence at most Medium).
pub fn advise(profile: &Profile, ctx: &PoolContext, target_fast_path: f64) -> Advice {
    advise_with(profile, ctx, target_fast_path, None)
}

/// The advice for one pool; `measured` (counters over the same interval at the current size)
/// calibrates the model and sets the confidence.
pub fn advise_with(
    profile: &Profile,
    ctx: &PoolContext,
    target_fast_path: f64,
    measured: Option<&sim::Measured>,
) -> Advice {
    let provider = profile.provider || ctx.zero_copy_provider;
    let base = SimParams::for_ring(ctx.ring_size, provider);
    let max = ctx.kernel_max_ring.max(sim::MIN_CANDIDATE);
    let frees = {
        let t = profile.totals();
        t.ring_frees + t.direct_frees
    };
    // 1. Every replay the rule needs, first.
    let replays = Replays::run(profile, &base, max, frees, target_fast_path);
    // 2. The verdict, from the replays alone.
    let d = decide(profile, ctx, &replays, max);
    // 3. The numbers behind it, in words.
    let evidence = evidence(profile, ctx, &replays, &d, max, provider);
    let secs = profile.duration_s();
    let (cur_slow, cur_rf) = cost_ns_per_s(&replays.current, ctx, secs);
    let (new_slow, new_rf) = cost_ns_per_s(&d.predicted, ctx, secs);
    let knob = knob_for(
        ctx.driver.as_deref(),
        ctx.ifname.as_deref(),
        d.knob_size,
        max,
    );
    let knob_text = knob_text(&knob, ctx.driver.as_deref(), d.knob_size);
    let confidence = confidence(
        profile,
        &base,
        d.recommended,
        &replays.judge,
        measured,
        d.low_reason,
    );
    Advice {
        verdict: d.verdict,
        current_size: ctx.ring_size,
        recommended_size: d.recommended,
        current: replays.current,
        predicted: d.predicted,
        slow_time_saved_ns_per_s: (cur_slow - new_slow) + (cur_rf - new_rf),
        extra_pinned_bytes: if provider {
            0
        } else {
            ring_bytes_delta(ctx, ctx.ring_size, d.recommended)
        },
        pinned_anyway: provider,
        knob,
        confidence,
        evidence,
        target: target_fast_path,
        queues: ctx.queues_on_device.max(1),
        pool_name: ctx.name(),
        knob_text,
        profile_s: secs,
        resize_suspect: None,
        curve: curve(&replays, ctx, provider),
    }
}

/// The advice curve: every candidate replayed, and the current size where it is not one.
fn curve(r: &Replays, ctx: &PoolContext, provider: bool) -> Vec<CurvePoint> {
    let point = |ring_size: u32, o: &SimOutcome| CurvePoint {
        ring_size,
        recycled_rate: o.recycled_rate,
        ring_bytes: if provider {
            0
        } else {
            u64::from(ring_size)
                .saturating_mul(ctx.page_bytes)
                .saturating_mul(u64::from(ctx.queues_on_device.max(1)))
        },
    };
    let mut points: Vec<CurvePoint> = r.runs.iter().map(|(n, o)| point(*n, o)).collect();
    if !points.iter().any(|p| p.ring_size == ctx.ring_size) {
        points.push(point(ctx.ring_size, &r.current));
    }
    points.extend(r.beyond.iter().map(|(n, o)| point(*n, o)));
    points.sort_by_key(|p| p.ring_size);
    points
}

/// The replays one advice reads: the current size, every candidate, and (only when no
/// candidate up to the kernel's maximum is good) sizes past the maximum.
struct Replays {
    current: SimOutcome,
    /// Candidate sizes, smallest first.
    runs: Vec<(u32, SimOutcome)>,
    /// The first size past the maximum (2×, 4×) that would be good, when none up to it is.
    beyond: Option<(u32, SimOutcome)>,
    judge: Judge,
}

impl Replays {
    fn run(profile: &Profile, base: &SimParams, max: u32, frees: u64, target: f64) -> Self {
        let current = sim::simulate_steady(profile, base);
        let runs = sim::sweep_steady(profile, base, &sim::candidate_sizes(max));
        let judge = Judge {
            target,
            ring_full_ok: (frees as f64 * RING_FULL_TOLERANCE).max(0.1 * current.ring_full as f64),
        };
        let stuck = !judge.good(&current)
            && !runs
                .iter()
                .any(|(n, o)| *n > base.ring_size && judge.good(o));
        let beyond = if stuck {
            [2u32, 4]
                .iter()
                .filter_map(|m| max.checked_mul(*m))
                .map(|n| (n, sim::simulate_steady(profile, &base.with_ring(n))))
                .find(|(_, o)| judge.good(o))
        } else {
            None
        };
        Self {
            current,
            runs,
            beyond,
            judge,
        }
    }
}

/// What the rule decided.
struct Decision {
    verdict: Verdict,
    recommended: u32,
    /// The replay at the recommended size.
    predicted: SimOutcome,
    /// The size the knob is written for (past the maximum when only a kernel change helps).
    knob_size: u32,
    /// Why confidence is low, when the rule could not reach the target.
    low_reason: Option<String>,
    /// Growing: the largest candidate below the recommended size (not enough).
    below: Option<(u32, SimOutcome)>,
}

/// The rule of the module doc, on replays already made.
fn decide(profile: &Profile, ctx: &PoolContext, r: &Replays, max: u32) -> Decision {
    let cur_size = ctx.ring_size;
    let totals = profile.totals();
    let traffic = totals.allocs.max(totals.ring_frees + totals.direct_frees);
    let keep = Decision {
        verdict: Verdict::Keep,
        recommended: cur_size,
        predicted: r.current,
        knob_size: cur_size,
        low_reason: None,
        below: None,
    };
    if r.judge.good(&r.current) {
        return match shrink_candidate(profile, ctx, &r.runs, &r.current, &r.judge, traffic) {
            Some((n, o)) => Decision {
                verdict: Verdict::Shrink,
                recommended: n,
                predicted: o,
                knob_size: n,
                ..keep
            },
            None => keep,
        };
    }
    if let Some(&(n, o)) = r
        .runs
        .iter()
        .find(|(n, o)| *n > cur_size && r.judge.good(o))
    {
        return Decision {
            verdict: Verdict::Grow,
            recommended: n,
            predicted: o,
            knob_size: n,
            below: r.runs.iter().rev().find(|(m, _)| *m < n).copied(),
            ..keep
        };
    }
    // Nothing up to the kernel's maximum reaches the target.
    let at_max = r.runs.last().map(|r| r.1).unwrap_or(r.current);
    let better = at_max.recycled_rate > r.current.recycled_rate + RATE_TOLERANCE
        || (at_max.ring_full as f64) < 0.9 * r.current.ring_full as f64;
    if max > cur_size && better {
        Decision {
            verdict: Verdict::Grow,
            recommended: max,
            predicted: at_max,
            knob_size: max,
            low_reason: Some(format!(
                "even the kernel's maximum ring ({max}) does not reach the target"
            )),
            below: None,
        }
    } else {
        Decision {
            knob_size: if r.beyond.is_some() {
                max.saturating_mul(2)
            } else {
                cur_size
            },
            low_reason: Some(format!(
                "the ring is at the kernel's maximum ({max}) or a larger one would not help"
            )),
            ..keep
        }
    }
}

/// The numbers behind a decision, in the order a person reads them: the profile, now, why
/// smaller sizes fall short (or what only a kernel change would do), the prediction, time,
/// memory.
fn evidence(
    profile: &Profile,
    ctx: &PoolContext,
    r: &Replays,
    d: &Decision,
    max: u32,
    provider: bool,
) -> Vec<String> {
    let cur_size = ctx.ring_size;
    let secs = profile.duration_s();
    let totals = profile.totals();
    let mut evidence = vec![
        format!(
            "profile: {} steps of {:.1} ms ({:.1} s): {:.0} allocs/s, {:.0} ring frees/s, {:.0} \
             direct frees/s; largest ring-free burst {} in one step",
            profile.steps.len(),
            profile.step_ns as f64 / 1e6,
            secs,
            SimOutcome::per_s(totals.allocs, secs),
            SimOutcome::per_s(totals.ring_frees, secs),
            SimOutcome::per_s(totals.direct_frees, secs),
            profile.peak_ring_frees()
        ),
        describe(cur_size, &r.current, secs, provider, "now"),
    ];
    if let Some((below, ob)) = &d.below {
        evidence.push(format!(
            "{below} is not enough: recycled {} (target {}), ring full {:.0}/s",
            pct(ob.recycled_rate),
            pct(r.judge.target),
            SimOutcome::per_s(ob.ring_full, secs)
        ));
    }
    if d.low_reason.is_some() {
        evidence.push(match r.beyond {
            Some((n, o)) => format!(
                "a ring of {n} would reach it (recycled {}): past the kernel's {max} clamp, \
                 needs a kernel change",
                pct(o.recycled_rate)
            ),
            None => format!(
                "not even {} would reach the target: the workload holds more buffers than a \
                 ring can take back; the fix is in how the application returns them",
                max.saturating_mul(4)
            ),
        });
    }
    if d.recommended != cur_size {
        evidence.push(describe(
            d.recommended,
            &d.predicted,
            secs,
            provider,
            "predicted",
        ));
        let (cur_slow, cur_rf) = cost_ns_per_s(&r.current, ctx, secs);
        let (new_slow, new_rf) = cost_ns_per_s(&d.predicted, ctx, secs);
        evidence.push(format!(
            "time: slow path {} → {}, ring-full frees {} → {} (at {:.1} µs per {}, {:.1} µs per \
             ring-full free)",
            ms_per_s(cur_slow),
            ms_per_s(new_slow),
            ms_per_s(cur_rf),
            ms_per_s(new_rf),
            ctx.slow_call_ns / 1e3,
            if provider {
                "provider alloc"
            } else {
                "slow-path call"
            },
            ctx.ring_full_ns / 1e3
        ));
        if cur_slow + cur_rf > 1e9 {
            evidence.push(
                "that is more than one CPU's worth every second: the queue cannot keep up, \
                 whatever the exact per-call costs"
                    .into(),
            );
        }
    }
    let q = ctx.queues_on_device.max(1);
    if provider {
        evidence.push(
            "zero-copy provider: the buffers belong to the dmabuf and are pinned whatever the \
             ring size, so a bigger ring costs no new memory"
                .into(),
        );
    } else if max > cur_size {
        evidence.push(format!(
            "memory: a ring of {max} would let the pool hold up to {} more ({} pages × {} × {})",
            bytes(ring_bytes_delta(ctx, cur_size, max) as u64),
            max - cur_size,
            bytes(ctx.page_bytes),
            queues_text(q)
        ));
    }
    if d.verdict == Verdict::Shrink {
        let n = d.recommended;
        evidence.push(format!(
            "a ring of {n} (twice the smallest size that predicts the same) gives back up to {} \
             across {}",
            bytes(ring_bytes_delta(ctx, cur_size, d.recommended).unsigned_abs()),
            queues_text(q)
        ));
    }
    evidence
}

fn describe(size: u32, o: &SimOutcome, secs: f64, provider: bool, what: &str) -> String {
    format!(
        "at {size} ({what}): recycled {} of allocations (kernel fast path {}), {:.0} {}/s, \
         {:.0} ring-full frees/s, ring peak {}/{size}",
        pct(o.recycled_rate),
        pct(o.fast_path_rate),
        SimOutcome::per_s(o.slow_calls, secs),
        if provider {
            "provider allocs"
        } else {
            "slow-path calls"
        },
        SimOutcome::per_s(o.ring_full, secs),
        o.peak_ring_fill
    )
}

/// The Shrink candidate, if one qualifies (see the module rule).
fn shrink_candidate(
    profile: &Profile,
    ctx: &PoolContext,
    runs: &[(u32, SimOutcome)],
    current: &SimOutcome,
    judge: &Judge,
    traffic: u64,
) -> Option<(u32, SimOutcome)> {
    if profile.provider || ctx.zero_copy_provider {
        return None;
    }
    let slack = (traffic as f64 * RING_FULL_TOLERANCE).max(1.0);
    let same = |o: &SimOutcome| {
        judge.good(o)
            && o.recycled_rate >= current.recycled_rate - RATE_TOLERANCE
            && o.ring_full as f64 <= current.ring_full as f64 + slack
            && o.slow_calls as f64 <= current.slow_calls as f64 + slack
    };
    let smallest = runs.iter().find(|(n, o)| *n < ctx.ring_size && same(o))?.0;
    let n = smallest.saturating_mul(2);
    if n > ctx.ring_size / 2 {
        return None;
    }
    let saving = ring_bytes_delta(ctx, n, ctx.ring_size);
    if saving < SHRINK_MIN_SAVING_BYTES as i64 {
        return None;
    }
    runs.iter().find(|(m, o)| *m == n && judge.good(o)).copied()
}

/// High only with measured counters the model reproduces and a verdict that does not depend
/// on the order of events inside a step.
fn confidence(
    profile: &Profile,
    base: &SimParams,
    recommended: u32,
    judge: &Judge,
    measured: Option<&sim::Measured>,
    low_reason: Option<String>,
) -> Confidence {
    let low = |reason: String| Confidence {
        level: ConfidenceLevel::Low,
        reason,
    };
    if let Some(r) = low_reason {
        return low(r);
    }
    if profile.steps.len() < 10 || profile.totals().allocs < 10 * u64::from(recommended) {
        return low(format!(
            "short profile: {} steps, {} allocations for a ring of {recommended}",
            profile.steps.len(),
            profile.totals().allocs
        ));
    }
    // Bracket the unknown order inside a step: coarse and fine interleaving must agree.
    let at = base.with_ring(recommended);
    let coarse = sim::simulate_steady(
        profile,
        &SimParams {
            chunks_per_step: 1,
            ..at
        },
    );
    let fine = sim::simulate_steady(
        profile,
        &SimParams {
            chunks_per_step: 64,
            ..at
        },
    );
    if judge.good(&coarse) != judge.good(&fine) {
        return low(format!(
            "depends on the order of events inside a {:.1} ms step (recycled {} with 1 slice, {} \
             with 64): record at a finer step",
            profile.step_ns as f64 / 1e6,
            pct(coarse.recycled_rate),
            pct(fine.recycled_rate)
        ));
    }
    match measured {
        None => Confidence {
            level: ConfidenceLevel::Medium,
            reason: "model not calibrated: no measured counters for this interval".into(),
        },
        Some(m) => {
            let c = sim::calibrate(
                profile,
                &sim::warmed(profile, &base.with_ring(m.ring_size)),
                m,
            );
            let w = c.worst();
            let what = format!(
                "replay at {} vs measured: recycled rate off by {:.1} points, slow calls by \
                 {:.0}%, ring full by {:.0}%",
                m.ring_size,
                c.recycled_rate_err * 100.0,
                c.slow_calls_rel_err * 100.0,
                c.ring_full_rel_err * 100.0
            );
            let level = if w <= 0.1 {
                ConfidenceLevel::High
            } else if w <= 0.3 {
                ConfidenceLevel::Medium
            } else {
                ConfidenceLevel::Low
            };
            Confidence {
                level,
                reason: what,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::simulator::{Measured, Step};
    use super::*;
    use crate::snapshot::advice::signed_bytes;

    fn steady(allocs: u64, direct: u64, ring: u64, steps: usize) -> Profile {
        Profile {
            step_ns: 10_000_000,
            steps: vec![
                Step {
                    allocs,
                    ring_frees: ring,
                    direct_frees: direct,
                };
                steps
            ],
            provider: false,
        }
    }

    /// Holds `hold` pages then frees them all in one step, `cycles` times.
    fn hold_and_release(hold: u64, cycles: usize, provider: bool) -> Profile {
        let mut steps = Vec::new();
        for _ in 0..cycles {
            for _ in 0..9 {
                steps.push(Step {
                    allocs: hold / 10,
                    ring_frees: 0,
                    direct_frees: 0,
                });
            }
            steps.push(Step {
                allocs: hold / 10,
                ring_frees: hold,
                direct_frees: 0,
            });
        }
        Profile {
            step_ns: 1_000_000,
            steps,
            provider,
        }
    }

    #[test]
    fn bytes_read_well() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(3 << 20), "3 MiB");
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(signed_bytes(-(4 << 20)), "−4 MiB");
    }

    #[test]
    fn knobs_per_driver() {
        assert_eq!(
            knob_for(Some("gve"), Some("eth1"), 16384, 16384),
            Knob::EthtoolRx { dev: "eth1".into() }
        );
        assert_eq!(
            knob_for(Some("gve"), Some("eth1"), 32768, 16384),
            Knob::KernelChange
        );
        assert_eq!(
            knob_for(Some("veth"), Some("v0"), 512, 16384),
            Knob::DriverFixed
        );
        assert_eq!(
            knob_for(Some("virtio-net"), None, 1024, 16384),
            Knob::DeviceQueueSize
        );
        assert_eq!(knob_for(None, Some("x"), 1024, 16384), Knob::Unknown);
        let t = knob_text(&Knob::EthtoolRx { dev: "eth1".into() }, Some("gve"), 16384);
        assert!(t.contains("ethtool -G eth1 rx 4096"), "{t}");
        assert!(
            knob_text(&Knob::DeviceQueueSize, Some("virtio_net"), 2048).contains("at most 1024")
        );
    }

    #[test]
    fn a_churning_pool_grows_to_the_smallest_size_that_holds_the_burst() {
        // 1500 pages held then released at once, every 10 steps: 2048 holds it, 1024 does not.
        let p = hold_and_release(1500, 50, false);
        let mut ctx = PoolContext::new(256, false);
        ctx.ifname = Some("vnet1".into());
        ctx.driver = Some("virtio_net".into());
        let a = advise(&p, &ctx, 0.99);
        assert_eq!(
            (a.verdict, a.recommended_size),
            (Verdict::Grow, 2048),
            "{:#?}",
            a.evidence
        );
        assert!(a.predicted.recycled_rate >= 0.99);
        assert!(a.current.recycled_rate < 0.5);
        assert_eq!(a.predicted.ring_full, 0);
        assert_eq!(a.extra_pinned_bytes, (2048 - 256) * 4096);
        assert!(a.slow_time_saved_ns_per_s > 0.0);
        assert_eq!(a.knob, Knob::DeviceQueueSize);
        let s = a.summary();
        assert!(s.starts_with("grow vnet1's ring 256 → 2048"), "{s}");
        assert!(s.contains("+7 MiB pinned (1 queue)"), "{s}");
        assert!(s.contains("QEMU rx_queue_size=2048"), "{s}");
        assert!(a
            .evidence
            .iter()
            .any(|e| e.starts_with("1024 is not enough")));
        // The curve the verdict weighed: every candidate, the current and recommended sizes
        // on it with the replays the advice quotes, memory growing with the size.
        let at = |n: u32| a.curve.iter().find(|c| c.ring_size == n).copied();
        assert_eq!(
            a.curve.iter().map(|c| c.ring_size).collect::<Vec<_>>(),
            sim::candidate_sizes(sim::KERNEL_MAX_RING)
        );
        assert_eq!(at(256).unwrap().recycled_rate, a.current.recycled_rate);
        assert_eq!(at(2048).unwrap().recycled_rate, a.predicted.recycled_rate);
        assert!(at(1024).unwrap().recycled_rate < 0.99);
        assert_eq!(at(2048).unwrap().ring_bytes, 2048 * 4096);
        assert!(a
            .curve
            .windows(2)
            .all(|w| w[0].ring_bytes < w[1].ring_bytes));
    }

    #[test]
    fn too_big_a_burst_grows_to_max_with_low_confidence() {
        let p = hold_and_release(40_000, 20, true);
        let mut ctx = PoolContext::new(4096, true);
        ctx.ifname = Some("eth1".into());
        ctx.driver = Some("gve".into());
        let a = advise(&p, &ctx, 0.99);
        assert_eq!((a.verdict, a.recommended_size), (Verdict::Grow, 16384));
        assert_eq!(a.confidence.level, ConfidenceLevel::Low);
        assert!(a
            .evidence
            .iter()
            .any(|e| e.contains("65536 would reach it") && e.contains("kernel change")));
        // Already at the maximum: keep, and say a kernel change is what is left.
        ctx.ring_size = 16384;
        let a = advise(&p, &ctx, 0.99);
        assert_eq!(a.verdict, Verdict::Keep);
        assert_eq!(a.knob, Knob::KernelChange);
        assert!(a.summary().contains("kernel change"), "{}", a.summary());
    }

    #[test]
    fn no_ring_helps_a_pool_whose_buffers_never_come_back() {
        // Every page is held for good (a leak or a socket that never reads): no ring helps.
        let p = steady(1000, 0, 0, 200);
        let a = advise(&p, &PoolContext::new(1024, false), 0.99);
        assert_eq!(a.verdict, Verdict::Keep);
        assert_eq!(a.confidence.level, ConfidenceLevel::Low);
        assert!(
            a.summary().contains("no ring size fixes it"),
            "{}",
            a.summary()
        );
        assert!(a.evidence.iter().any(|e| e.starts_with("not even 65536")));
    }

    #[test]
    fn healthy_single_queue_keeps_even_if_smaller_would_do() {
        // NAPI-local recycling: the ring is never used, but one queue's 1024 → 128 is < 4 MiB.
        let p = steady(500, 500, 0, 200);
        let a = advise(&p, &PoolContext::new(1024, false), 0.99);
        assert_eq!(a.verdict, Verdict::Keep);
        assert_eq!(a.predicted.recycled_rate, 1.0);
        assert!(a.summary().starts_with("keep the pool's ring at 1024"));
    }

    #[test]
    fn many_queues_shrink_when_it_gives_back_memory() {
        let p = steady(500, 500, 0, 200);
        let mut ctx = PoolContext::new(1024, false);
        ctx.queues_on_device = 64;
        let a = advise(&p, &ctx, 0.99);
        assert_eq!((a.verdict, a.recommended_size), (Verdict::Shrink, 128));
        assert_eq!(a.extra_pinned_bytes, -(1024 - 128) * 4096 * 64);
        assert!(
            a.summary().contains("−224 MiB pinned (64 queues)"),
            "{}",
            a.summary()
        );
        // Not for zero-copy: nothing to give back.
        ctx.zero_copy_provider = true;
        assert_eq!(advise(&p, &ctx, 0.99).verdict, Verdict::Keep);
    }

    #[test]
    fn calibrated_advice_is_high_confidence() {
        let p = hold_and_release(1500, 50, false);
        let ctx = PoolContext::new(256, false);
        let base = SimParams::for_ring(256, false);
        let truth = sim::simulate_steady(&p, &base);
        let m = Measured::from_outcome(256, &truth);
        let a = advise_with(&p, &ctx, 0.99, Some(&m));
        assert_eq!(
            a.confidence.level,
            ConfidenceLevel::High,
            "{:?}",
            a.confidence
        );
        // Counters that disagree with the replay lower it.
        let off = Measured {
            slow_calls: truth.slow_calls * 3,
            ..m
        };
        let a = advise_with(&p, &ctx, 0.99, Some(&off));
        assert_eq!(
            a.confidence.level,
            ConfidenceLevel::Low,
            "{:?}",
            a.confidence
        );
    }

    #[test]
    fn short_profile_is_low_confidence() {
        let p = hold_and_release(1500, 1, false);
        let a = advise(&p, &PoolContext::new(256, false), 0.99);
        assert_eq!(a.confidence.level, ConfidenceLevel::Low);
    }
}

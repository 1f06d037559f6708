//! Advice for every pool of a window: its burst profile replayed at other ring sizes.
//!
//! Glue between the samples of a window (live or recorded), the simulator and the advice:
//! builds each pool's [`PoolContext`] from what the probes read (ring size, page size, driver,
//! memory provider, how many pools the device has) and calibrates against the counters
//! measured over the same samples.
use std::collections::HashMap;

use ppscope_common::PoolIdentity;

use super::{
    advise::{self, PoolContext},
    profile::{profiles, PoolProfile},
    simulator::{self as sim, Measured, SimParams},
};
use crate::{
    model::{c_name, Coverage, RawSample},
    snapshot::{Advice, ProfileBasis},
};

/// QEMU's largest virtio-net `rx_queue_size`: the most a virtio-net pool can be given there.
pub const VIRTIO_QEMU_MAX_QUEUE: u32 = 1024;

/// The fast-path (recycled) rate a healthy pool should reach.
pub const DEFAULT_TARGET: f64 = 0.99;

/// What the advice knows of a pool besides its profile; `page_size` is the sampled host's.
fn context(p: &PoolProfile, queues: u32, page_size: u64) -> Option<PoolContext> {
    let id: &PoolIdentity = p.identity.as_ref()?;
    let ring = if id.known & PoolIdentity::KNOWN_RING_SIZE != 0 {
        id.ring_size
    } else if id.known & PoolIdentity::KNOWN_POOL_SIZE != 0 {
        id.pool_size
    } else {
        return None;
    };
    let provider =
        id.known & PoolIdentity::KNOWN_MEMORY_PROVIDER != 0 && id.has_memory_provider != 0;
    let mut ctx = PoolContext::new(ring, provider);
    ctx.ifname = (id.known & PoolIdentity::KNOWN_IFNAME != 0)
        .then(|| c_name(&id.ifname))
        .flatten();
    ctx.driver = c_name(&id.driver);
    if ctx.driver.as_deref() == Some("virtio_net") {
        // virtio-net's pool is its vring; QEMU allows rx_queue_size up to 1024.
        ctx.kernel_max_ring = ctx.kernel_max_ring.min(VIRTIO_QEMU_MAX_QUEUE);
    }
    let order = if id.known & PoolIdentity::KNOWN_ORDER != 0 {
        id.order
    } else {
        0
    };
    ctx.page_bytes = page_size << order;
    ctx.queues_on_device = queues.max(1);
    let m = &p.measured;
    if m.slow_calls > 0 {
        ctx.slow_call_ns = m.slow_ns_sum as f64 / m.slow_calls as f64;
    }
    Some(ctx)
}

fn measured(p: &PoolProfile, ring_size: u32, cov: &Coverage) -> Measured {
    let m = &p.measured;
    Measured {
        ring_size,
        allocs: m.taken(p.basis),
        slow_calls: m.slow_calls + m.mp_alloc_calls,
        pages_from_slow: cov.hold.then_some(m.hold_pages),
        ring_full: m.ring_full(p.basis),
    }
}

/// A ring size that explains the measured counters far better than the one the pool reports:
/// the sign of a resize that did not rebuild the pool. None when the reported size fits.
fn resized_without_rebuild(p: &PoolProfile, ctx: &PoolContext, m: &Measured) -> Option<u32> {
    let base = SimParams::for_ring(ctx.ring_size, ctx.zero_copy_provider);
    let at_reported = sim::calibrate(&p.profile, &base, m).worst();
    let sizes = sim::candidate_sizes(ctx.kernel_max_ring.max(ctx.ring_size));
    let (best, cal) = sim::best_fit_size(&p.profile, &base, m, &sizes)?;
    // Only a clear misfit at the reported size, and a clear fit elsewhere, says so.
    (best != ctx.ring_size && at_reported > 0.5 && cal.worst() < at_reported / 4.0).then_some(best)
}

/// Advice per pool address, for the pools whose profile the probes could measure, from full
/// samples (a recording).
pub fn advise_window(
    samples: &[RawSample],
    cov: &Coverage,
    page_size: u64,
    target: f64,
) -> HashMap<u64, Advice> {
    // Without the hooks a profile is made of there is nothing to replay.
    let Some(basis) = cov.profile_basis() else {
        return HashMap::new();
    };
    advise_profiles(&profiles(samples, basis), cov, page_size, target)
}

/// Advice per pool address from the pools' profiles.
pub fn advise_profiles(
    profiles: &[PoolProfile],
    cov: &Coverage,
    page_size: u64,
    target: f64,
) -> HashMap<u64, Advice> {
    let mut per_device: HashMap<u64, u32> = HashMap::new();
    for p in profiles {
        if let Some(id) = &p.identity {
            if id.netdev != 0 {
                *per_device.entry(id.netdev).or_default() += 1;
            }
        }
    }
    profiles
        .iter()
        .filter_map(|p| {
            let queues = p
                .identity
                .and_then(|i| per_device.get(&i.netdev).copied())
                .unwrap_or(1);
            let ctx = context(p, queues, page_size)?;
            let m = measured(p, ctx.ring_size, cov);
            let mut a = advise::advise_with(&p.profile, &ctx, target, Some(&m));
            if let Some(size) = resized_without_rebuild(p, &ctx, &m) {
                a.evidence.push(format!(
                    "the pool behaves like a ring of {size}, not the {} it reports: was it resized without being rebuilt? (virtio-net keeps the pool it built at probe after ethtool -G)",
                    ctx.ring_size
                ));
                a.resize_suspect = Some(size);
            }
            if p.basis == ProfileBasis::Refills {
                a.evidence.push(
                    "profile from ring refills, slow-path pages and returned pages (--detail light): exact at the ring, placed in time to within one refill (64 pages); --detail full replays every page".into(),
                );
            }
            Some((p.pool, a))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::simulator::{Profile, Step};
    use super::*;

    fn bursty() -> Profile {
        let mut steps = Vec::new();
        for _ in 0..40 {
            for _ in 0..15 {
                steps.push(Step {
                    allocs: 100,
                    ring_frees: 0,
                    direct_frees: 0,
                });
            }
            steps.push(Step {
                allocs: 0,
                ring_frees: 1500,
                direct_frees: 0,
            });
        }
        Profile {
            step_ns: 10_000_000,
            steps,
            provider: false,
        }
    }

    fn pool(profile: Profile) -> PoolProfile {
        PoolProfile {
            pool: 1,
            identity: None,
            basis: ProfileBasis::Pages,
            profile,
            measured: Default::default(),
        }
    }

    #[test]
    fn a_pool_that_behaves_like_another_size_is_flagged() {
        let p = pool(bursty());
        let ctx = PoolContext::new(256, false);
        let base = SimParams::for_ring(1024, false);
        let at_1024 = sim::simulate_steady(&p.profile, &base);
        // Counters that a 1024-entry ring produced, while the pool says 256.
        let m = Measured::from_outcome(256, &at_1024);
        assert_eq!(resized_without_rebuild(&p, &ctx, &m), Some(1024));
        // Counters of a real 256-entry ring: nothing to flag.
        let at_256 = sim::simulate_steady(&p.profile, &SimParams::for_ring(256, false));
        let m = Measured::from_outcome(256, &at_256);
        assert_eq!(resized_without_rebuild(&p, &ctx, &m), None);
    }

    /// A pool with a 256-entry ring under bursts (100 pages taken a step for 15 steps, then
    /// 1,500 back at once), counted the way each detail level's hooks count it: `full` sees
    /// every allocation and recycle, `light` sees refills, pages from the allocator, pages
    /// that found the ring full and the ring's fill. The books of a ring of 256 are kept by
    /// hand (no alloc cache: every page taken goes through the ring or the allocator).
    fn two_levels(steps: usize) -> (Vec<crate::model::RawSample>, Vec<crate::model::RawSample>) {
        use crate::model::{RawPool, RawSample};
        use ppscope_common::{PoolCounters, PoolState};
        use std::time::{Duration, Instant};
        const RING: u64 = 256;
        let t0 = Instant::now();
        let mut id = PoolIdentity::EMPTY;
        id.ring_size = RING as u32;
        id.netdev = 0x1000;
        id.known = PoolIdentity::KNOWN_RING_SIZE;
        let (mut full, mut light) = (PoolCounters::default(), PoolCounters::default());
        let mut fill = 0u64;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..steps {
            if i > 0 && i % 16 == 0 {
                let into = 1500u64.min(RING - fill);
                fill += into;
                full.put_calls += 1500;
                full.put_released += 1500 - into;
                light.release_pages += 1500 - into;
            } else if i > 0 {
                let from_ring = 100u64.min(fill);
                fill -= from_ring;
                let slow = 100 - from_ring;
                for c in [&mut full, &mut light] {
                    c.hold_pages += slow;
                    c.slow_calls += slow.div_ceil(64);
                    c.refill_pages += from_ring;
                    c.refill_calls += from_ring.div_ceil(64);
                }
                full.alloc_calls += 100;
            }
            let at = t0 + Duration::from_millis(10 * i as u64);
            let state = PoolState {
                ring_fill: fill as u32,
                known: 1,
                ..Default::default()
            };
            for (counters, out) in [(full, &mut a), (light, &mut b)] {
                let mut s = RawSample::empty(at);
                s.pools.insert(
                    7,
                    RawPool {
                        identity: Some(id),
                        state: Some(state),
                        ..RawPool::from_counters(counters)
                    },
                );
                out.push(s);
            }
        }
        (a, b)
    }

    #[test]
    fn light_and_full_counts_of_the_same_traffic_give_the_same_advice() {
        let (full, light) = two_levels(161);
        let cov_full = Coverage {
            alloc: true,
            recycle: true,
            refill: true,
            slow: true,
            hold: true,
            release: true,
            ..Default::default()
        };
        let cov_light = Coverage {
            alloc: false,
            recycle: false,
            ..cov_full
        };
        assert_eq!(cov_light.profile_basis(), Some(ProfileBasis::Refills));

        // The light profile rebuilds the ring's inflow from its books: exactly what was freed.
        let p_light = profiles(&light, ProfileBasis::Refills);
        let p_full = profiles(&full, ProfileBasis::Pages);
        assert_eq!(p_light[0].profile.steps, p_full[0].profile.steps);
        assert_eq!(p_light[0].profile.steps[15].ring_frees, 1500);

        let a = advise_window(&full, &cov_full, 4096, DEFAULT_TARGET);
        let b = advise_window(&light, &cov_light, 4096, DEFAULT_TARGET);
        let (a, b) = (&a[&7], &b[&7]);
        assert_eq!(a.current_size, 256);
        assert!(a.recommended_size > 256, "bursts of 1,500: {a:#?}");
        assert_eq!(
            (a.verdict, a.recommended_size),
            (b.verdict, b.recommended_size)
        );
        assert!(
            b.evidence.iter().any(|e| e.contains("--detail light")),
            "{:?}",
            b.evidence
        );
        // Neither level's hooks: no profile, no advice.
        let none = Coverage {
            refill: false,
            ..cov_light
        };
        assert!(advise_window(&light, &none, 4096, DEFAULT_TARGET).is_empty());
    }
}

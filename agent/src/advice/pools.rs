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
                    "profile from ring refills, slow-path pages and returned pages (--detail light): exact at the ring, placed in time to within 8 refills a CPU (the ring's fill is read at one refill in 8); --detail full replays every page".into(),
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

    #[test]
    fn light_and_full_counts_of_the_same_traffic_give_the_same_advice() {
        let mut id = PoolIdentity::EMPTY;
        id.netdev = 0x1000;
        let crate::testing::StarvedRing { full, light } = crate::testing::starved_ring(161, id);
        let cov_full = crate::testing::profile_coverage();
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

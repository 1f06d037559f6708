//! Built-in burst profiles for `ppscope simulate --scenario NAME`: deterministic workloads with
//! the pool context they run on, so the simulator and the advice can be shown (and tested)
//! without a kernel.
use super::{
    advise::PoolContext,
    simulator::{Profile, Step},
};

/// A generated workload and the pool it runs on.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub profile: Profile,
    pub context: PoolContext,
}

/// Names accepted by [`by_name`], in the order `--help` lists them.
pub const NAMES: [&str; 3] = ["gve-devmem-alltoall", "many-sockets", "healthy"];

pub fn by_name(name: &str) -> Option<Scenario> {
    match name {
        "gve-devmem-alltoall" => Some(gve_devmem_alltoall()),
        "many-sockets" => Some(many_sockets()),
        "healthy" => Some(healthy()),
        _ => None,
    }
}

/// Every scenario, in [`NAMES`] order.
pub fn all() -> Vec<Scenario> {
    NAMES.iter().filter_map(|n| by_name(n)).collect()
}

/// gve rx descriptors by default; the pool is `GVE_PAGE_POOL_SIZE_MULTIPLIER` (4) × that.
pub const GVE_DEFAULT_RX_DESC: u32 = 1024;

/// The seed case. A gve queue receiving devmem TCP (zero-copy into a dmabuf, so the pool's
/// slow path is `mp_dmabuf_devmem_alloc_netmems`, one net_iov per call) for an NCCL AllToAll:
/// - the NIC fills buffers at line rate, 400 per ms per queue (4 KiB buffers ≈ 13 Gbit/s: a
///   200 Gbit/s NIC over 16 queues);
/// - the application holds every buffer of a 30 ms collective step (12,000 buffers) and then
///   returns them all within 1 ms through `SO_DEVMEM_DONTNEED`, 128 tokens per call — process
///   context, so every free goes to the ring;
/// - the default ring is 4 × 1024 = 4096: ~7,500 frees of each burst find it full and go back
///   to the dmabuf's gen_pool (`net_devmem_free_dmabuf`), and the next step's allocations find
///   the ring empty and call the provider once per buffer.
///
/// 200 collective steps, 1 ms recording steps (6 s).
pub fn gve_devmem_alltoall() -> Scenario {
    const PER_MS: u64 = 400;
    const HOLD_MS: usize = 30;
    let held = PER_MS * HOLD_MS as u64;
    let mut steps = Vec::with_capacity(200 * HOLD_MS);
    for _ in 0..200 {
        for ms in 0..HOLD_MS {
            steps.push(Step {
                allocs: PER_MS,
                ring_frees: if ms == HOLD_MS - 1 { held } else { 0 },
                direct_frees: 0,
            });
        }
    }
    let mut context = PoolContext::new(4 * GVE_DEFAULT_RX_DESC, true);
    context.ifname = Some("eth1".into());
    context.driver = Some("gve".into());
    context.queues_on_device = 16;
    Scenario {
        name: "gve-devmem-alltoall",
        description: "gve + devmem TCP, NCCL AllToAll: 12,000 buffers held per 30 ms step, \
                      returned in one burst of SO_DEVMEM_DONTNEED against the default 4096 ring",
        profile: Profile {
            step_ns: 1_000_000,
            steps,
            provider: true,
        },
        context,
    }
}

/// A busy server: 2,048 rx queues (and thousands of sockets over them), each pool lightly
/// loaded: 40 pages per 10 ms, read by the application every 50 ms (the skbs are freed in
/// process context by recvmsg, so to the ring, in bursts of ~200), with a little NAPI-local
/// recycling. The default 1024 ring is healthy already; what matters here is that ring memory
/// is per queue: growing every ring to 16384 could pin ~120 GiB.
pub fn many_sockets() -> Scenario {
    let mut steps = Vec::with_capacity(1000);
    let mut held = 0u64;
    for i in 0..1000u64 {
        // Small deterministic jitter: 36..=44 pages per step.
        let allocs = 36 + (i * 7) % 9;
        held += allocs;
        let direct = allocs / 10;
        held -= direct;
        let ring = if i % 5 == 4 {
            std::mem::take(&mut held)
        } else {
            0
        };
        steps.push(Step {
            allocs,
            ring_frees: ring,
            direct_frees: direct,
        });
    }
    let mut context = PoolContext::new(1024, false);
    context.ifname = Some("eth0".into());
    context.driver = Some("mlx5_core".into());
    context.queues_on_device = 2048;
    Scenario {
        name: "many-sockets",
        description: "2,048 lightly loaded rx queues, sockets read every 50 ms: healthy at the \
                      default 1024 ring, where any growth multiplies by the queue count",
        profile: Profile {
            step_ns: 10_000_000,
            steps,
            provider: false,
        },
        context,
    }
}

/// One virtio-net queue with XDP recycling in NAPI (direct recycles into the alloc cache):
/// 2,000 pages per 10 ms, every one back in the cache within the same poll.
pub fn healthy() -> Scenario {
    let steps = vec![
        Step {
            allocs: 2000,
            ring_frees: 0,
            direct_frees: 2000,
        };
        500
    ];
    let mut context = PoolContext::new(256, false);
    context.ifname = Some("eth0".into());
    context.driver = Some("virtio_net".into());
    Scenario {
        name: "healthy",
        description: "one virtio-net queue, XDP recycling in NAPI: every page back in the alloc \
                      cache, the ring idle",
        profile: Profile {
            step_ns: 10_000_000,
            steps,
            provider: false,
        },
        context,
    }
}

#[cfg(test)]
mod tests {
    use super::super::advise::advise;
    use super::*;
    use crate::snapshot::{ConfidenceLevel, Knob, Verdict};

    #[test]
    fn names_resolve() {
        assert_eq!(all().len(), NAMES.len());
        for (s, n) in all().iter().zip(NAMES) {
            assert_eq!(s.name, n);
            assert!(!s.description.is_empty());
            assert!(s.profile.step_ns > 0 && !s.profile.steps.is_empty());
        }
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn seed_case_grows_to_the_kernel_maximum() {
        let s = gve_devmem_alltoall();
        assert_eq!(s.context.ring_size, 4096);
        let a = advise(&s.profile, &s.context, 0.99);
        assert_eq!(
            (a.verdict, a.recommended_size),
            (Verdict::Grow, 16384),
            "{:#?}",
            a.evidence
        );
        assert_eq!(a.recommended_size, 16384);
        // Now: the ring takes ~4,500 of each 12,000-buffer burst.
        assert!(
            a.current.recycled_rate < 0.45,
            "{}",
            a.current.recycled_rate
        );
        assert!(a.current.ring_full > 1_000_000);
        // At 16384: every buffer recycled, nothing back to the gen_pool.
        assert!(a.predicted.recycled_rate >= 0.999);
        assert_eq!(a.predicted.ring_full, 0);
        assert_eq!(a.predicted.slow_calls, 0);
        assert!(
            a.slow_time_saved_ns_per_s > 100e6,
            "{}",
            a.slow_time_saved_ns_per_s
        );
        assert!(a.pinned_anyway);
        assert_eq!(a.knob, Knob::EthtoolRx { dev: "eth1".into() });
        assert_eq!(a.confidence.level, ConfidenceLevel::Medium);
        // 8192 is not enough, and the evidence says so.
        assert!(a
            .evidence
            .iter()
            .any(|e| e.starts_with("8192 is not enough")));
        assert!(a
            .evidence
            .iter()
            .any(|e| e.contains("pinned whatever the ring size")));
        let line = a.summary();
        assert!(
            line.starts_with("grow eth1's ring 4096 → 16384: recycled "),
            "{line}"
        );
        assert!(line.contains("→ 100.0%"), "{line}");
        assert!(
            line.contains("zero-copy: the dmabuf is pinned anyway"),
            "{line}"
        );
        assert!(line.contains("ethtool -G eth1 rx 4096"), "{line}");
    }

    #[test]
    fn many_sockets_never_grows_and_shows_what_growth_would_pin() {
        let s = many_sockets();
        let a = advise(&s.profile, &s.context, 0.99);
        assert!(
            matches!(a.verdict, Verdict::Keep | Verdict::Shrink),
            "{:?}",
            a.verdict
        );
        assert!(a.recommended_size <= s.context.ring_size);
        assert!(a.current.recycled_rate >= 0.99);
        assert!(
            a.evidence
                .iter()
                .any(|e| e.contains("a ring of 16384 would let the pool hold up to 120 GiB more")),
            "{:#?}",
            a.evidence
        );
        assert_eq!(
            (a.verdict, a.recommended_size),
            (Verdict::Shrink, 512),
            "{:#?}",
            a.evidence
        );
        assert!(
            a.summary().contains("−4 GiB pinned (2048 queues)"),
            "{}",
            a.summary()
        );
    }

    #[test]
    fn healthy_keeps() {
        let s = healthy();
        let a = advise(&s.profile, &s.context, 0.99);
        assert_eq!(a.verdict, Verdict::Keep);
        assert_eq!(a.current.recycled_rate, 1.0);
        assert_eq!(a.current.ring_full, 0);
        let line = a.summary();
        assert!(
            line.starts_with(
                "keep eth0's ring at 256: recycled 100.0% (target 99.0%), ring full 0/s"
            ),
            "{line}"
        );
    }
}

//! A pool's ring-size advice as consumers see it: the verdict, the knob, the evidence, and the
//! one line a person reads. `crate::advice` computes it.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::bytes;

/// What to do with the ring: JSON `"keep"`, `"grow"` or `"shrink"`, to the advice's
/// `recommended_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Keep,
    Grow,
    Shrink,
}

/// What changes a pool's ring size. JSON: `{"kind": "ethtool_rx", "dev": "eth1"}`,
/// `{"kind": "device_queue_size"}`, `driver_fixed`, `kernel_change`, `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Knob {
    /// `ethtool -G <dev> rx N` (gve: the pool is 4 × the rx descriptor count).
    EthtoolRx {
        dev: String,
    },
    /// virtio-net: the pool is sized from the vring when the device probes (QEMU
    /// `rx_queue_size`); `ethtool -G` resizes the vring but not the pool.
    DeviceQueueSize,
    /// veth: `VETH_RING_SIZE` 256, no knob.
    DriverFixed,
    /// Past the kernel's 16384 clamp in `page_pool_init`.
    KernelChange,
    Unknown,
}

/// JSON `"low"`, `"medium"`, `"high"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ConfidenceLevel {
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Confidence {
    pub level: ConfidenceLevel,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Advice {
    pub verdict: Verdict,
    pub current_size: u32,
    pub recommended_size: u32,
    /// Replay at the current size.
    pub current: SimOutcome,
    /// Replay at the recommended size.
    pub predicted: SimOutcome,
    /// (slow calls saved × slow_call_ns + ring_full saved × ring_full_ns) per second of profile.
    pub slow_time_saved_ns_per_s: f64,
    /// (recommended − current) × page × queues: the most the rings can hold in addition; 0
    /// for a zero-copy provider, whose buffers the dmabuf pins whatever the ring size.
    pub extra_pinned_bytes: i64,
    /// Zero-copy provider: the buffers are pinned by the dmabuf whatever the ring size, so a
    /// bigger ring costs no new memory.
    pub pinned_anyway: bool,
    pub knob: Knob,
    pub confidence: Confidence,
    /// The numbers behind the verdict, in words.
    pub evidence: Vec<String>,
    /// The target the recycled rate was held to.
    pub target: f64,
    /// Pools on the device the knob changes together.
    pub queues: u32,
    /// "eth0's ring" or "the pool's ring".
    pub pool_name: String,
    /// The knob as a person types it.
    pub knob_text: String,
    /// Length of the profile, for per-second figures.
    pub profile_s: f64,
    /// A ring size that explains the measured counters far better than the reported one
    /// (a resize that did not rebuild the pool), when the replay shows one.
    pub resize_suspect: Option<u32>,
    /// The advice curve: the same profile replayed at each candidate size, smallest first
    /// (what the verdict weighed: the recycled share against the memory the rings can pin).
    #[serde(default)]
    pub curve: Vec<CurvePoint>,
}

/// One replayed ring size of the advice curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CurvePoint {
    pub ring_size: u32,
    /// Predicted share of allocations served by a recycled page at this size.
    pub recycled_rate: f64,
    /// Memory the rings of every queue the knob changes can hold at this size (page size ×
    /// size × queues); 0 for a zero-copy provider, whose buffers the dmabuf pins anyway.
    pub ring_bytes: u64,
}

pub(crate) fn signed_bytes(b: i64) -> String {
    if b < 0 {
        format!("−{}", bytes(b.unsigned_abs()))
    } else {
        format!("+{}", bytes(b as u64))
    }
}

pub(crate) fn ms_per_s(ns_per_s: f64) -> String {
    let ms = ns_per_s / 1e6;
    if ms.abs() >= 10.0 {
        format!("{ms:.0} ms/s")
    } else {
        format!("{ms:.1} ms/s")
    }
}

fn per_s_text(count: u64, secs: f64) -> String {
    format!("{:.0}/s", SimOutcome::per_s(count, secs))
}

pub(crate) fn queues_text(q: u32) -> String {
    if q == 1 {
        "1 queue".into()
    } else {
        format!("{q} queues")
    }
}

impl Advice {
    /// One line a person reads.
    pub fn summary(&self) -> String {
        let n = self.recommended_size;
        let secs_saved = ms_per_s(self.slow_time_saved_ns_per_s);
        let mem = if self.pinned_anyway {
            "no new memory (zero-copy: the dmabuf is pinned anyway)".to_string()
        } else {
            format!(
                "{} pinned ({})",
                signed_bytes(self.extra_pinned_bytes),
                queues_text(self.queues)
            )
        };
        let conf = match self.confidence.level {
            ConfidenceLevel::High => "high",
            ConfidenceLevel::Medium => "medium",
            ConfidenceLevel::Low => "low",
        };
        match self.verdict {
            Verdict::Grow => format!(
                "grow {} {} → {n}: recycled {} → {}, ring full {} → {}, slow path + ring-full \
                 frees −{secs_saved}, {mem}; knob: {} [confidence {conf}]",
                self.pool_name,
                self.current_size,
                crate::units::pct(self.current.recycled_rate),
                crate::units::pct(self.predicted.recycled_rate),
                per_s_text(self.current.ring_full, self.profile_s),
                per_s_text(self.predicted.ring_full, self.profile_s),
                self.knob_text
            ),
            Verdict::Shrink => format!(
                "shrink {} {} → {n}: recycled {} → {} (same), {mem}; knob: {} [confidence \
                 {conf}]",
                self.pool_name,
                self.current_size,
                crate::units::pct(self.current.recycled_rate),
                crate::units::pct(self.predicted.recycled_rate),
                self.knob_text
            ),
            Verdict::Keep => {
                let tail = if self.knob == Knob::KernelChange {
                    format!("; short of the target: {}", self.knob_text)
                } else if self.current.recycled_rate < self.target {
                    "; short of the target and no ring size fixes it: the application holds \
                     the buffers"
                        .to_string()
                } else {
                    String::new()
                };
                format!(
                    "keep {} at {}: recycled {} (target {}), ring full {}{tail} [confidence \
                     {conf}]",
                    self.pool_name,
                    self.current_size,
                    crate::units::pct(self.current.recycled_rate),
                    crate::units::pct(self.target),
                    per_s_text(self.current.ring_full, self.profile_s)
                )
            }
        }
    }
}

/// What one replay predicts, in the kernel's own stat names where one exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SimOutcome {
    pub allocs: u64,
    /// Allocations served from the alloc cache (kernel `alloc_fast`), including the pages a
    /// slow-path call left in the cache.
    pub cache_hits: u64,
    /// Refills that found pages in the ring (kernel `alloc_refill`).
    pub ring_refills: u64,
    /// Refills that found the ring empty (kernel `alloc_empty`); each one is followed by a
    /// slow-path call.
    pub empty_refills: u64,
    /// Page-allocator slow-path calls (kernel `alloc_slow`) or memory-provider calls.
    pub slow_calls: u64,
    /// Pages that entered the pool from the page allocator or provider (`page_pool_state_hold`).
    pub pages_from_slow: u64,
    /// Pages moved from the ring to the cache by refills.
    pub ring_pages: u64,
    pub recycled_cached: u64,
    pub recycled_ring: u64,
    /// Recycles that found the ring full: the page left the pool.
    pub ring_full: u64,
    /// Per allocation call, as the kernel counts and `model` shows it:
    /// (cache + ring) / all = 1 − slow_calls / allocs. A page-allocator slow call brings 64
    /// pages, so this rate cannot fall below 63/64 for such pools.
    pub fast_path_rate: f64,
    /// ring_refills / (ring_refills + empty_refills).
    pub ring_hit_rate: f64,
    /// Per page: the share of allocations served by a recycled page,
    /// 1 − pages_from_slow / allocs (clamped to 0..=1). Equal to `fast_path_rate` for provider
    /// pools; the one the advice's target applies to.
    pub recycled_rate: f64,
    pub peak_ring_fill: u32,
    /// Most pages the pool owned at once: cache + ring + held by the driver or application.
    pub pages_in_pool_max: u64,
    /// State at the end, so that a replay can start where another ended (`advice::simulator::warmed`).
    pub final_ring_fill: u32,
    pub final_cache: u32,
}

impl SimOutcome {
    /// Slow-path calls per second over a profile of `duration_s`.
    pub fn per_s(count: u64, duration_s: f64) -> f64 {
        if duration_s > 0.0 {
            count as f64 / duration_s
        } else {
            0.0
        }
    }
}

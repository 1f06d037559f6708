//! The health verdict of a pool: one word from what was measured (the advice first, then the
//! ring hit rate and the ring-full share), shared by every face that colours or alerts.
use super::{Knob, PoolView, Verdict};

/// Worst last, so `max` is the worst pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Nothing measured that says how the pool does (tracepoints only, or no traffic).
    Unknown,
    Ok,
    Warn,
    Starving,
}

impl Health {
    pub fn word(self) -> &'static str {
        match self {
            Health::Unknown => "?",
            Health::Ok => "ok",
            Health::Warn => "warn",
            Health::Starving => "STARV",
        }
    }
}

// Thresholds. Why these:
// - The advice, when there is one, is the model's verdict from the pool's own burst profile:
//   it outranks any rule of thumb. "grow" means the ring is too small for the bursts: starving.
//   A pool at the kernel's maximum still short of the target is starving too (only a kernel
//   change helps).
// - Ring hit rate (ring ÷ (ring + slow)) is the direct measure of starvation: each miss is a
//   slow-path call (page allocator: 64 pages, µs; provider: one net_iov). Below 90% the slow
//   path serves more than one refill in ten (warn); below 50% the ring is mostly empty when
//   needed, the seed case (starving). The per-call fast-path rate is not used: a page-allocator
//   slow call brings 64 pages, so it never falls below 63/64 even when the pool starves.
// - Ring-full share of recycles: each such page leaves the pool (DMA unmap and put_page, or a
//   gen_pool walk for devmem) and must come back through the slow path. 1% is noticeable,
//   10% is the burst overrunning the ring.
// - A handful of events proves nothing: a pool needs MIN_REFILLS refills + slow calls or
//   MIN_RECYCLES recycles in the interval before its rates count (a pool that just started
//   fills itself through the slow path).
const HIT_WARN: f64 = 0.90;
const HIT_STARVING: f64 = 0.50;
const FULL_WARN: f64 = 0.01;
const FULL_STARVING: f64 = 0.10;
const MIN_REFILLS: u64 = 16;
const MIN_RECYCLES: u64 = 256;

/// The verdict of one pool over one interval (`Unknown` when nothing measured says).
pub fn health(p: &PoolView) -> Health {
    let mut h = Health::Unknown;
    if let Some(a) = &p.advice {
        h = match a.verdict {
            Verdict::Grow => Health::Starving,
            Verdict::Keep if a.knob == Knob::KernelChange && a.current.recycled_rate < a.target => {
                Health::Starving
            }
            Verdict::Keep | Verdict::Shrink => Health::Ok,
        };
    }
    if let (Some(hit), Some(ring), Some(slow)) = (p.ring_hit_rate, p.alloc.ring, p.alloc.slow) {
        if ring + slow >= MIN_REFILLS {
            h = h.max(if hit < HIT_STARVING {
                Health::Starving
            } else if hit < HIT_WARN {
                Health::Warn
            } else {
                Health::Ok
            });
        }
    }
    if let (Some(full), Some(total)) = (p.recycle.ring_full, p.recycle.total) {
        if total >= MIN_RECYCLES {
            let share = full as f64 / total as f64;
            h = h.max(if share >= FULL_STARVING {
                Health::Starving
            } else if share >= FULL_WARN {
                Health::Warn
            } else {
                Health::Ok
            });
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolView {
        PoolView::unprobed(1, None, None)
    }

    #[test]
    fn nothing_measured_is_unknown_not_ok() {
        assert_eq!(health(&pool()), Health::Unknown);
    }

    #[test]
    fn ring_hit_rate_thresholds() {
        let mut p = pool();
        p.alloc.ring = Some(95);
        p.alloc.slow = Some(5);
        p.ring_hit_rate = Some(0.95);
        assert_eq!(health(&p), Health::Ok);
        p.ring_hit_rate = Some(0.8);
        assert_eq!(health(&p), Health::Warn);
        p.ring_hit_rate = Some(0.3);
        assert_eq!(health(&p), Health::Starving);
        // Too few refills to judge.
        p.alloc.ring = Some(1);
        p.alloc.slow = Some(2);
        assert_eq!(health(&p), Health::Unknown);
    }

    #[test]
    fn ring_full_share_thresholds() {
        let mut p = pool();
        p.recycle.total = Some(1000);
        p.recycle.ring_full = Some(5);
        assert_eq!(health(&p), Health::Ok);
        p.recycle.ring_full = Some(50);
        assert_eq!(health(&p), Health::Warn);
        p.recycle.ring_full = Some(200);
        assert_eq!(health(&p), Health::Starving);
    }
}

//! Per-pool figures the table shows and sorts by, computed once per snapshot (not per frame).
//! The health verdict that colours a row is the library's (`ppscope::snapshot::health`).
pub use ppscope::snapshot::health::{assess, health, Basis, Health};
use ppscope::snapshot::PoolView;

/// What a row shows, per second where it is a count. `None` is unknown (shown `?`).
#[derive(Debug, Clone)]
pub struct Metrics {
    pub label: String,
    /// Lower-case label, driver and pool name: what the filter matches.
    pub search: String,
    pub health: Health,
    pub alloc_s: Option<f64>,
    pub slow_s: Option<f64>,
    pub full_s: Option<f64>,
    pub fast: Option<f64>,
    pub hit: Option<f64>,
    /// The ring was never asked (no refill, no slow path): its hit rate is not unknown, there
    /// was nothing to hit (shown `-`).
    pub ring_idle: bool,
    pub p99_ns: Option<u64>,
    pub inflight_bytes: Option<u64>,
    /// Ring fill as a share of the ring.
    pub fill: Option<f64>,
}

/// `n` over the interval as a rate; unknown when the interval has no length.
pub fn per_s(n: Option<u64>, secs: f64) -> Option<f64> {
    n.filter(|_| secs > 0.0).map(|n| n as f64 / secs)
}

impl Metrics {
    /// The ring hit rate as shown: `-` when the ring was never asked, `?` when unknown.
    pub fn hit_text(&self) -> String {
        if self.ring_idle {
            "-".into()
        } else {
            crate::fmt::pct(self.hit)
        }
    }

    pub fn of(p: &PoolView, secs: f64) -> Self {
        let label = p.label();
        let search =
            format!("{} {} {}", label, p.driver.as_deref().unwrap_or(""), p.pool).to_lowercase();
        Metrics {
            label,
            search,
            health: health(p, secs),
            alloc_s: per_s(p.alloc.total, secs),
            slow_s: per_s(p.alloc.slow, secs),
            full_s: per_s(p.recycle.ring_full, secs),
            fast: p.fast_path_rate,
            hit: p.ring_hit_rate,
            ring_idle: p.alloc.ring == Some(0) && p.alloc.slow == Some(0),
            p99_ns: p.slow_path_latency.as_ref().map(|l| l.p99_ns),
            inflight_bytes: p
                .inflight_bytes
                .or_else(|| p.netlink.as_ref().and_then(|k| k.inflight_bytes)),
            fill: match (p.ring_fill, p.ring_size) {
                (Some(f), Some(s)) if s > 0 => Some(f as f64 / s as f64),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_measured_is_unknown() {
        let m = Metrics::of(&PoolView::unprobed(1, None, None), 1.0);
        assert_eq!(m.health, Health::Unknown);
        assert_eq!((m.alloc_s, m.hit, m.p99_ns), (None, None, None));
    }

    #[test]
    fn a_ring_never_asked_has_nothing_to_hit() {
        let mut p = PoolView::unprobed(1, None, None);
        p.alloc.ring = Some(0);
        p.alloc.slow = Some(0);
        assert_eq!(Metrics::of(&p, 1.0).hit_text(), "-");
        p.alloc.slow = None;
        assert_eq!(Metrics::of(&p, 1.0).hit_text(), "?", "not measured");
        p.alloc.slow = Some(3);
        p.ring_hit_rate = Some(0.0);
        assert_eq!(Metrics::of(&p, 1.0).hit_text(), "0.0%");
    }

    #[test]
    fn rates_need_an_interval() {
        assert_eq!(per_s(Some(10), 0.0), None);
        assert_eq!(per_s(Some(10), 2.0), Some(5.0));
        assert_eq!(per_s(None, 2.0), None);
    }
}

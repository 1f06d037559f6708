//! The health verdict of a pool: one word from what was measured, shared by every face that
//! colours, prints, exports or alerts, with the basis it was read from and a sentence saying
//! how, and how sure it is.
//!
//! The bases, best first (the first that says anything decides):
//! 1. **split**: the advice, the ring hit rate and the ring-full share, where hooks or the
//!    kernel's stats split allocations and recycles (exact);
//! 2. **packets**: fresh pages (the pool's slow path) per packet its device received, where
//!    the NAPI hook counts packets but nothing splits allocations (a tracepoint-only kernel
//!    at `--detail full`): an estimate, as a packet is not a page;
//! 3. **churn**: pages taken from the allocator and returned to it within the interval, per
//!    ring's worth a second, where even packets are unknown (tracepoint-only at `--detail
//!    light`): it can say pages cycle, not what share of the traffic that is, so it warns at
//!    most.
//!
//! Where none has enough events, the verdict stays unknown (`?`).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Knob, PoolView, Verdict};
use crate::units::pct;

/// Worst last, so `max` is the worst pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Nothing measured that says how the pool does (no traffic, or too little known).
    Unknown,
    Ok,
    Warn,
    Starving,
}

impl Health {
    /// The dashboard's cell (five columns wide).
    pub fn word(self) -> &'static str {
        match self {
            Health::Unknown => "?",
            Health::Ok => "ok",
            Health::Warn => "warn",
            Health::Starving => "STARV",
        }
    }

    /// The verdict in a sentence: "starving", "warn".
    pub fn name(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Ok => "ok",
            Health::Warn => "warn",
            Health::Starving => "starving",
        }
    }

    /// The value of the `ppscope_page_pool_health` gauge (None: no series).
    pub fn level(self) -> Option<u8> {
        match self {
            Health::Unknown => None,
            Health::Ok => Some(0),
            Health::Warn => Some(1),
            Health::Starving => Some(2),
        }
    }
}

/// What a verdict was read from (module docs: best first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    Nothing,
    Split,
    Packets,
    Churn,
}

impl Basis {
    /// The `basis` label of the health gauge.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Nothing => "none",
            Basis::Split => "split",
            Basis::Packets => "packets",
            Basis::Churn => "churn",
        }
    }
}

/// What a pool's device received over the interval (the work of its NAPI polls), and the
/// fresh pages its pools shown took meanwhile: which pool took which packet is not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DevicePackets {
    /// Packets the device received (its NAPI polls' work), whichever pool took them.
    pub packets: u64,
    /// Pages the device's pools took from the allocator over the interval, all of them.
    pub fresh_pages: u64,
    /// The device's pools that took any.
    pub pools: u32,
}

/// A pool's verdict, its basis, and how it was reached: `figure` in a few words (the
/// dashboard's detail pane), `how` in a sentence with its uncertainty (`diagnose`).
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub health: Health,
    pub basis: Basis,
    pub figure: String,
    pub how: String,
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
// - Fresh pages per packet mirror the hit rate: with a page per packet, 0.1 is one packet in
//   ten served by the slow path, 0.5 half of them. A pool's own packets are not known where
//   its device has several pools, so its fresh pages are set against all the device's
//   packets: a lower bound of its own rate, enough to say warn or starving. "ok" then needs
//   the device as a whole below the warn line too.
// - Churn: a pool whose ring holds its pages takes none fresh once filled; one that takes and
//   returns its whole ring's worth every second or more is cycling pages through the
//   allocator (each a DMA map and unmap). On a busy NIC that can still be a small share of
//   the traffic, which only packets would tell: so it warns, never more.
// - A handful of events proves nothing: a pool needs MIN_REFILLS refills + slow calls,
//   MIN_RECYCLES recycles, MIN_PACKETS packets on its device or MIN_RECYCLES pages cycled
//   in the interval before its rates count (a pool that just started fills itself through
//   the slow path).
const HIT_WARN: f64 = 0.90;
const HIT_STARVING: f64 = 0.50;
const FULL_WARN: f64 = 0.01;
const FULL_STARVING: f64 = 0.10;
const FRESH_WARN: f64 = 1.0 - HIT_WARN;
const FRESH_STARVING: f64 = 1.0 - HIT_STARVING;
const CHURN_WARN_RINGS_PER_S: f64 = 1.0;
const MIN_REFILLS: u64 = 16;
const MIN_RECYCLES: u64 = 256;
const MIN_PACKETS: u64 = 256;

/// The verdict of one pool over an interval of `secs` (`Unknown` when nothing measured says),
/// and its basis, without the words (the agent judges every pool at every collection).
pub fn verdict(p: &PoolView, secs: f64) -> (Health, Basis) {
    let a = judge(p, secs, false);
    (a.health, a.basis)
}

/// The pools of `snap` whose verdict over its window is warn or starving, worst first, each
/// with its verdict: what `diagnose --check` calls findings.
pub fn findings(snap: &super::Snapshot) -> Vec<(&PoolView, Health)> {
    let mut found: Vec<_> = snap
        .pools
        .iter()
        .map(|p| (p, health(p, snap.duration_seconds)))
        .filter(|(_, h)| matches!(h, Health::Warn | Health::Starving))
        .collect();
    found.sort_by_key(|(_, h)| std::cmp::Reverse(*h));
    found
}

/// The verdict of one pool over an interval of `secs`.
pub fn health(p: &PoolView, secs: f64) -> Health {
    verdict(p, secs).0
}

/// The verdict of one pool over an interval of `secs`, with its basis and how it was reached.
pub fn assess(p: &PoolView, secs: f64) -> Assessment {
    judge(p, secs, true)
}

/// The first basis that says something; the words only when `words`.
fn judge(p: &PoolView, secs: f64, words: bool) -> Assessment {
    if let Some(a) = from_split(p, words) {
        return a;
    }
    if let Some(a) = from_packets(p, words) {
        return a;
    }
    if let Some(a) = from_churn(p, secs, words) {
        return a;
    }
    let how = if !words {
        String::new()
    } else if p.pages.allocated.is_none() && p.alloc.slow.is_none() {
        "no hook on this kernel counts this pool's pages".into()
    } else {
        format!(
            "{}, {} and too few pages cycled through the allocator to judge",
            split_state(p),
            packets_state(p)
        )
    };
    Assessment {
        health: Health::Unknown,
        basis: Basis::Nothing,
        figure: if words {
            "not enough measured".into()
        } else {
            String::new()
        },
        how,
    }
}

/// Why the split said nothing, as a clause.
fn split_state(p: &PoolView) -> &'static str {
    if p.alloc.slow.is_some() || p.recycle.total.is_some() {
        "too few refills or recycles in the interval"
    } else {
        "no allocation split on this kernel"
    }
}

/// Why packets said nothing, as a clause.
fn packets_state(p: &PoolView) -> &'static str {
    if p.device_packets.is_some() {
        "too few packets on its device"
    } else {
        "no packet count for its device (the napi_poll hook is off at --detail light; `--detail full` turns it on)"
    }
}

/// One of three levels from `x` and the two thresholds, higher worse.
fn level(x: f64, warn: f64, starving: f64) -> Health {
    if x >= starving {
        Health::Starving
    } else if x >= warn {
        Health::Warn
    } else {
        Health::Ok
    }
}

/// Advice, ring hit rate and ring-full share: the worst of those measured.
fn from_split(p: &PoolView, words: bool) -> Option<Assessment> {
    let mut h = Health::Unknown;
    let mut read = Vec::new();
    if let Some(a) = &p.advice {
        h = match a.verdict {
            Verdict::Grow => Health::Starving,
            Verdict::Keep if a.knob == Knob::KernelChange && a.current.recycled_rate < a.target => {
                Health::Starving
            }
            Verdict::Keep | Verdict::Shrink => Health::Ok,
        };
        read.push(
            match a.verdict {
                Verdict::Keep => "advice keep",
                Verdict::Grow => "advice grow",
                Verdict::Shrink => "advice shrink",
            }
            .to_string(),
        );
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
            if words {
                read.push(format!("ring hit rate {}", pct(hit)));
            }
        }
    }
    if let (Some(full), Some(total)) = (p.recycle.ring_full, p.recycle.total) {
        if total >= MIN_RECYCLES {
            let share = full as f64 / total as f64;
            h = h.max(level(share, FULL_WARN, FULL_STARVING));
            if words {
                read.push(format!("ring-full share {}", pct(share)));
            }
        }
    }
    (h != Health::Unknown).then(|| Assessment {
        health: h,
        basis: Basis::Split,
        figure: if words {
            read.join(", ")
        } else {
            String::new()
        },
        how: if words {
            format!(
                "from the allocation split: {} (exact counts)",
                read.join(", ")
            )
        } else {
            String::new()
        },
    })
}

/// The pool's fresh pages against its device's packets (module docs, thresholds above).
fn from_packets(p: &PoolView, words: bool) -> Option<Assessment> {
    let (fresh, dev) = (p.pages.allocated?, p.device_packets?);
    if dev.packets < MIN_PACKETS {
        return None;
    }
    let per_packet = fresh as f64 / dev.packets as f64;
    let device_per_packet = dev.fresh_pages as f64 / dev.packets as f64;
    let shared = dev.pools > 1;
    let health = match level(per_packet, FRESH_WARN, FRESH_STARVING) {
        // A lower bound below the line proves nothing for one pool of many, unless the
        // whole device is below it too.
        Health::Ok if shared && device_per_packet >= FRESH_WARN => return None,
        h => h,
    };
    if !words {
        return Some(Assessment {
            health,
            basis: Basis::Packets,
            figure: String::new(),
            how: String::new(),
        });
    }
    let whose = if shared {
        format!(
            " (all {} of the device's, which its {} pools share: a lower bound of this pool's rate; the device's pools together take {device_per_packet:.2})",
            dev.packets, dev.pools
        )
    } else {
        String::new()
    };
    Some(Assessment {
        health,
        basis: Basis::Packets,
        figure: format!("{per_packet:.2} fresh pages per received packet"),
        how: format!(
            "an estimate from {per_packet:.2} fresh pages per received packet: {fresh} pages, {} packets{whose}; \
             this kernel does not split allocations, and a page may carry several packets or a packet several pages",
            dev.packets
        ),
    })
}

/// Pages taken from the allocator and returned to it in the interval, in rings a second.
fn from_churn(p: &PoolView, secs: f64, words: bool) -> Option<Assessment> {
    let cycled = p.pages.allocated?.min(p.pages.released?);
    let ring = p.ring_size.or(p.pool_size).filter(|&r| r > 0)?;
    if cycled < MIN_RECYCLES || secs <= 0.0 {
        return None;
    }
    let per_s = cycled as f64 / secs;
    let rings = per_s / f64::from(ring);
    if rings < CHURN_WARN_RINGS_PER_S {
        return None;
    }
    Some(Assessment {
        health: Health::Warn,
        basis: Basis::Churn,
        figure: if words {
            format!("{per_s:.0} pages/s cycled through the allocator, {rings:.1} rings/s")
        } else {
            String::new()
        },
        how: if words {
            format!(
                "pages cycle through the page allocator: {per_s:.0}/s taken and returned, {rings:.1} rings of {ring} a second; \
                 with {} and {}, the share of the traffic this is, and so whether the pool starves, cannot be said: warn at most",
                split_state(p),
                packets_state(p)
            )
        } else {
            String::new()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolView {
        PoolView::unprobed(1, None, None)
    }

    #[test]
    fn nothing_measured_is_unknown_not_ok() {
        assert_eq!(health(&pool(), 1.0), Health::Unknown);
    }

    #[test]
    fn ring_hit_rate_thresholds() {
        let mut p = pool();
        p.alloc.ring = Some(95);
        p.alloc.slow = Some(5);
        p.ring_hit_rate = Some(0.95);
        assert_eq!(health(&p, 1.0), Health::Ok);
        p.ring_hit_rate = Some(0.8);
        assert_eq!(health(&p, 1.0), Health::Warn);
        p.ring_hit_rate = Some(0.3);
        assert_eq!(health(&p, 1.0), Health::Starving);
        // Too few refills to judge.
        p.alloc.ring = Some(1);
        p.alloc.slow = Some(2);
        assert_eq!(health(&p, 1.0), Health::Unknown);
    }

    #[test]
    fn ring_full_share_thresholds() {
        let mut p = pool();
        p.recycle.total = Some(1000);
        p.recycle.ring_full = Some(5);
        assert_eq!(health(&p, 1.0), Health::Ok);
        p.recycle.ring_full = Some(50);
        assert_eq!(health(&p, 1.0), Health::Warn);
        p.recycle.ring_full = Some(200);
        assert_eq!(health(&p, 1.0), Health::Starving);
    }

    /// A tracepoint-only pool: fresh pages and pages returned, nothing split.
    fn traced(fresh: u64, returned: u64) -> PoolView {
        let mut p = pool();
        p.pages.allocated = Some(fresh);
        p.pages.released = Some(returned);
        p.ring_size = Some(256);
        p
    }

    fn on_device(p: &mut PoolView, packets: u64, fresh_pages: u64, pools: u32) {
        p.device_packets = Some(DevicePackets {
            packets,
            fresh_pages,
            pools,
        });
    }

    #[test]
    fn fresh_pages_per_packet_judge_where_nothing_splits() {
        let mut p = traced(50, 0);
        on_device(&mut p, 1000, 50, 1);
        let a = assess(&p, 1.0);
        assert_eq!((a.health, a.basis), (Health::Ok, Basis::Packets));
        assert_eq!(a.figure, "0.05 fresh pages per received packet");
        assert!(a.how.contains("an estimate"), "{}", a.how);
        assert_eq!(verdict(&p, 1.0), (Health::Ok, Basis::Packets));
        p.pages.allocated = Some(200);
        assert_eq!(health(&p, 1.0), Health::Warn);
        p.pages.allocated = Some(990);
        assert_eq!(health(&p, 1.0), Health::Starving);
        // Too few packets on the device to judge by: nothing cycled either (none returned).
        on_device(&mut p, 200, 990, 1);
        assert_eq!(assess(&p, 1.0).basis, Basis::Nothing);
    }

    #[test]
    fn a_device_shared_by_pools_gives_a_lower_bound() {
        // 990 fresh pages against all 1000 packets of a 4-pool device: starving whichever
        // share of the packets was this pool's.
        let mut p = traced(990, 0);
        on_device(&mut p, 1000, 1200, 4);
        let a = assess(&p, 1.0);
        assert_eq!((a.health, a.basis), (Health::Starving, Basis::Packets));
        assert!(a.how.contains("which its 4 pools share"), "{}", a.how);
        assert!(a.how.contains("lower bound"), "{}", a.how);
        // 0.02 for this pool against all packets proves nothing while the device's pools
        // together take 0.6 a packet: this pool may have had few of them.
        p.pages.allocated = Some(20);
        on_device(&mut p, 1000, 600, 4);
        assert_eq!(health(&p, 1.0), Health::Unknown);
        // The whole device below the warn line: this pool is too.
        on_device(&mut p, 1000, 50, 4);
        assert_eq!(verdict(&p, 1.0), (Health::Ok, Basis::Packets));
    }

    #[test]
    fn pages_cycled_through_the_allocator_warn_at_most() {
        // veth + XDP on the 6.18 host: ~26,000 pages a second taken and returned on a
        // 256-entry ring, no packet count at --detail light.
        let a = assess(&traced(52_000, 51_000), 2.0);
        assert_eq!((a.health, a.basis), (Health::Warn, Basis::Churn));
        assert!(a.how.contains("25500/s taken and returned"), "{}", a.how);
        assert!(a.how.contains("`--detail full` turns it on"), "{}", a.how);
        assert_eq!(
            a.figure,
            "25500 pages/s cycled through the allocator, 99.6 rings/s"
        );
        assert!(a.how.contains("99.6 rings of 256 a second"), "{}", a.how);
        // Less than a ring a second, or too few pages: no verdict.
        assert_eq!(health(&traced(400, 400), 2.0), Health::Unknown);
        assert_eq!(health(&traced(200, 200), 0.1), Health::Unknown);
        // Taken but not returned (a pool filling up) is not cycling.
        assert_eq!(health(&traced(52_000, 0), 2.0), Health::Unknown);
        // No ring size known: no ring to count in.
        let mut p = traced(52_000, 51_000);
        p.ring_size = None;
        assert_eq!(health(&p, 2.0), Health::Unknown);
        p.pool_size = Some(1024);
        assert_eq!(health(&p, 2.0), Health::Warn);
    }

    #[test]
    fn the_exact_split_outranks_the_estimates() {
        let mut p = traced(990, 990);
        on_device(&mut p, 1000, 990, 1);
        p.alloc.ring = Some(95);
        p.alloc.slow = Some(5);
        p.ring_hit_rate = Some(0.95);
        let a = assess(&p, 1.0);
        assert_eq!((a.health, a.basis), (Health::Ok, Basis::Split));
        assert!(a.how.contains("ring hit rate 95.0%"), "{}", a.how);
    }

    #[test]
    fn an_unknown_verdict_says_what_is_missing() {
        assert!(assess(&pool(), 1.0).how.contains("no hook on this kernel"));
        let a = assess(&traced(10, 10), 1.0);
        assert_eq!(a.basis, Basis::Nothing);
        assert!(a.how.contains("--detail full"), "{}", a.how);
        assert_eq!(Health::Unknown.level(), None);
        assert_eq!(Health::Starving.level(), Some(2));
    }
}

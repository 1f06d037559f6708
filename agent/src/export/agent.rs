//! `ppscope agent`: collect every interval, keep the snapshot since start for the HTTP side,
//! retire pools that stopped moving, stop cleanly when told to (the probes detach as they are
//! dropped).
use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    http::{HttpServer, Shared},
    metrics::SelfStats,
};
use crate::{probes::Probes, snapshot::Snapshot, source::LiveSource};

/// How the agent runs.
pub struct AgentOptions {
    pub listen: SocketAddr,
    pub interval: Duration,
    /// At most this many pools are exported; the rest are counted as dropped series.
    pub max_pools: usize,
    /// A pool whose counters have not moved for this long leaves the metrics.
    pub grace: Duration,
}

/// Pools that stopped moving leave the metrics after a grace period.
#[derive(Debug, Default)]
struct Retirement {
    /// Per pool: its activity when it last moved, and when that was.
    last_moved: HashMap<String, (u64, Instant)>,
}

impl Retirement {
    /// Drops from `snap` the pools that have not moved for longer than `grace` as of `now`.
    fn retire(&mut self, snap: &mut Snapshot, grace: Duration, now: Instant) {
        let listed: HashSet<String> = snap.pools.iter().map(|p| p.pool.clone()).collect();
        snap.pools.retain(|p| {
            let activity = p.activity();
            let entry = self
                .last_moved
                .entry(p.pool.clone())
                .or_insert((activity, now));
            if entry.0 != activity {
                *entry = (activity, now);
            }
            now.duration_since(entry.1) <= grace
        });
        // Forget only pools the kernel side no longer lists: forgetting a quiet pool that is
        // still listed would make it new again, and bring it back after its grace.
        self.last_moved.retain(|pool, _| listed.contains(pool));
    }
}

/// The collector's lock, even if a thread panicked while holding it: what it guards is a
/// finished snapshot, never half-written.
fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the agent until `wait` (which sleeps up to the interval) says to stop. `start_probes`
/// runs after the port is bound: a busy port is reported before anything is loaded into the
/// kernel. `say` gets one line per event.
pub fn run(
    opts: &AgentOptions,
    start_probes: impl FnOnce() -> Result<Probes>,
    mut wait: impl FnMut(Duration) -> bool,
    mut say: impl FnMut(&str),
) -> Result<()> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let server = HttpServer::start(opts.listen, shared.clone(), opts.interval, opts.max_pools)?;
    let mut live = LiveSource::new(start_probes()?)?;
    let hooks = live.hooks();
    say(&format!(
        "agent serving http://{}/metrics every {} (--detail {}, {}/{} hooks attached)",
        server.addr,
        humantime::format_duration(opts.interval),
        live.detail().name(),
        hooks.iter().filter(|h| h.attached()).count(),
        hooks.len()
    ));
    let mut retirement = Retirement::default();
    let mut stats = SelfStats::default();
    loop {
        if wait(opts.interval) {
            break;
        }
        let started = Instant::now();
        let collection = match live.collect(true) {
            Ok(c) => c,
            Err(e) => {
                // Keep serving the last values; say so in the self-metrics.
                stats.collection_errors += 1;
                say(&format!("collection failed: {e:#}"));
                lock(&shared).stats = stats.clone();
                continue;
            }
        };
        for change in &collection.module_changes {
            say(change);
        }
        stats.map_entries = collection.map_entries;
        stats.map_capacity = collection.map_capacity;
        stats.map_evictions = collection.map_evictions;
        let mut snap = collection.since_start.expect("asked for");
        let now = Instant::now();
        retirement.retire(&mut snap, opts.grace, now);
        stats.collections += 1;
        stats.last_collection_seconds = started.elapsed().as_secs_f64();
        stats.pools_tracked = snap.pools.len();
        let mut sh = lock(&shared);
        let last_scrape = sh.stats.last_scrape_seconds;
        sh.stats = stats.clone();
        sh.stats.last_scrape_seconds = last_scrape;
        sh.snapshot = Some(snap);
        // The last interval alone, for remote dashboards (`top --connect`): rates, not totals.
        sh.interval_snapshot = Some(collection.interval);
        sh.last_collection = Some(now);
    }
    server.stop();
    say("agent stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::PoolView;

    fn pool(netlink_id: u32, allocs: u64) -> PoolView {
        let mut p = PoolView::unprobed(netlink_id, None, None);
        p.alloc.total = Some(allocs);
        p
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.pools.iter().map(|p| p.pool.clone()).collect()
    }

    #[test]
    fn a_pool_leaves_after_its_grace_and_comes_back_when_it_moves() {
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut r = Retirement::default();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let snap = |a: u64, b: u64| Snapshot::with_pools("k", 1.0, vec![pool(1, a), pool(2, b)]);

        let mut s = snap(10, 10);
        r.retire(&mut s, grace, at(0));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        // Pool 2 keeps moving, pool 1 does not: within its grace it stays.
        let mut s = snap(10, 20);
        r.retire(&mut s, grace, at(5));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
        let mut s = snap(10, 30);
        r.retire(&mut s, grace, at(6));
        assert_eq!(names(&s), ["netlink:2"], "quiet for 6 s > 5 s of grace");
        // It moves again: back at once.
        let mut s = snap(11, 30);
        r.retire(&mut s, grace, at(7));
        assert_eq!(names(&s), ["netlink:1", "netlink:2"]);
    }

    #[test]
    fn a_quiet_pool_still_listed_is_not_made_new_again() {
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut r = Retirement::default();
        let mut s = Snapshot::with_pools("k", 1.0, vec![pool(1, 10)]);
        r.retire(&mut s, grace, t0);
        for secs in [6, 60, 600] {
            let mut s = Snapshot::with_pools("k", 1.0, vec![pool(1, 10)]);
            r.retire(&mut s, grace, t0 + Duration::from_secs(secs));
            assert!(s.pools.is_empty(), "still retired at {secs} s");
        }
        // Gone from the kernel side: forgotten, so a new pool at the same name starts afresh.
        let mut s = Snapshot::with_pools("k", 1.0, vec![]);
        r.retire(&mut s, grace, t0 + Duration::from_secs(601));
        assert!(r.last_moved.is_empty());
    }
}

//! `ppscope agent`: collect every interval, hand the collection to the HTTP side (which
//! assembles its snapshots when a scrape asks, and retires pools that stopped moving), stop
//! cleanly when told to (the probes detach as they are dropped).
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    http::{HttpServer, Shared},
    metrics::SelfStats,
    retire::Retirement,
};
use crate::{probes::Probes, source::LiveSource};

/// How the agent runs.
pub struct AgentOptions {
    pub listen: SocketAddr,
    pub interval: Duration,
    /// At most this many pools are exported; the rest are counted as dropped series.
    pub max_pools: usize,
    /// A pool whose counters have not moved for this long leaves the metrics.
    pub grace: Duration,
}

/// The collector's lock, even if a thread panicked while holding it: what it guards is a
/// finished collection or snapshot, never half-written.
fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the agent until `wait` (which sleeps up to the interval) says to stop. `start_probes`
/// runs after the port is bound: a busy port is reported before anything is loaded into the
/// kernel. Its events are logged, one line each.
pub fn run(
    opts: &AgentOptions,
    start_probes: impl FnOnce() -> Result<Probes>,
    mut wait: impl FnMut(Duration) -> bool,
) -> Result<()> {
    let shared = Arc::new(Mutex::new(Shared {
        retirement: Retirement::new(opts.grace),
        ..Shared::default()
    }));
    let server = HttpServer::start(opts.listen, shared.clone(), opts.interval, opts.max_pools)?;
    let mut live = LiveSource::new(start_probes()?)?;
    let hooks = live.hooks();
    log::info!(
        "agent serving http://{}/metrics every {} (--detail {}, {}/{} hooks attached)",
        server.addr,
        humantime::format_duration(opts.interval),
        live.detail().name(),
        hooks.iter().filter(|h| h.attached()).count(),
        hooks.len()
    );
    let mut stats = SelfStats::default();
    loop {
        if wait(opts.interval) {
            break;
        }
        let started = Instant::now();
        let collection = match live.collect() {
            Ok(c) => c,
            Err(e) => {
                // Keep serving the last values; say so in the self-metrics.
                stats.collection_errors += 1;
                log::warn!("collection failed: {e:#}");
                lock(&shared).stats = stats.clone();
                continue;
            }
        };
        stats.map_entries = collection.map_entries;
        stats.map_capacity = collection.map_capacity;
        stats.map_evictions = collection.map_evictions;
        let moved = collection.collected.moved();
        stats.collections += 1;
        stats.last_collection_seconds = started.elapsed().as_secs_f64();
        let mut sh = lock(&shared);
        // What the server measures itself (the scrape time) stays.
        stats.last_scrape_seconds = sh.stats.last_scrape_seconds;
        sh.stats = stats.clone();
        sh.publish(collection.collected, moved, Instant::now());
    }
    server.stop();
    log::info!("agent stopped");
    Ok(())
}

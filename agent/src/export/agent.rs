//! `ppscope agent`: collect every interval, hand each collection to the HTTP side (which
//! assembles its snapshots when a scrape asks, and retires pools that stopped moving), stop
//! cleanly on SIGTERM or SIGINT (the server drains, the probes detach as they are dropped).
//!
//! It runs on tokio: the server's tasks, the interval's ticks and the signals. Collecting
//! (BPF map reads, the advice) is CPU work that blocks, so it runs on tokio's blocking pool
//! with the live source handed to it and back; it never holds up a scrape.
use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use tokio::{
    signal::unix::{signal, SignalKind},
    task::spawn_blocking,
    time::MissedTickBehavior,
};

use super::{
    http::{HttpServer, Publication, ServerState},
    metrics::SelfStats,
    retire::Retirement,
};
use crate::{
    probes::Probes,
    source::{Collection, LiveSource},
};

/// How the agent runs.
pub struct AgentOptions {
    pub listen: SocketAddr,
    pub interval: Duration,
    /// At most this many pools are exported; the rest are counted as dropped series.
    pub max_pools: usize,
    /// A pool whose counters have not moved for this long leaves the metrics.
    pub grace: Duration,
}

/// Threads of the agent's runtime that accept and answer (tokio's workers).
pub const WORKER_THREADS: usize = 2;
/// Threads of its blocking pool, which collects and renders: CPU work, so a few at most
/// whatever the burst of scrapes (more would not answer sooner, and each holds memory).
/// Renderings take at most [`super::http::RENDERS_AT_ONCE`] of them, so a collection always
/// finds one free.
pub const BLOCKING_THREADS: usize = 4;
const _: () = assert!(super::http::RENDERS_AT_ONCE < BLOCKING_THREADS);

/// The runtime the agent runs on: [`WORKER_THREADS`] are plenty for a scrape every few
/// seconds (a host's CPU count would start dozens of idle threads), and at most
/// [`BLOCKING_THREADS`] collect and render; its threads are these and the main one, however
/// many clients come.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    share_one_malloc_arena();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(Duration::from_secs(2))
        .thread_name("ppscope-agent")
        .enable_all()
        .build()
        .context("cannot start the agent's runtime")
}

/// Makes the threads started from now on allocate from glibc's main arena instead of one
/// arena each. Every blocking thread that renders a large answer (a megabyte of text at 1,000
/// pools) would otherwise keep that memory in an arena of its own after freeing it: at 1,000
/// pools the agent's RSS was 34.8 MB with an arena per thread and 27.0 MB with one
/// (`cargo xtask bench --only agent --pools 1000`, BENCHMARKS.md section 3). The agent's threads
/// take turns (a collection a second, a scrape every few), so they hardly contend for it.
/// `MALLOC_ARENA_MAX` in the environment, glibc's own knob, is left to decide when set.
fn share_one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; glibc takes its own lock, and
        // arenas already given to a thread stay valid.
        let set = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
        if set != 1 {
            log::debug!("glibc refused M_ARENA_MAX=1; each thread keeps an arena of its own");
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT. `start_probes` runs after the port is bound: a
/// busy port is reported before anything is loaded into the kernel. Its events are logged, one
/// line each.
pub async fn run(
    opts: &AgentOptions,
    start_probes: impl FnOnce() -> Result<Probes> + Send + 'static,
) -> Result<()> {
    // Listening for the signals from the start: one that comes while the probes load is
    // taken at the first tick.
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let state = ServerState::new(opts.interval, opts.max_pools);
    let server = HttpServer::bind(opts.listen, state.clone()).await?;
    let mut live = spawn_blocking(move || LiveSource::new(start_probes()?)).await??;
    let hooks = live.hooks();
    log::info!(
        "agent serving http://{}/metrics every {} (--detail {}, {}/{} hooks attached)",
        server.addr,
        humantime::format_duration(opts.interval),
        live.detail().name(),
        hooks.iter().filter(|h| h.attached()).count(),
        hooks.len()
    );
    let mut retirement = Retirement::new(opts.grace);
    let mut stats = SelfStats::default();
    // Ticks on a fixed grid from the start: a slow collection does not push the next ones
    // later, and ticks missed while one ran are skipped, not made up in a burst.
    let start = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(start + opts.interval, opts.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = ticks.tick() => {}
        }
        let started = Instant::now();
        let (back, collected) = spawn_blocking(move || {
            let c = live.collect().map(|c| {
                let moved = c.collected.moved();
                (c, moved)
            });
            (live, c)
        })
        .await
        .context("the collection's thread failed")?;
        live = back;
        let (collection, moved) = match collected {
            Ok(c) => c,
            Err(e) => {
                // Keep serving the last values; say so in the self-metrics.
                stats.collection_errors += 1;
                log::warn!("collection failed: {e:#}");
                republish_stats(&state, &stats);
                continue;
            }
        };
        let Collection {
            collected,
            map_entries,
            map_capacity,
            map_evictions,
            unmatched_returns,
            recycle_pair_lost,
        } = collection;
        stats.map_entries = map_entries;
        stats.map_capacity = map_capacity;
        stats.map_evictions = map_evictions;
        stats.unmatched_returns = unmatched_returns;
        stats.recycle_pair_lost = recycle_pair_lost;
        stats.collections += 1;
        stats.last_collection_seconds = started.elapsed().as_secs_f64();
        let at = Instant::now();
        retirement.moved(moved, at);
        state.publish(Publication::collected(
            collected,
            Arc::new(retirement.clone()),
            stats.clone(),
            at,
        ));
    }
    server.shutdown().await;
    // Detaching the probes closes their links and maps: blocking work too.
    let _ = spawn_blocking(move || drop(live)).await;
    log::info!("agent stopped");
    Ok(())
}

/// The last collection again with new self-statistics (a failed collection is counted
/// while the last values stay served).
fn republish_stats(state: &ServerState, stats: &SelfStats) {
    if let Some(p) = state.current() {
        state.publish(p.with_stats(stats.clone()));
    }
}

//! Prometheus exposition of a snapshot: text format 0.0.4, or OpenMetrics 1.0 when asked,
//! both written by prometheus-client's encoders from one [`Collector`] of the snapshot.
//!
//! Pure rendering, unit-tested: counters end in `_total`, histograms come from the kernel's
//! log2 nanosecond buckets made cumulative with every edge present (`le` = 2^(i+1) ns in
//! seconds up to 2^31 ns, then `+Inf`, which also holds the kernel's last bucket: it takes
//! everything longer), with `_sum` and `_count`; labels are bounded (device, queue, pool,
//! and kind/reason/hook/basis from fixed sets), never a pid, a page or a kernel address: `pool` is
//! the pool's netlink id, or ppscope's own `ppscope:N` where the kernel gives none.
use std::{collections::HashMap, sync::Arc};

use ppscope_common::LATENCY_BUCKETS;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet},
    metrics::MetricType,
    registry::Registry,
};

use crate::probes::Unmatched;
use crate::snapshot::{
    health::{self, Basis},
    DeviceView, HookMissed, Latency, NapiView, OverheadView, PoolView, Snapshot,
};

/// What the agent knows about itself, for the self-metrics.
#[derive(Debug, Clone, Default)]
pub struct SelfStats {
    pub collections: u64,
    pub collection_errors: u64,
    pub last_collection_seconds: f64,
    pub last_scrape_seconds: f64,
    pub series_dropped: u64,
    /// Pools in the kernel's per-pool map, and its capacity (LRU: the least recently seen
    /// pool is evicted when full).
    pub map_entries: usize,
    pub map_capacity: usize,
    /// Pools the full map evicted (least recently seen first), since the start.
    pub map_evictions: u64,
    /// Per attached hook that pairs an entry and an exit on some backend: returns that found
    /// another call's frame, since the start.
    pub unmatched_returns: Vec<Unmatched>,
    /// Whether the kprobe recycle pair lost more of its calls than it counted.
    pub recycle_pair_lost: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// From an HTTP `Accept` header.
    pub fn from_accept(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A series' labels, in the order written.
type Labels<'a> = Vec<(&'a str, &'a str)>;

/// One metric family being written: prometheus-client's encoder of it, and its type.
struct Family<'e> {
    metric: MetricEncoder<'e>,
    kind: MetricType,
}

impl Family<'_> {
    /// One series. A whole number is written as one (`3`, not `3.0`), as counts are.
    fn sample(&mut self, labels: &Labels, value: f64) -> std::fmt::Result {
        let mut series = self.metric.encode_family(labels)?;
        let whole = value.fract() == 0.0 && (0.0..9.0e15).contains(&value);
        match (self.kind, whole) {
            (MetricType::Counter, true) => {
                series.encode_counter::<NoLabelSet, _, u64>(&(value as u64), None)
            }
            (MetricType::Counter, false) => {
                series.encode_counter::<NoLabelSet, _, u64>(&value, None)
            }
            (_, true) => series.encode_gauge(&(value as u64)),
            (_, false) => series.encode_gauge(&value),
        }
    }

    /// A log2-ns histogram in seconds: every edge present whatever was counted (a family's
    /// series must share one `le` set, or `sum by (le)` across pools adds mismatched
    /// buckets), then `+Inf`. The kernel's last bucket has no upper edge (it holds every
    /// duration from 2^31 ns on, a clamp), so it is counted in `+Inf` only.
    fn histogram(&mut self, labels: &Labels, l: &Latency) -> std::fmt::Result {
        let count = |i: usize| l.buckets.get(i).copied().unwrap_or(0);
        let mut buckets: Vec<(f64, u64)> = (0..LATENCY_BUCKETS - 1)
            .map(|i| (((1u64 << (i + 1)) as f64) / 1e9, count(i)))
            .collect();
        buckets.push((f64::INFINITY, count(LATENCY_BUCKETS - 1)));
        self.metric
            .encode_family(labels)?
            .encode_histogram::<NoLabelSet>(l.sum_ns as f64 / 1e9, l.count, &buckets, None)
    }
}

/// Where a pool's known splits came from: the kernel's stats when the pool says so, else
/// ppscope's own hooks; a split with no known part is left out.
fn split_sources(p: &PoolView) -> Vec<(&'static str, &'static str)> {
    let source = |from: &Option<std::borrow::Cow<str>>| match from.as_deref() {
        Some("kernel") => "kernel",
        _ => "probes",
    };
    let a = &p.alloc;
    let r = &p.recycle;
    let mut out = Vec::new();
    if a.cache.is_some() || a.ring.is_some() || a.slow.is_some() {
        out.push(("alloc", source(&p.alloc_source)));
    }
    if r.cached.is_some() || r.ring.is_some() || r.ring_full.is_some() {
        out.push(("recycle", source(&p.recycle_source)));
    }
    out
}

/// The bounded label set of a pool.
fn pool_labels(p: &PoolView) -> (String, String, String) {
    let device = p.ifname.clone().unwrap_or_default();
    let queue = p.queue.map(|q| q.to_string()).unwrap_or_default();
    let pool = p
        .netlink_id
        .map_or_else(|| p.pool.clone(), |id| id.to_string());
    (device, queue, pool)
}

/// A pool's figure split by kind (the `kind` label), each kind when known.
type PoolKinds = [(&'static str, Option<u64>); 3];

/// Where a family's series come from.
enum Series {
    /// Per pool, one series per kind (`kind` label) that the pool knows.
    PoolKinds(fn(&PoolView) -> PoolKinds),
    /// Per pool that knows the figure.
    Pool(fn(&PoolView) -> Option<u64>),
    /// Per pool, while the hook that fills the histogram is attached (all zero until it
    /// counts: a series that appears only with its first event breaks `rate()`).
    PoolHistogram(&'static str, fn(&PoolView) -> Option<&Latency>),
    /// One histogram of the whole snapshot, while the hook that fills it is attached.
    Histogram(&'static str, fn(&Snapshot) -> Option<&Latency>),
    /// Per device with NAPI figures.
    Napi(fn(&NapiView) -> u64),
    /// Per device and drop reason.
    Drops,
    /// Per hook: 1 when attached, with its backend.
    Hooks,
    /// The detail level the probes run at (`level` label), when the source has one.
    Detail,
    /// Per pool and split (alloc, recycle) that is known: where it came from (`source`).
    SplitSources,
    /// Per pool whose health is known over the last interval: its level, with its `basis`.
    Health,
    /// ppscope's own programs; the family is left out when BPF stats are off.
    Overhead(fn(&OverheadView) -> f64),
    /// The agent itself.
    Agent(fn(&SelfStats, &Exported) -> f64),
    /// Per attached hook with an entry/exit pair (`hook` label).
    UnmatchedReturns,
    /// Per hook the kernel counts skipped runs for (`HookStatus::missed`).
    SkippedRuns,
    /// Per hook on kprobes whose kprobes' dropped hits were read (`HookStatus::missed`).
    KprobeMissed,
}

/// The hooks whose programs' missed events the source's last check counted, from their
/// status in the snapshot (what the reports show too).
fn hooks_missed(snap: &Snapshot) -> impl Iterator<Item = (&str, &HookMissed)> {
    snap.backends
        .iter()
        .filter_map(|(hook, status)| Some((hook.as_str(), status.missed.as_ref()?)))
}

/// What this rendering exported, for the agent's own families.
struct Exported {
    pools: usize,
    dropped: u64,
}

/// One metric family: its name, type, help, and where its series come from.
struct FamilyDef {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    series: Series,
}

const fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    series: Series,
) -> FamilyDef {
    FamilyDef {
        name,
        kind,
        help,
        series,
    }
}

/// Every family, in the order they are written. Adding a metric is a row here.
const FAMILIES: &[FamilyDef] = &[
    family(
        "ppscope_page_pool_alloc_total",
        "counter",
        "Page allocations by where they were served: alloc cache, ptr_ring refill, slow path.",
        Series::PoolKinds(|p| {
            [
                ("cache", p.alloc.cache),
                ("ring", p.alloc.ring),
                ("slow", p.alloc.slow),
            ]
        }),
    ),
    family(
        "ppscope_page_pool_recycle_total",
        "counter",
        "Recycled pages by where they went: alloc cache, ptr_ring, or out of the pool (ring full).",
        Series::PoolKinds(|p| {
            [
                ("cached", p.recycle.cached),
                ("ring", p.recycle.ring),
                ("ring_full", p.recycle.ring_full),
            ]
        }),
    ),
    family(
        "ppscope_page_pool_pages_allocated_total",
        "counter",
        "Pages that entered the pool from the page allocator or a memory provider.",
        Series::Pool(|p| p.pages.allocated),
    ),
    family(
        "ppscope_page_pool_pages_released_total",
        "counter",
        "Pages that left the pool (ring full, not recyclable, teardown).",
        Series::Pool(|p| p.pages.released),
    ),
    family(
        "ppscope_page_pool_slow_path_seconds",
        "histogram",
        "Time spent in the page_pool slow path (page allocator, 64 pages per call).",
        Series::PoolHistogram("slow_path", |p| p.slow_path_latency.as_ref()),
    ),
    family(
        "ppscope_page_pool_ring_size",
        "gauge",
        "Entries of the pool's ptr_ring.",
        Series::Pool(|p| p.ring_size.map(u64::from)),
    ),
    family(
        "ppscope_page_pool_pool_size",
        "gauge",
        "pool_size the driver asked for.",
        Series::Pool(|p| p.pool_size.map(u64::from)),
    ),
    family(
        "ppscope_page_pool_ring_fill",
        "gauge",
        "Entries in the ring at the pool's last refill, slow path or release (during a run of releases into a full ring, up to 63 releases a CPU behind); the ring's size when a release found its next slot taken (full to its producers).",
        Series::Pool(|p| p.ring_fill.map(u64::from)),
    ),
    family(
        "ppscope_page_pool_inflight_bytes",
        "gauge",
        "Memory of the pages out of the pool (held by the driver, the stack or sockets).",
        Series::Pool(|p| p.inflight_bytes),
    ),
    family(
        "ppscope_page_pool_recommended_ring_size",
        "gauge",
        "Ring size the advice recommends for this pool.",
        Series::Pool(|p| p.advice.as_ref().map(|a| u64::from(a.recommended_size))),
    ),
    family(
        "ppscope_page_pool_health",
        "gauge",
        "The pool's health over the last interval: 0 ok, 1 warn, 2 starving; no series while unknown. basis: what it was read from (split: the exact allocation split; packets: fresh pages per packet the device received, an estimate; churn: pages cycled through the page allocator, which warns at most).",
        Series::Health,
    ),
    family(
        "ppscope_page_pool_teardown_attempts_total",
        "counter",
        "Release attempts of a pool its driver destroyed while pages were still out (one a second until they return).",
        Series::Pool(|p| p.teardown.as_ref().map(|t| t.attempts)),
    ),
    family(
        "ppscope_page_pool_teardown_inflight_pages",
        "gauge",
        "Pages still out of a destroyed pool at its last release attempt.",
        Series::Pool(|p| p.teardown.as_ref().map(|t| t.inflight_pages.max(0) as u64)),
    ),
    family(
        "ppscope_devmem_dontneed_seconds",
        "histogram",
        "Latency of SO_DEVMEM_DONTNEED (sock_devmem_dontneed).",
        Series::Histogram("devmem_dontneed", |s| {
            s.devmem
                .as_ref()
                .and_then(|d| d.dontneed.as_ref())
                .and_then(|s| s.latency.as_ref())
        }),
    ),
    family(
        "ppscope_napi_polls_total",
        "counter",
        "NAPI polls of the devices whose pools are watched.",
        Series::Napi(|n| n.polls),
    ),
    family(
        "ppscope_napi_full_budget_polls_total",
        "counter",
        "NAPI polls that used their whole budget (the device had more packets than a poll takes).",
        Series::Napi(|n| n.full_budget_polls),
    ),
    family(
        "ppscope_drops_total",
        "counter",
        "Packets dropped on the devices whose pools are watched, by kernel drop reason.",
        Series::Drops,
    ),
    family(
        "ppscope_hook_attached",
        "gauge",
        "1 when the hook is attached, with the backend serving it (none: nothing attached; module_not_loaded: its kernel module is absent, nothing to attach to; left_off: --detail light leaves the per-page and per-poll hooks off).",
        Series::Hooks,
    ),
    family(
        "ppscope_detail",
        "gauge",
        "1, labelled with the detail level the probes run at (light: no per-page or per-poll hook, the split from the kernel's stats; full: every page and NAPI poll counted).",
        Series::Detail,
    ),
    family(
        "ppscope_page_pool_split_source",
        "gauge",
        "1 per pool and split (alloc, recycle) that is known, labelled with where its figures come from: probes (ppscope's hooks) or kernel (the kernel's page_pool stats over netlink).",
        Series::SplitSources,
    ),
    family(
        "ppscope_bpf_run_seconds_total",
        "counter",
        "Time spent in ppscope's own BPF programs (only while the kernel keeps BPF run-time stats: --bpf-stats).",
        Series::Overhead(|o| o.run_ns as f64 / 1e9),
    ),
    family(
        "ppscope_bpf_runs_total",
        "counter",
        "Runs of ppscope's own BPF programs (only while the kernel keeps BPF run-time stats: --bpf-stats).",
        Series::Overhead(|o| o.runs as f64),
    ),
    family(
        "ppscope_map_entries",
        "gauge",
        "Pools in ppscope's per-pool kernel map.",
        Series::Agent(|me, _| me.map_entries as f64),
    ),
    family(
        "ppscope_map_capacity",
        "gauge",
        "Capacity of that map (--map-capacity); at capacity the least recently seen pool is evicted.",
        Series::Agent(|me, _| me.map_capacity as f64),
    ),
    family(
        "ppscope_map_evictions_total",
        "counter",
        "Pools the full map evicted to make room for a new one; raise --map-capacity if it moves.",
        Series::Agent(|me, _| me.map_evictions as f64),
    ),
    family(
        "ppscope_unmatched_returns_total",
        "counter",
        "Returns of a hook's entry/exit pair that found their call's frame held by another call, so went uncounted: a few where tasks move between CPUs; about as many as the hook's calls means the pair cannot tell its calls on this kernel (see ppscope_recycle_pair_lost). A hook served by an fexit alone has no pair and shows 0.",
        Series::UnmatchedReturns,
    ),
    family(
        "ppscope_skipped_runs_total",
        "counter",
        "Runs of a hook's programs the kernel skipped, as it counts them: it does not nest tracing programs, so a kprobe program is skipped while another kprobe or perf BPF program or a BPF map system call (ppscope's own reads included) holds the CPU, an fentry, fexit or tracepoint program while the same program runs there. Each is an event the hook's figures lack (up to one a call: a pair's entry and exit count apart). Only hooks whose programs this kernel counts have a series (fentry/fexit since Linux 5.11; kprobes and tracepoints where its BTF shows the 6.7 counting).",
        Series::SkippedRuns,
    ),
    family(
        "ppscope_kprobe_missed_total",
        "counter",
        "Hits of a hook's kprobes the kernel dropped before any of ppscope's programs ran, as it counts them per kprobe: a kprobe hit while another kprobe's handler (any tool's) runs on the CPU, and a kretprobe's return when all its instances (maxactive) are in use. The hook's figures lack up to that many events (a pair's kprobe and kretprobe each count a call dropped at its entry), on top of ppscope_skipped_runs_total. Only hooks on kprobes have a series, where the kernel counts them (Linux 6.7+, with the kprobe programs' skipped runs) and ppscope found its kprobes' links.",
        Series::KprobeMissed,
    ),
    family(
        "ppscope_recycle_pair_lost",
        "gauge",
        "1 once the kprobe recycle pair's unmatched returns (at least 32) outnumber the single recycles it counted since the start: recycles go uncounted on this kernel (the agent also warns in its log); 0 otherwise.",
        Series::Agent(|me, _| f64::from(u8::from(me.recycle_pair_lost))),
    ),
    family(
        "ppscope_collections_total",
        "counter",
        "Collections of the kernel maps.",
        Series::Agent(|me, _| me.collections as f64),
    ),
    family(
        "ppscope_collection_errors_total",
        "counter",
        "Collections that failed (the metrics keep their last values).",
        Series::Agent(|me, _| me.collection_errors as f64),
    ),
    family(
        "ppscope_collection_duration_seconds",
        "gauge",
        "Time the last collection took.",
        Series::Agent(|me, _| me.last_collection_seconds),
    ),
    family(
        "ppscope_scrape_duration_seconds",
        "gauge",
        "Time the last /metrics rendering took: the snapshot assembled and rendered, once per collection on its first scrape (the collection's other scrapes are answered from it).",
        Series::Agent(|me, _| me.last_scrape_seconds),
    ),
    family(
        "ppscope_series_dropped_total",
        "counter",
        "Pool series left out by the --max-pools cap.",
        Series::Agent(|me, e| (me.series_dropped + e.dropped) as f64),
    ),
    family(
        "ppscope_pools",
        "gauge",
        "Pools exported.",
        Series::Agent(|_, e| e.pools as f64),
    ),
];

/// Every family's name and type (`counter`, `gauge` or `histogram`), in the order written:
/// the names alert rules and dashboards may use.
pub fn families() -> impl Iterator<Item = (&'static str, &'static str)> {
    FAMILIES.iter().map(|f| (f.name, f.kind))
}

impl FamilyDef {
    /// The name and type prometheus-client is given: a counter's without `_total`, which
    /// its encoders add (to the series, and in 0.0.4 to the family too).
    fn described(&self) -> (&'static str, MetricType) {
        match self.kind {
            "counter" => (
                self.name
                    .strip_suffix("_total")
                    .expect("a counter family's name ends in _total"),
                MetricType::Counter,
            ),
            "histogram" => (self.name, MetricType::Histogram),
            _ => (self.name, MetricType::Gauge),
        }
    }
}

/// Renders everything; `max_pools` bounds the pool series (the rest are counted as
/// dropped, which it returns).
/// `snap` holds the totals since the start; the health gauge is each pool's verdict over
/// `last`, the last interval (a verdict over the whole run would hide a pool starving now).
pub fn render(
    snap: &Arc<Snapshot>,
    last: &Snapshot,
    me: &SelfStats,
    format: Format,
    max_pools: usize,
) -> (String, u64) {
    let health = last
        .pools
        .iter()
        .filter_map(|p| {
            let (health, basis) = health::verdict(p, last.duration_seconds);
            Some((p.pool.clone(), (health.level()?, basis)))
        })
        .collect();
    let exposition = Exposition {
        snap: snap.clone(),
        health,
        me: me.clone(),
        max_pools,
    };
    let dropped = exposition.dropped();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(exposition));
    let mut out = String::new();
    let written = match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    written.expect("writing to a String");
    (out, dropped)
}

/// A snapshot as prometheus-client collects it: every family of [`FAMILIES`].
#[derive(Debug)]
struct Exposition {
    snap: Arc<Snapshot>,
    /// Per pool name: its health gauge's value and basis over the last interval, where known.
    health: HashMap<String, (u8, Basis)>,
    me: SelfStats,
    max_pools: usize,
}

impl Exposition {
    fn dropped(&self) -> u64 {
        self.snap.pools.len().saturating_sub(self.max_pools) as u64
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let (snap, me) = (&*self.snap, &self.me);
        let pools: Vec<&PoolView> = snap.pools.iter().take(self.max_pools).collect();
        let exported = Exported {
            pools: pools.len(),
            dropped: self.dropped(),
        };
        let ids: Vec<(String, String, String)> = pools.iter().map(|p| pool_labels(p)).collect();
        let base = |i: usize| -> Labels {
            vec![
                ("device", ids[i].0.as_str()),
                ("queue", ids[i].1.as_str()),
                ("pool", ids[i].2.as_str()),
            ]
        };
        let device = |d: &DeviceView| d.ifname.clone().unwrap_or_default();
        let attached = |hook: &str| snap.backends.get(hook).is_some_and(|h| h.attached());
        for def in FAMILIES {
            if matches!(def.series, Series::Overhead(_)) && snap.overhead.is_none() {
                continue;
            }
            let (name, kind) = def.described();
            let metric = encoder.encode_descriptor(name, def.help, None, kind)?;
            let mut f = Family { metric, kind };
            match &def.series {
                Series::PoolKinds(kinds) => {
                    for (i, p) in pools.iter().enumerate() {
                        for (kind, v) in kinds(p) {
                            if let Some(v) = v {
                                let mut l = base(i);
                                l.push(("kind", kind));
                                f.sample(&l, v as f64)?;
                            }
                        }
                    }
                }
                Series::Pool(get) => {
                    for (i, p) in pools.iter().enumerate() {
                        if let Some(v) = get(p) {
                            f.sample(&base(i), v as f64)?;
                        }
                    }
                }
                Series::PoolHistogram(hook, get) => {
                    let counting = attached(hook);
                    for (i, p) in pools.iter().enumerate() {
                        match get(p) {
                            Some(l) => f.histogram(&base(i), l)?,
                            None if counting => f.histogram(&base(i), &Latency::default())?,
                            None => {}
                        }
                    }
                }
                Series::Histogram(hook, get) => match get(snap) {
                    Some(l) => f.histogram(&vec![], l)?,
                    None if attached(hook) => f.histogram(&vec![], &Latency::default())?,
                    None => {}
                },
                Series::Napi(get) => {
                    for d in &snap.devices {
                        if let Some(n) = &d.napi {
                            f.sample(&vec![("device", &device(d))], get(n) as f64)?;
                        }
                    }
                }
                Series::Drops => {
                    for d in &snap.devices {
                        for drop in &d.drops {
                            let reason = drop
                                .reason_name
                                .clone()
                                .unwrap_or_else(|| drop.reason.to_string());
                            let dev = device(d);
                            f.sample(
                                &vec![("device", &dev), ("reason", &reason)],
                                drop.count as f64,
                            )?;
                        }
                    }
                }
                Series::Hooks => {
                    for (name, h) in &snap.backends {
                        let backend = match h.backend {
                            Some(b) => format!("{b:?}").to_lowercase(),
                            None if h.module_absent() => "module_not_loaded".into(),
                            None if h.left_off() => "left_off".into(),
                            None => "none".into(),
                        };
                        let l = vec![("hook", name.as_str()), ("backend", &backend)];
                        f.sample(&l, if h.attached() { 1.0 } else { 0.0 })?;
                    }
                }
                Series::Detail => {
                    if let Some(d) = snap.detail {
                        f.sample(&vec![("level", d.name())], 1.0)?;
                    }
                }
                Series::SplitSources => {
                    for (i, p) in pools.iter().enumerate() {
                        for (split, source) in split_sources(p) {
                            let mut l = base(i);
                            l.push(("split", split));
                            l.push(("source", source));
                            f.sample(&l, 1.0)?;
                        }
                    }
                }
                Series::Health => {
                    for (i, p) in pools.iter().enumerate() {
                        if let Some((level, basis)) = self.health.get(&p.pool) {
                            let mut l = base(i);
                            l.push(("basis", basis.name()));
                            f.sample(&l, f64::from(*level))?;
                        }
                    }
                }
                Series::Overhead(get) => {
                    if let Some(o) = &snap.overhead {
                        f.sample(&vec![], get(o))?;
                    }
                }
                Series::Agent(get) => f.sample(&vec![], get(me, &exported))?,
                Series::UnmatchedReturns => {
                    for u in &me.unmatched_returns {
                        f.sample(&vec![("hook", u.hook)], u.returns as f64)?;
                    }
                }
                Series::SkippedRuns => {
                    for (hook, m) in hooks_missed(snap) {
                        f.sample(&vec![("hook", hook)], m.skipped_runs as f64)?;
                    }
                }
                Series::KprobeMissed => {
                    for (hook, m) in hooks_missed(snap) {
                        if let Some(dropped) = m.kprobe_hits_dropped {
                            f.sample(&vec![("hook", hook)], dropped as f64)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{pool_view, Coverage};
    use ppscope_common::{PoolCounters, PoolIdentity};

    fn snap() -> Snapshot {
        let mut c = PoolCounters {
            alloc_calls: 1000,
            refill_calls: 10,
            slow_calls: 3,
            slow_ns_sum: 7_000,
            put_calls: 990,
            put_released: 5,
            hold_pages: 192,
            release_pages: 5,
            ..Default::default()
        };
        c.slow_hist[10] = 2; // [1024, 2048) ns
        c.slow_hist[12] = 1; // [4096, 8192) ns
        let cov = Coverage::per_page();
        let mut id = PoolIdentity::EMPTY;
        id.ifname[..7].copy_from_slice(b"ve\"th\\1");
        id.netlink_id = 7;
        id.queue_idx = 0;
        id.known =
            PoolIdentity::KNOWN_IFNAME | PoolIdentity::KNOWN_NETLINK_ID | PoolIdentity::KNOWN_QUEUE;
        Snapshot::with_pools("k", 1.0, vec![pool_view(0x10, 1, &c, Some(&id), &cov)])
    }

    /// A hook as attached (`backend`) or not (`reason`).
    fn hook(
        name: &'static str,
        group: crate::snapshot::Group,
        backend: Option<crate::snapshot::Backend>,
        reason: Option<&str>,
    ) -> crate::snapshot::HookStatus {
        crate::snapshot::HookStatus {
            group,
            reasons: reason.into_iter().map(str::to_string).collect(),
            ..crate::testing::hook_status(name, backend, None)
        }
    }

    /// The Prometheus text of `s`, 100 pools at most.
    fn text(s: &Snapshot) -> String {
        render(
            &Arc::new(s.clone()),
            s,
            &SelfStats::default(),
            Format::Prometheus,
            100,
        )
        .0
    }

    fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn health_is_judged_over_the_last_interval_and_unknown_has_no_series() {
        // Healthy since the start (0.5% of recycles found the ring full), starving in the
        // last interval (20%): the gauge says starving, from the exact split.
        let totals = Arc::new(snap());
        let mut last = snap();
        last.pools[0].recycle.ring_full = Some(200);
        let gauge = |last: &Snapshot| {
            let (t, _) = render(
                &totals,
                last,
                &SelfStats::default(),
                Format::Prometheus,
                100,
            );
            lines(&t, "ppscope_page_pool_health{")
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            gauge(&last),
            [r#"ppscope_page_pool_health{device="ve\"th\\1",queue="0",pool="7",basis="split"} 2"#]
        );
        assert_eq!(
            gauge(&totals),
            [r#"ppscope_page_pool_health{device="ve\"th\\1",queue="0",pool="7",basis="split"} 0"#]
        );
        // Nothing in the interval says how the pool does: no series, not a 0.
        let p = &mut last.pools[0];
        p.recycle = Default::default();
        p.alloc = Default::default();
        p.ring_hit_rate = None;
        p.pages = Default::default();
        assert_eq!(gauge(&last), Vec::<String>::new());
        // Nor for a pool the interval did not see.
        last.pools.clear();
        assert_eq!(gauge(&last), Vec::<String>::new());
    }

    #[test]
    fn a_hook_of_an_absent_module_is_not_a_missing_hook() {
        use crate::snapshot::Group;
        let mut s = snap();
        for (name, reason) in [
            ("gve_alloc", "kprobe gve_alloc_buffer: module not loaded"),
            ("alloc", "fentry page_pool_alloc_netmems: EPERM"),
        ] {
            s.backends
                .insert(name.into(), hook(name, Group::Gve, None, Some(reason)));
        }
        let t = text(&s);
        assert!(
            t.contains(r#"ppscope_hook_attached{hook="gve_alloc",backend="module_not_loaded"} 0"#),
            "{t}"
        );
        assert!(
            t.contains(r#"ppscope_hook_attached{hook="alloc",backend="none"} 0"#),
            "{t}"
        );
    }

    #[test]
    fn the_detail_level_and_where_each_split_came_from_are_exported() {
        use crate::snapshot::{Detail, Group, LEFT_OFF_LIGHT};
        let mut s = snap();
        let t = text(&s);
        assert!(
            lines(&t, "ppscope_detail{").is_empty(),
            "a simulation has no level"
        );
        let labels = r#"device="ve\"th\\1",queue="0",pool="7""#;
        assert!(
            t.contains(&format!(
                r#"ppscope_page_pool_split_source{{{labels},split="alloc",source="probes"}} 1"#
            )),
            "{t}"
        );
        s.detail = Some(Detail::Light);
        s.pools[0].recycle_source = Some("kernel".into());
        s.backends.insert(
            "recycle".into(),
            hook("recycle", Group::PagePool, None, Some(LEFT_OFF_LIGHT)),
        );
        let t = text(&s);
        assert_eq!(
            lines(&t, "ppscope_detail{"),
            [r#"ppscope_detail{level="light"} 1"#]
        );
        assert!(
            t.contains(&format!(
                r#"ppscope_page_pool_split_source{{{labels},split="recycle",source="kernel"}} 1"#
            )),
            "{t}"
        );
        assert!(
            t.contains(r#"ppscope_hook_attached{hook="recycle",backend="left_off"} 0"#),
            "{t}"
        );
        // A pool that knows no part of a split has no source for it.
        s.pools[0].alloc = Default::default();
        let t = text(&s);
        assert!(!t.contains(r#"split="alloc""#), "{t}");
    }

    #[test]
    fn a_destroyed_pool_exports_its_release_attempts_and_inflight_pages() {
        let mut s = snap();
        s.pools[0].teardown = Some(crate::snapshot::TeardownView {
            attempts: 2,
            inflight_pages: 12,
        });
        let t = text(&s);
        let labels = r#"{device="ve\"th\\1",queue="0",pool="7"}"#;
        assert!(
            t.contains(&format!(
                "ppscope_page_pool_teardown_attempts_total{labels} 2"
            )),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "ppscope_page_pool_teardown_inflight_pages{labels} 12"
            )),
            "{t}"
        );
        let (quiet, _) = render(
            &Arc::new(snap()),
            &snap(),
            &SelfStats::default(),
            Format::Prometheus,
            100,
        );
        assert_eq!(
            lines(&quiet, "ppscope_page_pool_teardown_attempts_total{").len(),
            0
        );
    }

    #[test]
    fn counters_and_labels() {
        let (t, dropped) = render(
            &Arc::new(snap()),
            &snap(),
            &SelfStats::default(),
            Format::Prometheus,
            100,
        );
        assert_eq!(dropped, 0);
        assert!(
            t.contains("# TYPE ppscope_page_pool_alloc_total counter"),
            "{t}"
        );
        assert!(
            t.contains(r#"ppscope_page_pool_alloc_total{device="ve\"th\\1",queue="0",pool="7",kind="slow"} 3"#),
            "{t}"
        );
        assert!(t.contains(r#"kind="ring_full"} 5"#), "{t}");
        assert!(
            t.contains("ppscope_page_pool_pages_allocated_total{"),
            "{t}"
        );
    }

    #[test]
    fn histogram_is_cumulative_with_every_edge_and_seconds() {
        let (t, _) = render(
            &Arc::new(snap()),
            &snap(),
            &SelfStats::default(),
            Format::Prometheus,
            100,
        );
        let buckets = lines(&t, "ppscope_page_pool_slow_path_seconds_bucket");
        // Every one of the kernel's 31 bounded log2 buckets' edges plus +Inf, zeros
        // included, whatever the highest bucket counted; edges written as Go's clients
        // write them (prometheus-client's encoder), so series match theirs.
        assert_eq!(buckets.len(), LATENCY_BUCKETS, "{buckets:#?}");
        assert!(buckets[0].ends_with("le=\"2e-09\"} 0"), "{}", buckets[0]);
        assert!(
            buckets[10].contains("le=\"2.048e-06\"") && buckets[10].ends_with("} 2"),
            "{}",
            buckets[10]
        );
        assert!(buckets[11].ends_with("} 2"), "cumulative: {}", buckets[11]);
        assert!(buckets[12].contains("le=\"8.192e-06\"") && buckets[12].ends_with("} 3"));
        assert!(buckets[30].contains("le=\"2.147483648\"") && buckets[30].ends_with("} 3"));
        assert!(buckets[31].contains("le=\"+Inf\"") && buckets[31].ends_with("} 3"));
        assert!(t.contains("ppscope_page_pool_slow_path_seconds_sum{device=\"ve\\\"th\\\\1\",queue=\"0\",pool=\"7\"} 0.000007"), "{t}");
        assert!(lines(&t, "ppscope_page_pool_slow_path_seconds_count")[0].ends_with(" 3"));
    }

    /// Every pool's histogram carries the same `le` set, and a pool that had no slow path yet
    /// exports zeros while the hook is attached (none while it is not): `sum by (le)` across
    /// pools and `rate()` over a pool's first slow path both need the series there.
    #[test]
    fn every_pool_exports_the_same_buckets_zeros_included() {
        use crate::snapshot::{Backend, Group};
        let mut s = snap();
        let mut quiet = s.pools[0].clone();
        quiet.slow_path_latency = None;
        quiet.pool = "8".into();
        quiet.netlink_id = Some(8);
        s.pools.push(quiet);
        let le_of = |t: &str, pool: &str| -> Vec<String> {
            lines(t, "ppscope_page_pool_slow_path_seconds_bucket")
                .into_iter()
                .filter(|l| l.contains(&format!("pool=\"{pool}\"")))
                .map(|l| {
                    l.split("le=")
                        .nth(1)
                        .unwrap()
                        .split('}')
                        .next()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let t = text(&s);
        assert!(le_of(&t, "8").is_empty(), "the hook is not attached: {t}");
        s.backends.insert(
            "slow_path".into(),
            hook("slow_path", Group::PagePool, Some(Backend::Fentry), None),
        );
        let t = text(&s);
        assert_eq!(le_of(&t, "8"), le_of(&t, "7"));
        assert_eq!(le_of(&t, "8").len(), LATENCY_BUCKETS);
        assert!(t.contains("ppscope_page_pool_slow_path_seconds_count{device=\"ve\\\"th\\\\1\",queue=\"0\",pool=\"8\"} 0"), "{t}");
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let (t, _) = render(
            &Arc::new(snap()),
            &snap(),
            &SelfStats::default(),
            Format::OpenMetrics,
            100,
        );
        assert!(t.contains("# TYPE ppscope_page_pool_alloc counter"), "{t}");
        assert!(t.contains("ppscope_page_pool_alloc_total{"), "{t}");
        assert!(t.ends_with("# EOF\n"));
        assert!(
            Format::from_accept(Some("application/openmetrics-text; version=1.0.0"))
                == Format::OpenMetrics
        );
        assert!(Format::from_accept(Some("text/plain")) == Format::Prometheus);
    }

    #[test]
    fn the_pool_cap_counts_what_it_drops() {
        let mut s = snap();
        let p = s.pools[0].clone();
        s.pools.push(p);
        let (t, dropped) = render(
            &Arc::new(s.clone()),
            &s,
            &SelfStats::default(),
            Format::Prometheus,
            1,
        );
        assert_eq!(dropped, 1);
        assert!(t.contains("ppscope_series_dropped_total 1"), "{t}");
        assert!(t.contains("ppscope_pools 1"), "{t}");
    }

    #[test]
    fn unmatched_returns_are_a_counter_per_hook_with_a_pair_and_a_lost_pair_a_gauge() {
        let me = SelfStats {
            unmatched_returns: vec![
                Unmatched {
                    hook: "refill",
                    returns: 0,
                },
                Unmatched {
                    hook: "recycle",
                    returns: 51,
                },
            ],
            ..Default::default()
        };
        let (t, _) = render(&Arc::new(snap()), &snap(), &me, Format::Prometheus, 100);
        assert_eq!(
            lines(&t, "ppscope_unmatched_returns_total"),
            [
                r#"ppscope_unmatched_returns_total{hook="refill"} 0"#,
                r#"ppscope_unmatched_returns_total{hook="recycle"} 51"#
            ]
        );
        assert!(
            t.contains("# TYPE ppscope_unmatched_returns_total counter"),
            "{t}"
        );
        assert_eq!(
            lines(&t, "ppscope_recycle_pair_lost"),
            ["ppscope_recycle_pair_lost 0"]
        );
        let lost = SelfStats {
            recycle_pair_lost: true,
            ..me
        };
        let (t, _) = render(&Arc::new(snap()), &snap(), &lost, Format::Prometheus, 100);
        assert_eq!(
            lines(&t, "ppscope_recycle_pair_lost"),
            ["ppscope_recycle_pair_lost 1"]
        );
    }

    #[test]
    fn skipped_runs_are_a_counter_per_hook_the_kernel_counts_and_absent_for_others() {
        use crate::{snapshot::Backend, testing::hook_status};
        let missed = |skipped_runs, kprobe_hits_dropped| {
            Some(HookMissed {
                skipped_runs,
                kprobe_hits_dropped,
            })
        };
        let mut s = snap();
        for status in [
            hook_status("page_release", Some(Backend::Tracepoint), missed(12, None)),
            hook_status("alloc", Some(Backend::Kprobe), missed(3, Some(40))),
            // Attached, but the kernel counts nothing for it (or its info was not read).
            hook_status("refill", Some(Backend::Fentry), None),
        ] {
            s.backends.insert(status.hook.to_string(), status);
        }
        let s = Arc::new(s);
        let (t, _) = render(&s, &s, &SelfStats::default(), Format::Prometheus, 100);
        assert_eq!(
            lines(&t, "ppscope_skipped_runs_total"),
            [
                r#"ppscope_skipped_runs_total{hook="alloc"} 3"#,
                r#"ppscope_skipped_runs_total{hook="page_release"} 12"#
            ]
        );
        assert!(
            t.contains("# TYPE ppscope_skipped_runs_total counter"),
            "{t}"
        );
        // Dropped kprobe hits: only where the hook is on kprobes and they were read.
        assert_eq!(
            lines(&t, "ppscope_kprobe_missed_total"),
            [r#"ppscope_kprobe_missed_total{hook="alloc"} 40"#]
        );
        assert!(
            t.contains("# TYPE ppscope_kprobe_missed_total counter"),
            "{t}"
        );
        // Hooks whose status carries no count have no series: no guessed 0.
        let (t, _) = render(
            &Arc::new(snap()),
            &snap(),
            &SelfStats::default(),
            Format::Prometheus,
            100,
        );
        assert!(lines(&t, "ppscope_skipped_runs_total").is_empty(), "{t}");
        assert!(lines(&t, "ppscope_kprobe_missed_total").is_empty(), "{t}");
    }
}

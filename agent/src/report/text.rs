//! `diagnose` as text for people.
use std::fmt::Write;

use crate::snapshot::{
    health, Latency, MissedNote, PoolView, SiteView, Snapshot, OWN_COST_UNKNOWN,
};

fn count(n: Option<u64>) -> String {
    match n {
        None => "?".into(),
        Some(n) => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, ch) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(ch);
            }
            out
        }
    }
}

use crate::units::pct_or_unknown as pct;

fn share(part: Option<u64>, total: Option<u64>) -> String {
    match (part, total) {
        (Some(p), Some(t)) if t > 0 => {
            format!("{} ({:.1}%)", count(Some(p)), p as f64 * 100.0 / t as f64)
        }
        _ => count(part),
    }
}

pub fn duration_ns(ns: u64) -> String {
    match ns {
        n if n < 1_000 => format!("{n} ns"),
        n if n < 1_000_000 => format!("{:.1} µs", n as f64 / 1e3),
        n if n < 1_000_000_000 => format!("{:.1} ms", n as f64 / 1e6),
        n => format!("{:.2} s", n as f64 / 1e9),
    }
}

/// bcc-style log2 histogram (`nsecs : count distribution`).
pub fn histogram(l: &Latency, indent: &str) -> String {
    let mut out = String::new();
    let max = l.buckets.iter().copied().max().unwrap_or(0).max(1);
    let first = l.buckets.iter().position(|n| *n > 0).unwrap_or(0);
    let _ = writeln!(out, "{indent}{:>24} : {:<8} distribution", "nsecs", "count");
    for (i, n) in l.buckets.iter().enumerate().skip(first) {
        let lo = if i == 0 { 0 } else { 1u64 << i };
        let hi = (1u64 << (i + 1)) - 1;
        let bar = "*".repeat(((*n * 40) / max) as usize);
        let _ = writeln!(
            out,
            "{indent}{:>11} -> {:<10}: {:<8} |{:<40}|",
            lo, hi, n, bar
        );
    }
    out
}

fn pool_text(p: &PoolView, secs: f64, out: &mut String) {
    let mut ident = Vec::new();
    if let Some(id) = p.netlink_id {
        ident.push(format!("netlink id {id}"));
    }
    if let Some(n) = p.pool_size {
        ident.push(format!("pool_size {n}"));
    }
    if let Some(n) = p.ring_size {
        ident.push(format!("ring {n}"));
    }
    if let Some(true) = p.memory_provider {
        ident.push("memory provider".into());
    }
    ident.push(p.pool.clone());
    ident.extend(p.address.clone());
    let _ = writeln!(out, "pool {}  ({})", p.label(), ident.join(", "));
    let verdict = health::assess(p, secs);
    let _ = writeln!(
        out,
        "  health       {} ({}): {}",
        verdict.health.word(),
        verdict.basis.name(),
        verdict.how
    );
    let a = &p.alloc;
    let _ = writeln!(
        out,
        "  allocations  {:>12}   cache {}  ring {}  slow {}",
        count(a.total),
        share(a.cache, a.total),
        share(a.ring, a.total),
        share(a.slow, a.total)
    );
    let _ = writeln!(
        out,
        "  ring hit rate {}   fast-path rate {}   empty-ring refills {}   frag calls {}",
        pct(p.ring_hit_rate),
        pct(p.fast_path_rate),
        count(a.ring_empty),
        count(a.frag_calls)
    );
    let r = &p.recycle;
    let _ = writeln!(
        out,
        "  recycles     {:>12}   cached {}  ring {}  ring full {}",
        count(r.total),
        share(r.cached, r.total),
        share(r.ring, r.total),
        share(r.ring_full, r.total)
    );
    let _ = writeln!(
        out,
        "  pages        from allocator {}   released {}",
        count(p.pages.allocated),
        count(p.pages.released)
    );
    if p.ring_fill.is_some() || p.inflight_pages.is_some() {
        let mut facts = Vec::new();
        if let (Some(fill), Some(size)) = (p.ring_fill, p.ring_size) {
            facts.push(format!("ring {fill}/{size} full"));
        }
        if let (Some(n), Some(b)) = (p.inflight_pages, p.inflight_bytes) {
            facts.push(format!(
                "{} pages inflight ({})",
                count(Some(n as u64)),
                crate::units::bytes(b)
            ));
        }
        let _ = writeln!(
            out,
            "  state        {} (at its last refill, slow path or release)",
            facts.join(", ")
        );
    }
    if let Some(t) = &p.teardown {
        let _ = writeln!(
            out,
            "  teardown     destroyed by its driver: {} release attempt(s), {} pages still out at the last",
            count(Some(t.attempts)),
            t.inflight_pages
        );
    }
    if let Some(k) = &p.netlink {
        let mut facts = Vec::new();
        if let (Some(pages), Some(bytes)) = (k.inflight_pages, k.inflight_bytes) {
            facts.push(format!(
                "inflight {} pages ({})",
                count(Some(pages)),
                crate::units::bytes(bytes)
            ));
        }
        if let Some(n) = k.napi_id {
            facts.push(format!("napi id {n}"));
        }
        if let Some(i) = k.ifindex {
            facts.push(format!("netlink ifindex {i}"));
        }
        if k.detached {
            facts.push("detached by its driver".into());
        }
        if let Some(d) = k.dmabuf {
            facts.push(format!("devmem dmabuf {d}"));
        }
        if k.io_uring {
            facts.push("io_uring zcrx".into());
        }
        let _ = writeln!(out, "  kernel       {}", facts.join(", "));
    }
    if p.alloc_source.is_some() || p.recycle_source.is_some() {
        out.push_str(
            "  (split from the kernel's own page_pool stats: no probe measured it here)\n",
        );
    }
    if let Some(q) = p.gve_queue {
        let _ = writeln!(out, "  gve rx queue {q}");
    }
    if let (Some(n), Some(mean)) = (p.provider_allocs, p.provider_alloc_mean_ns) {
        let _ = writeln!(
            out,
            "  provider     {} allocations from the memory provider, mean {}",
            count(Some(n)),
            duration_ns(mean as u64)
        );
    }
    let b = &p.bursts;
    if b.ring_full_runs.is_some() || b.empty_ring_runs.is_some() || b.ring_fill.is_some() {
        // `?`: no hook counts it here; `none`: counted, and nothing happened.
        let d = |x: &Option<crate::snapshot::Distribution>| match x {
            None => "?".to_string(),
            Some(d) if d.samples == 0 => "none".to_string(),
            Some(d) => format!(
                "{} (p50 ≤ {}, max ≤ {})",
                count(Some(d.samples)),
                d.p50,
                d.max
            ),
        };
        let _ = writeln!(
            out,
            "  bursts       ring-full runs {}; empty-ring runs {}; ring fill {}",
            d(&b.ring_full_runs),
            d(&b.empty_ring_runs),
            d(&b.ring_fill)
        );
    }
    if let Some(a) = &p.advice {
        let _ = writeln!(out, "  advice       {}", a.summary());
        for e in &a.evidence {
            let _ = writeln!(out, "                 - {e}");
        }
    }
    if let Some(l) = &p.slow_path_latency {
        let _ = writeln!(
            out,
            "  slow path    {} calls   p50 < {}   p99 < {}   max < {}",
            count(Some(l.count)),
            duration_ns(l.p50_ns),
            duration_ns(l.p99_ns),
            duration_ns(l.max_ns)
        );
        out.push_str(&histogram(l, "    "));
    }
}

/// One whole-site line (calls, latency percentiles, value per call) and its histogram.
fn site_text(out: &mut String, name: &str, v: Option<&SiteView>, value_name: Option<&str>) {
    let Some(v) = v else {
        let _ = writeln!(out, "  {name:<19} not attached");
        return;
    };
    let mut line = format!("  {name:<19} {} calls", count(Some(v.calls)));
    if let Some(l) = &v.latency {
        line += &format!(
            "   p50 < {}   p99 < {}   max < {}",
            duration_ns(l.p50_ns),
            duration_ns(l.p99_ns),
            duration_ns(l.max_ns)
        );
    }
    if let (Some(what), Some(sum)) = (value_name, v.value_sum) {
        line += &format!("   {what} {}", count(Some(sum)));
        if let Some(per) = v.value_per_call {
            line += &format!(" ({per:.1}/call)");
        }
        if let Some(ns) = v.ns_per_value {
            line += &format!(
                ", {} per {}",
                duration_ns(ns as u64),
                what.trim_end_matches('s')
            );
        }
    }
    if v.errors > 0 {
        line += &format!("   errors {}", count(Some(v.errors)));
    }
    out.push_str(&line);
    out.push('\n');
    if let Some(l) = &v.latency {
        out.push_str(&histogram(l, "    "));
    }
}

/// The diagnose report as text: one section after another, each skipped when it has nothing
/// (but ppscope's own cost, which says why it is unknown).
pub fn text(s: &Snapshot) -> String {
    let mut out = String::new();
    for section in [
        pools_section,
        devices_section,
        timeline_section,
        sites_section,
        cost_section,
        hooks_section,
    ] {
        section(s, &mut out);
    }
    out.push_str("\n'?' = not measured by the hooks available on this kernel.\n");
    out
}

/// The window, then every pool.
fn pools_section(s: &Snapshot, out: &mut String) {
    let detail = s
        .detail
        .map_or(String::new(), |d| format!(", --detail {}", d.name()));
    let _ = writeln!(
        out,
        "ppscope diagnose: kernel {}, {:.1} s window{detail}, {} pool(s) active\n",
        s.kernel,
        s.duration_seconds,
        s.pools.len()
    );
    if s.pools.is_empty() {
        let _ = writeln!(
            out,
            "No page_pool activity was seen in the window ({}).",
            s.quiet_hint().text()
        );
        if let Some(why) = s.quiet_why() {
            let _ = writeln!(out, "{why}");
        }
        out.push('\n');
    } else if let Some(why) = s.advice_unavailable() {
        let _ = writeln!(out, "No ring-size advice: {why}.\n");
    }
    for p in &s.pools {
        pool_text(p, s.duration_seconds, out);
        out.push('\n');
    }
}

/// NAPI and drops of the pools' devices.
fn devices_section(s: &Snapshot, out: &mut String) {
    if !s.devices.is_empty() {
        out.push_str("devices (NAPI and drops)\n");
        for d in &s.devices {
            let name = d.ifname.clone().unwrap_or_else(|| "?".into());
            let napi = match &d.napi {
                Some(n) => format!(
                    "{} polls, {} packets/poll, {} used the whole budget",
                    count(Some(n.polls)),
                    n.work_per_poll.map_or("?".into(), |w| format!("{w:.1}")),
                    n.full_budget_share
                        .map_or("?".into(), |r| format!("{:.1}%", r * 100.0))
                ),
                None => "NAPI not watched".into(),
            };
            let drops = match d.drops_total {
                Some(0) => "no drops".to_string(),
                Some(n) => {
                    let top: Vec<String> = d
                        .drops
                        .iter()
                        .take(3)
                        .map(|x| {
                            format!(
                                "{} {}",
                                x.reason_name.as_deref().unwrap_or("?"),
                                count(Some(x.count))
                            )
                        })
                        .collect();
                    format!("{} drops ({})", count(Some(n)), top.join(", "))
                }
                None => "drops not watched".into(),
            };
            let _ = writeln!(out, "  {name:<12} {napi}; {drops}");
        }
        out.push('\n');
    }
}

/// The steps where pages came from or went back to the allocator, or packets dropped.
fn timeline_section(s: &Snapshot, out: &mut String) {
    let busy: Vec<_> = s
        .timeline
        .iter()
        .filter(|st| {
            st.devices.iter().any(|d| {
                [d.slow, d.ring_full, d.pages_in, d.pages_out, d.drops]
                    .iter()
                    .any(|v| v.unwrap_or(0) > 0)
            })
        })
        .collect();
    if !busy.is_empty() {
        out.push_str("timeline (steps where pages came from or went back to the allocator, or packets dropped)\n");
        let _ = writeln!(
            out,
            "  {:>7}  {:<12} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7}",
            "t",
            "device",
            "allocs",
            "slow",
            "ring_full",
            "pages in",
            "pages out",
            "polls",
            "full-budg",
            "drops"
        );
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        for st in busy.iter().take(30) {
            for d in &st.devices {
                let _ = writeln!(
                    out,
                    "  {:>6.1}s  {:<12} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7}",
                    st.t,
                    d.ifname.as_deref().unwrap_or("?"),
                    n(d.allocs),
                    n(d.slow),
                    n(d.ring_full),
                    n(d.pages_in),
                    n(d.pages_out),
                    n(d.napi_polls),
                    n(d.napi_full_budget),
                    n(d.drops)
                );
            }
        }
        if busy.len() > 30 {
            let _ = writeln!(out, "  … {} more steps in --json", busy.len() - 30);
        }
        out.push('\n');
    }
}

/// Whole-site hooks: pages leaving pools, devmem TCP, gve.
fn sites_section(s: &Snapshot, out: &mut String) {
    if let Some(r) = &s.page_return {
        site_text(out, "pages leaving pools", Some(r), None);
        out.push('\n');
    }
    if let Some(d) = &s.devmem {
        out.push_str("devmem TCP\n");
        site_text(
            out,
            "SO_DEVMEM_DONTNEED",
            d.dontneed.as_ref(),
            Some("frags"),
        );
        site_text(out, "dmabuf free", d.free.as_ref(), None);
        site_text(out, "provider alloc", d.provider_alloc.as_ref(), None);
        out.push('\n');
    }
    match &s.gve {
        Some(g) => {
            out.push_str("gve\n");
            site_text(out, "gve_alloc_buffer", g.alloc.as_ref(), None);
            if g.queues.is_empty() {
                out.push_str("  rx NAPI poll        no polls in the window\n");
            }
            for q in &g.queues {
                site_text(
                    out,
                    &format!("rx queue {} poll", q.queue),
                    Some(&q.poll),
                    Some("work"),
                );
            }
            out.push('\n');
        }
        None => {
            if let Some(h) = s.backends.get("gve_alloc") {
                let _ = writeln!(
                    out,
                    "gve: {}\n",
                    // A module's reason names it already ("gve: module not loaded").
                    h.reasons
                        .first()
                        .map_or("not attached", |r| r.strip_prefix("gve: ").unwrap_or(r))
                );
            }
        }
    }
}

/// ppscope's own cost, and what netlink could not give.
fn cost_section(s: &Snapshot, out: &mut String) {
    match &s.overhead {
        Some(o) => {
            let _ = writeln!(
                out,
                "ppscope's own cost: {} program runs, {} per run, {:.3}% of one CPU\n",
                count(Some(o.runs)),
                o.ns_per_run.map_or("?".into(), |n| duration_ns(n as u64)),
                o.cpu_share * 100.0
            );
        }
        None => {
            let _ = writeln!(out, "ppscope's own cost: ? ({OWN_COST_UNKNOWN})\n");
        }
    }
    if let Some(k) = &s.netlink {
        if let Some(e) = &k.error {
            let _ = writeln!(out, "kernel netlink: unavailable ({e})");
        }
        if let Some(why) = &k.stats_missing {
            let _ = writeln!(out, "kernel page_pool stats: not kept ({why})");
        }
        out.push('\n');
    }
}

/// Which backend serves each hook, or why none does.
fn hooks_section(s: &Snapshot, out: &mut String) {
    out.push_str("hooks\n");
    for (name, h) in &s.backends {
        match &h.backend {
            Some(b) => {
                let lost = match h.missed_note() {
                    MissedNote::Some(what) => format!(" (since it attached, {what})"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "  {name:<15} {:<11} {}{lost}",
                    format!("{b:?}").to_lowercase(),
                    h.targets.join(", ")
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {name:<15} {:<11} {}: {} (lost: {})",
                    "-",
                    if h.left_off() { "left off" } else { "missing" },
                    h.reasons.join("; "),
                    h.loses
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{pool_view, Coverage};
    use ppscope_common::PoolCounters;

    /// No pool shown: the hint says what could hide one, from the source's hooks and stats.
    #[test]
    fn a_window_without_pools_says_what_could_hide_them() {
        use crate::snapshot::{Backend, Detail, NetlinkSourceView};
        let hook = |name: &'static str, backend: Option<Backend>| {
            crate::testing::hook_status(name, backend, None)
        };
        let mut s = Snapshot::with_pools("k", 1.0, vec![]);
        assert!(
            text(&s).contains("(no traffic on a page_pool driver?)"),
            "a simulation"
        );

        // This host at --detail light: tracepoints on the allocator, no kernel stats.
        s.detail = Some(Detail::Light);
        for h in ["page_hold", "page_release"] {
            s.backends
                .insert(h.into(), hook(h, Some(Backend::Tracepoint)));
        }
        for h in ["alloc", "refill"] {
            s.backends.insert(h.into(), hook(h, None));
        }
        s.netlink = Some(NetlinkSourceView {
            stats_available: false,
            stats_missing: Some("this kernel has no CONFIG_PAGE_POOL_STATS".into()),
            error: None,
        });
        let t = text(&s);
        assert!(
            t.contains("(light traffic is unseen here: a pool shows only at the page allocator)."),
            "{t}"
        );
        assert!(
            t.contains("Kernel page_pool stats: this kernel has no CONFIG_PAGE_POOL_STATS. The allocation hook: left off by --detail light (--detail full attaches it"),
            "{t}"
        );
        // A refill hook (fentry) shows a pool at its refills too.
        s.backends
            .insert("refill".into(), hook("refill", Some(Backend::Fentry)));
        assert!(text(&s).contains("a pool shows only at refills or the page allocator)"));
        s.detail = Some(Detail::Full);
        assert!(text(&s).contains("The allocation hook: not attached on this kernel"));

        // The kernel's stats read: only pools netlink does not list can hide.
        s.netlink.as_mut().unwrap().stats_available = true;
        let t = text(&s);
        assert!(t.contains("(no traffic here? pools netlink does not list show only at refills or the page allocator)"), "{t}");
        assert!(t.contains("Kernel page_pool stats: read for the pools netlink lists in this network namespace"), "{t}");

        // Every allocation seen: no traffic is the answer, and nothing more is said.
        s.backends
            .insert("alloc".into(), hook("alloc", Some(Backend::Fentry)));
        let t = text(&s);
        assert!(t.contains("(no traffic on a page_pool driver?)"), "{t}");
        assert!(!t.contains("Kernel page_pool stats:"), "{t}");
    }

    #[test]
    fn a_kernel_that_cannot_be_advised_is_said_up_front() {
        use crate::snapshot::Backend;
        let hook = |name: &'static str, backend: Option<Backend>| {
            crate::testing::hook_status(name, backend, None)
        };
        let mut s = Snapshot::with_pools(
            "k",
            1.0,
            vec![crate::snapshot::PoolView::unprobed(3, None, None)],
        );
        s.backends.insert("alloc".into(), hook("alloc", None));
        s.backends.insert("recycle".into(), hook("recycle", None));
        let t = text(&s);
        assert!(
            t.contains("No ring-size advice: it needs the refill hook (fentry or kprobes)"),
            "{t}"
        );
        // --detail light: refills, pages in and pages out make a profile.
        for h in ["refill", "page_hold", "page_release"] {
            s.backends.insert(h.into(), hook(h, Some(Backend::Fentry)));
        }
        assert_eq!(s.advice_unavailable(), None);
        s.backends.remove("refill");
        assert!(s.advice_unavailable().is_some());
        for h in ["alloc", "recycle"] {
            s.backends.insert(h.into(), hook(h, Some(Backend::Fentry)));
        }
        assert_eq!(s.advice_unavailable(), None);
        assert!(!text(&s).contains("No ring-size advice"));
        s.backends.clear();
        assert_eq!(s.advice_unavailable(), None, "a simulation names no hooks");
    }

    #[test]
    fn gve_says_why_it_has_no_figures_once() {
        use crate::snapshot::{HookStatus, MODULE_NOT_LOADED};
        let mut s = Snapshot::with_pools("k", 1.0, Vec::new());
        s.backends.insert(
            "gve_alloc".into(),
            HookStatus {
                reasons: vec![format!("gve: {MODULE_NOT_LOADED}")],
                ..crate::testing::hook_status("gve_alloc", None, None)
            },
        );
        let t = text(&s);
        assert!(t.contains(&format!("\ngve: {MODULE_NOT_LOADED}\n")), "{t}");
        assert!(!t.contains("gve: gve:"), "{t}");
    }

    #[test]
    fn a_hook_whose_programs_missed_events_says_so() {
        use crate::snapshot::{Backend, HookMissed, HookStatus};
        let hook = |missed| HookStatus {
            targets: vec!["page_pool_put_unrefed_netmem".into()],
            ..crate::testing::hook_status("recycle", Some(Backend::Kprobe), missed)
        };
        let mut s = Snapshot::with_pools("k", 1.0, vec![]);
        let line = |s: &Snapshot| {
            text(s)
                .lines()
                .find(|l| l.trim_start().starts_with("recycle "))
                .unwrap()
                .to_string()
        };
        for quiet in [
            None,
            Some(HookMissed {
                skipped_runs: 0,
                kprobe_hits_dropped: Some(0),
            }),
        ] {
            s.backends.insert("recycle".into(), hook(quiet));
            assert!(
                line(&s).ends_with("page_pool_put_unrefed_netmem"),
                "{}",
                line(&s)
            );
        }
        s.backends.insert(
            "recycle".into(),
            hook(Some(HookMissed {
                skipped_runs: 1,
                kprobe_hits_dropped: Some(2),
            })),
        );
        assert!(
            line(&s).ends_with(
                "page_pool_put_unrefed_netmem (since it attached, the kernel skipped 1 run of its \
                 programs and dropped 2 hits of its kprobes: the figures lack up to that many \
                 events)"
            ),
            "{}",
            line(&s)
        );
    }

    #[test]
    fn own_cost_is_counted_or_says_why_not() {
        let mut s = Snapshot::with_pools("k", 2.0, vec![]);
        assert!(
            text(&s).contains(&format!("ppscope's own cost: ? ({OWN_COST_UNKNOWN})\n")),
            "{}",
            text(&s)
        );
        s.overhead = Some(crate::snapshot::OverheadView {
            runs: 2000,
            run_ns: 100_000,
            ns_per_run: Some(50.0),
            cpu_share: 0.00005,
        });
        let t = text(&s);
        assert!(
            t.contains("ppscope's own cost: 2,000 program runs, 50 ns per run, 0.005% of one CPU"),
            "{t}"
        );
        let page = super::super::html::diagnose(&s);
        assert!(
            page.contains("ppscope's programs: 2000 runs, 50 ns per run"),
            "{page}"
        );
        s.overhead = None;
        let page = super::super::html::diagnose(&s);
        assert!(
            page.contains("ppscope's own cost: ? (BPF run-time stats were not on"),
            "{page}"
        );
    }

    #[test]
    fn a_destroyed_pool_gets_its_teardown_line() {
        let mut p = crate::snapshot::PoolView::unprobed(3, None, Some("veth1".into()));
        p.teardown = Some(crate::snapshot::TeardownView {
            attempts: 2,
            inflight_pages: 12,
        });
        let t = text(&Snapshot::with_pools("k", 1.0, vec![p]));
        assert!(
            t.contains("  teardown     destroyed by its driver: 2 release attempt(s), 12 pages still out at the last\n"),
            "{t}"
        );
        let quiet = text(&Snapshot::with_pools(
            "k",
            1.0,
            vec![crate::snapshot::PoolView::unprobed(3, None, None)],
        ));
        assert!(!quiet.contains("teardown"), "{quiet}");
    }

    #[test]
    fn thousands_and_unknowns() {
        assert_eq!(count(Some(1234567)), "1,234,567");
        assert_eq!(count(Some(12)), "12");
        assert_eq!(count(None), "?");
        assert_eq!(pct(Some(0.9876)), "98.8%");
        assert_eq!(duration_ns(1500), "1.5 µs");
    }

    #[test]
    fn text_report_shows_the_split_and_histogram() {
        let mut c = PoolCounters {
            alloc_calls: 1000,
            refill_calls: 10,
            slow_calls: 2,
            ..Default::default()
        };
        c.slow_hist[12] = 2;
        let cov = Coverage {
            alloc: true,
            refill: true,
            slow: true,
            ..Default::default()
        };
        let s = Snapshot::with_pools("7.2.13", 5.0, vec![pool_view(0x10, 1, &c, None, &cov)]);
        let t = text(&s);
        assert!(
            t.contains("cache 988 (98.8%)  ring 10 (1.0%)  slow 2 (0.2%)"),
            "{t}"
        );
        assert!(t.contains("ring hit rate 83.3%"), "{t}");
        assert!(t.contains("recycles                ?"), "{t}");
        assert!(t.contains("4096 -> 8191      : 2"), "{t}");
        let j = crate::report::json(&s);
        assert_eq!(j["version"], 1);
        assert_eq!(j["pools"][0]["alloc"]["cache"], 988);
        assert!(j["backends"].is_object());
    }
}

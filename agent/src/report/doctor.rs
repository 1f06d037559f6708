//! `ppscope doctor`: what ppscope can measure on this kernel, and why not where it cannot.
use std::fmt::Write;

use crate::{
    host::{btf::ResolvedField, btf::VMLINUX_BTF, netlink::NetlinkSample, system},
    model::{BpfStats, SkippedRunsCounted, SourceFacts},
    snapshot::{Backend, HookLoad},
};

/// The report as a JSON object: the same backend lines as the text, then every hook and field.
pub fn json(
    facts: &SourceFacts,
    fields: &[ResolvedField],
    netlink: &NetlinkSample,
) -> serde_json::Value {
    let backends: serde_json::Map<String, serde_json::Value> = backend_lines(facts, netlink)
        .into_iter()
        .map(|(name, line)| (name.to_string(), line.into()))
        .collect();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "kernel": facts.kernel,
        "kprobes": system::has_kprobe_pmu(),
        "btf": VMLINUX_BTF,
        "backends": backends,
        "detail": facts.detail,
        "figures": figure_sources(facts, netlink.stats.is_some())
            .into_iter()
            .map(|f| serde_json::json!({"figure": f.figure, "light": f.light, "full": f.full}))
            .collect::<Vec<_>>(),
        "hooks": facts.hooks,
        "fields": fields,
    })
}

/// One line per source of numbers: each probe backend (how many hooks it serves, or why it
/// cannot), and the kernel's own page_pool stats over netlink.
fn backend_lines(facts: &SourceFacts, netlink: &NetlinkSample) -> Vec<(&'static str, String)> {
    let hooks = &facts.hooks;
    let served_by = |b: Backend| hooks.iter().filter(|h| h.backend == Some(b)).count();
    let refused = |what: &str| {
        hooks
            .iter()
            .flat_map(|h| &h.reasons)
            .find(|r| r.starts_with(what))
            .cloned()
    };
    let mut lines: Vec<(&'static str, String)> = [
        ("fentry/fexit", Backend::Fentry, "fentry"),
        ("kprobes", Backend::Kprobe, "kprobe"),
        ("tracepoints", Backend::Tracepoint, "tracepoint"),
    ]
    .into_iter()
    .map(|(name, backend, prefix)| {
        let n = served_by(backend);
        let line = if n > 0 {
            format!("serve {n} hook(s)")
        } else if let Some(r) = refused(prefix) {
            format!(
                "unavailable: {}",
                r.split_once(": ").map_or(r.as_str(), |(_, why)| why)
            )
        } else {
            "not used".into()
        };
        (name, line)
    })
    .collect();
    let netlink_line = match (&netlink.error, &netlink.stats, &netlink.stats_missing) {
        (Some(e), _, _) => format!("unavailable: {e}"),
        (None, Some(stats), _) => format!(
            "serve the split where no probe measures it ({} pool(s) in this network namespace)",
            stats.len()
        ),
        (None, None, Some(why)) => format!("not kept: {why}"),
        (None, None, None) => "not kept".into(),
    };
    lines.push(("netlink stats", netlink_line));
    lines.push(("BPF stats", bpf_stats_line(facts.bpf_stats).into()));
    let on = |b: Backend| hooks.iter().any(|h| h.backend == Some(b));
    if let Some(line) = skipped_runs_line(
        facts.skipped_runs_counted,
        on(Backend::Kprobe) || on(Backend::Tracepoint),
    ) {
        lines.push(("skipped runs", line.into()));
    }
    // Where a program holds a pool or page as a number: kprobes, raw tracepoints (a tracepoint
    // row may run its raw program), the recycle (the cache's top slot, a page's `pp`); fentry
    // programs that take the pool from a frame too, but those hooks come with the others.
    let untyped = hooks.iter().any(|h| h.backend == Some(Backend::Kprobe))
        || hooks.iter().any(|h| h.backend == Some(Backend::Tracepoint))
        || hooks.iter().any(|h| h.hook == "recycle" && h.attached());
    if untyped {
        lines.push((
            "pointer reads",
            if facts.cast_reads {
                "loads (bpf_rdonly_cast) where a program holds a pool or page as a number".into()
            } else {
                "helper calls (bpf_probe_read_kernel): the kernel has no bpf_rdonly_cast \
                 (Linux 6.2+) or its BPF JIT is off, so kprobe, raw-tracepoint and recycle \
                 bodies cost more"
                    .into()
            },
        ));
    }
    lines
}

/// Where one figure comes from at each detail level, on this kernel.
struct FigureSource {
    figure: &'static str,
    light: String,
    full: String,
}

/// Where each main figure comes from at `--detail light` and `full`, by the hooks this run
/// attached (a per-page hook left off by light was not tried: said so) and whether the kernel
/// keeps page_pool stats.
fn figure_sources(facts: &SourceFacts, kernel_stats: bool) -> Vec<FigureSource> {
    let on = |name: &str| facts.hooks.iter().any(|h| h.hook == name && h.attached());
    let left_off = |name: &str| facts.hooks.iter().any(|h| h.hook == name && h.left_off());
    let kernel = "the kernel's page_pool stats (pools netlink lists)";
    let or_kernel = |what: String| {
        if kernel_stats {
            format!("{kernel}; elsewhere {what}")
        } else {
            what
        }
    };
    let refills = on("refill") && on("slow_path");
    let per_page = |hooks: &[&str], what: &str| -> Option<String> {
        if hooks.iter().all(|h| on(h)) {
            Some(format!("{what} (every page)"))
        } else if hooks.iter().any(|h| left_off(h)) {
            Some("per-page hooks, not tried (doctor --detail full tries them)".into())
        } else {
            None
        }
    };
    let unknown = |what: &str| format!("? ({what})");
    let alloc_light = or_kernel(if refills {
        "ring and slow from the refill and slow_path hooks, the cache share ?".into()
    } else {
        unknown("no refill or slow_path hook, no kernel stats")
    });
    let alloc_full = per_page(
        &["alloc", "refill", "slow_path"],
        "alloc, refill and slow_path hooks",
    )
    .unwrap_or_else(|| alloc_light.clone());
    let recycle_light = or_kernel(if on("page_release") {
        "ring_full only (page_release); cached and ring ?".into()
    } else {
        unknown("no page_release hook, no kernel stats")
    });
    let recycle_full = per_page(
        &["recycle", "page_release"],
        "recycle and page_release hooks",
    )
    .unwrap_or_else(|| recycle_light.clone());
    let hit_rate = if refills {
        "refill and slow_path hooks (per refill)".to_string()
    } else if kernel_stats {
        kernel.to_string()
    } else {
        unknown("no refill or slow_path hook, no kernel stats")
    };
    let slow = if on("slow_path") {
        "slow_path hook (per batch of up to 64 pages)".to_string()
    } else {
        unknown("no slow_path hook")
    };
    let from_refills = if on("refill") && on("page_hold") && on("page_release") {
        "profile from refills and returned pages (refill, page_hold, page_release)".to_string()
    } else {
        unknown("needs fentry or kprobes for the refill hook, with page_hold and page_release")
    };
    let napi_full = if on("napi_poll") {
        "napi_poll tracepoint (every poll)".to_string()
    } else if left_off("napi_poll") {
        "napi_poll tracepoint, not tried (doctor --detail full tries it)".into()
    } else {
        unknown("no napi_poll tracepoint")
    };
    let advice_full = per_page(
        &["alloc", "recycle"],
        "profile of every allocation and recycle",
    )
    .unwrap_or_else(|| from_refills.clone());
    // The health verdict's basis, best first (`snapshot::health`).
    let split = "split: advice, ring hit rate and ring-full share (exact)";
    let churn = if on("page_hold") && on("page_release") {
        "churn: pages cycled through the allocator (page_hold, page_release; warns at most)".into()
    } else {
        unknown("no split, no packets, no page_hold or page_release")
    };
    let health_light = if refills {
        split.to_string()
    } else {
        or_kernel(churn.clone())
    };
    let health_full = if refills || (on("alloc") && on("recycle")) {
        split.to_string()
    } else if on("napi_poll") && on("page_hold") {
        or_kernel(
            "packets: fresh pages per received packet (napi_poll, page_hold; an estimate)".into(),
        )
    } else if left_off("napi_poll") && on("page_hold") {
        or_kernel("packets, not tried (doctor --detail full tries the napi_poll hook)".into())
    } else {
        health_light.clone()
    };
    vec![
        FigureSource {
            figure: "health",
            light: health_light,
            full: health_full,
        },
        FigureSource {
            figure: "allocation split",
            light: alloc_light,
            full: alloc_full,
        },
        FigureSource {
            figure: "recycle split",
            light: recycle_light,
            full: recycle_full,
        },
        FigureSource {
            figure: "ring hit rate",
            light: hit_rate.clone(),
            full: hit_rate,
        },
        FigureSource {
            figure: "slow-path latency",
            light: slow.clone(),
            full: slow,
        },
        FigureSource {
            figure: "NAPI polls",
            light: unknown("light leaves napi_poll off: it runs on every poll"),
            full: napi_full,
        },
        FigureSource {
            figure: "ring-size advice",
            light: from_refills,
            full: advice_full,
        },
    ]
}

/// Whether the kernel counts the runs it skips of the programs this run attached (it does not
/// nest tracing programs), for a live run (`doctor` is one). None where it counts none and
/// only fentry/fexit hooks are attached (a kernel before 5.11 has nothing to say then either).
fn skipped_runs_line(
    counted: SkippedRunsCounted,
    kprobes_or_tracepoints: bool,
) -> Option<&'static str> {
    Some(
        match (counted.trampolines, counted.kprobes_and_tracepoints) {
            (false, _) if !kprobes_or_tracepoints => return None,
            (_, true) => {
                "counted by the kernel for every backend: ppscope_skipped_runs_total and a warning \
             say when it skipped ppscope's programs (a kprobe program while another kprobe or \
             perf program, or a BPF map system call, ppscope's own reads included, holds the \
             CPU), ppscope_kprobe_missed_total when it dropped a hit of ppscope's kprobes \
             before any program ran (another kprobe's handler held the CPU, or a kretprobe's \
             instances were all in use)"
            }
            (true, false) if kprobes_or_tracepoints => {
                "counted for fentry/fexit; for kprobes and tracepoints this kernel's BTF shows no \
             counting (Linux 6.7's), so a kprobe program skipped while another kprobe program \
             or a BPF map system call holds the CPU, or a kprobe hit the kernel dropped, may \
             leave its hook's figures short without a sign"
            }
            (true, false) => {
                "counted by the kernel for fentry/fexit: ppscope_skipped_runs_total and a warning \
             say when it skipped ppscope's programs"
            }
            (false, _) => {
                "not counted by this kernel (its BTF has no recursion_misses: before 5.11): a \
             program it skips leaves its hook's figures short without a sign"
            }
        },
    )
}

/// Whether the kernel timed ppscope's programs this run (its own cost), and at what price.
fn bpf_stats_line(stats: BpfStats) -> &'static str {
    match stats {
        BpfStats::Asked => {
            "on (--bpf-stats): ppscope's own cost is counted, and every BPF program on the \
             host is timed while ppscope runs"
        }
        BpfStats::Sysctl => "on (kernel.bpf_stats_enabled=1): ppscope's own cost is counted",
        BpfStats::Refused => {
            "refused (BPF_ENABLE_STATS needs CAP_SYS_ADMIN): ppscope's own cost is '?'"
        }
        BpfStats::Off => {
            "off: ppscope's own cost is '?' (--bpf-stats turns them on, timing every BPF \
             program on the host)"
        }
    }
}

/// What attaching a hook took, as a doctor line ends: where a slow start went.
fn load_note(load: Option<HookLoad>) -> String {
    match load {
        Some(HookLoad {
            ms,
            verified_insns: Some(n),
        }) => format!(" (attached in {ms:.0} ms; verifier: {n} instructions)"),
        Some(HookLoad { ms, .. }) => format!(" (attached in {ms:.0} ms)"),
        None => String::new(),
    }
}

/// The report as text: the sources of numbers, then each hook, then the kernel fields read
/// from BTF.
pub fn text(facts: &SourceFacts, fields: &[ResolvedField], netlink: &NetlinkSample) -> String {
    let mut out = String::new();
    let hooks = &facts.hooks;
    let _ = writeln!(out, "kernel {}", facts.kernel);
    for (name, line) in backend_lines(facts, netlink) {
        let _ = writeln!(out, "{name:<13} {line}");
    }
    let _ = writeln!(
        out,
        "\nfigures by detail level (this run: {}; agent and top default to light, diagnose, record and doctor to full)",
        facts.detail.name()
    );
    for f in figure_sources(facts, netlink.stats.is_some()) {
        let _ = writeln!(out, "  {:<18} light: {}", f.figure, f.light);
        let _ = writeln!(out, "  {:<18} full:  {}", "", f.full);
    }
    let _ = writeln!(out, "\nhooks");
    for h in hooks {
        let _ = match h.backend {
            Some(b) => writeln!(
                out,
                "  {:<15} {:<11} {}{}",
                h.hook,
                format!("{b:?}").to_lowercase(),
                h.targets.join(", "),
                load_note(h.load)
            ),
            None => writeln!(
                out,
                "  {:<15} {:<11} {} (lost: {})",
                h.hook,
                if h.left_off() { "left off" } else { "missing" },
                h.reasons.join("; "),
                h.loses
            ),
        };
    }
    let _ = writeln!(out, "\nkernel fields (from BTF)");
    for f in fields {
        let _ = match (&f.path, f.offset) {
            (Some(p), Some(o)) => writeln!(out, "  {:<16} {p} @ {o}", f.name),
            _ => writeln!(
                out,
                "  {:<16} unknown on this kernel: that column will show '?'",
                f.name
            ),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::Coverage,
        snapshot::{Detail, HookStatus, LEFT_OFF_LIGHT},
        testing,
    };

    fn hook(name: &'static str, backend: Option<Backend>, reason: &str) -> HookStatus {
        HookStatus {
            reasons: (!reason.is_empty())
                .then(|| reason.into())
                .into_iter()
                .collect(),
            ..testing::hook_status(name, backend, None)
        }
    }

    fn facts(detail: Detail, per_page: Option<Backend>, refill: Option<Backend>) -> SourceFacts {
        let per_page_reason = match (detail, per_page) {
            (Detail::Light, _) => LEFT_OFF_LIGHT,
            (_, None) => "kprobe: no kprobes",
            _ => "",
        };
        let mut f = testing::facts("k", Coverage::default());
        f.detail = detail;
        f.hooks = vec![
            hook(
                "alloc",
                per_page.filter(|_| detail == Detail::Full),
                per_page_reason,
            ),
            hook(
                "recycle",
                per_page.filter(|_| detail == Detail::Full),
                per_page_reason,
            ),
            hook(
                "refill",
                refill,
                if refill.is_none() {
                    "kprobe: no kprobes"
                } else {
                    ""
                },
            ),
            hook("slow_path", refill, ""),
            hook("page_hold", Some(Backend::Tracepoint), ""),
            hook("page_release", Some(Backend::Tracepoint), ""),
            match detail {
                Detail::Light => hook("napi_poll", None, LEFT_OFF_LIGHT),
                Detail::Full => hook("napi_poll", Some(Backend::Tracepoint), ""),
            },
        ];
        f
    }

    fn source<'a>(all: &'a [FigureSource], figure: &str) -> &'a FigureSource {
        all.iter().find(|f| f.figure == figure).unwrap()
    }

    #[test]
    fn each_figure_says_where_it_comes_from_at_each_detail_level() {
        let fe = Some(Backend::Fentry);
        // The lab's kernel at full: every page at full, refills and kernel stats at light.
        let all = figure_sources(&facts(Detail::Full, fe, fe), true);
        let alloc = source(&all, "allocation split");
        assert!(alloc.full.contains("(every page)"), "{}", alloc.full);
        assert!(
            alloc.light.starts_with("the kernel's page_pool stats"),
            "{}",
            alloc.light
        );
        assert!(alloc.light.contains("the cache share ?"), "{}", alloc.light);
        let advice = source(&all, "ring-size advice");
        assert!(
            advice.light.contains("profile from refills"),
            "{}",
            advice.light
        );
        assert!(advice.full.contains("every allocation"), "{}", advice.full);
        let napi = source(&all, "NAPI polls");
        assert!(napi.light.starts_with("? (light leaves"), "{}", napi.light);
        assert_eq!(napi.full, "napi_poll tracepoint (every poll)");
        let health = source(&all, "health");
        assert!(health.light.starts_with("split:"), "{}", health.light);

        // Run at light: the per-page hooks were not tried, and doctor says so.
        let all = figure_sources(&facts(Detail::Light, fe, fe), false);
        let alloc = source(&all, "allocation split");
        assert!(alloc.full.contains("not tried"), "{}", alloc.full);
        assert!(!alloc.light.contains("kernel"), "no stats: {}", alloc.light);
        let napi = source(&all, "NAPI polls");
        assert!(napi.full.contains("not tried"), "{}", napi.full);
        let health = source(&all, "health");
        assert!(health.light.starts_with("split:"), "{}", health.light);

        // Tracepoints only, no kernel stats: what cannot be known is '?' with the reason.
        let all = figure_sources(&facts(Detail::Full, None, None), false);
        for figure in ["allocation split", "ring hit rate", "ring-size advice"] {
            let f = source(&all, figure);
            assert!(
                f.light.starts_with("? (") && f.full.starts_with("? ("),
                "{figure}: {}/{}",
                f.light,
                f.full
            );
        }
        // Yet health has a basis: pages cycled at light, packets at full.
        let health = source(&all, "health");
        assert!(health.light.starts_with("churn:"), "{}", health.light);
        assert!(health.full.starts_with("packets:"), "{}", health.full);
        let all = figure_sources(&facts(Detail::Light, None, None), false);
        let health = source(&all, "health");
        assert!(health.light.starts_with("churn:"), "{}", health.light);
        assert!(health.full.contains("not tried"), "{}", health.full);
        let recycle = source(&all, "recycle split");
        assert!(
            recycle.light.starts_with("ring_full only"),
            "{}",
            recycle.light
        );

        let t = text(
            &facts(Detail::Light, fe, fe),
            &[],
            &NetlinkSample::default(),
        );
        assert!(t.contains("this run: light"), "{t}");
        assert!(t.contains("alloc           left off"), "{t}");
    }

    #[test]
    fn each_attached_hook_says_what_attaching_it_took() {
        let fe = Some(Backend::Fentry);
        let mut f = facts(Detail::Full, fe, fe);
        f.hooks[2].load = Some(HookLoad {
            ms: 249.6,
            verified_insns: Some(1986),
        });
        f.hooks[3].load = Some(HookLoad {
            ms: 12.0,
            verified_insns: None,
        });
        let t = text(&f, &[], &NetlinkSample::default());
        let line = |hook: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(hook))
                .unwrap_or_else(|| panic!("no {hook} line in {t}"))
                .to_string()
        };
        assert!(
            line("refill").ends_with("(attached in 250 ms; verifier: 1986 instructions)"),
            "{t}"
        );
        assert!(line("slow_path").ends_with("(attached in 12 ms)"), "{t}");
        assert!(!line("alloc").contains("attached in"), "{t}");
    }

    #[test]
    fn doctor_says_how_untyped_pointers_are_read() {
        let kp = Some(Backend::Kprobe);
        let reads = |f: &SourceFacts| {
            text(f, &[], &NetlinkSample::default())
                .lines()
                .find(|l| l.starts_with("pointer reads"))
                .map(str::to_string)
        };
        let mut f = facts(Detail::Full, kp, kp);
        f.cast_reads = true;
        assert!(reads(&f).unwrap().contains("loads (bpf_rdonly_cast)"));
        f.cast_reads = false;
        let line = reads(&f).unwrap();
        assert!(
            line.contains("helper calls") && line.contains("Linux 6.2+"),
            "{line}"
        );
        // A light run on fentry: no program holds a pool as a number on the hot path.
        let mut f = facts(Detail::Light, None, Some(Backend::Fentry));
        f.hooks.retain(|h| !h.hook.starts_with("page_"));
        assert_eq!(reads(&f), None);
    }

    #[test]
    fn doctor_says_whether_the_kernel_counts_the_runs_it_skips() {
        let line = |trampolines, kprobes_and_tracepoints, backend| {
            let mut f = facts(Detail::Full, backend, backend);
            // Only the backend asked for (a tracepoint may run a raw program).
            f.hooks.retain(|h| h.backend == backend);
            f.skipped_runs_counted = SkippedRunsCounted {
                trampolines,
                kprobes_and_tracepoints,
            };
            text(&f, &[], &NetlinkSample::default())
                .lines()
                .find(|l| l.starts_with("skipped runs"))
                .map(str::to_string)
        };
        let fentry = Some(Backend::Fentry);
        let kprobe = Some(Backend::Kprobe);
        assert!(line(true, true, kprobe)
            .unwrap()
            .contains("counted by the kernel for every backend"));
        let old = line(true, false, kprobe).unwrap();
        assert!(
            old.contains("no counting") && old.contains("without a sign"),
            "{old}"
        );
        assert!(line(true, false, fentry)
            .unwrap()
            .contains("counted by the kernel for fentry/fexit"));
        assert!(line(false, false, kprobe).unwrap().contains("before 5.11"));
        // A replay's facts count nothing and attach nothing: no line.
        let mut replay = facts(Detail::Full, None, None);
        replay.hooks.clear();
        replay.skipped_runs_counted = SkippedRunsCounted::default();
        assert!(text(&replay, &[], &NetlinkSample::default())
            .lines()
            .all(|l| !l.starts_with("skipped runs")));
    }

    #[test]
    fn doctor_says_whether_the_kernel_times_the_programs() {
        let line = |stats: BpfStats| {
            let mut f = facts(Detail::Light, None, Some(Backend::Fentry));
            f.bpf_stats = stats;
            text(&f, &[], &NetlinkSample::default())
                .lines()
                .find(|l| l.starts_with("BPF stats"))
                .map(str::to_string)
                .unwrap()
        };
        assert!(line(BpfStats::Off).starts_with("BPF stats     off: ppscope's own cost is '?'"));
        assert!(line(BpfStats::Asked).contains("on (--bpf-stats): ppscope's own cost is counted"));
        assert!(line(BpfStats::Refused).contains("needs CAP_SYS_ADMIN"));
        assert!(line(BpfStats::Sysctl).contains("on (kernel.bpf_stats_enabled=1)"));
    }
}

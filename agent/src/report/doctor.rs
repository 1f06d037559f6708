//! `ppscope doctor`: what ppscope can measure on this kernel, and why not where it cannot.
use std::fmt::Write;

use crate::{
    host::{btf::ResolvedField, btf::VMLINUX_BTF, netlink::NetlinkSample, system},
    model::SourceFacts,
    snapshot::Backend,
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
    lines
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
    let _ = writeln!(out, "\nhooks");
    for h in hooks {
        let _ = match h.backend {
            Some(b) => writeln!(
                out,
                "  {:<15} {:<11} {}",
                h.hook,
                format!("{b:?}").to_lowercase(),
                h.targets.join(", ")
            ),
            None => writeln!(
                out,
                "  {:<15} {:<11} {} (lost: {})",
                h.hook,
                "missing",
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

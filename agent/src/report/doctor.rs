//! `ppscope doctor`: what ppscope can measure on this kernel, and why not where it cannot.
use std::fmt::Write;

use crate::{
    host::{btf::ResolvedField, btf::VMLINUX_BTF, system},
    model::SourceFacts,
    snapshot::Backend,
};

/// The report as a JSON object.
pub fn json(facts: &SourceFacts, fields: &[ResolvedField]) -> serde_json::Value {
    serde_json::json!({
        "kernel": facts.kernel,
        "kprobes": system::has_kprobe_pmu(),
        "btf": VMLINUX_BTF,
        "hooks": facts.hooks,
        "fields": fields,
    })
}

/// The report as text: backends, then each hook, then the kernel fields read from BTF.
pub fn text(facts: &SourceFacts, fields: &[ResolvedField]) -> String {
    let mut out = String::new();
    let hooks = &facts.hooks;
    let _ = writeln!(out, "kernel {}", facts.kernel);
    let served_by = |b: Backend| hooks.iter().filter(|h| h.backend == Some(b)).count();
    let refused = |what: &str| {
        hooks
            .iter()
            .flat_map(|h| &h.reasons)
            .find(|r| r.starts_with(what))
            .cloned()
    };
    for (name, backend, prefix) in [
        ("fentry/fexit", Backend::Fentry, "fentry"),
        ("kprobes", Backend::Kprobe, "kprobe"),
        ("tracepoints", Backend::Tracepoint, "tracepoint"),
    ] {
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

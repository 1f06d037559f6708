//! Facts about the running kernel and our privileges, read at run time.
use std::{collections::HashSet, fs, path::Path};

use anyhow::{Context, Result};

/// Function names the kernel knows (`/proc/kallsyms`, text symbols only), with module names
/// stripped. Names are listed even to unprivileged readers.
pub struct Symbols {
    names: HashSet<String>,
}

impl Symbols {
    pub fn load() -> Result<Self> {
        let text = fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
        Ok(Self::parse(&text))
    }

    pub fn parse(text: &str) -> Self {
        let names = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let (_addr, kind, name) = (it.next()?, it.next()?, it.next()?);
                matches!(kind, "t" | "T").then(|| name.to_string())
            })
            .collect();
        Self { names }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}

/// `uname -r`.
pub fn release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Whether the kernel offers the kprobe PMU that perf-based kprobes attach through.
pub fn has_kprobe_pmu() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capabilities of this process, from `/proc/self/status`.
pub fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// None when we may load and attach tracing programs; else the sentence telling what is missing.
pub fn missing_privilege(caps: u64) -> Option<String> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return None;
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    Some(format!(
        "ppscope needs root or the capabilities {} to load its probes (missing: {}); run it with sudo",
        "CAP_BPF and CAP_PERFMON",
        missing.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_text_symbols_only() {
        let s = Symbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81a00000 t page_pool_refill_alloc_cache\n\
             ffffffffc0000000 t gve_alloc_buffer\t[gve]\n\
             ffffffff82000000 D some_data\n",
        );
        assert!(s.contains("page_pool_refill_alloc_cache"));
        assert!(s.contains("gve_alloc_buffer"));
        assert!(!s.contains("some_data"));
    }

    #[test]
    fn privilege_sentences() {
        assert_eq!(missing_privilege(1 << CAP_SYS_ADMIN), None);
        assert_eq!(missing_privilege((1 << CAP_BPF) | (1 << CAP_PERFMON)), None);
        let msg = missing_privilege(1 << CAP_BPF).unwrap();
        assert!(msg.contains("missing: CAP_PERFMON"), "{msg}");
        let msg = missing_privilege(0).unwrap();
        assert!(msg.contains("CAP_BPF, CAP_PERFMON"), "{msg}");
    }
}

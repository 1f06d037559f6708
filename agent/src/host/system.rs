//! Facts about the running kernel and our privileges, read at run time.
use std::{
    collections::{HashMap, HashSet},
    fs,
    path::Path,
};

use anyhow::{Context, Result};

/// The kernel functions a caller asked about (`/proc/kallsyms`, text symbols only), with module
/// names stripped, and their sizes where addresses are visible (root: not hidden by
/// kptr_restrict).
///
/// Only the asked-for names are kept: kallsyms has ~150,000 text symbols, and a map of all of
/// them (a string each) took as long as the kernel takes to write the file, on the start-up's
/// critical path under the VM lab's emulated CPUs (0.7 s of its 2 s). A symbol's size needs
/// every text address (the next one ends it): those are kept as numbers.
pub struct Symbols {
    /// name → address (0 when hidden), of the asked-for names the kernel has.
    addrs: HashMap<String, u64>,
    /// Every text symbol address, sorted: a symbol's size is the gap to the next one.
    sorted: Vec<u64>,
}

impl Symbols {
    /// Reads kallsyms for the functions named in `wanted`.
    pub fn load(wanted: &[&str]) -> Result<Self> {
        let text = fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
        Ok(Self::parse(&text, wanted))
    }

    pub fn parse(text: &str, wanted: &[&str]) -> Self {
        let wanted: HashSet<&str> = wanted.iter().copied().collect();
        let mut addrs = HashMap::new();
        let mut sorted = Vec::new();
        for line in text.lines() {
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if !matches!(kind, "t" | "T") {
                continue;
            }
            let addr = u64::from_str_radix(addr, 16).unwrap_or(0);
            if addr != 0 {
                sorted.push(addr);
            }
            if wanted.contains(name) {
                addrs.entry(name.to_string()).or_insert(addr);
            }
        }
        sorted.sort_unstable();
        sorted.dedup();
        Self { addrs, sorted }
    }

    /// Whether the kernel has `name` (one of the names asked for).
    pub fn contains(&self, name: &str) -> bool {
        self.addrs.contains_key(name)
    }

    /// Bytes of code of `name` (distance to the next text symbol), None when addresses are hidden.
    pub fn size(&self, name: &str) -> Option<u64> {
        let addr = *self.addrs.get(name).filter(|a| **a != 0)?;
        let i = self.sorted.partition_point(|a| *a <= addr);
        self.sorted.get(i).map(|next| next - addr)
    }
}

/// The name of interface `ifindex` in this network namespace.
pub fn ifname_of(ifindex: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: the buffer is IF_NAMESIZE bytes as if_indextoname requires; it writes a
    // NUL-terminated name or returns NULL.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The base page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// `uname -r`.
pub fn release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Whether the administrator has the kernel keep BPF run-time stats (the
/// `kernel.bpf_stats_enabled` sysctl). Another process holding `BPF_ENABLE_STATS` does not
/// show here: the sysctl reports only its own switch.
pub fn bpf_stats_sysctl_on() -> bool {
    fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
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

/// The kernel's `perf_event_paranoid` sysctl, where it can be read.
pub fn perf_event_paranoid() -> Option<i32> {
    fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What a refused `perf_event_open` (a kprobe's attach) owes to the kernel's
/// `perf_event_paranoid`, in words; None where that is not the reason. Above 2 is not an
/// upstream level: Debian's kernels (and those that carry its patch) add 3, their default,
/// which refused kprobes to CAP_PERFMON without CAP_SYS_ADMIN in the VM lab's Debian kernel
/// (refused at 3, attached at 2, with CAP_BPF and CAP_PERFMON;
/// `vm_least_privilege_needs_no_tracefs_and_names_what_refuses_kprobes`).
pub fn paranoid_refusal(level: Option<i32>, caps: u64) -> Option<String> {
    let level = level.filter(|l| *l > 2)?;
    if has_cap(caps, CAP_SYS_ADMIN) {
        return None;
    }
    Some(format!(
        "kernel.perf_event_paranoid is {level}: above 2, kernels with Debian's patch refuse \
         kprobes to all but CAP_SYS_ADMIN, and `sysctl kernel.perf_event_paranoid=2` lets \
         CAP_PERFMON attach them"
    ))
}

/// Whether the capability set `caps` (as `effective_caps` reads it) holds `cap`.
fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// None when we may load and attach tracing programs; else the sentence telling what is missing.
pub fn missing_privilege(caps: u64) -> Option<String> {
    let has = |c: u32| has_cap(caps, c);
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
        // Least privilege is the deployment we recommend, so say how to grant them, not only sudo.
        "ppscope needs root or the capabilities {} to load its probes (missing: {}); run it with sudo, or grant them (systemd AmbientCapabilities=, or setcap cap_bpf,cap_perfmon+ep)",
        "CAP_BPF and CAP_PERFMON",
        missing.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kprobe_refused_above_paranoid_2_names_the_sysctl_unless_sys_admin_would_pass() {
        let perfmon = (1u64 << CAP_BPF) | (1u64 << CAP_PERFMON);
        let why = paranoid_refusal(Some(3), perfmon).expect("level 3 without CAP_SYS_ADMIN");
        assert!(why.contains("kernel.perf_event_paranoid is 3"), "{why}");
        assert!(why.contains("sysctl kernel.perf_event_paranoid=2"), "{why}");
        assert!(!why.contains("  "), "one sentence, no gaps: {why}");
        assert!(paranoid_refusal(Some(4), perfmon).is_some());
        assert_eq!(
            paranoid_refusal(Some(2), perfmon),
            None,
            "upstream levels pass CAP_PERFMON"
        );
        assert_eq!(paranoid_refusal(Some(3), 1 << CAP_SYS_ADMIN), None);
        assert_eq!(paranoid_refusal(None, perfmon), None);
    }

    #[test]
    fn kallsyms_text_symbols_only() {
        let wanted = [
            "_stext",
            "page_pool_refill_alloc_cache",
            "gve_alloc_buffer",
            "some_data",
            "page_pool_alloc_pages",
        ];
        let s = Symbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81a00000 t page_pool_refill_alloc_cache\n\
             ffffffff81b00000 t not_asked_for\n\
             ffffffffc0000000 t gve_alloc_buffer\t[gve]\n\
             ffffffff82000000 D some_data\n",
            &wanted,
        );
        assert!(s.contains("page_pool_refill_alloc_cache"));
        assert!(s.contains("gve_alloc_buffer"));
        assert!(!s.contains("some_data"));
        assert!(
            !s.contains("not_asked_for"),
            "only the names asked for are kept"
        );
        // A symbol not asked for still ends the one before it.
        assert_eq!(s.size("page_pool_refill_alloc_cache"), Some(0x100000));
        assert_eq!(s.size("_stext"), Some(0xa00000));
        assert_eq!(
            s.size("gve_alloc_buffer"),
            None,
            "last symbol: no next address"
        );
        let hidden = Symbols::parse("0000000000000000 T page_pool_alloc_pages\n", &wanted);
        assert!(hidden.contains("page_pool_alloc_pages"));
        assert_eq!(hidden.size("page_pool_alloc_pages"), None);
    }

    #[test]
    fn loopback_is_named() {
        assert_eq!(ifname_of(1).as_deref(), Some("lo"));
        assert_eq!(ifname_of(u32::MAX), None);
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

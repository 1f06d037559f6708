//! Runs of ppscope's programs the kernel skipped, as the kernel counts them per program
//! (`bpf_prog_info.recursion_misses`): exported per hook, and warned of once per hook.
//!
//! The kernel does not run a tracing program where it would nest. A kprobe program is skipped
//! while the CPU's `bpf_prog_active` is held: by another kprobe or perf program, any tool's (a
//! NAPI softirq taken while a tracer's kprobe program ran in a task, say), or by a BPF map
//! system call, ppscope's own reads of its maps included. An fentry, fexit or tracepoint
//! program (`tp_btf` or raw, as ppscope attaches them) is skipped only while the same program
//! runs on that CPU (a pool's teardown releasing pages in a worker when a softirq there
//! releases another's). Each skipped run is an event the hook's figures lack (up to one a
//! call: a pair's entry and exit are counted apart). The kernel counts them for fentry and
//! fexit since Linux 5.11 (`bpf_prog_info.recursion_misses` in its BTF), for tracepoints since
//! 6.1 and for kprobes since 6.7: both are taken as counted where the kernel's BTF has the
//! kprobe link's `missed`, which came with the second, not by version (a 6.1-6.6 kernel's
//! tracepoint counts are left out). A hook served by programs the kernel does not count is
//! left out, not shown as 0. Not counted here: a kretprobe's return the kernel dropped
//! because all its instances were busy (`maxactive`), which only the kprobe link's `missed`
//! holds.
use std::{
    collections::HashMap,
    io, mem,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
};

use aya::programs::Program;
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

use super::{hooks::HOOKS, Probes};
use crate::{
    host::btf::KernelBtf,
    model::{since, SkippedRunsCounted},
    snapshot::Backend,
};

/// A hook's runs the kernel skipped since its programs were loaded, and the backend serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub hook: &'static str,
    pub backend: Backend,
    pub runs: u64,
}

/// Which programs' skipped runs this kernel counts, found in its BTF.
pub(super) fn counted(btf: &KernelBtf) -> SkippedRunsCounted {
    btf.look_up(&["bpf_prog_info", "bpf_link_info"]);
    let trampolines = btf
        .member_offset("bpf_prog_info", &["recursion_misses"])
        .is_some();
    SkippedRunsCounted {
        trampolines,
        kprobes_and_tracepoints: trampolines
            && btf
                .member_offset("bpf_link_info", &["perf_event", "kprobe", "missed"])
                .is_some(),
    }
}

/// Whether a program serves `backend` (a hook keeps the programs of a backend that loaded but
/// did not attach), and whether the kernel counts its skipped runs.
fn serves_and_counted(
    counted: SkippedRunsCounted,
    backend: Backend,
    program: &Program,
) -> (bool, bool) {
    match program {
        Program::FEntry(_) | Program::FExit(_) => (backend == Backend::Fentry, counted.trampolines),
        Program::KProbe(_) => (backend == Backend::Kprobe, counted.kprobes_and_tracepoints),
        // `tp_btf` programs run as raw tracepoint programs do (`bpf_trace_run`).
        Program::BtfTracePoint(_) | Program::RawTracePoint(_) | Program::TracePoint(_) => (
            backend == Backend::Tracepoint,
            counted.kprobes_and_tracepoints,
        ),
        _ => (false, false),
    }
}

/// The hooks whose skipped runs were warned of, and each hook's count at the first check.
#[derive(Debug, Default)]
pub(super) struct SkipCheck {
    at_start: Option<HashMap<&'static str, u64>>,
    warned: Vec<&'static str>,
}

impl SkipCheck {
    /// A hook attached again (a module's, reloaded): its programs count from 0 again.
    pub fn forget(&mut self, hook: &'static str) {
        if let Some(start) = &mut self.at_start {
            start.insert(hook, 0);
        }
    }

    /// One check: each hook's skipped runs now (since load). A warning per hook, the first
    /// time its count moved since the first check.
    fn observe(&mut self, now: &[Skipped]) -> Vec<String> {
        let start = self
            .at_start
            .get_or_insert_with(|| now.iter().map(|s| (s.hook, s.runs)).collect());
        let mut warnings = Vec::new();
        for s in now {
            // A hook attached after the first check (a module's) started from none.
            let skipped = since(s.runs, start.get(s.hook).copied().unwrap_or(0));
            if skipped == 0 || self.warned.contains(&s.hook) {
                continue;
            }
            self.warned.push(s.hook);
            let why = match s.backend {
                Backend::Kprobe => {
                    "a kprobe program is not run while another kprobe or perf BPF program or \
                     a BPF map system call, ppscope's own reads included, holds the CPU; \
                     fentry programs, --backend fentry where the kernel has them, are skipped \
                     only where one would nest in itself"
                }
                _ => "the hook's program would have nested in itself on the same CPU",
            };
            warnings.push(format!(
                "{}: the kernel skipped {skipped} {} of ppscope's programs on this hook ({why}), \
                 so its figures lack up to that many events, and more as it goes on \
                 (ppscope_skipped_runs_total)",
                s.hook,
                if skipped == 1 { "run" } else { "runs" }
            ));
        }
        warnings
    }
}

impl Probes {
    /// Every attached hook whose programs' skipped runs the kernel counts, with their sum
    /// since load: one `BPF_OBJ_GET_INFO_BY_FD` per loaded program. A program whose info
    /// cannot be read leaves its hook out.
    pub fn skipped_runs(&self) -> Vec<Skipped> {
        let backend_of = |name: &str| {
            self.facts
                .hooks
                .iter()
                .find(|h| h.hook == name)
                .and_then(|h| h.backend)
        };
        HOOKS
            .iter()
            .filter_map(|def| {
                let backend = backend_of(def.name)?;
                let mut runs = 0;
                for name in super::hooks::all_programs(def) {
                    let Some(program) = self.ebpf.program(name) else {
                        continue;
                    };
                    let (serves, counted) =
                        serves_and_counted(self.facts.skipped_runs_counted, backend, program);
                    // Not loaded: a backend not tried, or not this one.
                    let Ok(fd) = program.fd() else { continue };
                    if !serves {
                        continue;
                    }
                    if !counted {
                        return None;
                    }
                    runs += recursion_misses(fd.as_fd()).ok()?;
                }
                Some(Skipped {
                    hook: def.name,
                    backend,
                    runs,
                })
            })
            .collect()
    }

    /// Reads the skipped runs, and warns once per hook whose count moved since the first
    /// check.
    pub fn check_skipped(&mut self) -> Vec<Skipped> {
        let skipped = self.skipped_runs();
        for warning in self.skip_check.observe(&skipped) {
            log::warn!("{warning}");
        }
        skipped
    }
}

/// The kernel's count of a program's skipped runs (`bpf_prog_info.recursion_misses`). aya 0.14
/// reads the program's info but does not give that field, so this asks the kernel itself
/// (`sys.rs`).
fn recursion_misses(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: plain data; all zero asks for no arrays (lengths 0, pointers null).
    let mut info: bpf_prog_info = unsafe { mem::zeroed() };
    // SAFETY: plain data; all zero is every member's "unused" value.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    // SAFETY: writing the info member of a zeroed union of plain integers.
    let i = unsafe { &mut attr.info };
    i.bpf_fd = fd.as_raw_fd() as u32;
    i.info_len = mem::size_of::<bpf_prog_info>() as u32;
    i.info = &mut info as *mut bpf_prog_info as u64;
    // SAFETY: `info` outlives the call and has room for `info_len` bytes, which is all the
    // kernel writes.
    unsafe { super::sys::bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.recursion_misses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(hook: &'static str, runs: u64) -> Skipped {
        Skipped {
            hook,
            backend: Backend::Kprobe,
            runs,
        }
    }

    #[test]
    fn a_hook_is_warned_of_once_when_its_count_moves_after_the_first_check() {
        let mut check = SkipCheck::default();
        // Skipped before the baseline (another run's, or before the window): not this one's.
        assert!(check
            .observe(&[skipped("alloc", 5), skipped("recycle", 0)])
            .is_empty());
        assert!(check
            .observe(&[skipped("alloc", 5), skipped("recycle", 0)])
            .is_empty());
        let w = check.observe(&[skipped("alloc", 5), skipped("recycle", 3)]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("recycle: the kernel skipped 3 runs"),
            "{w:?}"
        );
        assert!(check
            .observe(&[skipped("alloc", 5), skipped("recycle", 300)])
            .is_empty());
        // A hook first seen after the baseline (a module's, attached later) counts from 0.
        let w = check.observe(&[skipped("gve_alloc", 1)]);
        assert!(
            w[0].starts_with("gve_alloc: the kernel skipped 1 run of"),
            "{w:?}"
        );
    }

    #[test]
    fn a_reloaded_hooks_programs_count_from_zero_again() {
        let mut check = SkipCheck::default();
        check.observe(&[skipped("gve_rx_poll", 40)]);
        // Reloaded: the new programs' count starts again at 0, below the old baseline.
        check.forget("gve_rx_poll");
        let w = check.observe(&[skipped("gve_rx_poll", 40)]);
        assert!(
            w[0].starts_with("gve_rx_poll: the kernel skipped 40 runs"),
            "{w:?}"
        );
    }

    #[test]
    fn the_warning_says_what_skips_a_program_on_its_backend() {
        let mut check = SkipCheck::default();
        let fentry = Skipped {
            hook: "recycle",
            backend: Backend::Fentry,
            runs: 0,
        };
        check.observe(&[skipped("alloc", 0), fentry]);
        let w = check.observe(&[skipped("alloc", 2), Skipped { runs: 2, ..fentry }]);
        assert!(
            w[0].contains("a BPF map system call, ppscope's own reads included,"),
            "{w:?}"
        );
        assert!(w[1].contains("would have nested in itself"), "{w:?}");
        assert!(w[1].contains("lack up to that many events"), "{w:?}");
    }

    /// On the running kernel (its BTF, where readable): a release that has the counting
    /// finds it in BTF. (Not the other way round: a distribution may backport it.)
    #[test]
    fn the_kernels_btf_shows_what_its_release_counts() {
        let path = std::path::Path::new(crate::host::btf::VMLINUX_BTF);
        let Ok(btf) = KernelBtf::vmlinux(path) else {
            return;
        };
        let release = crate::host::system::release();
        let mut parts = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        let found = counted(&btf);
        assert!(
            found.trampolines || version < (5, 11),
            "{release}: {found:?}"
        );
        assert!(
            found.kprobes_and_tracepoints || version < (6, 7),
            "{release}: {found:?}"
        );
    }
}

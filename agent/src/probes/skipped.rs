//! Runs of ppscope's programs the kernel skipped, as the kernel counts them per program
//! (`bpf_prog_info.recursion_misses`): exported per hook, and warned of once per hook.
//!
//! The kernel does not run a tracing program where it would nest. A kprobe program is skipped
//! while another BPF program, any tool's, runs on the same CPU (a NAPI's softirq taken while a
//! tracer's kprobe program ran in a task, say); an fentry, fexit or tracepoint program
//! (`tp_btf` or raw, as ppscope attaches them) while the same program runs there (a pool's
//! teardown releasing pages in a worker when a softirq on that CPU releases another's). Each
//! skipped run is an event the hook's figures lack. The kernel counts them for trampoline programs (fentry,
//! fexit, `tp_btf`) since Linux 5.11 and for kprobes and raw tracepoints since 6.7; both are
//! found in BTF (`bpf_prog_info.recursion_misses`, and the kprobe link's `missed`, which came
//! with the second), not by version. A hook with a program the kernel does not count is left
//! out, not shown as 0. Not counted here: a kretprobe's return the kernel dropped because all
//! its instances were busy (`maxactive`), which only the kprobe link's `missed` holds.
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
};

/// A hook's runs the kernel skipped since its programs were loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub hook: &'static str,
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
        kprobes_and_raw: trampolines
            && btf
                .member_offset("bpf_link_info", &["perf_event", "kprobe", "missed"])
                .is_some(),
    }
}

/// Whether the kernel counts this program's skipped runs.
fn counts(counted: SkippedRunsCounted, program: &Program) -> bool {
    match program {
        Program::FEntry(_) | Program::FExit(_) | Program::BtfTracePoint(_) => counted.trampolines,
        Program::KProbe(_) | Program::RawTracePoint(_) | Program::TracePoint(_) => {
            counted.kprobes_and_raw
        }
        _ => false,
    }
}

/// The hooks whose skipped runs were warned of, and each hook's count at the first check.
#[derive(Debug, Default)]
pub(super) struct SkipCheck {
    at_start: Option<HashMap<&'static str, u64>>,
    warned: Vec<&'static str>,
}

impl SkipCheck {
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
            warnings.push(format!(
                "{}: the kernel skipped {skipped} {} of ppscope's programs on this hook (it \
                 does not nest tracing programs: another BPF program was running on the same \
                 CPU), so its figures are short by that many events and more as it goes on \
                 (ppscope_skipped_runs_total); the fentry backend's programs are skipped only \
                 where they would nest in themselves",
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
        let attached = |name: &str| {
            self.facts
                .hooks
                .iter()
                .any(|h| h.hook == name && h.attached())
        };
        HOOKS
            .iter()
            .filter(|def| attached(def.name))
            .filter_map(|def| {
                let mut runs = 0;
                for name in super::hooks::all_programs(def) {
                    let Some(program) = self.ebpf.program(name) else {
                        continue;
                    };
                    // Not loaded: another backend serves the hook.
                    let Ok(fd) = program.fd() else { continue };
                    if !counts(self.facts.skipped_runs_counted, program) {
                        return None;
                    }
                    runs += recursion_misses(fd.as_fd()).ok()?;
                }
                Some(Skipped {
                    hook: def.name,
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
/// reads the program's info but does not give that field, so this asks the kernel itself.
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
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &mut attr as *mut bpf_attr,
            mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.recursion_misses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(hook: &'static str, runs: u64) -> Skipped {
        Skipped { hook, runs }
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
        let w = check.observe(&[skipped("gve_alloc", 2)]);
        assert!(
            w[0].starts_with("gve_alloc: the kernel skipped 2 runs"),
            "{w:?}"
        );
    }

    /// On the running kernel (its BTF, where readable): what BTF says is counted agrees with
    /// the release the counting came in.
    #[test]
    fn the_kernels_btf_says_what_it_counts_as_its_release_does() {
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
        assert_eq!(
            found.trampolines,
            version >= (5, 11),
            "{release}: {found:?}"
        );
        assert_eq!(
            found.kprobes_and_raw,
            version >= (6, 7),
            "{release}: {found:?}"
        );
    }
}

//! Runs of ppscope's programs the kernel skipped, as the kernel counts them per program
//! (`bpf_prog_info.recursion_misses`), and hits of its kprobes the kernel did not hand to them,
//! as it counts them per kprobe (`bpf_link_info.perf_event.kprobe.missed`): warned of once per
//! hook, and kept in each hook's status (`HookStatus::missed`), from which the snapshots, the
//! reports and the agent's `/metrics` read them.
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
//! left out, not shown as 0.
//!
//! A layer below, the kprobe itself may not run: a kprobe hit while another kprobe's handler
//! runs on the CPU (any tool's) is dropped before any program sees it, and a kretprobe's
//! return is dropped when all its instances (`maxactive`) are in use. The kernel counts both
//! per kprobe and gives them with the kprobe's BPF link (Linux 6.7, with the programs'
//! count). aya 0.14 keeps a kprobe's link to itself, so ppscope finds its links among its own
//! descriptors by their programs' ids ([`KprobeLinks`]).
use std::{
    collections::HashMap,
    io, mem,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
};

use aya::programs::Program;
use aya_obj::generated::{
    bpf_attr, bpf_cmd, bpf_link_info, bpf_link_type, bpf_perf_event_type, bpf_prog_info,
};

use super::{hooks::HOOKS, Probes};
use crate::{
    host::btf::KernelBtf,
    model::{since, SkippedRunsCounted},
    snapshot::{Backend, HookMissed, HookStatus},
    units::count_of,
};

/// What a hook's programs missed since they were loaded (that is, since it attached), as its
/// status carries it, and the backend serving it. The dropped kprobe hits (returns, for a
/// kretprobe) are None unless the hook is on kprobes, the kernel counts them
/// (`SkippedRunsCounted::kprobes_and_tracepoints`) and its links were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Skipped {
    hook: &'static str,
    backend: Backend,
    missed: HookMissed,
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

/// What a count of [`Skipped`] lost: its key in [`SkipCheck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lost {
    /// Runs of the hook's programs (`HookMissed::skipped_runs`).
    Runs,
    /// Hits of its kprobes (`HookMissed::kprobe_hits_dropped`).
    KprobeHits,
}

/// The hooks whose losses were warned of, and each hook's counts at the first check.
#[derive(Debug, Default)]
pub(super) struct SkipCheck {
    at_start: Option<HashMap<(&'static str, Lost), u64>>,
    warned: Vec<(&'static str, Lost)>,
}

impl SkipCheck {
    /// A hook attached again (a module's, reloaded): its programs and kprobes count from 0
    /// again.
    pub fn forget(&mut self, hook: &'static str) {
        if let Some(start) = &mut self.at_start {
            start.insert((hook, Lost::Runs), 0);
            start.insert((hook, Lost::KprobeHits), 0);
        }
    }

    /// One check: each hook's counts now (since load). A warning per hook and count, the
    /// first time the count moved since the first check.
    fn observe(&mut self, now: &[Skipped]) -> Vec<String> {
        let counts = || {
            now.iter().flat_map(|s| {
                [
                    Some(((s.hook, Lost::Runs), s.missed.skipped_runs, s.backend)),
                    s.missed
                        .kprobe_hits_dropped
                        .map(|m| ((s.hook, Lost::KprobeHits), m, s.backend)),
                ]
                .into_iter()
                .flatten()
            })
        };
        let start = self
            .at_start
            .get_or_insert_with(|| counts().map(|(key, n, _)| (key, n)).collect());
        let mut warnings = Vec::new();
        for (key, n, backend) in counts() {
            // A hook attached after the first check (a module's) started from none.
            let lost = since(n, start.get(&key).copied().unwrap_or(0));
            if lost == 0 || self.warned.contains(&key) {
                continue;
            }
            self.warned.push(key);
            let (hook, what) = key;
            warnings.push(warning(hook, what, backend, lost));
        }
        warnings
    }
}

/// The warning for `lost` events of `hook` since the first check.
fn warning(hook: &str, what: Lost, backend: Backend, lost: u64) -> String {
    match what {
        Lost::Runs => {
            let why = match backend {
                Backend::Kprobe => {
                    "a kprobe program is not run while another kprobe or perf BPF program or \
                     a BPF map system call, ppscope's own reads included, holds the CPU; \
                     fentry programs, --backend fentry where the kernel has them, are skipped \
                     only where one would nest in itself"
                }
                _ => "the hook's program would have nested in itself on the same CPU",
            };
            format!(
                "{hook}: the kernel skipped {} of ppscope's programs on this hook ({why}), \
                 so its figures lack up to that many events, and more as it goes on \
                 (ppscope_skipped_runs_total)",
                count_of(lost, "run", "runs")
            )
        }
        Lost::KprobeHits => format!(
            "{hook}: the kernel dropped {} of ppscope's kprobes on this hook before any \
             program ran (a kprobe hit while another kprobe's handler, any tool's, runs on the \
             CPU is dropped, and a kretprobe's return when all its instances are in use; \
             --backend fentry, where the kernel has it, uses no kprobes), so its figures lack \
             up to that many events, and more as it goes on (ppscope_kprobe_missed_total)",
            count_of(lost, "hit", "hits")
        ),
    }
}

/// ppscope's kprobe links, by their programs' ids. The kernel keeps a kprobe's count of
/// dropped hits with its BPF link, and aya 0.14 keeps the link to itself, so the links are
/// looked for among this process's descriptors ([`links_of`]) once per program not looked
/// for before, and kept open: a copy of each, which keeps the link attached while it is open
/// whatever aya does, so [`Probes::refresh_modules`] lets every copy go before it unloads a
/// module's programs ([`KprobeLinks::let_go`]).
#[derive(Debug, Default)]
pub(super) struct KprobeLinks {
    /// Per program looked for: its links (one per function it is attached to).
    by_program: HashMap<u32, Vec<OwnedFd>>,
}

impl KprobeLinks {
    /// The dropped hits of each of `programs`' kprobes (a pair's kprobe and kretprobe each
    /// count a call dropped at its entry: they share the function's kprobe), asked for all of
    /// ppscope's kprobe programs at once: the links are looked for again only for a program
    /// not looked for before, and programs no longer asked for are let go (their links
    /// closed). A program's count is None where it has no link (an attached kprobe program
    /// has one per function on every kernel that counts), or one could not be read.
    fn missed(&mut self, programs: &[u32]) -> io::Result<HashMap<u32, Option<u64>>> {
        self.by_program.retain(|id, _| programs.contains(id));
        let new: Vec<u32> = programs
            .iter()
            .copied()
            .filter(|id| !self.by_program.contains_key(id))
            .collect();
        if !new.is_empty() {
            let mut found = links_of(&new)?;
            for id in new {
                self.by_program
                    .insert(id, found.remove(&id).unwrap_or_default());
            }
        }
        Ok(self
            .by_program
            .iter()
            .map(|(id, links)| {
                let missed = links
                    .iter()
                    .map(|link| kprobe_missed(link.as_fd()).ok().flatten())
                    .sum::<Option<u64>>()
                    .filter(|_| !links.is_empty());
                (*id, missed)
            })
            .collect())
    }

    /// Closes every copy held: before programs are unloaded (a module's hooks attached
    /// again), whose links the copies would keep attached. The next check looks again.
    pub fn let_go(&mut self) {
        self.by_program.clear();
    }

    /// How many links of `program` are held, if it was looked for (a test's look inside).
    #[cfg(test)]
    fn links(&self, program: u32) -> Option<usize> {
        self.by_program.get(&program).map(Vec::len)
    }

    /// The descriptors held for `program`'s links (a test's look inside: a new look through
    /// the descriptors would hold new copies).
    #[cfg(test)]
    fn descriptors(&self, program: u32) -> Vec<RawFd> {
        self.by_program.get(&program).map_or(Vec::new(), |links| {
            links.iter().map(AsRawFd::as_raw_fd).collect()
        })
    }
}

impl Probes {
    /// Every attached hook whose programs' skipped runs the kernel counts, with their sum
    /// since load (one `BPF_OBJ_GET_INFO_BY_FD` per loaded program) and, on kprobes, its
    /// kprobes' dropped hits (one per link, [`KprobeLinks`]). A program whose info cannot be
    /// read leaves its hook out; links that cannot be read leave its kprobes' count out.
    fn skipped_runs(&mut self) -> Vec<Skipped> {
        let mut found = Vec::new();
        for def in HOOKS {
            let Some(backend) = self
                .facts
                .hooks
                .iter()
                .find(|h| h.hook == def.name)
                .and_then(|h| h.backend)
            else {
                continue;
            };
            let mut runs = Some(0);
            let mut kprobes = Vec::new();
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
                let info = counted.then(|| program_info(fd.as_fd()).ok()).flatten();
                let Some(info) = info else {
                    runs = None;
                    break;
                };
                runs = runs.map(|r| r + info.recursion_misses);
                if matches!(program, Program::KProbe(_)) {
                    kprobes.push(info.id);
                }
            }
            if let Some(runs) = runs {
                found.push((def.name, backend, runs, kprobes));
            }
        }
        // All kprobe programs at once (none: every copy let go).
        let all: Vec<u32> = found.iter().flat_map(|f| f.3.iter().copied()).collect();
        let missed = self.kprobe_links.missed(&all).unwrap_or_default();
        found
            .into_iter()
            .map(|(hook, backend, runs, kprobes)| Skipped {
                hook,
                backend,
                missed: HookMissed {
                    skipped_runs: runs,
                    kprobe_hits_dropped: if kprobes.is_empty() {
                        None
                    } else {
                        kprobes
                            .iter()
                            .map(|id| missed.get(id).copied().flatten())
                            .sum()
                    },
                },
            })
            .collect()
    }

    /// Reads the skipped runs, and warns once per hook whose count moved since the first
    /// check. Each hook's counts go into its status (`HookStatus::missed`), so the snapshots,
    /// reports and /metrics made after say what the figures lack.
    pub fn check_skipped(&mut self) {
        let skipped = self.skipped_runs();
        for warning in self.skip_check.observe(&skipped) {
            log::warn!("{warning}");
        }
        record_missed(&mut self.facts.hooks, &skipped);
    }
}

/// Writes each hook's counts into its status (`HookStatus::missed`); a hook the check left
/// out (not attached, or not counted) has none, whatever it had before.
fn record_missed(hooks: &mut [HookStatus], skipped: &[Skipped]) {
    for status in hooks {
        status.missed = skipped
            .iter()
            .find(|s| status.hook == s.hook)
            .map(|s| s.missed);
    }
}

/// What ppscope reads of a program's info: its id, and the kernel's count of its skipped runs
/// (`recursion_misses`).
struct ProgramInfo {
    id: u32,
    recursion_misses: u64,
}

/// A program's id and skipped runs. aya 0.14 reads the program's info but does not give the
/// second, so this asks the kernel itself (`sys.rs`).
fn program_info(fd: BorrowedFd<'_>) -> io::Result<ProgramInfo> {
    // SAFETY: plain data; all zero asks for no arrays (lengths 0, pointers null).
    let mut info: bpf_prog_info = unsafe { mem::zeroed() };
    obj_info(fd, &mut info)?;
    Ok(ProgramInfo {
        id: info.id,
        recursion_misses: info.recursion_misses,
    })
}

/// `BPF_OBJ_GET_INFO_BY_FD` of `fd` into `info`: a `bpf_prog_info` or `bpf_link_info` whose
/// pointers are all null (no arrays or names asked for).
fn obj_info<T>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    // SAFETY: plain data; all zero is every member's "unused" value.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    // SAFETY: writing the info member of a zeroed union of plain integers.
    let i = unsafe { &mut attr.info };
    i.bpf_fd = fd.as_raw_fd() as u32;
    i.info_len = mem::size_of::<T>() as u32;
    i.info = info as *mut T as u64;
    // SAFETY: `info` outlives the call and has room for `info_len` bytes, which is all the
    // kernel writes; its null pointers ask for nothing written elsewhere.
    unsafe { super::sys::bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(())
}

/// A link's info (no name asked for).
fn link_info(fd: BorrowedFd<'_>) -> io::Result<bpf_link_info> {
    // SAFETY: plain data; all zero asks for no name (pointer null, length 0).
    let mut info: bpf_link_info = unsafe { mem::zeroed() };
    obj_info(fd, &mut info)?;
    Ok(info)
}

/// The kernel's count of a kprobe link's dropped hits (the kprobe's, and a kretprobe's
/// returns dropped for want of an instance); None for a link of another kind.
fn kprobe_missed(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let info = link_info(fd)?;
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_PERF_EVENT as u32 {
        return Ok(None);
    }
    // SAFETY: a perf event link's info fills the union's `perf_event` member, plain integers.
    let event = unsafe { info.__bindgen_anon_1.perf_event };
    let kprobe = [
        bpf_perf_event_type::BPF_PERF_EVENT_KPROBE as u32,
        bpf_perf_event_type::BPF_PERF_EVENT_KRETPROBE as u32,
    ];
    // SAFETY: plain integers whichever member the kernel filled (a kprobe's fills `kprobe`).
    let missed = unsafe { event.__bindgen_anon_1.kprobe.missed };
    Ok(kprobe.contains(&event.type_).then_some(missed))
}

/// This process's BPF links whose program is one of `programs`, each opened again (a
/// duplicate descriptor of ppscope's own), by program id: aya holds them, so they are among
/// the descriptors in `/proc/self/fd` that name a BPF link. Looking there needs no privilege
/// (opening them by id among the host's would need `CAP_SYS_ADMIN`, which the systemd unit
/// does not grant), and touches no other tool's links. The listing is read whole before any
/// copy is made (a copy made while the directory is read would be listed, and copied, in
/// turn); a link is kept once, by its id. Another thread may close a listed descriptor, and
/// the number may be reused, before it is copied: a copy that is not a BPF link, or not one
/// of these programs', is closed again (holding another thread's socket for that moment).
fn links_of(programs: &[u32]) -> io::Result<HashMap<u32, Vec<OwnedFd>>> {
    const LINK: &str = "anon_inode:bpf_link";
    let is_link = |path: &std::path::Path| {
        std::fs::read_link(path).is_ok_and(|target| target.as_os_str() == LINK)
    };
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            is_link(&entry.path()).then_some(())?;
            entry.file_name().to_str()?.parse().ok()
        })
        .collect();
    let mut found: HashMap<u32, Vec<OwnedFd>> = HashMap::new();
    let mut kept = Vec::new();
    for number in listed {
        // A number, not a borrowed descriptor: it may have been closed since the listing.
        // SAFETY: F_DUPFD_CLOEXEC only reads the number; a closed one fails with EBADF.
        let copy = unsafe { libc::fcntl(number, libc::F_DUPFD_CLOEXEC, 0) };
        if copy < 0 {
            continue;
        }
        // SAFETY: a descriptor the kernel just made for this call, owned by no one else.
        let link = unsafe { OwnedFd::from_raw_fd(copy) };
        // The copy is this call's: what it names cannot change under it.
        if !is_link(std::path::Path::new(&format!("/proc/self/fd/{copy}"))) {
            continue;
        }
        let info = link_info(link.as_fd())?;
        if programs.contains(&info.prog_id) && !kept.contains(&info.id) {
            kept.push(info.id);
            found.entry(info.prog_id).or_default().push(link);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(hook: &'static str, runs: u64) -> Skipped {
        with_hits(hook, runs, None)
    }

    /// On kprobes, with `hits` of its kprobes dropped.
    fn with_hits(hook: &'static str, runs: u64, hits: Option<u64>) -> Skipped {
        Skipped {
            hook,
            backend: Backend::Kprobe,
            missed: HookMissed {
                skipped_runs: runs,
                kprobe_hits_dropped: hits,
            },
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
        let fentry = |runs| Skipped {
            backend: Backend::Fentry,
            ..skipped("recycle", runs)
        };
        check.observe(&[skipped("alloc", 0), fentry(0)]);
        let w = check.observe(&[skipped("alloc", 2), fentry(2)]);
        assert!(
            w[0].contains("a BPF map system call, ppscope's own reads included,"),
            "{w:?}"
        );
        assert!(w[1].contains("would have nested in itself"), "{w:?}");
        assert!(w[1].contains("lack up to that many events"), "{w:?}");
    }

    #[test]
    fn a_hooks_dropped_kprobe_hits_are_warned_of_apart_from_its_skipped_runs() {
        let mut check = SkipCheck::default();
        let recycle = |runs, hits| with_hits("recycle", runs, hits);
        check.observe(&[recycle(0, Some(7))]);
        // Its programs' count moved, its kprobes' did not: one warning, of skipped runs.
        let w = check.observe(&[recycle(2, Some(7))]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("ppscope_skipped_runs_total"), "{w:?}");
        let w = check.observe(&[recycle(2, Some(8))]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("recycle: the kernel dropped 1 hit of ppscope's kprobes"),
            "{w:?}"
        );
        assert!(w[0].contains("ppscope_kprobe_missed_total"), "{w:?}");
        assert!(check.observe(&[recycle(9, Some(90))]).is_empty());
        // Attached again: both count from 0.
        check.forget("recycle");
        let w = check.observe(&[recycle(0, Some(3))]);
        assert!(w.is_empty(), "warned of once only: {w:?}");
    }

    #[test]
    fn each_hooks_status_says_what_the_last_check_counted_for_it() {
        let status =
            |hook: &'static str| crate::testing::hook_status(hook, Some(Backend::Kprobe), None);
        let mut hooks = vec![status("alloc"), status("recycle")];
        let recycle = with_hits("recycle", 2, Some(30));
        record_missed(&mut hooks, &[skipped("alloc", 0), recycle]);
        assert_eq!(
            hooks.iter().map(|h| h.missed).collect::<Vec<_>>(),
            [
                Some(HookMissed {
                    skipped_runs: 0,
                    kprobe_hits_dropped: None
                }),
                Some(HookMissed {
                    skipped_runs: 2,
                    kprobe_hits_dropped: Some(30)
                }),
            ]
        );
        // A hook the next check leaves out (its programs' info unreadable) has no count left.
        record_missed(&mut hooks, &[recycle]);
        assert_eq!(hooks[0].missed, None);
        assert!(hooks[1].missed.is_some());
    }

    /// This process's links are looked through for a program's (a raw tracepoint's here: the
    /// host has no kprobes): found while attached, its count 0 (not a kprobe link), gone
    /// once detached.
    #[test]
    #[ignore = "needs root (BPF programs): run through `cargo xtask test`"]
    fn a_programs_links_are_found_among_this_process_descriptors_by_its_id() {
        use aya::programs::RawTracePoint;
        let mut ebpf = aya::Ebpf::load(super::super::EBPF_OBJECT).expect("load the object");
        let program: &mut RawTracePoint = ebpf
            .program_mut("bench_tp_hold")
            .unwrap()
            .try_into()
            .unwrap();
        program
            .load()
            .expect("load a raw tracepoint program (root?)");
        let link = program.attach("page_pool_state_hold").expect("attach it");
        let id = program_info(program.fd().unwrap().as_fd()).unwrap().id;

        let found = links_of(&[id]).unwrap();
        assert_eq!(found.get(&id).map(Vec::len), Some(1), "{found:?}");
        assert_eq!(found.len(), 1);
        let info = link_info(found[&id][0].as_fd()).unwrap();
        assert_eq!(info.prog_id, id);
        assert_eq!(kprobe_missed(found[&id][0].as_fd()).unwrap(), None);
        drop(found);

        let mut links = KprobeLinks::default();
        // Its link is not a kprobe's: no count, rather than a made-up 0.
        assert_eq!(links.missed(&[id]).unwrap(), HashMap::from([(id, None)]));
        assert_eq!(links.links(id), Some(1));
        // Asked again: the same copy, not looked for again (a look would make new copies).
        let held = links.descriptors(id);
        links.missed(&[id]).unwrap();
        assert_eq!(links.descriptors(id), held);
        // Another program: looked for, no link found (no count); the first one let go.
        assert_eq!(
            links.missed(&[u32::MAX]).unwrap(),
            HashMap::from([(u32::MAX, None)])
        );
        assert_eq!(links.links(u32::MAX), Some(0));
        assert_eq!(links.links(id), None);
        links.let_go();
        assert_eq!(links.links(u32::MAX), None);

        // With every gap below the highest descriptor filled, a copy made while the listing
        // was read would have been listed and copied again: the link is kept once.
        let highest = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
            .max()
            .unwrap();
        let fillers: Vec<std::fs::File> = (0..highest)
            .map_while(|_| {
                let f = std::fs::File::open("/dev/null").ok()?;
                (f.as_raw_fd() < highest).then_some(f)
            })
            .collect();
        let found = links_of(&[id]).unwrap();
        assert_eq!(found.get(&id).map(Vec::len), Some(1), "{found:?}");
        drop((found, fillers));

        program.detach(link).expect("detach");
        assert!(links_of(&[id]).unwrap().is_empty());
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

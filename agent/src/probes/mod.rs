//! The live source's kernel side: which hook goes on which backend, attaching, reading maps.
//!
//! Every hook lists its attach candidates across kernel versions and backends. The backend
//! is chosen per hook at run time by what the kernel accepts (fentry/fexit, then kprobes,
//! then tracepoints); what could not attach is kept with its reason so the report and
//! `doctor` can say exactly what is missing and why.
//!
//! - [`hooks`]: the table (one row per hook, one file per hook in `ebpf/src/hooks/`);
//! - [`attach`]: trying a hook's backends in order;
//! - [`modules`]: re-attaching hooks of kernel modules as they come and go;
//! - [`read`]: the maps read into a [`crate::model::RawSample`];
//! - [`kept`]: pools' records and identities taken from the last sample while nothing moved;
//! - [`kept_devices`]: the devices' identities, taken from the last read while no count names
//!   a new one;
//! - [`unmatched`]: returns that found another call's frame, and the warning when a pair
//!   finds almost none of its own;
//! - [`skipped`]: runs of the programs the kernel skipped (it does not nest tracing programs),
//!   and hits of the kprobes it dropped, as it counts them, and the warning when a hook's
//!   count moves;
//! - [`sys`]: the one `bpf(2)` call ppscope makes itself (what aya 0.14 does not do).
use std::{
    collections::{HashMap, VecDeque},
    os::fd::OwnedFd,
    path::Path,
    sync::Mutex,
    time::Instant,
};

use anyhow::{anyhow, Result};
use aya::{
    maps::{PerCpuArray, PerCpuValues},
    programs::Program,
    Btf, Ebpf, EbpfLoader,
};
use ppscope_common::{ProbeConfig, ReleaseMark};

mod attach;
mod batch;
pub mod bpf_log;
mod cast;
mod hooks;
mod hot_slot;
mod kept;
mod kept_devices;
pub mod lab;
mod modules;
mod read;
mod skipped;
mod sys;
mod unmatched;

use attach::{attach_hook, load_error, unload_all, AttachContext, HookPrograms};
pub use hooks::build_features;
use hooks::{programs_of, HOOKS};
use kept::KeptRecords;
use kept_devices::KeptDevices;
use modules::{hooked_modules, loaded_modules, module_generation, ModuleGeneration};
pub use unmatched::Unmatched;

use crate::{
    host::{
        btf::{self, KernelBtf, ResolvedField, VMLINUX_BTF},
        system::{self, Symbols},
    },
    model::{BpfStats, Coverage, PoolIds, SourceFacts},
    snapshot::{Backend, Detail, Group, HookStatus},
};

/// The eBPF object built by `agent/build.rs` from `ebpf/`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("PPSCOPE_EBPF_OBJECT"));

/// `--backend`: let each hook take what works, or force one backend for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    #[default]
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

impl BackendChoice {
    /// Whether a hook may take `backend` under this choice.
    fn allows(self, backend: Backend) -> bool {
        matches!(
            (self, backend),
            (BackendChoice::Auto, _)
                | (BackendChoice::Fentry, Backend::Fentry)
                | (BackendChoice::Kprobe, Backend::Kprobe)
                | (BackendChoice::Tracepoint, Backend::Tracepoint)
        )
    }
}

pub struct ProbeOptions {
    pub backend: BackendChoice,
    /// Only count pools of the interface with this index (0: all).
    pub only_ifindex: u32,
    /// Fail unless every hook attached (except hooks of modules not loaded).
    pub strict: bool,
    /// Pools (and NAPI instances, dropping devices) tracked at once: the size of every
    /// per-pool map. Memory grows with it (per-CPU counters), so it is the user's choice.
    pub map_capacity: u32,
    /// `light` leaves the per-page and per-poll hooks off.
    pub detail: Detail,
    /// Pools show their kernel address (`--show-addresses`).
    pub show_addresses: bool,
    /// The programs' own log lines (`--bpf-log`; also when the logger shows
    /// `ppscope::bpf`'s debug lines): see [`bpf_log`].
    pub bpf_log: bool,
    /// Turn the kernel's BPF run-time stats on while we run (`--bpf-stats`), to report
    /// ppscope's own cost. Off by default: they are the kernel's, for every BPF program on the
    /// host (two clock reads around each run), not only ours. Where the administrator
    /// keeps them on (`kernel.bpf_stats_enabled`) the cost is reported anyway.
    pub bpf_stats: bool,
}

/// The maps keyed by pool, NAPI instance or device: sized by [`ProbeOptions::map_capacity`].
const PER_POOL_MAPS: [&str; 9] = [
    "POOL_COUNTERS",
    "POOL_RARE",
    "POOL_IDENTITY",
    "GVE_POOL_QUEUE",
    "NAPI_COUNTERS",
    "NAPI_IDENTITY",
    "DROP_DEVICES",
    "DROPS",
    "POOL_TEARDOWN",
];

/// The loaded programs. Dropping it detaches everything (fd-based links) and ends the
/// scoped BPF run-time statistics.
pub struct Probes {
    ebpf: Ebpf,
    /// The kernel, its page size, the hooks as attached and what they cover, drop-reason
    /// names from BTF: what every snapshot and recording of this source carries (and what
    /// each hook's programs missed so far, which a recording leaves out: [`skipped`]).
    pub facts: SourceFacts,
    /// The kernel struct fields the programs read, as BTF resolved them (doctor).
    pub fields: Vec<ResolvedField>,
    /// Keeps `BPF_ENABLE_STATS` on for as long as we run: only with `--bpf-stats` (and None
    /// when the kernel refused).
    _stats: Option<OwnedFd>,
    /// The size of every per-pool map.
    pub map_capacity: u32,
    /// The backend asked for, to attach module hooks again (see [`Probes::refresh_modules`];
    /// the kernel's symbols and BTF are read again then, not kept: tens of MB).
    backend: BackendChoice,
    /// Each hooked module as last seen (None: not loaded).
    modules: HashMap<&'static str, Option<ModuleGeneration>>,
    /// A module generation whose hooks could not be attached again because kallsyms or BTF
    /// could not be read: tried again every refresh, reported once.
    refresh_failed: HashMap<&'static str, Option<ModuleGeneration>>,
    /// Each pool's record and identity as last read, taken again while its counts hold
    /// still (see [`kept`]).
    kept: KeptRecords,
    /// The devices' identities as last read whole, taken again while no count names a new
    /// device (see [`kept_devices`]).
    kept_devices: KeptDevices,
    /// The pools' own ids (what names a pool the kernel gives no netlink id).
    ids: PoolIds,
    /// Reads the programs' log lines while they run, when asked for (`--bpf-log`).
    _bpf_log: Option<bpf_log::BpfLog>,
    /// Start-up's clock until the first sample has said when it was taken.
    pub(crate) startup: Option<StartupClock>,
    /// The recycle pair's returns against its counts, for the warning ([`unmatched`]).
    recycle_pair: unmatched::RecyclePairCheck,
    /// The hooks whose skipped runs or dropped kprobe hits were warned of ([`skipped`]).
    skip_check: skipped::SkipCheck,
    /// Copies of the kprobes' links, for their dropped hits ([`skipped`]): let go before a
    /// module's programs are unloaded.
    kprobe_links: skipped::KprobeLinks,
}

impl Probes {
    /// Loads the programs and attaches every hook it can. Fails when loading is impossible,
    /// when no page_pool hook at all attached, or (with `strict`) when any hook is missing; a
    /// partial plan is returned with its reasons.
    pub fn start(opts: &ProbeOptions) -> Result<Self> {
        let probes = Self::attach(opts)?;
        match probes.refusal(opts.strict.then_some("--strict")) {
            Some(why) => Err(anyhow!(why)),
            None => Ok(probes),
        }
    }

    /// Why these probes cannot serve (no page_pool hook attached; with `strict`, the flag that
    /// asked, any hook missing other than those of a module that is not loaded), in one
    /// sentence that names that flag; None when they can. Each distinct reason is said once,
    /// after the hooks it stopped.
    pub fn refusal(&self, strict: Option<&str>) -> Option<String> {
        let hooks = &self.facts.hooks;
        let core: Vec<&HookStatus> = hooks
            .iter()
            .filter(|h| h.group == Group::PagePool)
            .collect();
        if !core.iter().any(|h| h.attached()) {
            return Some(format!(
                "none of ppscope's page_pool hooks could be attached on this kernel: {}",
                missing_in_words(&core)
            ));
        }
        let missing: Vec<&HookStatus> = hooks
            .iter()
            .filter(|h| !h.attached() && !h.module_absent() && !h.left_off())
            .collect();
        let flag = strict.filter(|_| !missing.is_empty())?;
        Some(format!(
            "{flag}: {} of {} hooks could not be attached: {}",
            missing.len(),
            hooks.len(),
            missing_in_words(&missing)
        ))
    }

    /// Loads the programs and attaches every hook it can, whatever is missing (`doctor` reports
    /// on what it got). Fails only when loading is impossible.
    pub fn attach(opts: &ProbeOptions) -> Result<Self> {
        if let Some(msg) = system::missing_privilege(system::effective_caps()) {
            return Err(anyhow!(msg));
        }
        let clock = StartupClock::start();
        // kallsyms is read while BTF is parsed and the programs load: each is a large part of
        // the start-up under the VM lab's emulated CPUs, and neither needs the other.
        let symbols = std::thread::spawn(move || {
            let symbols = Symbols::load(&hooks::kernel_functions());
            clock.mark("kallsyms read (on its thread)");
            symbols
        });
        // aya 0.14's loader reads and parses the kernel's BTF for itself when it is made,
        // before it could be handed one: made on a thread meanwhile, that parse is off the
        // critical path (a sixth of a second under the VM lab's emulated CPUs). It is the
        // second of the kernel's BTF aya parses (`kernel_btf` parses the one the fentry and
        // tp_btf programs are resolved against): memory that is given back once attached.
        let loader = std::thread::spawn(move || {
            let loader = EbpfLoader::new();
            clock.mark("eBPF loader made (on its thread)");
            loader
        });
        let (btf, aya_btf) = kernel_btf(Some(clock))?;
        // The drop reasons and the functions the hooks may check the arity of, in one pass.
        let mut names = hooks::kernel_functions();
        names.push("skb_drop_reason");
        btf.look_up(&names);
        let (mut offsets, mut fields) = btf.kernel_offsets();
        if let Ok(gve) = KernelBtf::load_module(&btf, "gve") {
            let (o, f) = gve.gve_offsets();
            offsets.gve_rx_q_num = o.0;
            offsets.gve_block_rx = o.1;
            fields.extend(f);
        }
        clock.mark("kernel field offsets found (gve's too, where loaded)");
        let drop_reasons: HashMap<u32, String> =
            btf.enum_values("skb_drop_reason").into_iter().collect();
        // The casts where the kernel has the kfunc (see `cast`): found before the loader is
        // handed the object, as the object is rewritten to call it.
        let cast_support = aya_btf.as_ref().and_then(cast::CastSupport::find);
        let (object, _) = cast::resolve(EBPF_OBJECT, cast_support)?;
        let config = ProbeConfig {
            offsets,
            only_ifindex: opts.only_ifindex,
            skb_consumed_reason: drop_reasons
                .iter()
                .find(|(_, name)| name.as_str() == "SKB_CONSUMED")
                .map_or(u32::MAX, |(v, _)| *v),
            cast: cast_support.map_or(ppscope_common::CastTypes::NONE, |c| c.types),
            feed_recycles: hooks::recycles_fed(opts.backend, opts.detail).into(),
        };
        let bpf_log_level = bpf_log::level(opts.bpf_log);
        let mut ebpf = {
            let mut loader = loader
                .join()
                .map_err(|_| anyhow!("preparing the eBPF loader panicked"))?;
            loader.override_global("PPSCOPE_CONFIG", &config, true);
            loader.override_global(aya_log::LEVEL, &bpf_log_level, true);
            for name in PER_POOL_MAPS {
                loader.map_max_entries(name, opts.map_capacity);
            }
            loader.load(&object).map_err(|e| load_error(&e))?
        };
        clock.mark("object loaded (maps made)");
        let bpf_log = match bpf_log_level {
            0 => None,
            _ => bpf_log::BpfLog::start(&mut ebpf)
                .inspect_err(|e| log::warn!("{e:#}"))
                .ok(),
        };
        let stats = if opts.bpf_stats {
            aya::sys::enable_stats(aya::sys::Stats::RunTime)
                .inspect_err(|e| {
                    log::warn!("--bpf-stats: the kernel refused BPF_ENABLE_STATS (it needs CAP_SYS_ADMIN): {e}")
                })
                .ok()
        } else {
            None
        };
        let symbols = symbols
            .join()
            .map_err(|_| anyhow!("reading kallsyms panicked"))??;
        let ctx = AttachContext {
            symbols,
            btf,
            aya_btf,
        };
        let hooks = attach_all(&mut ebpf, opts.backend, opts.detail, &ctx);
        let skipped_runs_counted = skipped::counted(&ctx.btf);
        for hook in &hooks {
            clock.hook_loaded(hook);
        }
        clock.mark("hooks attached");
        drop(ctx);
        give_back_freed_memory();
        let on = |name: &str| hooks.iter().any(|h| h.hook == name && h.attached());
        // Only where a single recycle is hooked to take them (a mark costs every release),
        // and `page_release` is on its tracepoint: the function its fallbacks hook is not
        // every way a page leaves on every kernel (6.0-6.5 release non-recyclable pages
        // through `page_pool_release_page`; a static function may be inlined). Not fatal:
        // without the marks a recycle reads the page to learn whether it left.
        let release_traced = hooks
            .iter()
            .any(|h| h.hook == "page_release" && h.backend == Some(Backend::Tracepoint));
        // Decided before load from the same table and flags as the attach: a recycle attached
        // without it would count every page that left as kept.
        debug_assert!(
            config.feed_recycles != 0 || !(on("recycle") || on("recycle_bulk")),
            "a recycle hook attached where page_release was built not to feed it"
        );
        let marks = config.feed_recycles != 0
            && on("recycle")
            && release_traced
            && switch_release_marks_on(&mut ebpf).is_ok();
        let coverage = Coverage {
            alloc: on("alloc"),
            refill: on("refill"),
            slow: on("slow_path"),
            recycle: on("recycle"),
            recycle_bulk: on("recycle_bulk"),
            hold: on("page_hold"),
            release: on("page_release"),
            // A page that left the pool is told by the release marks, else by its `pp`.
            cache_layout: [
                config.offsets.pool_alloc_count,
                config.offsets.pool_alloc_cache,
            ]
            .iter()
            .all(|o| *o != ppscope_common::OFFSET_UNKNOWN)
                && (marks || config.offsets.page_pp != ppscope_common::OFFSET_UNKNOWN),
            provider_alloc: on("provider_alloc"),
            dontneed: on("devmem_dontneed"),
            devmem_free: on("devmem_free"),
            gve_alloc: on("gve_alloc"),
            gve_poll: on("gve_rx_poll"),
            napi: on("napi_poll"),
            page_return: on("page_return"),
            drops: on("drops"),
            teardown: on("pool_release"),
        };
        let loaded = loaded_modules();
        let modules = hooked_modules()
            .map(|m| (m, loaded.get(m).map(|addr| module_generation(m, *addr))))
            .collect();
        Ok(Self {
            ebpf,
            facts: SourceFacts {
                kernel: system::release(),
                page_size: system::page_size(),
                coverage,
                hooks,
                drop_reasons,
                detail: opts.detail,
                cast_reads: cast_support.is_some(),
                show_addresses: opts.show_addresses,
                // The sysctl is read once: switched while we run, it is not followed.
                bpf_stats: if stats.is_some() {
                    BpfStats::Asked
                } else if system::bpf_stats_sysctl_on() {
                    BpfStats::Sysctl
                } else if opts.bpf_stats {
                    BpfStats::Refused
                } else {
                    BpfStats::Off
                },
                skipped_runs_counted,
            },
            fields,
            map_capacity: opts.map_capacity,
            _stats: stats,
            backend: opts.backend,
            modules,
            refresh_failed: HashMap::new(),
            kept: KeptRecords::default(),
            kept_devices: KeptDevices::default(),
            ids: PoolIds::default(),
            recycle_pair: Default::default(),
            skip_check: Default::default(),
            kprobe_links: Default::default(),
            _bpf_log: bpf_log,
            startup: Some(clock),
        })
    }

    /// Follows the kernel modules ppscope hooks (gve) as they come and go while it runs: a
    /// module loaded, unloaded or reloaded (a new sysfs node) since the last call gets its
    /// hooks detached and attached again against the new symbols, or marked "module not
    /// loaded". A kprobe on an unloaded module's function is gone for good in the kernel, so
    /// without this the hooks would stay silent after `rmmod`/`insmod`. Cheap when nothing
    /// changed (one read of /proc/modules). Returns one line per module that changed.
    pub fn refresh_modules(&mut self) -> Vec<String> {
        let loaded = loaded_modules();
        let mut changes = Vec::new();
        for module in hooked_modules() {
            let now = loaded.get(module).map(|a| module_generation(module, *a));
            let before = self.modules.get(module).copied().flatten();
            if now == before {
                continue;
            }
            let ctx = match (Symbols::load(&hooks::kernel_functions()), kernel_btf(None)) {
                (Ok(symbols), Ok((btf, aya_btf))) => AttachContext {
                    symbols,
                    btf,
                    aya_btf,
                },
                (Err(e), _) | (_, Err(e)) => {
                    // Not recorded as seen: the next refresh tries again.
                    if self.refresh_failed.insert(module, now) != Some(now) {
                        changes.push(format!(
                            "{module} changed but kallsyms/BTF cannot be read again (trying again each interval): {e:#}"
                        ));
                    }
                    continue;
                }
            };
            self.modules.insert(module, now);
            self.refresh_failed.remove(module);
            // Its copies would keep the links of the programs unloaded below attached.
            self.kprobe_links.let_go();
            let mut attached = 0;
            let mut total = 0;
            for (i, def) in HOOKS.iter().enumerate() {
                if def.module != Some(module) {
                    continue;
                }
                unload_all(&mut self.ebpf, &programs_of(def));
                // New programs: the kernel's count of their skipped runs starts again.
                self.skip_check.forget(def.name);
                let hooks = &mut self.facts.hooks;
                hooks[i] = attach_hook(&mut self.ebpf, def, self.backend, &ctx);
                total += 1;
                attached += usize::from(hooks[i].attached());
            }
            drop(ctx);
            give_back_freed_memory();
            let on = |name: &str| {
                self.facts
                    .hooks
                    .iter()
                    .any(|h| h.hook == name && h.attached())
            };
            self.facts.coverage.gve_alloc = on("gve_alloc");
            self.facts.coverage.gve_poll = on("gve_rx_poll");
            changes.push(match (before, now) {
                (_, None) => format!("{module} unloaded: its {total} hook(s) wait for it"),
                (None, Some(_)) => {
                    format!("{module} loaded: {attached}/{total} of its hooks attached")
                }
                (Some(_), Some(_)) => {
                    format!("{module} reloaded: {attached}/{total} of its hooks attached again")
                }
            });
        }
        changes
    }
}

/// Lets a single recycle learn from `page_release` which pages left the pool instead of
/// reading each page (`ReleaseMark`): switched on once both are attached, as no mark is made
/// before.
fn switch_release_marks_on(ebpf: &mut Ebpf) -> Result<()> {
    let map = ebpf
        .map_mut("RELEASE_MARK")
        .ok_or_else(|| anyhow!("map RELEASE_MARK missing from the object"))?;
    let mut marks: PerCpuArray<_, ReleaseMark> = PerCpuArray::try_from(map)?;
    let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
    let on = ReleaseMark {
        on: 1,
        ..ReleaseMark::default()
    };
    marks.set(0, PerCpuValues::try_from(vec![on; cpus])?, 0)?;
    Ok(())
}

/// vmlinux BTF for the offsets (btf-rs) and for aya (loading, and the fentry/fexit attach
/// targets; None when aya cannot parse it: fentry is then refused), side by side: each was a
/// large part of the start-up under the VM lab's emulated CPUs, and neither needs the other.
/// `clock`: at start-up, to say when each was done (not when a module's hooks are redone).
fn kernel_btf(clock: Option<StartupClock>) -> Result<(KernelBtf, Option<Btf>)> {
    let path = Path::new(VMLINUX_BTF);
    let (ours, aya_btf) = std::thread::scope(|s| {
        let aya_btf = s.spawn(|| {
            let btf = btf::read(path)
                .ok()
                .and_then(|bytes| Btf::parse(&bytes, aya::Endianness::default()).ok());
            clock.inspect(|c| c.mark("kernel BTF parsed for aya (on its thread)"));
            btf
        });
        let ours = KernelBtf::vmlinux(path);
        clock.inspect(|c| c.mark("kernel BTF indexed"));
        (ours, aya_btf.join().ok().flatten())
    });
    Ok((ours?, aya_btf))
}

/// "alloc, refill, … (fentry: the kernel refuses …; kprobe: no kprobes)": the hooks, then each
/// distinct cause once (a reason names the function it was tried on; the cause is the same).
fn missing_in_words(hooks: &[&HookStatus]) -> String {
    let cause = |r: &str| -> String {
        match r.split_once(": ") {
            Some((head, why))
                if ["fentry", "fexit", "kprobe", "tracepoint"]
                    .iter()
                    .any(|b| head.split_whitespace().next() == Some(b)) =>
            {
                format!("{}: {why}", head.split_whitespace().next().unwrap_or(head))
            }
            _ => r.to_string(),
        }
    };
    let mut causes: Vec<String> = Vec::new();
    for r in hooks.iter().flat_map(|h| &h.reasons) {
        let c = cause(r);
        if !causes.contains(&c) {
            causes.push(c);
        }
    }
    let names: Vec<&str> = hooks.iter().map(|h| &*h.hook).collect();
    format!("{} ({})", names.join(", "), causes.join("; "))
}

/// The log target of start-up's phases and hooks, with what each took.
const STARTUP_LOG: &str = "ppscope::startup";

/// Where start-up goes, at debug level: `RUST_LOG=ppscope=info,ppscope::startup=debug` (a
/// filter that names only this target would hide ppscope's other lines; `ppscope=debug` would
/// also turn the programs' own log sites on, so the programs verified and timed would not be
/// the ones a normal start loads). Times are from the start of [`Probes::attach`]; on a host
/// that is slow to start, the phase that ended late says why.
#[derive(Clone, Copy)]
pub(crate) struct StartupClock(Instant);

impl StartupClock {
    fn start() -> Self {
        Self(Instant::now())
    }

    pub(crate) fn mark(self, what: &str) {
        log::debug!(
            target: STARTUP_LOG,
            "start-up: {what} at {:.0} ms",
            self.0.elapsed().as_secs_f64() * 1e3
        );
    }

    /// What attaching a hook took (the hooks attach side by side: durations, not times).
    fn hook_loaded(self, hook: &HookStatus) {
        let Some(load) = &hook.load else {
            return;
        };
        let outcome = match (hook.attached(), load.verified_insns) {
            (false, _) => "not attached (`ppscope doctor` says why)".to_string(),
            (true, Some(n)) => format!("attached ({n} instructions verified)"),
            (true, None) => "attached (the kernel gives no count of instructions verified)".into(),
        };
        log::debug!(
            target: STARTUP_LOG,
            "start-up: hook {}: {:.0} ms, {outcome}",
            hook.hook,
            load.ms,
        );
    }
}

/// Attaches every hook `detail` keeps, in the table's order, on up to one thread per CPU:
/// loading a program is the verifier's work, most of the start-up (0.15–0.25 s a hook in the
/// VM lab, BENCHMARKS.md), and the kernel verifies a privileged loader's programs in parallel.
/// Each hook's attempts stay in order on one thread, with its own programs.
fn attach_all(
    ebpf: &mut Ebpf,
    backend: BackendChoice,
    detail: Detail,
    ctx: &AttachContext,
) -> Vec<HookStatus> {
    let mut by_name: HashMap<&str, &mut Program> = ebpf.programs_mut().collect();
    let mut hooks: Vec<Option<HookStatus>> = HOOKS.iter().map(|_| None).collect();
    let mut jobs = VecDeque::new();
    for (i, def) in HOOKS.iter().enumerate() {
        if hooks::left_off(def, detail) {
            hooks[i] = Some(hooks::left_off_status(def));
            continue;
        }
        let programs = hooks::all_programs(def)
            .into_iter()
            .filter_map(|name| by_name.remove_entry(name))
            .collect();
        jobs.push_back((i, def, HookPrograms(programs)));
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len())
        .max(1);
    let jobs = Mutex::new(jobs);
    let next = || jobs.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    while let Some((i, def, mut programs)) = next() {
                        done.push((i, attach_hook(&mut programs, def, backend, ctx)));
                    }
                    done
                })
            })
            .collect();
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (i, status) in done {
                hooks[i] = Some(status);
            }
        }
    });
    hooks
        .into_iter()
        .map(|h| h.expect("every hook is left off or attached"))
        .collect()
}

/// Start-up (and a module's return) parses vmlinux BTF and kallsyms (tens of MB, peak RSS
/// ~95 MB) and frees them once the hooks are attached; glibc keeps freed heap for reuse, so without this a
/// long-running agent would hold that peak's memory for ever (41 MB resident at one pool
/// instead of the working set).
fn give_back_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap pages; no pointer is invalidated.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::{hooks::*, modules::*};

    #[test]
    fn missing_hooks_are_named_and_each_cause_said_once() {
        use crate::snapshot::HookStatus;
        let hook = |name: &'static str, reasons: &[&str]| HookStatus {
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            ..crate::testing::hook_status(name, None, None)
        };
        let a = hook(
            "alloc",
            &[
                "fentry page_pool_alloc_netmems: EPERM",
                "kprobe: no kprobes",
            ],
        );
        let b = hook(
            "refill",
            &[
                "fexit page_pool_refill_alloc_cache: EPERM",
                "kprobe: no kprobes",
            ],
        );
        let c = hook(
            "pool_release",
            &["--backend fentry cannot serve this hook (it has: tracepoint)"],
        );
        assert_eq!(
            super::missing_in_words(&[&a, &b, &c]),
            "alloc, refill, pool_release (fentry: EPERM; kprobe: no kprobes; fexit: EPERM; \
             --backend fentry cannot serve this hook (it has: tracepoint))"
        );
    }

    #[test]
    fn modules_are_read_from_proc_modules_live_ones_only() {
        let text = "gve 135168 0 - Live 0xffffffffc0a00000\n\
                    veth 45056 0 - Loading 0xffffffffc0900000\n\
                    virtio_net 81920 0 - Live 0x0000000000000000 (E)\n\
                    broken line\n";
        let m = parse_modules(text);
        assert_eq!(m.get("gve"), Some(&0xffff_ffff_c0a0_0000));
        assert_eq!(
            m.get("veth"),
            None,
            "still loading: no symbols to attach to"
        );
        assert_eq!(
            m.get("virtio_net"),
            Some(&0),
            "address hidden, still loaded"
        );
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn module_hooks_name_their_programs() {
        assert_eq!(hooked_modules().collect::<Vec<_>>(), vec!["gve"]);
        for def in HOOKS.iter().filter(|d| d.module.is_some()) {
            let progs = programs_of(def);
            assert!(!progs.is_empty(), "{}", def.name);
            for p in progs {
                assert!(p.starts_with("gve_"), "{} uses {p}", def.name);
            }
        }
    }
}

//! The live source's kernel side: which hook goes on which backend, attaching, reading maps.
//!
//! Every hook lists its attach candidates across kernel versions and backends. The backend
//! is chosen per hook at run time by what the kernel accepts (fentry/fexit, then kprobes,
//! then tracepoints); what could not attach is kept with its reason so the report and
//! `doctor` can say exactly what is missing and why.
use std::{borrow::Cow, collections::HashMap, os::fd::OwnedFd, path::Path, time::Instant};

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, PerCpuArray, PerCpuHashMap},
    programs::{FEntry, FExit, KProbe, Program, RawTracePoint},
    Btf, Ebpf, EbpfLoader,
};
use ppscope_common::{
    site_stat, DeviceIdentity, DropKey, NapiCounters, PoolHists, PoolHot, PoolIdentity, PoolState,
    ProbeConfig, SiteStats,
};
use serde::{Deserialize, Serialize};

use crate::{
    btf::{KernelBtf, ResolvedField, VMLINUX_BTF},
    kernel::{self, Symbols},
    model::{accumulate_site, Coverage, ProgramRuntime, RawPool, RawSample},
};

/// The eBPF object built by `agent/build.rs` from `ebpf/`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("PPSCOPE_EBPF_OBJECT"));

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Fentry,
    Kprobe,
    Tracepoint,
}

/// `--backend`: let each hook take what works, or force one backend for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    #[default]
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

/// What a hook is about, for grouping in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    PagePool,
    /// Around the pool: NAPI work and packet drops, any driver.
    Chain,
    Devmem,
    Gve,
}

struct KprobeDef {
    /// Alternatives across kernel versions, newest first.
    symbols: &'static [&'static str],
    entry: &'static str,
    /// Another entry program for a symbol with this many parameters (from BTF): signatures
    /// change across versions and a program reads its arguments by fixed position.
    entry_by_arity: Option<(usize, &'static str)>,
    exit: Option<&'static str>,
    /// Attach to every symbol found (distinct providers), not just the first.
    all: bool,
    /// Older exported wrappers around the first symbol. Where the compiler inlined the whole
    /// function into one (6.12: `page_pool_alloc_pages` carries its own copy), calls through
    /// it never reach the probed symbol, so it is probed too; where it is a thin wrapper that
    /// calls the symbol, probing it would count every call twice, so it is left alone.
    wrappers: &'static [&'static str],
}

/// fentry/fexit programs of a hook. One program attaches to one function, so a hook that
/// covers several functions names one program pair per function, in `KprobeDef::symbols`
/// order (`pairs`), and one for its wrapper.
struct FentryDef {
    pairs: [(Option<&'static str>, Option<&'static str>); 2],
    entry_by_arity: Option<(usize, &'static str)>,
    wrapper_entry: Option<&'static str>,
}

struct TracepointDef {
    category: &'static str,
    name: &'static str,
    prog: &'static str,
}

struct HookDef {
    name: &'static str,
    group: Group,
    /// What the user loses when this hook is missing.
    loses: &'static str,
    kprobe: Option<KprobeDef>,
    fentry: Option<FentryDef>,
    tracepoint: Option<TracepointDef>,
    /// The tracepoint is the exact source (it fires for memory providers too), so it goes first.
    tracepoint_first: bool,
    /// The kernel module the functions live in, if not vmlinux.
    module: Option<&'static str>,
}

const fn kp(
    symbols: &'static [&'static str],
    entry: &'static str,
    exit: Option<&'static str>,
) -> Option<KprobeDef> {
    Some(KprobeDef {
        symbols,
        entry,
        entry_by_arity: None,
        exit,
        all: false,
        wrappers: &[],
    })
}

const fn fe(entry: Option<&'static str>, exit: Option<&'static str>) -> Option<FentryDef> {
    Some(FentryDef {
        pairs: [(entry, exit), (None, None)],
        entry_by_arity: None,
        wrapper_entry: None,
    })
}

const fn hook(name: &'static str, group: Group, loses: &'static str) -> HookDef {
    HookDef {
        name,
        group,
        loses,
        kprobe: None,
        fentry: None,
        tracepoint: None,
        tracepoint_first: false,
        module: None,
    }
}

const HOOKS: &[HookDef] = &[
    HookDef {
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_alloc_netmems", "page_pool_alloc_netmem"],
            entry: "pp_alloc",
            entry_by_arity: None,
            exit: None,
            all: false,
            wrappers: &["page_pool_alloc_pages"],
        }),
        fentry: Some(FentryDef {
            pairs: [(Some("fe_alloc"), None), (None, None)],
            entry_by_arity: None,
            wrapper_entry: Some("fe_alloc_wrapper"),
        }),
        ..hook(
            "alloc",
            Group::PagePool,
            "allocation counts, so the cache share and fast-path rate",
        )
    },
    HookDef {
        kprobe: kp(
            &["page_pool_alloc_frag_netmem", "page_pool_alloc_frag"],
            "pp_alloc_frag",
            None,
        ),
        fentry: fe(Some("fe_alloc_frag"), None),
        ..hook("alloc_frag", Group::PagePool, "fragment allocation counts")
    },
    HookDef {
        kprobe: kp(
            &["page_pool_refill_alloc_cache"],
            "pp_refill_entry",
            Some("pp_refill_exit"),
        ),
        fentry: fe(None, Some("fx_refill")),
        ..hook(
            "refill",
            Group::PagePool,
            "ring refills and empty-ring misses, so the ring hit rate",
        )
    },
    HookDef {
        kprobe: kp(
            &[
                "__page_pool_alloc_netmems_slow",
                "__page_pool_alloc_pages_slow",
            ],
            "pp_slow_entry",
            Some("pp_slow_exit"),
        ),
        fentry: fe(Some("fe_slow_entry"), Some("fx_slow_exit")),
        ..hook(
            "slow_path",
            Group::PagePool,
            "slow-path calls and their latency",
        )
    },
    HookDef {
        kprobe: Some(KprobeDef {
            symbols: &["mp_dmabuf_devmem_alloc_netmems", "io_pp_zc_alloc_netmems"],
            entry: "pp_mp_entry",
            entry_by_arity: None,
            exit: Some("pp_mp_exit"),
            all: true,
            wrappers: &[],
        }),
        fentry: Some(FentryDef {
            pairs: [
                (Some("fe_mp_entry"), Some("fx_mp_exit")),
                (Some("fe_mp_entry_2"), Some("fx_mp_exit_2")),
            ],
            entry_by_arity: None,
            wrapper_entry: None,
        }),
        ..hook(
            "provider_alloc",
            Group::Devmem,
            "memory-provider (devmem gen_pool, io_uring zcrx) allocations and their latency",
        )
    },
    HookDef {
        kprobe: kp(
            &[
                "page_pool_put_unrefed_netmem",
                "page_pool_put_defragged_page",
            ],
            "pp_put_entry",
            Some("pp_put_exit"),
        ),
        fentry: fe(Some("fe_put_entry"), Some("fx_put_exit")),
        ..hook(
            "recycle",
            Group::PagePool,
            "single-page recycles, so the cached/ring/ring_full split",
        )
    },
    HookDef {
        // Before 6.14 the bulk free took the pool as its first argument: its own program.
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_put_netmem_bulk", "page_pool_put_page_bulk"],
            entry: "pp_bulk_entry",
            entry_by_arity: Some((3, "pp_bulk_entry_pool")),
            exit: Some("pp_bulk_exit"),
            all: false,
            wrappers: &[],
        }),
        fentry: Some(FentryDef {
            pairs: [(Some("fe_bulk_entry"), Some("fx_bulk_exit")), (None, None)],
            entry_by_arity: Some((3, "fe_bulk_entry_pool")),
            wrapper_entry: None,
        }),
        ..hook(
            "recycle_bulk",
            Group::PagePool,
            "bulk recycles (XDP redirect/TX completion)",
        )
    },
    HookDef {
        // Called once per page the slow path brings in; memory providers may bypass it,
        // which is why the tracepoint goes first.
        kprobe: kp(&["page_pool_set_pp_info"], "pp_hold", None),
        fentry: fe(Some("fe_hold"), None),
        tracepoint: Some(TracepointDef {
            category: "page_pool",
            name: "page_pool_state_hold",
            prog: "tp_state_hold",
        }),
        tracepoint_first: true,
        ..hook(
            "page_hold",
            Group::PagePool,
            "pages entering the pool from the page allocator or provider",
        )
    },
    HookDef {
        kprobe: kp(
            &["page_pool_return_netmem", "page_pool_return_page"],
            "pp_release",
            None,
        ),
        fentry: fe(Some("fe_release"), None),
        tracepoint: Some(TracepointDef {
            category: "page_pool",
            name: "page_pool_state_release",
            prog: "tp_state_release",
        }),
        tracepoint_first: true,
        ..hook(
            "page_release",
            Group::PagePool,
            "pages leaving the pool, so ring_full",
        )
    },
    HookDef {
        tracepoint: Some(TracepointDef {
            category: "napi",
            name: "napi_poll",
            prog: "tp_napi_poll",
        }),
        ..hook(
            "napi_poll",
            Group::Chain,
            "NAPI work per poll and polls that used their whole budget",
        )
    },
    HookDef {
        tracepoint: Some(TracepointDef {
            category: "skb",
            name: "kfree_skb",
            prog: "tp_kfree_skb",
        }),
        ..hook("drops", Group::Chain, "packet drops by device and reason")
    },
    HookDef {
        kprobe: kp(
            &["page_pool_return_netmem", "page_pool_return_page"],
            "pp_return_entry",
            Some("pp_return_exit"),
        ),
        fentry: fe(Some("fe_return_entry"), Some("fx_return_exit")),
        ..hook(
            "page_return",
            Group::PagePool,
            "how long a page takes to leave its pool (unmap and free, or back to a provider)",
        )
    },
    HookDef {
        kprobe: kp(
            &["sock_devmem_dontneed", "sock_devmem_dontneed_autorelease"],
            "dm_dontneed_entry",
            Some("dm_dontneed_exit"),
        ),
        fentry: fe(Some("fe_dontneed_entry"), Some("fx_dontneed_exit")),
        ..hook(
            "devmem_dontneed",
            Group::Devmem,
            "SO_DEVMEM_DONTNEED latency and frags freed per call",
        )
    },
    HookDef {
        kprobe: kp(
            &["net_devmem_free_dmabuf"],
            "dm_free_entry",
            Some("dm_free_exit"),
        ),
        fentry: fe(Some("fe_devmem_free_entry"), Some("fx_devmem_free_exit")),
        ..hook(
            "devmem_free",
            Group::Devmem,
            "the cost of returning a devmem buffer to its dmabuf (the ring-full path)",
        )
    },
    HookDef {
        kprobe: kp(
            &["gve_alloc_buffer"],
            "gve_alloc_entry",
            Some("gve_alloc_exit"),
        ),
        module: Some("gve"),
        ..hook("gve_alloc", Group::Gve, "gve buffer allocation latency")
    },
    HookDef {
        kprobe: kp(
            &["gve_rx_poll_dqo"],
            "gve_poll_entry",
            Some("gve_poll_exit"),
        ),
        module: Some("gve"),
        ..hook(
            "gve_rx_poll",
            Group::Gve,
            "gve NAPI poll time and work per rx queue",
        )
    },
    HookDef {
        kprobe: kp(
            &["gve_rx_create_page_pool"],
            "gve_create_entry",
            Some("gve_create_exit"),
        ),
        module: Some("gve"),
        ..hook(
            "gve_pool_queue",
            Group::Gve,
            "which gve rx queue each pool serves (pools created after start)",
        )
    },
];

/// How one hook ended up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookStatus {
    pub hook: Cow<'static, str>,
    pub group: Group,
    /// The backend serving it, None when nothing attached.
    pub backend: Option<Backend>,
    /// Kernel functions or tracepoints attached.
    pub targets: Vec<String>,
    /// Why each candidate that was tried did not attach.
    pub reasons: Vec<String>,
    /// What is lost while the hook is missing.
    pub loses: Cow<'static, str>,
}

impl HookStatus {
    pub fn attached(&self) -> bool {
        self.backend.is_some()
    }

    /// Missing only because its kernel module is not loaded (not a failure).
    pub fn module_absent(&self) -> bool {
        !self.attached() && self.reasons.iter().any(|r| r.ends_with(MODULE_NOT_LOADED))
    }
}

pub struct ProbeOptions {
    pub backend: BackendChoice,
    /// Only count pools of the interface with this index (0: all).
    pub only_ifindex: u32,
    /// Fail unless every hook attached (except hooks of modules not loaded).
    pub strict: bool,
}

const MODULE_NOT_LOADED: &str = "module not loaded";

/// Kernel facts the attach steps need, read once.
struct Kernel {
    symbols: Symbols,
    btf: KernelBtf,
    /// aya's view of vmlinux BTF for fentry/fexit, None when it cannot be parsed.
    aya_btf: Option<Btf>,
}

/// The loaded programs. Dropping it detaches everything (fd-based links) and ends the
/// scoped BPF run-time statistics.
pub struct Probes {
    ebpf: Ebpf,
    pub hooks: Vec<HookStatus>,
    pub fields: Vec<ResolvedField>,
    pub coverage: Coverage,
    /// `enum skb_drop_reason` names by value, from BTF.
    pub drop_reasons: HashMap<u32, String>,
    /// Keeps `BPF_ENABLE_STATS` on for as long as we run; None when the kernel refused.
    _stats: Option<OwnedFd>,
    /// The backend asked for, to attach module hooks again (see [`Probes::refresh_modules`];
    /// the kernel's symbols and BTF are read again then, not kept: tens of MB).
    backend: BackendChoice,
    /// Each hooked module as last seen (None: not loaded).
    modules: HashMap<&'static str, Option<ModuleGeneration>>,
    /// A module generation whose hooks could not be attached again because kallsyms or BTF
    /// could not be read: tried again every refresh, reported once.
    refresh_failed: HashMap<&'static str, Option<ModuleGeneration>>,
}

impl Probes {
    /// Loads the programs and attaches every hook it can. Fails only when loading is
    /// impossible or no hook at all attached; a partial plan is returned with its reasons.
    pub fn start(opts: &ProbeOptions) -> Result<Self> {
        if let Some(msg) = kernel::missing_privilege(kernel::effective_caps()) {
            return Err(anyhow!(msg));
        }
        let btf = KernelBtf::load(Path::new(VMLINUX_BTF))?;
        let (mut offsets, mut fields) = btf.kernel_offsets();
        if let Ok(gve) = KernelBtf::load_module(&btf, "gve") {
            let (o, f) = gve.gve_offsets();
            offsets.gve_rx_q_num = o.0;
            offsets.gve_block_rx = o.1;
            fields.extend(f);
        }
        let drop_reasons: HashMap<u32, String> =
            btf.enum_values("skb_drop_reason").into_iter().collect();
        let config = ProbeConfig {
            offsets,
            only_ifindex: opts.only_ifindex,
            skb_consumed_reason: drop_reasons
                .iter()
                .find(|(_, name)| name.as_str() == "SKB_CONSUMED")
                .map_or(u32::MAX, |(v, _)| *v),
        };
        let mut ebpf = EbpfLoader::new()
            .override_global("PPSCOPE_CONFIG", &config, true)
            .load(EBPF_OBJECT)
            .map_err(|e| load_error(&e))?;
        let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();

        let kernel = Kernel {
            symbols: Symbols::load()?,
            btf,
            aya_btf: Btf::from_sys_fs().ok(),
        };
        let mut hooks = Vec::new();
        for def in HOOKS {
            hooks.push(attach_hook(&mut ebpf, def, opts.backend, &kernel));
        }
        let core: Vec<&HookStatus> = hooks
            .iter()
            .filter(|h| h.group == Group::PagePool)
            .collect();
        if !core.iter().any(|h| h.attached()) {
            let why: Vec<String> = core
                .iter()
                .filter_map(|h| h.reasons.first().map(|r| format!("{}: {r}", h.hook)))
                .collect();
            return Err(anyhow!(
                "none of ppscope's page_pool hooks could be attached on this kernel ({})",
                why.join("; ")
            ));
        }
        if opts.strict {
            let missing: Vec<String> = hooks
                .iter()
                .filter(|h| !h.attached() && !h.module_absent())
                .map(|h| format!("{} ({})", h.hook, h.reasons.join("; ")))
                .collect();
            if !missing.is_empty() {
                return Err(anyhow!(
                    "--strict: {} hook(s) could not be attached: {}",
                    missing.len(),
                    missing.join(", ")
                ));
            }
        }
        let on = |name: &str| hooks.iter().any(|h| h.hook == name && h.attached());
        let coverage = Coverage {
            alloc: on("alloc"),
            refill: on("refill"),
            slow: on("slow_path"),
            recycle: on("recycle"),
            recycle_bulk: on("recycle_bulk"),
            hold: on("page_hold"),
            release: on("page_release"),
            cache_layout: config.offsets.pool_alloc_count != ppscope_common::OFFSET_UNKNOWN
                && config.offsets.pool_alloc_cache != ppscope_common::OFFSET_UNKNOWN,
            provider_alloc: on("provider_alloc"),
            dontneed: on("devmem_dontneed"),
            devmem_free: on("devmem_free"),
            gve_alloc: on("gve_alloc"),
            gve_poll: on("gve_rx_poll"),
            napi: on("napi_poll"),
            page_return: on("page_return"),
            drops: on("drops"),
        };
        let loaded = loaded_modules();
        let modules = hooked_modules()
            .map(|m| (m, loaded.get(m).map(|addr| module_generation(m, *addr))))
            .collect();
        Ok(Self {
            ebpf,
            hooks,
            fields,
            coverage,
            drop_reasons,
            _stats: stats,
            backend: opts.backend,
            modules,
            refresh_failed: HashMap::new(),
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
            let kernel = match (Symbols::load(), KernelBtf::load(Path::new(VMLINUX_BTF))) {
                (Ok(symbols), Ok(btf)) => Kernel {
                    symbols,
                    btf,
                    aya_btf: Btf::from_sys_fs().ok(),
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
            let mut attached = 0;
            let mut total = 0;
            for (i, def) in HOOKS.iter().enumerate() {
                if def.module != Some(module) {
                    continue;
                }
                unload_all(&mut self.ebpf, &programs_of(def));
                self.hooks[i] = attach_hook(&mut self.ebpf, def, self.backend, &kernel);
                total += 1;
                attached += usize::from(self.hooks[i].attached());
            }
            let on = |name: &str| self.hooks.iter().any(|h| h.hook == name && h.attached());
            self.coverage.gve_alloc = on("gve_alloc");
            self.coverage.gve_poll = on("gve_rx_poll");
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

    /// Reads the cumulative counters of every pool and site seen so far.
    pub fn sample(&self) -> Result<RawSample> {
        let map = |name: &str| {
            self.ebpf
                .map(name)
                .with_context(|| format!("map {name} missing from the object"))
        };
        let counters: PerCpuHashMap<_, u64, PoolHot> =
            PerCpuHashMap::try_from(map("POOL_COUNTERS")?)?;
        let hists: BpfHashMap<_, u64, PoolHists> = BpfHashMap::try_from(map("POOL_HISTS")?)?;
        let identities: BpfHashMap<_, u64, PoolIdentity> =
            BpfHashMap::try_from(map("POOL_IDENTITY")?)?;
        let gve_queues: BpfHashMap<_, u64, u32> = BpfHashMap::try_from(map("GVE_POOL_QUEUE")?)?;
        let site_stats: PerCpuArray<_, SiteStats> = PerCpuArray::try_from(map("SITE_STATS")?)?;
        let gve_poll: PerCpuHashMap<_, u32, SiteStats> = PerCpuHashMap::try_from(map("GVE_POLL")?)?;

        let mut pools: HashMap<u64, RawPool> = HashMap::new();
        for item in counters.iter() {
            // A pool evicted between key and value lookups is skipped, not fatal.
            let Ok((pool, per_cpu)) = item else { continue };
            let entry = pools.entry(pool).or_default();
            for c in per_cpu.iter() {
                entry.counters.add_hot(c);
            }
        }
        for item in hists.iter() {
            let Ok((pool, h)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.counters.set_hists(&h);
            }
        }
        for item in identities.iter() {
            let Ok((pool, id)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.identity = Some(id);
            }
        }
        for item in gve_queues.iter() {
            let Ok((pool, queue)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.gve_queue = Some(queue);
            }
        }
        let states: BpfHashMap<_, u64, PoolState> = BpfHashMap::try_from(map("POOL_STATE")?)?;
        for item in states.iter() {
            let Ok((pool, st)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.state = Some(st);
            }
        }
        let mut sites = [SiteStats::default(); site_stat::COUNT as usize];
        for (i, slot) in sites.iter_mut().enumerate() {
            if let Ok(per_cpu) = site_stats.get(&(i as u32), 0) {
                for s in per_cpu.iter() {
                    accumulate_site(slot, s);
                }
            }
        }
        let mut gve = HashMap::new();
        for item in gve_poll.iter() {
            let Ok((queue, per_cpu)) = item else { continue };
            let slot: &mut SiteStats = gve.entry(queue).or_default();
            for s in per_cpu.iter() {
                accumulate_site(slot, s);
            }
        }
        let napi_counters: PerCpuHashMap<_, u64, NapiCounters> =
            PerCpuHashMap::try_from(map("NAPI_COUNTERS")?)?;
        let napi_ids: BpfHashMap<_, u64, DeviceIdentity> =
            BpfHashMap::try_from(map("NAPI_IDENTITY")?)?;
        let drops: PerCpuHashMap<_, DropKey, u64> = PerCpuHashMap::try_from(map("DROPS")?)?;
        let drop_devices: BpfHashMap<_, u64, DeviceIdentity> =
            BpfHashMap::try_from(map("DROP_DEVICES")?)?;
        let mut napi = HashMap::new();
        for item in napi_counters.iter() {
            let Ok((key, per_cpu)) = item else { continue };
            let slot: &mut NapiCounters = napi.entry(key).or_default();
            for c in per_cpu.iter() {
                slot.polls += c.polls;
                slot.work += c.work;
                slot.full_budget += c.full_budget;
                slot.budget += c.budget;
            }
        }
        let mut devices = HashMap::new();
        let mut napi_devices = HashMap::new();
        for item in napi_ids.iter() {
            let Ok((key, id)) = item else { continue };
            napi_devices.insert(key, id.netdev);
            devices.insert(id.netdev, id);
        }
        for item in drop_devices.iter() {
            let Ok((key, id)) = item else { continue };
            devices.entry(key).or_insert(id);
        }
        let mut drop_counts = HashMap::new();
        for item in drops.iter() {
            let Ok((key, per_cpu)) = item else { continue };
            *drop_counts.entry(key).or_insert(0u64) += per_cpu.iter().sum::<u64>();
        }
        Ok(RawSample {
            at: Instant::now(),
            pools,
            sites,
            gve_poll: gve,
            napi,
            napi_devices,
            devices,
            drops: drop_counts,
            runtime: self.runtime(),
        })
    }

    /// Run time and run count of ppscope's own programs (only while BPF stats are on).
    fn runtime(&self) -> Option<ProgramRuntime> {
        self._stats.as_ref()?;
        let mut total = ProgramRuntime::default();
        for (_, prog) in self.ebpf.programs() {
            if let Ok(info) = prog.info() {
                total.run_ns += info.run_time().as_nanos() as u64;
                total.runs += info.run_count();
            }
        }
        Some(total)
    }
}

fn load_error(e: &aya::EbpfError) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("Function not implemented") {
        anyhow!("this kernel has no BPF system call (CONFIG_BPF_SYSCALL is off): {text}")
    } else if text.contains("Operation not permitted") || text.contains("Permission denied") {
        anyhow!("the kernel refused to load ppscope's programs (missing CAP_BPF/CAP_PERFMON, or a lockdown/LSM policy): {text}")
    } else {
        anyhow!("cannot load ppscope's eBPF programs: {text}")
    }
}

fn attach_hook(
    ebpf: &mut Ebpf,
    def: &HookDef,
    choice: BackendChoice,
    kernel: &Kernel,
) -> HookStatus {
    let mut status = HookStatus {
        hook: Cow::Borrowed(def.name),
        group: def.group,
        backend: None,
        targets: Vec::new(),
        reasons: Vec::new(),
        loses: Cow::Borrowed(def.loses),
    };
    if let Some(module) = def.module {
        let present = def
            .kprobe
            .as_ref()
            .is_some_and(|k| k.symbols.iter().any(|s| kernel.symbols.contains(s)));
        if !present && !Path::new(&format!("/sys/module/{module}")).exists() {
            status
                .reasons
                .push(format!("{module}: {MODULE_NOT_LOADED}"));
            return status;
        }
    }
    let order: &[Backend] = if def.tracepoint_first {
        &[Backend::Tracepoint, Backend::Fentry, Backend::Kprobe]
    } else {
        &[Backend::Fentry, Backend::Kprobe, Backend::Tracepoint]
    };
    for &backend in order {
        let allowed = matches!(
            (choice, backend),
            (BackendChoice::Auto, _)
                | (BackendChoice::Fentry, Backend::Fentry)
                | (BackendChoice::Kprobe, Backend::Kprobe)
                | (BackendChoice::Tracepoint, Backend::Tracepoint)
        );
        if !allowed {
            continue;
        }
        let result = match backend {
            Backend::Fentry => match (&def.fentry, &def.kprobe) {
                (Some(f), Some(k)) => attach_fentry(ebpf, f, k, kernel),
                _ => continue,
            },
            Backend::Kprobe => match &def.kprobe {
                Some(k) => attach_kprobe(ebpf, k, kernel),
                None => continue,
            },
            Backend::Tracepoint => match &def.tracepoint {
                Some(t) => attach_tracepoint(ebpf, t),
                None => continue,
            },
        };
        match result {
            Ok(targets) => {
                status.backend = Some(backend);
                status.targets = targets;
                return status;
            }
            Err(reason) => status.reasons.push(reason),
        }
    }
    if status.reasons.is_empty() {
        let offered: Vec<&str> = [
            (def.fentry.is_some(), "fentry"),
            (def.kprobe.is_some(), "kprobe"),
            (def.tracepoint.is_some(), "tracepoint"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect();
        status.reasons.push(format!(
            "--backend {} cannot serve this hook (it has: {})",
            format!("{choice:?}").to_lowercase(),
            offered.join(", ")
        ));
    }
    status
}

/// The symbols of a kprobe definition present on this kernel (first one only unless `all`).
fn present_symbols(def: &KprobeDef, symbols: &Symbols) -> Result<Vec<&'static str>, String> {
    let found: Vec<&'static str> = def
        .symbols
        .iter()
        .copied()
        .filter(|s| symbols.contains(s))
        .collect();
    if found.is_empty() {
        return Err(format!(
            "none of {} is in /proc/kallsyms (absent or inlined on this kernel)",
            def.symbols.join(", ")
        ));
    }
    Ok(if def.all { found } else { found[..1].to_vec() })
}

/// Wrappers that carry their own copy of the function (see `KprobeDef::wrappers`), and a
/// note for each that could not be judged.
fn thick_wrappers(def: &KprobeDef, symbols: &Symbols) -> (Vec<&'static str>, Vec<String>) {
    let mut thick = Vec::new();
    let mut notes = Vec::new();
    for wrapper in def.wrappers.iter().copied().filter(|w| symbols.contains(w)) {
        match symbols.size(wrapper) {
            Some(size) if size > THIN_WRAPPER_MAX_BYTES => thick.push(wrapper),
            Some(_) => {}
            None => notes.push(format!(
                "(not {wrapper}: its size is hidden from this process, so calls through it may be missed)"
            )),
        }
    }
    (thick, notes)
}

/// Above this size a "wrapper" holds its own copy of the function rather than a call to it
/// (a thin wrapper is the ftrace/IBT preamble plus a jump or call: well under 64 bytes).
const THIN_WRAPPER_MAX_BYTES: u64 = 64;

fn arity_entry(
    by_arity: Option<(usize, &'static str)>,
    default: &'static str,
    symbol: &str,
    btf: &KernelBtf,
) -> &'static str {
    match by_arity {
        Some((arity, prog)) if btf.func_param_count(symbol) == Some(arity) => prog,
        _ => default,
    }
}

fn attach_kprobe(ebpf: &mut Ebpf, def: &KprobeDef, kernel: &Kernel) -> Result<Vec<String>, String> {
    if !kernel::has_kprobe_pmu() {
        return Err("kprobe: the kernel has no kprobes (CONFIG_KPROBES is off)".into());
    }
    let wanted = present_symbols(def, &kernel.symbols).map_err(|e| format!("kprobe: {e}"))?;
    // The first symbol found sets the signature (alternatives are versions of one function).
    let entry = arity_entry(def.entry_by_arity, def.entry, wanted[0], &kernel.btf);
    let (thick, notes) = thick_wrappers(def, &kernel.symbols);
    let mut attached = Vec::new();
    let progs: Vec<&str> = std::iter::once(entry).chain(def.exit).collect();
    for symbol in wanted.iter().chain(thick.iter()) {
        for prog in &progs {
            if let Err(e) = attach_one_kprobe(ebpf, prog, symbol) {
                unload_all(ebpf, &progs);
                return Err(format!("kprobe {symbol}: {e}"));
            }
        }
        attached.push(symbol.to_string());
    }
    attached.extend(notes);
    Ok(attached)
}

/// One load of a module: unloading and loading it again, even between two calls and at the
/// same address, gives another (sysfs recreates `/sys/module/NAME` with a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ModuleGeneration {
    base: u64,
    sysfs_inode: u64,
}

fn module_generation(module: &str, base: u64) -> ModuleGeneration {
    use std::os::unix::fs::MetadataExt;
    ModuleGeneration {
        base,
        sysfs_inode: std::fs::metadata(format!("/sys/module/{module}/initstate"))
            .map_or(0, |m| m.ino()),
    }
}

/// Modules named by the hook table, once each.
fn hooked_modules() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for m in HOOKS.iter().filter_map(|d| d.module) {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    seen.into_iter()
}

/// Live modules and their base addresses, from /proc/modules ("gve 135168 0 - Live
/// 0xffffffffc0a00000"; the address reads 0 without CAP_SYSLOG, which still tells loaded
/// from not loaded).
fn loaded_modules() -> HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    parse_modules(&text)
}

fn parse_modules(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // A module still loading or going away has no usable symbols yet (or any more).
            if f.len() < 6 || f[4] != "Live" {
                return None;
            }
            let addr = u64::from_str_radix(f[5].trim_start_matches("0x"), 16).unwrap_or(0);
            Some((f[0].to_string(), addr))
        })
        .collect()
}

/// Every program a hook's kprobe and fentry flavours may have attached.
fn programs_of(def: &HookDef) -> Vec<&'static str> {
    let mut progs = Vec::new();
    if let Some(k) = &def.kprobe {
        progs.push(k.entry);
        progs.extend(k.entry_by_arity.map(|(_, p)| p));
        progs.extend(k.exit);
    }
    if let Some(f) = &def.fentry {
        for (entry, exit) in f.pairs {
            progs.extend(entry);
            progs.extend(exit);
        }
        progs.extend(f.entry_by_arity.map(|(_, p)| p));
        progs.extend(f.wrapper_entry);
    }
    progs
}

/// Unloads programs (detaching all their links) after a hook failed half way.
fn unload_all(ebpf: &mut Ebpf, progs: &[&str]) {
    for name in progs {
        let _ = match ebpf.program_mut(name) {
            Some(Program::KProbe(p)) => p.unload(),
            Some(Program::FEntry(p)) => p.unload(),
            Some(Program::FExit(p)) => p.unload(),
            _ => Ok(()),
        };
    }
}

fn attach_one_kprobe(ebpf: &mut Ebpf, prog: &str, symbol: &str) -> Result<()> {
    let program: &mut KProbe = ebpf
        .program_mut(prog)
        .with_context(|| format!("program {prog} missing from the object"))?
        .try_into()?;
    if program.fd().is_err() {
        program.load().map_err(|e| anyhow!("{e:#}"))?;
    }
    program.attach(symbol, 0).map_err(|e| anyhow!("{e:#}"))?;
    Ok(())
}

fn fentry_error(e: anyhow::Error) -> String {
    let text = format!("{e:#}");
    if text.contains("Operation not permitted") || text.contains("os error 1)") {
        "the kernel refuses BPF tracing programs (EPERM: lockdown or a security policy)".into()
    } else {
        text
    }
}

fn attach_fentry(
    ebpf: &mut Ebpf,
    def: &FentryDef,
    kdef: &KprobeDef,
    kernel: &Kernel,
) -> Result<Vec<String>, String> {
    let btf = kernel
        .aya_btf
        .as_ref()
        .ok_or("fentry: cannot parse /sys/kernel/btf/vmlinux")?;
    let wanted = present_symbols(kdef, &kernel.symbols).map_err(|e| format!("fentry: {e}"))?;
    let (thick, notes) = thick_wrappers(kdef, &kernel.symbols);
    let mut plan: Vec<(&str, Option<&str>, Option<&str>)> = Vec::new();
    for (i, symbol) in wanted.iter().enumerate() {
        let Some(&(entry, exit)) = def.pairs.get(i).filter(|p| p.0.is_some() || p.1.is_some())
        else {
            return Err(format!("fentry: no program for a further symbol {symbol}"));
        };
        let entry = entry.map(|e| arity_entry(def.entry_by_arity, e, symbol, &kernel.btf));
        plan.push((symbol, entry, exit));
    }
    for wrapper in &thick {
        match def.wrapper_entry {
            Some(entry) => plan.push((wrapper, Some(entry), None)),
            None => return Err(format!("fentry: no program for the wrapper {wrapper}")),
        }
    }
    let mut attached = Vec::new();
    let mut loaded: Vec<&str> = Vec::new();
    for (symbol, entry, exit) in plan {
        for (prog, is_exit) in [(entry, false), (exit, true)] {
            let Some(prog) = prog else { continue };
            loaded.push(prog);
            if let Err(e) = attach_one_fentry(ebpf, prog, symbol, btf, is_exit) {
                // Half a hook must not stay attached beside the next backend's whole one.
                unload_all(ebpf, &loaded);
                let kind = if is_exit { "fexit" } else { "fentry" };
                return Err(format!("{kind} {symbol}: {}", fentry_error(e)));
            }
        }
        attached.push(symbol.to_string());
    }
    attached.extend(notes);
    Ok(attached)
}

fn attach_one_fentry(
    ebpf: &mut Ebpf,
    prog: &str,
    symbol: &str,
    btf: &Btf,
    exit: bool,
) -> Result<()> {
    let program = ebpf
        .program_mut(prog)
        .with_context(|| format!("program {prog} missing from the object"))?;
    if exit {
        let p: &mut FExit = program.try_into()?;
        p.load(symbol, btf).map_err(|e| anyhow!("{e:#}"))?;
        p.attach().map_err(|e| anyhow!("{e:#}"))?;
    } else {
        let p: &mut FEntry = program.try_into()?;
        p.load(symbol, btf).map_err(|e| anyhow!("{e:#}"))?;
        p.attach().map_err(|e| anyhow!("{e:#}"))?;
    }
    Ok(())
}

fn attach_tracepoint(ebpf: &mut Ebpf, def: &TracepointDef) -> Result<Vec<String>, String> {
    let mut run = || -> Result<()> {
        let program: &mut RawTracePoint = ebpf
            .program_mut(def.prog)
            .with_context(|| format!("program {} missing from the object", def.prog))?
            .try_into()?;
        if program.fd().is_err() {
            program.load().map_err(|e| anyhow!("{e:#}"))?;
        }
        program.attach(def.name).map_err(|e| anyhow!("{e:#}"))?;
        Ok(())
    };
    run().map_err(|e| format!("tracepoint {}: {e}", def.name))?;
    Ok(vec![format!("tracepoint:{}:{}", def.category, def.name)])
}

#[cfg(test)]
mod tests {
    use super::*;

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

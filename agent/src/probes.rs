//! The live source's kernel side: which hook goes on which backend, attaching, reading maps.
//!
//! Every hook lists its attach candidates across kernel versions. The backend is chosen per
//! hook at run time by what the kernel accepts; what could not attach is kept with its reason
//! so the report and `doctor` can say exactly what is missing and why.
use std::{collections::HashMap, path::Path};

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, PerCpuHashMap},
    programs::{KProbe, RawTracePoint},
    Ebpf, EbpfLoader,
};
use ppscope_common::{PoolCounters, PoolIdentity, ProbeConfig};
use serde::Serialize;

use crate::{
    btf::{KernelBtf, ResolvedField, VMLINUX_BTF},
    kernel::{self, Symbols},
    model::{accumulate, Coverage, RawPool, RawSample},
};

/// The eBPF object built by `agent/build.rs` from `ebpf/`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("PPSCOPE_EBPF_OBJECT"));

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Kprobe,
    Tracepoint,
}

/// `--backend`: let each hook take what works, or force one backend for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    #[default]
    Auto,
    Kprobe,
    Tracepoint,
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

/// Above this size a "wrapper" holds its own copy of the function rather than a call to it
/// (a thin wrapper is the ftrace/IBT preamble plus a jump or call: well under 64 bytes).
const THIN_WRAPPER_MAX_BYTES: u64 = 64;

struct TracepointDef {
    name: &'static str,
    prog: &'static str,
}

struct HookDef {
    name: &'static str,
    /// What the user loses when this hook is missing.
    loses: &'static str,
    kprobe: Option<KprobeDef>,
    tracepoint: Option<TracepointDef>,
    /// The tracepoint is the exact source (it fires for memory providers too), so it goes first.
    tracepoint_first: bool,
}

const HOOKS: &[HookDef] = &[
    HookDef {
        name: "alloc",
        loses: "allocation counts, so the cache share and fast-path rate",
        kprobe: Some(KprobeDef {
            symbols: &[
                "page_pool_alloc_netmems",
                "page_pool_alloc_netmem",
                "page_pool_alloc_pages",
            ],
            entry: "pp_alloc",
            entry_by_arity: None,
            exit: None,
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "alloc_frag",
        loses: "fragment allocation counts",
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_alloc_frag_netmem", "page_pool_alloc_frag"],
            entry: "pp_alloc_frag",
            entry_by_arity: None,
            exit: None,
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "refill",
        loses: "ring refills and empty-ring misses, so the ring hit rate",
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_refill_alloc_cache"],
            entry: "pp_refill_entry",
            entry_by_arity: None,
            exit: Some("pp_refill_exit"),
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "slow_path",
        loses: "slow-path calls and their latency",
        kprobe: Some(KprobeDef {
            symbols: &[
                "__page_pool_alloc_netmems_slow",
                "__page_pool_alloc_pages_slow",
            ],
            entry: "pp_slow_entry",
            entry_by_arity: None,
            exit: Some("pp_slow_exit"),
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "provider_alloc",
        loses: "memory-provider (devmem, io_uring zcrx) allocations",
        kprobe: Some(KprobeDef {
            symbols: &["mp_dmabuf_devmem_alloc_netmems", "io_pp_zc_alloc_netmems"],
            entry: "pp_mp_alloc",
            entry_by_arity: None,
            exit: None,
            all: true,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "recycle",
        loses: "single-page recycles, so the cached/ring/ring_full split",
        kprobe: Some(KprobeDef {
            symbols: &[
                "page_pool_put_unrefed_netmem",
                "page_pool_put_defragged_page",
            ],
            entry: "pp_put_entry",
            entry_by_arity: None,
            exit: Some("pp_put_exit"),
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "recycle_bulk",
        loses: "bulk recycles (XDP redirect/TX completion)",
        // Before 6.14 the bulk free took the pool as its first argument: its own program.
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_put_netmem_bulk", "page_pool_put_page_bulk"],
            entry: "pp_bulk_entry",
            entry_by_arity: Some((3, "pp_bulk_entry_pool")),
            exit: Some("pp_bulk_exit"),
            all: false,
            wrappers: &[],
        }),
        tracepoint: None,
        tracepoint_first: false,
    },
    HookDef {
        name: "page_hold",
        loses: "pages entering the pool from the page allocator or provider",
        // Called once per page the slow path brings in; memory providers may bypass it,
        // which is why the tracepoint goes first.
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_set_pp_info"],
            entry: "pp_hold",
            entry_by_arity: None,
            exit: None,
            all: false,
            wrappers: &[],
        }),
        tracepoint: Some(TracepointDef {
            name: "page_pool_state_hold",
            prog: "tp_state_hold",
        }),
        tracepoint_first: true,
    },
    HookDef {
        name: "page_release",
        loses: "pages leaving the pool, so ring_full",
        kprobe: Some(KprobeDef {
            symbols: &["page_pool_return_netmem", "page_pool_return_page"],
            entry: "pp_release",
            entry_by_arity: None,
            exit: None,
            all: false,
            wrappers: &[],
        }),
        tracepoint: Some(TracepointDef {
            name: "page_pool_state_release",
            prog: "tp_state_release",
        }),
        tracepoint_first: true,
    },
];

/// How one hook ended up.
#[derive(Debug, Clone, Serialize)]
pub struct HookStatus {
    pub hook: &'static str,
    /// The backend serving it, None when nothing attached.
    pub backend: Option<Backend>,
    /// Kernel functions or tracepoints attached.
    pub targets: Vec<String>,
    /// Why each candidate that was tried did not attach.
    pub reasons: Vec<String>,
    /// What is lost while the hook is missing.
    pub loses: &'static str,
}

impl HookStatus {
    pub fn attached(&self) -> bool {
        self.backend.is_some()
    }
}

pub struct ProbeOptions {
    pub backend: BackendChoice,
    /// Only count pools of the interface with this index (0: all).
    pub only_ifindex: u32,
}

/// The loaded programs. Dropping it detaches everything (fd-based links).
pub struct Probes {
    ebpf: Ebpf,
    pub hooks: Vec<HookStatus>,
    pub fields: Vec<ResolvedField>,
    pub coverage: Coverage,
}

impl Probes {
    /// Loads the programs and attaches every hook it can. Fails only when loading is
    /// impossible or no hook at all attached; a partial plan is returned with its reasons.
    pub fn start(opts: &ProbeOptions) -> Result<Self> {
        if let Some(msg) = kernel::missing_privilege(kernel::effective_caps()) {
            return Err(anyhow!(msg));
        }
        let btf = KernelBtf::load(Path::new(VMLINUX_BTF))?;
        let (offsets, fields) = btf.kernel_offsets();
        let symbols = Symbols::load()?;
        let config = ProbeConfig {
            offsets,
            only_ifindex: opts.only_ifindex,
        };
        let mut ebpf = EbpfLoader::new()
            .override_global("PPSCOPE_CONFIG", &config, true)
            .load(EBPF_OBJECT)
            .map_err(|e| load_error(&e))?;

        let mut hooks = Vec::new();
        for def in HOOKS {
            hooks.push(attach_hook(&mut ebpf, def, opts.backend, &symbols, &btf));
        }
        if !hooks.iter().any(HookStatus::attached) {
            let why: Vec<String> = hooks
                .iter()
                .filter_map(|h| h.reasons.first().map(|r| format!("{}: {r}", h.hook)))
                .collect();
            return Err(anyhow!(
                "none of ppscope's page_pool hooks could be attached on this kernel ({})",
                why.join("; ")
            ));
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
        };
        Ok(Self {
            ebpf,
            hooks,
            fields,
            coverage,
        })
    }

    /// Reads the cumulative counters of every pool seen so far.
    pub fn sample(&self) -> Result<RawSample> {
        let counters: PerCpuHashMap<_, u64, PoolCounters> = PerCpuHashMap::try_from(
            self.ebpf
                .map("POOL_COUNTERS")
                .context("map POOL_COUNTERS missing")?,
        )?;
        let identities: BpfHashMap<_, u64, PoolIdentity> = BpfHashMap::try_from(
            self.ebpf
                .map("POOL_IDENTITY")
                .context("map POOL_IDENTITY missing")?,
        )?;
        let mut pools: HashMap<u64, RawPool> = HashMap::new();
        for item in counters.iter() {
            // A pool evicted between key and value lookups is skipped, not fatal.
            let Ok((pool, per_cpu)) = item else { continue };
            let entry = pools.entry(pool).or_default();
            for c in per_cpu.iter() {
                accumulate(&mut entry.counters, c);
            }
        }
        for item in identities.iter() {
            let Ok((pool, id)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.identity = Some(id);
            }
        }
        Ok(RawSample {
            at: std::time::Instant::now(),
            pools,
        })
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
    symbols: &Symbols,
    btf: &KernelBtf,
) -> HookStatus {
    let mut status = HookStatus {
        hook: def.name,
        backend: None,
        targets: Vec::new(),
        reasons: Vec::new(),
        loses: def.loses,
    };
    let mut order = vec![Backend::Kprobe, Backend::Tracepoint];
    if def.tracepoint_first {
        order.reverse();
    }
    for backend in order {
        let allowed = matches!(
            (choice, backend),
            (BackendChoice::Auto, _)
                | (BackendChoice::Kprobe, Backend::Kprobe)
                | (BackendChoice::Tracepoint, Backend::Tracepoint)
        );
        if !allowed {
            continue;
        }
        let result = match backend {
            Backend::Kprobe => match &def.kprobe {
                Some(k) => attach_kprobe(ebpf, k, symbols, btf),
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
        status
            .reasons
            .push(format!("no candidate for the {choice:?} backend").to_lowercase());
    }
    status
}

fn attach_kprobe(
    ebpf: &mut Ebpf,
    def: &KprobeDef,
    symbols: &Symbols,
    btf: &KernelBtf,
) -> Result<Vec<String>, String> {
    if !kernel::has_kprobe_pmu() {
        return Err("kprobe: the kernel has no kprobes (CONFIG_KPROBES is off)".into());
    }
    let found: Vec<&str> = def
        .symbols
        .iter()
        .copied()
        .filter(|s| symbols.contains(s))
        .collect();
    if found.is_empty() {
        return Err(format!(
            "kprobe: none of {} is in /proc/kallsyms (absent or inlined on this kernel)",
            def.symbols.join(", ")
        ));
    }
    let wanted = if def.all { &found[..] } else { &found[..1] };
    let mut attached = Vec::new();
    // The first symbol found sets the signature (alternatives are versions of one function).
    let entry = match def.entry_by_arity {
        Some((arity, prog)) if btf.func_param_count(wanted[0]) == Some(arity) => prog,
        _ => def.entry,
    };
    for symbol in wanted {
        for prog in std::iter::once(entry).chain(def.exit) {
            if let Err(e) = attach_one_kprobe(ebpf, prog, symbol) {
                return Err(format!("kprobe {symbol}: {e}"));
            }
        }
        attached.push(symbol.to_string());
    }
    for wrapper in def.wrappers {
        if !symbols.contains(wrapper) {
            continue;
        }
        match symbols.size(wrapper) {
            Some(size) if size > THIN_WRAPPER_MAX_BYTES => {
                for prog in std::iter::once(entry).chain(def.exit) {
                    if let Err(e) = attach_one_kprobe(ebpf, prog, wrapper) {
                        return Err(format!("kprobe {wrapper}: {e}"));
                    }
                }
                attached.push(format!("{wrapper} (carries its own copy)"));
            }
            Some(_) => {}
            None => attached.push(format!(
                "(not {wrapper}: its size is hidden from this process, so calls through it may be missed)"
            )),
        }
    }
    Ok(attached)
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
    Ok(vec![format!("tracepoint:page_pool:{}", def.name)])
}

//! The hook table: every hook ppscope attaches, each with its candidates per backend
//! (kprobe symbols across kernel versions, fentry/fexit programs, a tracepoint), the module it
//! lives in and what is lost without it. One row here per file in `ebpf/src/hooks/`; the
//! program names are the functions there (`cargo test -p ppscope-agent hook_table` checks every
//! one is in the built object).
use std::borrow::Cow;

use ppscope_common::site;

use super::BackendChoice;
use crate::snapshot::{Backend, Detail, Group, HookStatus, LEFT_OFF_LIGHT};

pub(super) struct KprobeDef {
    /// Alternatives across kernel versions, newest first.
    pub(super) symbols: &'static [&'static str],
    pub(super) entry: &'static str,
    /// Another entry program for a symbol with this many parameters (from BTF): signatures
    /// change across versions and a program reads its arguments by fixed position.
    pub(super) entry_by_arity: Option<(usize, &'static str)>,
    pub(super) exit: Option<&'static str>,
    /// Attach to every symbol found (distinct providers), not just the first.
    pub(super) all: bool,
    /// Older exported wrappers around the first symbol. Where the compiler inlined the whole
    /// function into one (6.12: `page_pool_alloc_pages` carries its own copy), calls through
    /// it never reach the probed symbol, so it is probed too; where it is a thin wrapper that
    /// calls the symbol, probing it would count every call twice, so it is left alone.
    pub(super) wrappers: &'static [&'static str],
}

/// fentry/fexit programs of a hook. One program attaches to one function, so a hook that
/// covers several functions names one program pair per function, in `KprobeDef::symbols`
/// order (`pairs`), and one for its wrapper.
pub(super) struct FentryDef {
    pub(super) pairs: [(Option<&'static str>, Option<&'static str>); 2],
    pub(super) entry_by_arity: Option<(usize, &'static str)>,
    pub(super) wrapper_entry: Option<&'static str>,
}

pub(super) struct TracepointDef {
    pub(super) category: &'static str,
    pub(super) name: &'static str,
    /// The raw tracepoint program (arguments are plain numbers: kernel reads are casts, see
    /// `probes/cast.rs`, or helper calls).
    pub(super) prog: &'static str,
    /// The same body as a `tp_btf` program (arguments typed from BTF: a pool's fields are plain
    /// loads), tried first; the raw one serves where the kernel refuses tracing programs.
    pub(super) typed_prog: Option<&'static str>,
}

pub(super) struct HookDef {
    pub(super) name: &'static str,
    pub(super) group: Group,
    /// What the user loses when this hook is missing.
    pub(super) loses: &'static str,
    pub(super) kprobe: Option<KprobeDef>,
    pub(super) fentry: Option<FentryDef>,
    pub(super) tracepoint: Option<TracepointDef>,
    /// The tracepoint is the exact source (it fires for memory providers too), so it goes first.
    pub(super) tracepoint_first: bool,
    /// The kernel module the functions live in, if not vmlinux.
    pub(super) module: Option<&'static str>,
    /// Runs on every page allocated or recycled, every NAPI poll (one a packet when traffic is
    /// light) or around every page leaving its pool: left off by `--detail light`.
    pub(super) frequent: bool,
    /// Its programs learn from `page_release` which pages left the pool inside their call (a
    /// single recycle's mark, a bulk recycle's frame): where no such hook can attach,
    /// `page_release` leaves that out (`recycles_fed`).
    pub(super) fed_by_releases: bool,
    /// The per-CPU frame (`site::*`) its entry hands its exit, if it has an entry/exit pair:
    /// where the returns that found another call's frame are counted (`UnmatchedReturns`).
    pub(super) frame_site: Option<u32>,
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
        frequent: false,
        fed_by_releases: false,
        frame_site: None,
    }
}

pub(super) const HOOKS: &[HookDef] = &[
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
        frequent: true,
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
        frequent: true,
        ..hook("alloc_frag", Group::PagePool, "fragment allocation counts")
    },
    HookDef {
        kprobe: kp(
            &["page_pool_refill_alloc_cache"],
            "pp_refill_entry",
            Some("pp_refill_exit"),
        ),
        fentry: fe(None, Some("fx_refill")),
        frame_site: Some(site::REFILL),
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
        frame_site: Some(site::SLOW),
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
        frame_site: Some(site::PROVIDER_ALLOC),
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
        fentry: fe(None, Some("fx_put_exit")),
        frequent: true,
        fed_by_releases: true,
        frame_site: Some(site::PUT),
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
        frequent: true,
        fed_by_releases: true,
        frame_site: Some(site::BULK),
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
            typed_prog: None,
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
            typed_prog: Some("tb_state_release"),
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
            typed_prog: None,
        }),
        // A poll handles up to its budget of packets, but one a packet when traffic is
        // light: under `--detail light` it was two thirds of the BPF time per page
        // (BENCHMARKS.md), for figures light does not promise.
        frequent: true,
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
            typed_prog: None,
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
        // Two programs and two clock reads on every page that leaves its pool: per page in a
        // ring-full churn, for a latency light does not promise (`page_release` already
        // counts those pages, once).
        frequent: true,
        frame_site: Some(site::PAGE_RETURN),
        ..hook(
            "page_return",
            Group::PagePool,
            "how long a page takes to leave its pool (unmap and free, or back to a provider)",
        )
    },
    HookDef {
        tracepoint: Some(TracepointDef {
            category: "page_pool",
            name: "page_pool_release",
            prog: "tp_pool_release",
            typed_prog: None,
        }),
        ..hook(
            "pool_release",
            Group::PagePool,
            "pools destroyed with pages still out of them (release attempts, inflight pages)",
        )
    },
    HookDef {
        kprobe: kp(
            &["sock_devmem_dontneed", "sock_devmem_dontneed_autorelease"],
            "dm_dontneed_entry",
            Some("dm_dontneed_exit"),
        ),
        fentry: fe(Some("fe_dontneed_entry"), Some("fx_dontneed_exit")),
        frame_site: Some(site::DONTNEED),
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
        frame_site: Some(site::DEVMEM_FREE),
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
        frame_site: Some(site::GVE_ALLOC),
        ..hook("gve_alloc", Group::Gve, "gve buffer allocation latency")
    },
    HookDef {
        kprobe: kp(
            &["gve_rx_poll_dqo"],
            "gve_poll_entry",
            Some("gve_poll_exit"),
        ),
        module: Some("gve"),
        frame_site: Some(site::GVE_POLL),
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
        frame_site: Some(site::GVE_CREATE),
        ..hook(
            "gve_pool_queue",
            Group::Gve,
            "which gve rx queue each pool serves (pools created after start)",
        )
    },
];

/// Every program a hook's kprobe and fentry flavours may have attached.
pub(super) fn programs_of(def: &HookDef) -> Vec<&'static str> {
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

/// Every kernel function a hook may attach to or check (symbols and wrappers, whatever the
/// backend): what kallsyms is read for.
pub(super) fn kernel_functions() -> Vec<&'static str> {
    HOOKS
        .iter()
        .filter_map(|def| def.kprobe.as_ref())
        .flat_map(|k| k.symbols.iter().chain(k.wrappers))
        .copied()
        .collect()
}

/// Every program a hook may attach, whatever the backend.
pub(super) fn all_programs(def: &HookDef) -> Vec<&'static str> {
    let mut progs = programs_of(def);
    if let Some(t) = &def.tracepoint {
        progs.push(t.prog);
        progs.extend(t.typed_prog);
    }
    progs
}

/// What this build was made to use of the kernel, one line each, for `ppscope --version`:
/// how many hooks each attach kind serves (the hook table above is what the eBPF object
/// holds programs for), the tracepoints, the modules hooked when loaded. Run time decides
/// what of it a kernel accepts (`ppscope doctor`).
pub fn build_features() -> Vec<String> {
    let hooks = HOOKS.len();
    let served = |has: fn(&HookDef) -> bool| HOOKS.iter().filter(|d| has(d)).count();
    let tracepoints: Vec<String> = HOOKS
        .iter()
        .filter_map(|d| d.tracepoint.as_ref())
        .map(|t| format!("{}:{}", t.category, t.name))
        .collect();
    let mut modules: Vec<&str> = HOOKS.iter().filter_map(|d| d.module).collect();
    modules.sort_unstable();
    modules.dedup();
    vec![
        "BTF (/sys/kernel/btf/vmlinux): field offsets and signatures, read at run time".into(),
        format!(
            "fentry/fexit: {} of {hooks} hooks",
            served(|d| d.fentry.is_some())
        ),
        format!(
            "kprobe/kretprobe: {} of {hooks} hooks",
            served(|d| d.kprobe.is_some())
        ),
        format!(
            "tracepoints (tp_btf, raw): {} of {hooks} hooks: {}",
            tracepoints.len(),
            tracepoints.join(", ")
        ),
        format!("kernel modules hooked when loaded: {}", modules.join(", ")),
        "netlink page-pool family: pools, inflight memory and their own stats".into(),
    ]
}

/// Whether `detail` leaves this hook off: `light` leaves every frequent hook off.
pub(super) fn left_off(def: &HookDef, detail: Detail) -> bool {
    def.frequent && detail == Detail::Light
}

/// Whether a hook `page_release` feeds (`HookDef::fed_by_releases`) can attach in a run of
/// `choice` and `detail`: the agent's `ProbeConfig::feed_recycles`, fixed before load from
/// the same table and flags the attach goes by.
pub(super) fn recycles_fed(choice: BackendChoice, detail: Detail) -> bool {
    HOOKS
        .iter()
        .filter(|def| def.fed_by_releases && !left_off(def, detail))
        .any(|def| def.backends(choice).next().is_some())
}

impl HookDef {
    /// The backends this hook tries under `choice`, in order: those `choice` allows that it has
    /// programs for (fentry resolves the kprobe's symbols, so it needs both).
    pub(super) fn backends(&self, choice: BackendChoice) -> impl Iterator<Item = Backend> + '_ {
        let order: &[Backend] = if self.tracepoint_first {
            &[Backend::Tracepoint, Backend::Fentry, Backend::Kprobe]
        } else {
            &[Backend::Fentry, Backend::Kprobe, Backend::Tracepoint]
        };
        order.iter().copied().filter(move |&backend| {
            choice.allows(backend)
                && match backend {
                    Backend::Fentry => self.fentry.is_some() && self.kprobe.is_some(),
                    Backend::Kprobe => self.kprobe.is_some(),
                    Backend::Tracepoint => self.tracepoint.is_some(),
                }
        })
    }
}

/// The status of a hook left off by `--detail light`: not attached, and why.
pub(super) fn left_off_status(def: &HookDef) -> HookStatus {
    HookStatus {
        hook: Cow::Borrowed(def.name),
        group: def.group,
        backend: None,
        targets: Vec::new(),
        reasons: vec![LEFT_OFF_LIGHT.to_string()],
        loses: Cow::Borrowed(def.loses),
        load: None,
        missed: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::{probes::EBPF_OBJECT, snapshot::ProfileBasis};

    #[test]
    fn build_features_name_every_attach_kind_and_tracepoint() {
        let lines = build_features();
        let text = lines.join("\n");
        let of = |kind: &str| {
            let line = lines.iter().find(|l| l.starts_with(kind)).unwrap();
            let n: usize = line[kind.len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                line.contains(&format!("of {} hooks", HOOKS.len())),
                "{line}"
            );
            n
        };
        assert_eq!(
            of("fentry/fexit: "),
            HOOKS.iter().filter(|d| d.fentry.is_some()).count()
        );
        assert_eq!(
            of("kprobe/kretprobe: "),
            HOOKS.iter().filter(|d| d.kprobe.is_some()).count()
        );
        for tp in HOOKS.iter().filter_map(|d| d.tracepoint.as_ref()) {
            let name = format!("{}:{}", tp.category, tp.name);
            assert!(text.contains(&name), "{name} not in:\n{text}");
        }
        let modules = lines
            .iter()
            .find_map(|l| l.strip_prefix("kernel modules hooked when loaded: "))
            .unwrap();
        for module in HOOKS.iter().filter_map(|d| d.module) {
            assert!(
                modules.split(", ").any(|m| m == module),
                "{module}: {modules}"
            );
        }
    }

    #[test]
    fn hook_table_programs_are_all_in_the_built_object() {
        let obj = aya_obj::Object::parse(EBPF_OBJECT).expect("the embedded object parses");
        let in_object: HashSet<&str> = obj.programs.keys().map(String::as_str).collect();
        let mut checked = 0;
        for def in HOOKS {
            let progs = all_programs(def);
            assert!(!progs.is_empty(), "hook {} names no program", def.name);
            for prog in progs {
                assert!(
                    in_object.contains(prog),
                    "hook {} names program {prog}, which the eBPF object does not have",
                    def.name
                );
                checked += 1;
            }
        }
        assert!(checked >= HOOKS.len());
    }

    /// Start-up attaches hooks on several threads, each with its hook's programs taken out of
    /// the object: a program named by two hooks would be missing from the second.
    #[test]
    fn no_program_serves_two_hooks() {
        let mut seen = HashSet::new();
        for def in HOOKS {
            for prog in all_programs(def) {
                assert!(
                    seen.insert(prog),
                    "{prog} is named again by hook {}",
                    def.name
                );
            }
        }
    }

    #[test]
    fn hook_table_rows_have_one_ebpf_file_each_holding_their_programs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf/src/hooks");
        let mut names = HashSet::new();
        for def in HOOKS {
            assert!(names.insert(def.name), "hook {} listed twice", def.name);
            let file = dir.join(format!("{}.rs", def.name));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("hook {}: {}: {e}", def.name, file.display()));
            for prog in all_programs(def) {
                assert!(
                    text.contains(&format!("pub fn {prog}(")),
                    "program {prog} of hook {} is not in {}",
                    def.name,
                    file.display()
                );
            }
        }
        let files = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f != "mod.rs")
            .count();
        assert_eq!(files, HOOKS.len(), "a file in {} has no row", dir.display());
    }

    /// A row's `frame_site` is the frame its file's entry opens, so the returns counted there
    /// (`UnmatchedReturns`) are exported under the right hook, and every site has its row.
    #[test]
    fn hook_table_frame_sites_are_the_frames_their_files_open() {
        const SITES: [(&str, u32); site::COUNT as usize] = [
            ("REFILL", site::REFILL),
            ("SLOW", site::SLOW),
            ("PUT", site::PUT),
            ("BULK", site::BULK),
            ("PROVIDER_ALLOC", site::PROVIDER_ALLOC),
            ("DONTNEED", site::DONTNEED),
            ("DEVMEM_FREE", site::DEVMEM_FREE),
            ("GVE_ALLOC", site::GVE_ALLOC),
            ("GVE_POLL", site::GVE_POLL),
            ("GVE_CREATE", site::GVE_CREATE),
            ("PAGE_RETURN", site::PAGE_RETURN),
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf/src/hooks");
        let mut rows = HashSet::new();
        for def in HOOKS {
            let text = std::fs::read_to_string(dir.join(format!("{}.rs", def.name))).unwrap();
            // Without whitespace: a call rustfmt split over lines reads as one.
            let text: String = text.split_whitespace().collect();
            let opened: Vec<u32> = SITES
                .iter()
                .filter(|(name, _)| text.contains(&format!("open_frame(site::{name},")))
                .map(|&(_, site)| site)
                .collect();
            let expected: Vec<u32> = def.frame_site.into_iter().collect();
            assert_eq!(opened, expected, "hook {}: frames opened", def.name);
            if let Some(site) = def.frame_site {
                assert!(rows.insert(site), "site {site} is a second hook's");
            }
        }
        assert_eq!(rows.len(), site::COUNT as usize, "a site has no hook");
    }

    #[test]
    fn light_leaves_off_exactly_the_frequent_hooks_and_keeps_what_its_figures_need() {
        let off: Vec<&str> = HOOKS
            .iter()
            .filter(|d| left_off(d, Detail::Light))
            .map(|d| d.name)
            .collect();
        assert_eq!(
            off,
            [
                "alloc",
                "alloc_frag",
                "recycle",
                "recycle_bulk",
                "napi_poll",
                "page_return"
            ]
        );
        assert!(HOOKS.iter().all(|d| !left_off(d, Detail::Full)));
        // What light keeps is enough for a burst profile (the advice), from refills.
        let kept = |name: &str| {
            HOOKS
                .iter()
                .any(|d| d.name == name && !left_off(d, Detail::Light))
        };
        assert_eq!(ProfileBasis::from_hooks(kept), Some(ProfileBasis::Refills));
        let status = left_off_status(&HOOKS[0]);
        assert!(status.left_off() && !status.attached() && !status.module_absent());
    }

    #[test]
    fn releases_feed_the_recycles_except_under_light_or_tracepoints() {
        use BackendChoice::*;
        let fed: Vec<&str> = HOOKS
            .iter()
            .filter(|d| d.fed_by_releases)
            .map(|d| d.name)
            .collect();
        assert_eq!(fed, ["recycle", "recycle_bulk"]);
        for choice in [Auto, Fentry, Kprobe, Tracepoint] {
            assert!(!recycles_fed(choice, Detail::Light), "{choice:?}");
            assert_eq!(
                recycles_fed(choice, Detail::Full),
                choice != Tracepoint,
                "{choice:?}"
            );
        }
        // The order the attach tries: the tracepoint first where it is the exact source.
        use crate::snapshot::Backend as B;
        let order = |name: &str, choice| {
            let def = HOOKS.iter().find(|d| d.name == name).unwrap();
            def.backends(choice).collect::<Vec<_>>()
        };
        assert_eq!(order("recycle", Auto), [B::Fentry, B::Kprobe]);
        assert_eq!(
            order("page_hold", Auto),
            [B::Tracepoint, B::Fentry, B::Kprobe]
        );
        assert_eq!(order("page_hold", Kprobe), [B::Kprobe]);
        assert!(order("recycle", Tracepoint).is_empty());
    }
}

//! Struct offsets from the running kernel's BTF (`/sys/kernel/btf/vmlinux`).
//!
//! Rust eBPF has no CO-RE relocations, so every field the programs read is located here at
//! start and passed to them in [`ProbeConfig`](ppscope_common::ProbeConfig). A field that cannot be found stays
//! [`OFFSET_UNKNOWN`]: the programs then skip it and the report says the column is unknown.
use std::{collections::HashMap, path::Path, sync::Mutex};

use anyhow::{Context, Result};
use btf_rs::{Backend, Btf, Type};
use ppscope_common::{KernelOffsets, OFFSET_UNKNOWN};

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Members one offset query may look at (see `walk`).
const WALK_BUDGET: u32 = 1 << 16;

/// The bytes of a kernel BTF file (`/sys/kernel/btf/vmlinux`), for aya (loading, and the
/// fentry/fexit attach targets). Mapped where the kernel allows it (6.16 and later map the
/// kernel's own copy: no 5 MB read, a sixth of a second under the VM lab's emulated CPUs),
/// read otherwise.
pub fn read(path: &Path) -> Result<BtfBytes> {
    let what = || {
        format!(
            "cannot read the kernel's BTF at {} (needs CONFIG_DEBUG_INFO_BTF)",
            path.display()
        )
    };
    let file = std::fs::File::open(path).with_context(what)?;
    // SAFETY: the kernel's BTF is written once at boot and never changes while mapped; a
    // file the kernel refuses to map is read instead. Private and read-only: the kernel maps
    // nothing else.
    if let Ok(map) = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) } {
        return Ok(BtfBytes::Mapped(map));
    }
    std::fs::read(path).map(BtfBytes::Read).with_context(what)
}

/// A BTF file's bytes, mapped or read.
pub enum BtfBytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for BtfBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Read(v) => v,
        }
    }
}

/// The kernel's type information, loaded once.
pub struct KernelBtf {
    btf: Btf,
    /// Types by name, as looked up: on the mapped backend a lookup scans every type's name,
    /// and the offsets ask for the same nine structs thirty times.
    by_name: Mutex<HashMap<String, Vec<Type>>>,
}

/// Each offset with the member path it came from, for `doctor` and the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ResolvedField {
    pub name: &'static str,
    /// The member path that matched, e.g. `page_pool.slow.netdev`; None when none did.
    pub path: Option<String>,
    pub offset: Option<u32>,
}

impl KernelBtf {
    /// A module's split BTF (`/sys/kernel/btf/<module>`) on top of vmlinux's.
    pub fn load_module(base: &KernelBtf, module: &str) -> Result<Self> {
        let path = format!("/sys/kernel/btf/{module}");
        let what = || format!("cannot read {path} (module not loaded?)");
        let bytes = std::fs::read(&path).with_context(what)?;
        let btf = Btf::from_split_bytes(&bytes, &base.btf).with_context(what)?;
        Ok(Self::new(btf))
    }

    /// gve offsets from the gve module's BTF: (`gve_rx_ring.q_num`, `gve_notify_block.rx`).
    pub fn gve_offsets(&self) -> ((u32, u32), Vec<ResolvedField>) {
        let (q, q_off) = self.first_of("gve_rx_q_num", "gve_rx_ring", &[&["q_num"]]);
        let (b, b_off) = self.first_of("gve_block_rx", "gve_notify_block", &[&["rx"]]);
        ((q_off, b_off), vec![q, b])
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Ok(Self::new(Btf::from_bytes(bytes).context("not valid BTF")?))
    }

    fn new(btf: Btf) -> Self {
        Self {
            btf,
            by_name: Mutex::default(),
        }
    }

    /// The running kernel's BTF at `path` (`/sys/kernel/btf/vmlinux`). btf-rs maps it and
    /// finds types by name when asked, where the kernel allows the mapping; its other reader
    /// parses and indexes all ~130,000 types (0.5 s of the start-up under the VM lab's
    /// emulated CPUs, for the nine structs the offsets need).
    pub fn vmlinux(path: &Path) -> Result<Self> {
        if let Ok(btf) = Btf::from_file_with_backend(path, Backend::Mmap) {
            return Ok(Self::new(btf));
        }
        Self::from_bytes(&read(path)?)
            .with_context(|| format!("the kernel's BTF at {} does not parse", path.display()))
    }

    /// Looks up every type of these names in one pass (see `by_name`): a pass per name was
    /// most of the offsets' time on the mapped backend.
    pub fn look_up(&self, names: &[&str]) {
        let alternatives: Vec<String> = names.iter().map(|n| regex::escape(n)).collect();
        let Ok(re) = regex::Regex::new(&format!("^(?:{})$", alternatives.join("|"))) else {
            return;
        };
        // A pass that fails stores nothing: each name is then looked up alone when asked
        // (stored empty, a name would stay unknown for good).
        let Ok(types) = self.btf.resolve_types_by_regex(&re) else {
            return;
        };
        let mut found: HashMap<String, Vec<Type>> =
            names.iter().map(|n| (n.to_string(), Vec::new())).collect();
        for ty in types {
            let name = ty
                .as_btf_type()
                .and_then(|t| self.btf.resolve_name(t).ok())
                .unwrap_or_default();
            if let Some(types) = found.get_mut(&name) {
                types.push(ty);
            }
        }
        self.by_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(found);
    }

    /// Every type named `name` (looked up once).
    fn types_named(&self, name: &str) -> Vec<Type> {
        let mut by_name = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        by_name
            .entry(name.to_string())
            .or_insert_with(|| self.btf.resolve_types_by_name(name).unwrap_or_default())
            .clone()
    }

    /// Byte offset of `path` (member names, e.g. `["slow", "netdev"]`) inside `struct name`.
    /// Anonymous struct and union members are searched through, as C does.
    pub fn member_offset(&self, name: &str, path: &[&str]) -> Option<u32> {
        let ty = self.find_struct(name)?;
        let mut budget = WALK_BUDGET;
        self.walk(&ty, path, 0, 0, &mut budget)
    }

    /// Number of parameters of the kernel function `name`, if BTF describes it.
    pub fn func_param_count(&self, name: &str) -> Option<usize> {
        for ty in self.types_named(name) {
            if let Type::Func(func) = ty {
                if let Ok(Type::FuncProto(proto)) = self.btf.resolve_chained_type(&func) {
                    return Some(proto.parameters.len());
                }
            }
        }
        None
    }

    /// Values and names of a C enum (e.g. `skb_drop_reason`), empty when BTF lacks it.
    pub fn enum_values(&self, name: &str) -> Vec<(u32, String)> {
        for ty in self.types_named(name) {
            if let Type::Enum(e) = ty {
                return e
                    .members
                    .iter()
                    .map(|m| (m.val(), self.btf.resolve_name(m).unwrap_or_default()))
                    .collect();
            }
        }
        Vec::new()
    }

    fn find_struct(&self, name: &str) -> Option<Type> {
        self.types_named(name)
            .into_iter()
            .find(|t| matches!(t, Type::Struct(s) if !s.members.is_empty()))
    }

    /// Strips typedefs and qualifiers down to the underlying type.
    fn underlying(&self, mut ty: Type) -> Option<Type> {
        for _ in 0..16 {
            match ty {
                Type::Typedef(_)
                | Type::Volatile(_)
                | Type::Const(_)
                | Type::Restrict(_)
                | Type::TypeTag(_) => {
                    ty = self.btf.resolve_chained_type(ty.as_btf_type()?).ok()?;
                }
                other => return Some(other),
            }
        }
        None
    }

    /// Bounded twice, because BTF from a corrupt or hostile file can nest a struct inside
    /// itself through anonymous members (no real kernel does): `depth` counts the structs
    /// entered (without it: recursion until the stack overflows), and `budget` the members
    /// looked at (two self-nesting members make 2^depth paths: the `btf` fuzz target's
    /// first find, a query that never ended). Real kernels need a few hundred members.
    fn walk(
        &self,
        ty: &Type,
        path: &[&str],
        base_bits: u32,
        depth: u32,
        budget: &mut u32,
    ) -> Option<u32> {
        const MAX_DEPTH: u32 = 32;
        let (Type::Struct(st) | Type::Union(st)) = ty else {
            return None;
        };
        if depth >= MAX_DEPTH {
            return None;
        }
        let (want, rest) = path.split_first()?;
        for m in &st.members {
            *budget = budget.checked_sub(1)?;
            let name = self.btf.resolve_name(m).unwrap_or_default();
            // Checked: offsets come from the file, and a wrapped sum would be a wrong offset.
            let bits = base_bits.checked_add(m.bit_offset())?;
            if m.bitfield_size().is_some_and(|s| s != 0) {
                continue;
            }
            let member_ty = self
                .btf
                .resolve_chained_type(m)
                .ok()
                .and_then(|t| self.underlying(t));
            if name.is_empty() {
                // Anonymous struct/union: its members belong to the enclosing struct.
                if let Some(inner) = &member_ty {
                    if let Some(off) = self.walk(inner, path, bits, depth + 1, budget) {
                        return Some(off);
                    }
                }
                continue;
            }
            if name != *want {
                continue;
            }
            if rest.is_empty() {
                return bits.is_multiple_of(8).then_some(bits / 8);
            }
            return self.walk(member_ty.as_ref()?, rest, bits, depth + 1, budget);
        }
        None
    }

    /// Tries each candidate path in turn (newest kernel layout first).
    fn first_of(
        &self,
        name: &'static str,
        st: &str,
        candidates: &[&[&str]],
    ) -> (ResolvedField, u32) {
        for c in candidates {
            if let Some(off) = self.member_offset(st, c) {
                let field = ResolvedField {
                    name,
                    path: Some(format!("{st}.{}", c.join("."))),
                    offset: Some(off),
                };
                return (field, off);
            }
        }
        (
            ResolvedField {
                name,
                path: None,
                offset: None,
            },
            OFFSET_UNKNOWN,
        )
    }

    /// Resolves every offset the programs use. Never fails: unknown fields stay unknown.
    pub fn kernel_offsets(&self) -> (KernelOffsets, Vec<ResolvedField>) {
        // The structs below, in one pass (a struct not in it, or all of them when the pass
        // fails, is still looked up alone).
        self.look_up(&[
            "page_pool",
            "napi_struct",
            "net_device",
            "device",
            "class",
            "page",
            "device_driver",
            "rtnl_link_ops",
            "sk_buff",
        ]);
        let mut fields = Vec::new();
        let mut get = |name, st, cands: &[&[&str]]| {
            let (f, off) = self.first_of(name, st, cands);
            fields.push(f);
            off
        };
        let offsets = KernelOffsets {
            pool_alloc_count: get("alloc_count", "page_pool", &[&["alloc", "count"]]),
            pool_alloc_cache: get("alloc_cache", "page_pool", &[&["alloc", "cache"]]),
            pool_netdev: get(
                "netdev",
                "page_pool",
                &[&["slow", "netdev"], &["p", "netdev"]],
            ),
            pool_napi: get("napi", "page_pool", &[&["p", "napi"]]),
            napi_dev: get("napi_dev", "napi_struct", &[&["dev"]]),
            pool_dev: get("device", "page_pool", &[&["p", "dev"]]),
            pool_destroy_cnt: get("destroy_cnt", "page_pool", &[&["destroy_cnt"]]),
            netdev_dev: get("netdev_device", "net_device", &[&["dev"]]),
            device_class: get("device_class", "device", &[&["class"]]),
            class_name: get("class_name", "class", &[&["name"]]),
            pool_queue_idx: get(
                "queue_idx",
                "page_pool",
                &[&["slow", "queue_idx"], &["p", "queue_idx"]],
            ),
            pool_size: get("pool_size", "page_pool", &[&["p", "pool_size"]]),
            pool_ring_size: get("ring_size", "page_pool", &[&["ring", "size"]]),
            pool_user_id: get("netlink_id", "page_pool", &[&["user", "id"]]),
            pool_order: get("order", "page_pool", &[&["p", "order"]]),
            pool_mp: get("memory_provider", "page_pool", &[&["mp_ops"], &["mp_priv"]]),
            netdev_ifindex: get("ifindex", "net_device", &[&["ifindex"]]),
            netdev_name: get("ifname", "net_device", &[&["name"]]),
            page_pp: get("page_pp", "page", &[&["pp"]]),
            pool_ring_producer: get("ring_producer", "page_pool", &[&["ring", "producer"]]),
            pool_ring_consumer_head: get(
                "ring_consumer_head",
                "page_pool",
                &[&["ring", "consumer_head"]],
            ),
            pool_ring_queue: get("ring_queue", "page_pool", &[&["ring", "queue"]]),
            pool_hold_cnt: get("hold_cnt", "page_pool", &[&["pages_state_hold_cnt"]]),
            pool_release_cnt: get("release_cnt", "page_pool", &[&["pages_state_release_cnt"]]),
            device_parent: get("device_parent", "device", &[&["parent"]]),
            device_driver: get("device_driver", "device", &[&["driver"]]),
            driver_name: get("driver_name", "device_driver", &[&["name"]]),
            netdev_link_ops: get("rtnl_link_ops", "net_device", &[&["rtnl_link_ops"]]),
            link_ops_kind: get("link_kind", "rtnl_link_ops", &[&["kind"]]),
            napi_id: get("napi_id", "napi_struct", &[&["napi_id"]]),
            skb_dev: get("skb_dev", "sk_buff", &[&["dev"]]),
            // From the gve module's BTF: see `gve_offsets`.
            gve_rx_q_num: OFFSET_UNKNOWN,
            gve_block_rx: OFFSET_UNKNOWN,
        };
        (offsets, fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_btf() -> KernelBtf {
        let bytes = read(Path::new(VMLINUX_BTF)).expect("this machine has vmlinux BTF");
        KernelBtf::from_bytes(&bytes).expect("vmlinux BTF parses")
    }

    #[test]
    fn resolves_page_pool_fields_on_this_kernel() {
        let btf = host_btf();
        let (o, fields) = btf.kernel_offsets();
        for f in &fields {
            assert!(f.offset.is_some(), "unresolved on the host kernel: {f:?}");
        }
        // Facts that hold for every layout: the alloc cache follows its count, and the
        // 128-entry cache alone is 1 KiB, so the ring lies beyond it.
        assert!(o.pool_alloc_cache > o.pool_alloc_count);
        assert!(o.pool_ring_size > o.pool_alloc_cache + 1024);
        assert_ne!(o.netdev_ifindex, o.netdev_name);
    }

    /// The mapped reader (this kernel allows the mapping) finds what the parsing one finds,
    /// whether a name was looked up in one pass with others or alone.
    #[test]
    fn the_mapped_kernel_btf_gives_the_same_answers() {
        let (parsed, mapped) = (
            host_btf(),
            KernelBtf::vmlinux(Path::new(VMLINUX_BTF)).unwrap(),
        );
        assert!(
            matches!(read(Path::new(VMLINUX_BTF)).unwrap(), BtfBytes::Mapped(_))
                && Btf::from_file_with_backend(VMLINUX_BTF, Backend::Mmap).is_ok(),
            "this kernel maps its BTF (6.16 and later): both readers map it"
        );
        let (a, b) = (parsed.kernel_offsets(), mapped.kernel_offsets());
        assert_eq!(format!("{:?}", a.0), format!("{:?}", b.0));
        let alone = KernelBtf::vmlinux(Path::new(VMLINUX_BTF)).unwrap();
        mapped.look_up(&[
            "page_pool_alloc_netmems",
            "skb_drop_reason",
            "no_such_name_xyz",
        ]);
        for name in ["page_pool_alloc_netmems", "no_such_name_xyz"] {
            assert_eq!(mapped.func_param_count(name), alone.func_param_count(name));
            assert_eq!(mapped.func_param_count(name), parsed.func_param_count(name));
        }
        assert_eq!(
            mapped.enum_values("skb_drop_reason"),
            parsed.enum_values("skb_drop_reason")
        );
        assert!(!mapped.enum_values("skb_drop_reason").is_empty());
    }

    #[test]
    fn anonymous_members_are_searched() {
        // `struct page`'s `pp` sits inside anonymous unions/structs: a flat search misses it.
        let btf = host_btf();
        let off = btf.member_offset("page", &["pp"]).expect("page.pp");
        assert!(off > 0 && off < 64, "page.pp at {off}");
    }

    #[test]
    fn missing_fields_are_unknown_not_guessed() {
        let btf = host_btf();
        assert_eq!(btf.member_offset("page_pool", &["no_such_field"]), None);
        assert_eq!(btf.member_offset("no_such_struct_xyz", &["p"]), None);
        assert_eq!(
            btf.member_offset("page_pool", &["p", "pool_size", "x"]),
            None
        );
    }

    #[test]
    fn function_arity_from_btf() {
        let btf = host_btf();
        assert_eq!(
            btf.func_param_count("page_pool_put_unrefed_netmem"),
            Some(4)
        );
        assert_eq!(btf.func_param_count("no_such_function_xyz"), None);
    }

    #[test]
    fn drop_reasons_from_btf() {
        let reasons = host_btf().enum_values("skb_drop_reason");
        let consumed = reasons.iter().find(|(_, n)| n == "SKB_CONSUMED");
        assert!(consumed.is_some(), "{reasons:?}");
        assert!(reasons
            .iter()
            .any(|(_, n)| n == "SKB_DROP_REASON_NOT_SPECIFIED"));
        assert!(host_btf().enum_values("no_such_enum_xyz").is_empty());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(KernelBtf::from_bytes(b"definitely not btf").is_err());
    }
}

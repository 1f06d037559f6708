//! The programs' `bpf_rdonly_cast` calls, made real before load.
//!
//! A pool a kprobe or a raw tracepoint is handed, the alloc cache's top slot and a page's
//! `pp` are plain numbers to the verifier, so each field read of them was a
//! `bpf_probe_read_kernel` helper call: in the VM lab the one read of the cache's top slot
//! was the largest part of the recycle's cost priced (BENCHMARKS.md). Cast with the
//! `bpf_rdonly_cast` kfunc (Linux 6.2+) to the kernel's type, each is one load the kernel makes
//! fault-safe, and the verifier turns the call itself into a register move.
//!
//! Neither aya 0.14 nor bpf-linker relocates kfunc calls, so the eBPF code calls a marker
//! helper number (`RDONLY_CAST_MARKER`) and [`resolve`] rewrites each such call in a copy of
//! the object: into a call of the kfunc by its BTF id in the running kernel, or, where the
//! kernel lacks it, into `r0 = r1` (what the kfunc is made into anyway). The casts are used
//! only where `ProbeConfig::cast` names the types, set from the same lookup, so without the
//! kfunc that code is dead to the verifier and every read goes through the helper as before.

use aya::Btf;
use aya_obj::btf::BtfKind;
use object::{Object, ObjectSection, SectionKind};
use ppscope_common::{CastTypes, RDONLY_CAST_MARKER};

/// `call` (BPF_JMP | BPF_CALL).
const OP_CALL: u8 = 0x85;
/// `r0 = r1` (BPF_ALU64 | BPF_MOV | BPF_X, src r1, dst r0).
const MOV_R0_R1: [u8; 8] = [0xbf, 0x10, 0, 0, 0, 0, 0, 0];
/// A call's src_reg field saying "kfunc by BTF id" (BPF_PSEUDO_KFUNC_CALL), in the register
/// byte's high nibble.
const PSEUDO_KFUNC_CALL: u8 = 2 << 4;

/// What the running kernel offers for the casts: the kfunc's BTF id and the types'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CastSupport {
    pub kfunc: u32,
    pub types: CastTypes,
}

impl CastSupport {
    /// From the kernel's BTF: None when it lacks the kfunc (before 6.2) or either type, or
    /// when the kernel could not call it: the verifier refuses every program with a kfunc call
    /// when the JIT is off (`net.core.bpf_jit_enable` 0) or does not call kfuncs (an
    /// architecture other than x86-64 and arm64 may not), where the helper reads still load.
    pub fn find(btf: &Btf) -> Option<Self> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) || !jit_enabled() {
            return None;
        }
        let id = |name, kind| {
            btf.id_by_type_name_kind(name, kind)
                .ok()
                .filter(|i| *i != 0)
        };
        Some(Self {
            kfunc: id("bpf_rdonly_cast", BtfKind::Func)?,
            types: CastTypes {
                page_pool: id("page_pool", BtfKind::Struct)?,
                page: id("page", BtfKind::Struct)?,
            },
        })
    }
}

/// Whether the kernel JIT-compiles BPF programs (`/proc/sys/net/core/bpf_jit_enable` not 0;
/// a kernel built with the JIT always on may not have the file).
fn jit_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable").map_or(true, |v| v.trim() != "0")
}

/// The object with every marker call rewritten for this kernel (`support`: None rewrites them
/// into moves), and how many there were. The object as it is when it has none.
pub fn resolve(
    object: &[u8],
    support: Option<CastSupport>,
) -> anyhow::Result<(Resolved<'_>, usize)> {
    let marks = marker_calls(object)?;
    if marks.is_empty() {
        return Ok((Resolved::Same(object), 0));
    }
    let mut out = AlignedBytes::copy_of(object);
    for at in &marks {
        let insn = &mut out[*at..*at + 8];
        match support {
            Some(s) => {
                insn[1] = PSEUDO_KFUNC_CALL;
                insn[4..8].copy_from_slice(&s.kfunc.to_le_bytes());
            }
            None => insn.copy_from_slice(&MOV_R0_R1),
        }
    }
    Ok((Resolved::Rewritten(out), marks.len()))
}

/// The object to load: as embedded, or a rewritten copy.
pub enum Resolved<'a> {
    Same(&'a [u8]),
    Rewritten(AlignedBytes),
}

impl std::ops::Deref for Resolved<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Same(b) => b,
            Self::Rewritten(b) => b,
        }
    }
}

/// Bytes on an 8-byte boundary, as ELF parsing wants them (the embedded object is included
/// aligned for the same reason; a `Vec<u8>` promises only 1).
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    fn copy_of(bytes: &[u8]) -> Self {
        let mut out = Self {
            words: vec![0; bytes.len().div_ceil(8)],
            len: bytes.len(),
        };
        out.copy_from_slice(bytes);
        out
    }
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes of the words' initialised memory, which any u8 may view.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; the borrow is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// File offsets of the marker calls in the object's code sections.
fn marker_calls(object: &[u8]) -> anyhow::Result<Vec<usize>> {
    let file = object::File::parse(object)
        .map_err(|e| anyhow::anyhow!("ppscope's eBPF object does not parse as ELF: {e}"))?;
    let mut found = Vec::new();
    for section in file.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let Some((start, size)) = section.file_range() else {
            continue;
        };
        let (start, size) = (start as usize, size as usize);
        let Some(code) = object.get(start..start + size) else {
            continue;
        };
        for (i, insn) in code.chunks_exact(8).enumerate() {
            let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            // A helper call (src_reg 0) with the marker's number.
            if insn[0] == OP_CALL && insn[1] >> 4 == 0 && imm == RDONLY_CAST_MARKER {
                found.push(start + i * 8);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::EBPF_OBJECT;

    fn calls_of(object: &[u8], want: impl Fn(&[u8]) -> bool) -> usize {
        let file = object::File::parse(object).unwrap();
        file.sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| s.file_range())
            .map(|(start, size)| {
                object[start as usize..(start + size) as usize]
                    .chunks_exact(8)
                    .filter(|i| want(i))
                    .count()
            })
            .sum()
    }

    #[test]
    fn every_cast_becomes_the_kernels_kfunc_call_or_a_move() {
        // The object the agent embeds calls the marker (the recycle reads the cache's top slot
        // through a cast; the refill, slow path, release and recycle kprobes their pool).
        let (same, n) = resolve(EBPF_OBJECT, None).unwrap();
        assert!(n >= 2, "{n} marker calls in the object");
        assert_eq!(
            calls_of(&same, |i| i == MOV_R0_R1),
            n + calls_of(EBPF_OBJECT, |i| i == MOV_R0_R1)
        );

        let support = CastSupport {
            kfunc: 69957,
            types: CastTypes {
                page_pool: 1,
                page: 2,
            },
        };
        let (patched, m) = resolve(EBPF_OBJECT, Some(support)).unwrap();
        assert_eq!(m, n);
        let kfunc_calls = calls_of(&patched, |i| {
            i[0] == OP_CALL && i[1] == PSEUDO_KFUNC_CALL && i[4..8] == 69957u32.to_le_bytes()
        });
        assert_eq!(kfunc_calls, n);
        // Nothing else moved: the object differs from the original only in those calls.
        let changed = EBPF_OBJECT
            .chunks(8)
            .zip(patched.chunks(8))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(changed, n);
        assert_eq!(
            patched.as_ptr() as usize % 8,
            0,
            "the copy is aligned for ELF parsing"
        );
        // Once rewritten, no marker is left to rewrite again.
        assert_eq!(resolve(&patched, Some(support)).unwrap().1, 0);
    }

    #[test]
    fn the_scan_finds_every_marker_aya_will_load() {
        // Every call to the marker in the programs as aya parses them (whatever their
        // sections' flags) is one the scan rewrites: a missed one would reach the verifier
        // as a call of an unknown helper.
        let obj = aya_obj::Object::parse(EBPF_OBJECT).expect("the embedded object parses");
        let in_programs: usize = obj
            .functions
            .values()
            .flat_map(|f| &f.instructions)
            .filter(|i| i.code == OP_CALL && i.imm == RDONLY_CAST_MARKER)
            .count();
        let (_, rewritten) = resolve(EBPF_OBJECT, None).unwrap();
        assert_eq!(rewritten, in_programs);
    }

    #[test]
    fn an_object_that_is_not_elf_is_an_error_not_a_panic() {
        let Err(err) = resolve(b"not an ELF file", None) else {
            panic!("a text file was taken for an object");
        };
        assert!(err.to_string().contains("does not parse as ELF"), "{err}");
    }
}

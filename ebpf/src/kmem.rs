//! Reading kernel memory (every offset comes from `PPSCOPE_CONFIG`; an unknown one reads as
//! `None`), and small generic helpers.

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    programs::ProbeContext,
};
use ppscope_common::{
    log2_bucket, DeviceIdentity, LATENCY_BUCKETS, OFFSET_UNKNOWN, RDONLY_CAST_MARKER,
};

use crate::config;

/// Reads a `T` at `base + offset` in kernel memory, or `None` when the offset is unknown.
#[inline(always)]
pub(crate) fn read_field<T>(base: u64, offset: u32) -> Option<T> {
    if base == 0 || offset == OFFSET_UNKNOWN {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T).ok() }
}

/// How a hook reads a field of the pool it was handed (the hook's body is the same for every
/// backend; the program picks the reader).
pub(crate) trait PoolRead {
    /// A `T` at `pool + offset`, or `None` when the offset is unknown.
    fn field<T>(pool: u64, offset: u32) -> Option<T>;
}

/// A pool that is a plain number to the verifier (kprobes, raw tracepoints, a pool taken from
/// a frame): cast to `struct page_pool` where the kernel has `bpf_rdonly_cast` (one load a
/// field, see [`read_cast`]), else one `bpf_probe_read_kernel` helper call a field.
pub(crate) struct Probed;

impl PoolRead for Probed {
    #[inline(always)]
    fn field<T>(pool: u64, offset: u32) -> Option<T> {
        read_cast(pool, config().cast.page_pool, offset)
    }
}

/// `bpf_rdonly_cast(obj, btf_id)`: `obj` as an untrusted pointer to the kernel's type
/// `btf_id`, through which the verifier allows plain loads of that type's fields (each a load
/// the kernel makes fault-safe, as for `Typed`). The verifier makes the call itself a register
/// move. Only called where `btf_id` is not 0, which the agent sets only after rewriting this
/// call into the kfunc's (see `RDONLY_CAST_MARKER`); with 0 the code is dead to the verifier.
#[inline(always)]
fn rdonly_cast(obj: u64, btf_id: u32) -> u64 {
    // SAFETY: a BPF call instruction with the marker as its number (how aya-ebpf calls every
    // helper); the agent rewrites it before load into the kfunc's call, whose contract
    // (any value in, the same value out as a typed pointer) this signature states.
    unsafe {
        let f: unsafe extern "C" fn(u64, u32) -> u64 =
            core::mem::transmute(RDONLY_CAST_MARKER as usize);
        f(obj, btf_id)
    }
}

/// The low 32 bits of a kernel address as a number the program may compute with. A typed
/// program's pointer argument (fentry, fexit, `tp_btf`) is a pointer to the verifier, which
/// refuses arithmetic on it ("math between trusted_ptr_ pointer and ... is not allowed", as
/// LLVM computes `ptr as u32 * k` with a 64-bit multiply), but takes a 32-bit move of it as
/// an unknown number when the loader may see kernel addresses (CAP_PERFMON, which tracing
/// programs need anyway). So the move is written out; on a plain number it is a plain move.
#[inline(always)]
pub(crate) fn address_low_bits(addr: u64) -> u32 {
    let low: u64;
    // SAFETY: one register move, no memory touched.
    unsafe { core::arch::asm!("w0 = w0", inout("r0") addr => low, options(pure, nomem, nostack)) };
    low as u32
}

/// The 8 bytes at `addr`, anywhere in kernel memory (an element of an array of pointers the
/// pool points to, such as its ring's queue), as one load: read as the alloc cache's first
/// slot of a `struct page_pool` cast at `addr` less that slot's offset (the verifier checks
/// only that the constant offset is a u64 inside the type; the address is the kernel's to
/// fault on). Through the helper without the cast or the cache's offset.
#[inline(always)]
pub(crate) fn read_word(addr: u64) -> Option<u64> {
    let cfg = config();
    let slot = cfg.offsets.pool_alloc_cache;
    if cfg.cast.page_pool == 0 || slot == OFFSET_UNKNOWN || addr == 0 {
        return read_field(addr, 0);
    }
    read_cast(addr.wrapping_sub(slot as u64), cfg.cast.page_pool, slot)
}

/// A `T` at `base + offset`, where `base` points to a kernel object of BTF type `btf_id`
/// (`CastTypes`): one load through [`rdonly_cast`]; through the helper when `btf_id` is 0.
/// `None` when the offset is unknown or `base` is 0; a cast read of an address that faults reads
/// 0 (the helper's read gave `None`), so a caller that compares two reads treats 0 as no value
/// where that matters. The offset must fall inside the type (the verifier checks it against
/// the kernel's BTF and refuses the program otherwise). The verifier checks only that constant
/// offset, so an array inside the object is read at a run-time index by shifting `base` (the
/// alloc cache's top slot is read as the cache of a pool `8 * index` bytes further on).
#[inline(always)]
pub(crate) fn read_cast<T>(base: u64, btf_id: u32, offset: u32) -> Option<T> {
    if btf_id == 0 {
        return read_field(base, offset);
    }
    if base == 0 || offset == OFFSET_UNKNOWN {
        return None;
    }
    let typed = rdonly_cast(base, btf_id);
    // SAFETY: an untrusted typed pointer: the verifier checks the access against the type and
    // the kernel turns a fault into a read of 0.
    Some(unsafe { core::ptr::read_volatile((typed + offset as u64) as *const T) })
}

/// A plain load through the BTF-typed `struct page_pool *` an fentry/fexit program is handed:
/// the verifier checks the access against the kernel's BTF of the argument's type and makes it
/// one instruction that cannot fault, no helper call. Only for that argument as the program
/// received it: a pool read from memory or a frame is a plain number to the verifier, which
/// then refuses the load. The offset is a constant to the verifier (as it must be): it comes
/// from `PPSCOPE_CONFIG`, which aya freezes read-only before load, and loads from a frozen
/// read-only map are known values. No CO-RE needed.
pub(crate) struct Typed;

impl PoolRead for Typed {
    #[inline(always)]
    fn field<T>(pool: u64, offset: u32) -> Option<T> {
        // No test of `pool` against 0: the verifier does not narrow a typed pointer on such a
        // test, so it walks the path "null, then not null" the compiler knows cannot happen
        // and refuses it (the compiler had reused a register there). A load through a null
        // typed pointer reads 0 and does not fault.
        if offset == OFFSET_UNKNOWN {
            return None;
        }
        // SAFETY: `pool` is the BTF-typed argument and the offset is a field of its type (both
        // checked by the verifier, which refuses the program otherwise); the load is made
        // fault-safe by the kernel.
        Some(unsafe { core::ptr::read_volatile((pool + offset as u64) as *const T) })
    }
}

/// The net_device of a pool: its NAPI's device first (a pool whose device moved to another
/// netns is re-parented to the old netns' loopback in `slow.netdev`, but its NAPI still names
/// the real device), then `slow.netdev`, then the net_device around `p.dev` when that device
/// is of class "net" (veth, which registers neither) and the pool is not being destroyed:
/// a destroyed pool waiting for its pages may outlive that device (it holds no reference
/// on it), whose memory may by then hold another net_device: a torn-down veth's pool would
/// be named after a veth created since. Such a pool keeps the device read while it was
/// alive, if any.
#[inline(always)]
pub(crate) fn pool_netdev(pool: u64, o: &ppscope_common::KernelOffsets) -> Option<u64> {
    let napi = read_word_at(pool, o.pool_napi);
    let mut dev = read_word_at(napi, o.napi_dev);
    if dev == 0 {
        dev = read_word_at(pool, o.pool_netdev);
    }
    if dev == 0 && read_word_at(pool, o.pool_destroy_cnt) == 0 && o.netdev_dev != OFFSET_UNKNOWN {
        let device = read_word_at(pool, o.pool_dev);
        let class = read_word_at(device, o.device_class);
        let name = read_word_at(class, o.class_name);
        let is_net = read_field::<u32>(name, 0) == Some(u32::from_ne_bytes(*b"net\0"));
        if is_net && device > o.netdev_dev as u64 {
            dev = device - o.netdev_dev as u64;
        }
    }
    (dev != 0).then_some(dev)
}

/// The word at `base + offset` (0 when it cannot be read): for pointer chains, where 0 ends
/// the chain ([`read_field`] reads nothing at a null base). One value whichever way the read
/// went and no early return, so the verifier walks what follows once, not once per way out
/// (see `pool::read_identity`).
#[inline(always)]
fn read_word_at(base: u64, offset: u32) -> u64 {
    read_field::<u64>(base, offset).unwrap_or(0)
}

/// Copies a kernel C string (up to 15 bytes) into a NUL-padded array.
#[inline(always)]
pub(crate) fn read_cstr16(ptr: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    if ptr != 0 {
        // SAFETY: the helper bounds the copy by the slice and checks the address.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(ptr as *const u8, &mut out) };
    }
    out
}

/// The driver of a net_device: its bus device's driver, else its rtnl link kind.
#[inline(always)]
pub(crate) fn driver_name(netdev: u64, o: &ppscope_common::KernelOffsets) -> [u8; 16] {
    let mut name = 0;
    if o.netdev_dev != OFFSET_UNKNOWN && netdev != 0 {
        let parent = read_word_at(netdev + o.netdev_dev as u64, o.device_parent);
        let driver = read_word_at(parent, o.device_driver);
        name = read_word_at(driver, o.driver_name);
    }
    if name == 0 {
        let ops = read_word_at(netdev, o.netdev_link_ops);
        name = read_word_at(ops, o.link_ops_kind);
    }
    read_cstr16(name)
}

/// What `netdev` is (ifindex, name) and, for a NAPI instance, its id (`napi` 0: none).
#[inline(always)]
pub(crate) fn device_identity(netdev: u64, napi: u64) -> DeviceIdentity {
    let o = &config().offsets;
    DeviceIdentity {
        ifindex: read_field::<u32>(netdev, o.netdev_ifindex).unwrap_or(0),
        napi_id: read_field::<u32>(napi, o.napi_id).unwrap_or(0),
        netdev,
        ifname: read_field::<[u8; 16]>(netdev, o.netdev_name).unwrap_or([0; 16]),
    }
}

/// The rx queue number of a gve rx ring (`rx->q_num`).
#[inline(always)]
pub(crate) fn gve_queue_of_rx(rx: u64) -> Option<u32> {
    read_field::<u32>(rx, config().offsets.gve_rx_q_num)
}

#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// [`log2_bucket`] as an index into a histogram the verifier can bound: masked after a
/// volatile read, which the compiler cannot see through. Where the compiler knows the value
/// is small (a poll's work is an `i32`) it drops `log2_bucket`'s clamp, and the verifier,
/// which cannot follow the leading-zero count's arithmetic, would then refuse the access
/// (seen on `gve_rx_poll`). The mask changes nothing: the bucket is already below
/// `LATENCY_BUCKETS`, a power of two.
#[inline(always)]
pub(crate) fn bucket_index(v: u64) -> usize {
    const _: () = assert!(LATENCY_BUCKETS.is_power_of_two());
    let b = log2_bucket(v);
    // SAFETY: a read of a local.
    unsafe { core::ptr::read_volatile(&b) & (LATENCY_BUCKETS - 1) }
}

/// Argument `n` of a kprobe, 0 when it cannot be read.
#[inline(always)]
pub(crate) fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

//! ppscope's kernel side: small programs on the page_pool alloc and recycle paths.
//!
//! Rules (see DESIGN.md): count per pool per CPU, take timestamps only around the slow path,
//! never hard-code a struct offset (they arrive in `PPSCOPE_CONFIG`), never loop unbounded.
//! Every hook has the same body whichever backend (kprobe or tracepoint) carries it.
#![no_std]
#![no_main]
// The atomic add intrinsic: the BPF target has no compare-and-swap, so core's atomics offer
// no fetch_add, but the instruction exists (the build already runs with RUSTC_BOOTSTRAP=1).
#![allow(internal_features)]
#![feature(core_intrinsics)]

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
    macros::{fentry, fexit, kprobe, kretprobe, map, raw_tracepoint, xdp},
    maps::{LruHashMap, LruPerCpuHashMap, PerCpuArray},
    programs::{
        FEntryContext, FExitContext, ProbeContext, RawTracePointContext, RetProbeContext,
        XdpContext,
    },
};
use ppscope_common::{
    site, site_stat, DeviceIdentity, DropKey, Frame, NapiCounters, PoolHists, PoolHot,
    PoolIdentity, PoolState, ProbeConfig, SiteStats, LATENCY_BUCKETS, MAX_POOLS, OFFSET_UNKNOWN,
};

/// Written by the agent before load (`EbpfLoader::override_global`).
#[no_mangle]
static PPSCOPE_CONFIG: ProbeConfig = ProbeConfig::DEFAULT;

#[map]
static POOL_COUNTERS: LruPerCpuHashMap<u64, PoolHot> =
    LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// Rare-event histograms per pool, shared by all CPUs (atomic adds).
#[map]
static POOL_HISTS: LruHashMap<u64, PoolHists> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
static ZERO_HISTS: PerCpuArray<PoolHists> = PerCpuArray::with_max_entries(1, 0);

#[map]
static POOL_IDENTITY: LruHashMap<u64, PoolIdentity> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
static FRAMES: PerCpuArray<Frame> = PerCpuArray::with_max_entries(site::COUNT, 0);

/// Whole-site stats (devmem, provider, gve alloc), indexed by `site_stat::*`.
#[map]
static SITE_STATS: PerCpuArray<SiteStats> = PerCpuArray::with_max_entries(site_stat::COUNT, 0);

/// gve NAPI poll duration and work, per rx queue.
#[map]
static GVE_POLL: LruPerCpuHashMap<u32, SiteStats> = LruPerCpuHashMap::with_max_entries(1024, 0);

/// Which gve rx queue a pool belongs to (from `gve_rx_create_page_pool`).
#[map]
static GVE_POOL_QUEUE: LruHashMap<u64, u32> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
static ZERO_SITE: PerCpuArray<SiteStats> = PerCpuArray::with_max_entries(1, 0);

/// Ring fill and inflight pages per pool, as of the pool's last rare event.
#[map]
static POOL_STATE: LruHashMap<u64, PoolState> = LruHashMap::with_max_entries(MAX_POOLS, 0);

/// NAPI polls per NAPI instance (key: `struct napi_struct *`).
#[map]
static NAPI_COUNTERS: LruPerCpuHashMap<u64, NapiCounters> =
    LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// Device behind each NAPI instance (key: napi pointer) and each dropping device (key: netdev).
#[map]
static NAPI_IDENTITY: LruHashMap<u64, DeviceIdentity> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
static DROP_DEVICES: LruHashMap<u64, DeviceIdentity> = LruHashMap::with_max_entries(MAX_POOLS, 0);

/// skb drops per device and reason (normal frees, SKB_CONSUMED, are not counted).
#[map]
static DROPS: LruPerCpuHashMap<DropKey, u64> = LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// A zeroed counter set to insert on first sight; a map value is too big for the BPF stack.
#[map]
static ZERO_COUNTERS: PerCpuArray<PoolHot> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn config() -> ProbeConfig {
    // SAFETY: the global is plain data the loader rewrote before load; a volatile read keeps
    // the compiler from folding the default value in.
    unsafe { core::ptr::read_volatile(&PPSCOPE_CONFIG) }
}

/// Reads a `T` at `base + offset` in kernel memory, or `None` when the offset is unknown.
#[inline(always)]
fn read_field<T>(base: u64, offset: u32) -> Option<T> {
    if base == 0 || offset == OFFSET_UNKNOWN {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T).ok() }
}

/// The net_device of a pool: its NAPI's device first (a pool whose device moved to another
/// netns is re-parented to the old netns' loopback in `slow.netdev`, but its NAPI still names
/// the real device), then `slow.netdev`, then the net_device around `p.dev` when that device
/// is of class "net" (veth, which registers neither).
#[inline(always)]
fn pool_netdev(pool: u64, o: &ppscope_common::KernelOffsets) -> Option<u64> {
    if let Some(napi) = read_field::<u64>(pool, o.pool_napi).filter(|n| *n != 0) {
        if let Some(dev) = read_field::<u64>(napi, o.napi_dev).filter(|d| *d != 0) {
            return Some(dev);
        }
    }
    if let Some(dev) = read_field::<u64>(pool, o.pool_netdev).filter(|d| *d != 0) {
        return Some(dev);
    }
    let device = read_field::<u64>(pool, o.pool_dev).filter(|d| *d != 0)?;
    let class = read_field::<u64>(device, o.device_class).filter(|c| *c != 0)?;
    let name = read_field::<u64>(class, o.class_name).filter(|n| *n != 0)?;
    if read_field::<[u8; 4]>(name, 0)? != *b"net\0" || o.netdev_dev == OFFSET_UNKNOWN {
        return None;
    }
    device.checked_sub(o.netdev_dev as u64)
}

/// Copies a kernel C string (up to 15 bytes) into a NUL-padded array.
#[inline(always)]
fn read_cstr16(ptr: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    if ptr != 0 {
        // SAFETY: the helper bounds the copy by the slice and checks the address.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(ptr as *const u8, &mut out) };
    }
    out
}

/// The driver of a net_device: its bus device's driver, else its rtnl link kind.
#[inline(always)]
fn driver_name(netdev: u64, o: &ppscope_common::KernelOffsets) -> [u8; 16] {
    if o.netdev_dev != OFFSET_UNKNOWN {
        let device = netdev + o.netdev_dev as u64;
        if let Some(parent) = read_field::<u64>(device, o.device_parent).filter(|p| *p != 0) {
            if let Some(drv) = read_field::<u64>(parent, o.device_driver).filter(|d| *d != 0) {
                if let Some(name) = read_field::<u64>(drv, o.driver_name) {
                    return read_cstr16(name);
                }
            }
        }
    }
    match read_field::<u64>(netdev, o.netdev_link_ops).filter(|p| *p != 0) {
        Some(ops) => read_cstr16(read_field::<u64>(ops, o.link_ops_kind).unwrap_or(0)),
        None => [0; 16],
    }
}

/// Reads the identity of a pool the first time it is seen.
#[inline(always)]
fn record_identity(pool: u64, cfg: &ProbeConfig) {
    // SAFETY: read-only lookup; a value aliased by a concurrent update is only an identity.
    if unsafe { POOL_IDENTITY.get(pool) }.is_some() {
        return;
    }
    let _ = POOL_IDENTITY.insert(pool, read_identity(pool, cfg), 0);
}

/// What the kernel says about `pool` and its device now.
#[inline(always)]
fn read_identity(pool: u64, cfg: &ProbeConfig) -> PoolIdentity {
    let o = &cfg.offsets;
    let mut id = PoolIdentity::EMPTY;
    // The queue index means something only when the driver registered the pool with its netdev.
    if read_field::<u64>(pool, o.pool_netdev).unwrap_or(0) != 0 {
        if let Some(v) = read_field::<u32>(pool, o.pool_queue_idx) {
            id.queue_idx = v;
            id.known |= PoolIdentity::KNOWN_QUEUE;
        }
    }
    if let Some(v) = read_field::<u32>(pool, o.pool_size) {
        id.pool_size = v;
        id.known |= PoolIdentity::KNOWN_POOL_SIZE;
    }
    if let Some(v) = read_field::<u32>(pool, o.pool_ring_size) {
        id.ring_size = v;
        id.known |= PoolIdentity::KNOWN_RING_SIZE;
    }
    if let Some(v) = read_field::<u32>(pool, o.pool_user_id) {
        id.netlink_id = v;
        id.known |= PoolIdentity::KNOWN_NETLINK_ID;
    }
    if let Some(v) = read_field::<u32>(pool, o.pool_order) {
        id.order = v;
        id.known |= PoolIdentity::KNOWN_ORDER;
    }
    if let Some(v) = read_field::<u64>(pool, o.pool_mp) {
        id.has_memory_provider = (v != 0) as u32;
        id.known |= PoolIdentity::KNOWN_MEMORY_PROVIDER;
    }
    if let Some(netdev) = pool_netdev(pool, o) {
        id.netdev = netdev;
        id.driver = driver_name(netdev, o);
        if let Some(v) = read_field::<u32>(netdev, o.netdev_ifindex) {
            id.ifindex = v;
            id.known |= PoolIdentity::KNOWN_IFINDEX;
        }
        if let Some(name) = read_field::<[u8; 16]>(netdev, o.netdev_name) {
            id.ifname = name;
            id.known |= PoolIdentity::KNOWN_IFNAME;
        }
    }
    id
}

/// The identity is read once per pool address, but a pool's device can change under it: an
/// interface renamed, or a pool freed and a new one (another device's) born at its address.
/// Rare events (pages entering the pool, refills) compare the device and its name with what
/// was recorded and read the whole identity again when they differ, so names follow within
/// one rare event.
#[inline(always)]
fn refresh_device(pool: u64) {
    let Some(id) = POOL_IDENTITY.get_ptr_mut(pool) else {
        return;
    };
    // SAFETY: a value of the shared identity map; a concurrent refresh writes the same facts.
    let id = unsafe { &mut *id };
    let cfg = config();
    let o = &cfg.offsets;
    let Some(netdev) = pool_netdev(pool, o) else {
        return;
    };
    // Compared as two words: no memcmp in BPF.
    let Some(name) = read_field::<[u64; 2]>(netdev, o.netdev_name) else {
        return;
    };
    // SAFETY: [u8; 16] and [u64; 2] have the same size; any bit pattern is valid for both.
    let recorded: [u64; 2] = unsafe { core::mem::transmute(id.ifname) };
    if id.netdev == netdev && recorded[0] == name[0] && recorded[1] == name[1] {
        return;
    }
    if id.netdev != netdev {
        // Another device: another pool at this address; everything is read again.
        *id = read_identity(pool, &cfg);
    } else {
        // SAFETY: as above.
        id.ifname = unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>(name) };
        id.known |= PoolIdentity::KNOWN_IFNAME;
    }
}

/// The counters of `pool` on this CPU, created (and the pool's identity read) on first sight.
#[inline(always)]
fn counters(pool: u64) -> Option<&'static mut PoolHot> {
    if pool == 0 {
        return None;
    }
    if let Some(c) = POOL_COUNTERS.get_ptr_mut(pool) {
        // SAFETY: per-CPU value of this CPU; programs do not nest on one CPU for one map
        // value except through NMI, which none of these hooks run in.
        return Some(unsafe { &mut *c });
    }
    let cfg = config();
    if cfg.only_ifindex != 0 {
        let netdev = pool_netdev(pool, &cfg.offsets).unwrap_or(0);
        let ifindex = read_field::<u32>(netdev, cfg.offsets.netdev_ifindex).unwrap_or(0);
        if ifindex != cfg.only_ifindex {
            return None;
        }
    }
    record_identity(pool, &cfg);
    let zero = ZERO_COUNTERS.get_ptr(0)?;
    // SAFETY: the zero slot is never written.
    let _ = POOL_COUNTERS.insert(pool, unsafe { &*zero }, 0);
    POOL_COUNTERS.get_ptr_mut(pool).map(|c| {
        // SAFETY: as above.
        unsafe { &mut *c }
    })
}

#[inline(always)]
fn frame(site: u32) -> Option<&'static mut Frame> {
    // SAFETY: per-CPU slot; see `Frame` for how a stale or foreign frame is rejected.
    FRAMES.get_ptr_mut(site).map(|f| unsafe { &mut *f })
}

#[inline(always)]
fn open_frame(site: u32, pool: u64, netmem: u64, with_time: bool) {
    if let Some(f) = frame(site) {
        f.pid_tgid = bpf_get_current_pid_tgid();
        f.pool = pool;
        f.netmem = netmem;
        f.released = 0;
        // SAFETY: helper without arguments.
        f.start_ns = if with_time {
            unsafe { bpf_ktime_get_ns() }
        } else {
            0
        };
    }
}

/// Takes this task's open frame for `site`, if it is still there.
#[inline(always)]
fn close_frame(site: u32) -> Option<Frame> {
    let f = frame(site)?;
    if f.pid_tgid == 0 || f.pid_tgid != bpf_get_current_pid_tgid() {
        return None;
    }
    let taken = *f;
    f.pid_tgid = 0;
    Some(taken)
}

#[inline(always)]
fn log2_bucket(mut v: u64) -> usize {
    let mut b = 0usize;
    // Bounded: at most 6 halvings of the shift, the verifier sees a fixed trip count.
    let mut shift = 32u32;
    while shift > 0 {
        if v >> shift != 0 {
            v >>= shift;
            b += shift as usize;
        }
        shift >>= 1;
    }
    if b >= LATENCY_BUCKETS {
        LATENCY_BUCKETS - 1
    } else {
        b
    }
}

// ---- bodies shared by every backend -------------------------------------------------------
//
// Each hook is one function below; the kprobe/kretprobe, fentry/fexit and tracepoint programs
// further down only fetch their arguments and call it.

#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// Reads the pool's ring fill and inflight pages (rare events only: refill, slow path,
/// release). Release is rare only while the pool is healthy: a ring-full churn (veth + XDP on
/// the host: ~26k releases/s) runs it per page, so it stays cheap: no timestamp (`stamp_ns`
/// is read by nobody; it was 5× the floor's cost with the map update below, measured by
/// `cargo xtask bench`) and an in-place write instead of a map update.
#[inline(always)]
fn record_state(pool: u64) {
    let o = config().offsets;
    let mut st = PoolState::default();
    let size = read_field::<i32>(pool, o.pool_ring_size).unwrap_or(0);
    if let (Some(prod), Some(cons)) = (
        read_field::<i32>(pool, o.pool_ring_producer),
        read_field::<i32>(pool, o.pool_ring_consumer_head),
    ) {
        if size > 0 && (0..size).contains(&prod) && (0..size).contains(&cons) {
            let mut fill = prod - cons;
            if fill < 0 {
                fill += size;
            }
            // producer == consumer_head is empty or full: a full ring's next slot is taken.
            if fill == 0 {
                let queue = read_field::<u64>(pool, o.pool_ring_queue).unwrap_or(0);
                if read_field::<u64>(queue, 0).is_some()
                    && read_field::<u64>(queue + prod as u64 * 8, 0).unwrap_or(0) != 0
                {
                    fill = size;
                }
            }
            st.ring_fill = fill as u32;
            st.known |= 1;
            hist_add(pool, Hist::Fill, fill as u64);
        }
    }
    if let (Some(hold), Some(release)) = (
        read_field::<u32>(pool, o.pool_hold_cnt),
        read_field::<u32>(pool, o.pool_release_cnt),
    ) {
        st.inflight = hold.wrapping_sub(release);
        st.known |= 2;
    }
    // An LRU hash update allocates a fresh element and frees the old one on every call; a
    // write through the looked-up value does not. A reader racing the write may see fields
    // of two updates mixed: both are gauges of the same moment, good enough for a gauge.
    match POOL_STATE.get_ptr_mut(pool) {
        // SAFETY: a map value stays valid for the program's run.
        Some(p) => unsafe { *p = st },
        None => {
            let _ = POOL_STATE.insert(pool, st, 0);
        }
    }
}

/// Which rare-event histogram of a pool.
#[derive(Clone, Copy)]
enum Hist {
    Slow,
    FullRun,
    EmptyRun,
    Fill,
}

/// Adds one sample of `value` to a pool's shared histogram (created on first use).
#[inline(always)]
fn hist_add(pool: u64, which: Hist, value: u64) {
    let mut h = POOL_HISTS.get_ptr_mut(pool);
    if h.is_none() {
        let Some(zero) = ZERO_HISTS.get_ptr(0) else {
            return;
        };
        // SAFETY: the zero slot is never written. BPF_NOEXIST: a racing CPU's entry stays.
        let _ = POOL_HISTS.insert(pool, unsafe { &*zero }, 1);
        h = POOL_HISTS.get_ptr_mut(pool);
    }
    let Some(h) = h else { return };
    // SAFETY: a map value lives as long as the program runs; every writer adds atomically.
    let h = unsafe { &mut *h };
    let arr = match which {
        Hist::Slow => &mut h.slow_hist,
        Hist::FullRun => &mut h.full_run_hist,
        Hist::EmptyRun => &mut h.empty_run_hist,
        Hist::Fill => &mut h.fill_hist,
    };
    if let Some(slot) = arr.get_mut(log2_bucket(value)) {
        // SAFETY: an aligned u64 inside the map value; BPF has an atomic add even though the
        // target lacks compare-and-swap (so core's AtomicU64 offers no fetch_add).
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                slot as *mut u64,
                1,
            )
        };
    }
}

/// Ends a run in progress (if any) and files its length.
#[inline(always)]
fn close_run(pool: u64, run: &mut u64, which: Hist) {
    if *run > 0 {
        hist_add(pool, which, *run);
        *run = 0;
    }
}

#[inline(always)]
fn on_alloc(pool: u64) {
    if let Some(c) = counters(pool) {
        c.alloc_calls += 1;
    }
}

#[inline(always)]
fn on_alloc_frag(pool: u64) {
    if let Some(c) = counters(pool) {
        c.frag_calls += 1;
    }
}

#[inline(always)]
fn on_refill_exit(pool: u64, got: u64) {
    let cfg = config();
    record_state(pool);
    refresh_device(pool);
    if let Some(c) = counters(pool) {
        c.refill_calls += 1;
        if got == 0 {
            c.refill_empty += 1;
            c.empty_run += 1;
        } else {
            close_run(pool, &mut c.empty_run, Hist::EmptyRun);
            // The refill moved `count + 1` pages: the cache now holds `count`, one was returned.
            let left = read_field::<u32>(pool, cfg.offsets.pool_alloc_count).unwrap_or(0);
            c.refill_pages += left as u64 + 1;
        }
    }
}

#[inline(always)]
fn on_slow_exit() {
    let Some(f) = close_frame(site::SLOW) else {
        return;
    };
    let elapsed = now_ns().saturating_sub(f.start_ns);
    record_state(f.pool);
    if let Some(c) = counters(f.pool) {
        c.slow_calls += 1;
        c.slow_ns_sum += elapsed;
    }
    hist_add(f.pool, Hist::Slow, elapsed);
}

/// Adds one call of `elapsed` ns carrying `value` (when `Some`) to a site's stats.
#[inline(always)]
fn site_add(stats: &mut SiteStats, elapsed: u64, value: Option<i64>) {
    stats.calls += 1;
    stats.ns_sum += elapsed;
    if let Some(slot) = stats.ns_hist.get_mut(log2_bucket(elapsed)) {
        *slot += 1;
    }
    match value {
        Some(v) if v < 0 => stats.errors += 1,
        Some(v) => {
            stats.value_sum += v as u64;
            if let Some(slot) = stats.value_hist.get_mut(log2_bucket(v as u64)) {
                *slot += 1;
            }
        }
        None => {}
    }
}

#[inline(always)]
fn site_record(index: u32, elapsed: u64, value: Option<i64>) {
    if let Some(stats) = SITE_STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot of this CPU.
        site_add(unsafe { &mut *stats }, elapsed, value);
    }
}

#[inline(always)]
fn on_provider_alloc_exit() {
    let Some(f) = close_frame(site::PROVIDER_ALLOC) else {
        return;
    };
    let elapsed = now_ns().saturating_sub(f.start_ns);
    if let Some(c) = counters(f.pool) {
        c.mp_alloc_calls += 1;
        c.mp_ns_sum += elapsed;
    }
    site_record(site_stat::PROVIDER_ALLOC, elapsed, None);
}

#[inline(always)]
fn on_put_exit(pool: u64, netmem: u64, released: bool) {
    let cfg = config();
    let Some(c) = counters(pool) else {
        return;
    };
    c.put_calls += 1;
    if released {
        c.put_released += 1;
        c.full_run += 1;
        return;
    }
    close_run(pool, &mut c.full_run, Hist::FullRun);
    // Direct recycling pushes the page on top of the alloc cache, and nothing can pop it
    // before we look (the cache is only touched in this softirq context). A page sent to the
    // ring cannot also be in the cache, so "top of cache == our page" is exact.
    let o = &cfg.offsets;
    if let Some(count) = read_field::<u32>(pool, o.pool_alloc_count) {
        if count > 0 && count <= 128 && o.pool_alloc_cache != OFFSET_UNKNOWN {
            let slot = o.pool_alloc_cache as u64 + (count as u64 - 1) * 8;
            if read_field::<u64>(pool, slot as u32) == Some(netmem) {
                c.put_cached += 1;
            }
        }
    }
}

#[inline(always)]
fn bulk_entry(pool: u64, count: u64) {
    if let Some(c) = counters(pool) {
        c.bulk_calls += 1;
        c.bulk_pages += count;
    }
    open_frame(site::BULK, pool, 0, false);
}

/// The pool of a bulk free without a pool argument: the first netmem names it (bit 0 marks a
/// net_iov; pages and net_iovs carry `pp` at the same offset).
#[inline(always)]
fn bulk_pool(data: u64) -> u64 {
    let cfg = config();
    let first = read_field::<u64>(data, 0).unwrap_or(0) & !1u64;
    read_field::<u64>(first, cfg.offsets.page_pp).unwrap_or(0)
}

#[inline(always)]
fn on_bulk_exit() {
    if let Some(f) = close_frame(site::BULK) {
        if let Some(c) = counters(f.pool) {
            c.bulk_released += f.released;
        }
    }
}

#[inline(always)]
fn on_hold(pool: u64) {
    let mut refresh = false;
    if let Some(c) = counters(pool) {
        c.hold_pages += 1;
        // Pages enter a pool by the thousand under churn: the device is checked on the first
        // page of a pool on this CPU and every 64th after (at every page it tripled this
        // program's cost; BENCHMARKS.md), still within one slow-path batch of a new pool.
        refresh = c.hold_pages % 64 == 1;
    }
    if refresh {
        refresh_device(pool);
    }
}

#[inline(always)]
fn on_release(pool: u64) {
    if let Some(c) = counters(pool) {
        c.release_pages += 1;
    }
    record_state(pool);
    // Tell an open recycle frame of this task that its page left the pool.
    let me = bpf_get_current_pid_tgid();
    for s in [site::PUT, site::BULK] {
        if let Some(f) = frame(s) {
            if f.pid_tgid == me && f.pool == pool {
                f.released += 1;
            }
        }
    }
}

/// Closes a timed frame of a whole-site hook and records it.
#[inline(always)]
fn on_site_exit(frame_site: u32, stat: u32, value: Option<i64>) {
    if let Some(f) = close_frame(frame_site) {
        site_record(stat, now_ns().saturating_sub(f.start_ns), value);
    }
}

#[inline(always)]
fn gve_queue_of_rx(rx: u64) -> Option<u32> {
    read_field::<u32>(rx, config().offsets.gve_rx_q_num)
}

#[inline(always)]
fn on_gve_poll_exit(work: i64) {
    let Some(f) = close_frame(site::GVE_POLL) else {
        return;
    };
    // The frame's `pool` slot carries the queue number here.
    let queue = f.pool as u32;
    let elapsed = now_ns().saturating_sub(f.start_ns);
    if GVE_POLL.get_ptr_mut(queue).is_none() {
        let Some(zero) = ZERO_SITE.get_ptr(0) else {
            return;
        };
        // SAFETY: the zero slot is never written.
        let _ = GVE_POLL.insert(queue, unsafe { &*zero }, 0);
    }
    if let Some(stats) = GVE_POLL.get_ptr_mut(queue) {
        // SAFETY: per-CPU value of this CPU.
        site_add(unsafe { &mut *stats }, elapsed, Some(work));
    }
}

#[inline(always)]
fn on_gve_create_exit(pool: u64) {
    let Some(f) = close_frame(site::GVE_CREATE) else {
        return;
    };
    // Error pointers (-4095..-1) are not pools.
    if pool == 0 || pool > u64::MAX - 4096 {
        return;
    }
    if let Some(queue) = gve_queue_of_rx(f.netmem) {
        let _ = GVE_POOL_QUEUE.insert(pool, queue, 0);
    }
}

// ---- kprobe / kretprobe -------------------------------------------------------------------

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

#[kprobe]
pub fn pp_alloc(ctx: ProbeContext) -> u32 {
    on_alloc(arg(&ctx, 0));
    0
}

#[kprobe]
pub fn pp_alloc_frag(ctx: ProbeContext) -> u32 {
    on_alloc_frag(arg(&ctx, 0));
    0
}

#[kprobe]
pub fn pp_refill_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::REFILL, arg(&ctx, 0), 0, false);
    0
}

#[kretprobe]
pub fn pp_refill_exit(ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::REFILL) {
        on_refill_exit(f.pool, ctx.ret::<u64>());
    }
    0
}

#[kprobe]
pub fn pp_slow_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::SLOW, arg(&ctx, 0), 0, true);
    0
}

#[kretprobe]
pub fn pp_slow_exit(_ctx: RetProbeContext) -> u32 {
    on_slow_exit();
    0
}

#[kprobe]
pub fn pp_mp_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::PROVIDER_ALLOC, arg(&ctx, 0), 0, true);
    0
}

#[kretprobe]
pub fn pp_mp_exit(_ctx: RetProbeContext) -> u32 {
    on_provider_alloc_exit();
    0
}

#[kprobe]
pub fn pp_put_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::PUT, arg(&ctx, 0), arg(&ctx, 1), false);
    0
}

#[kretprobe]
pub fn pp_put_exit(_ctx: RetProbeContext) -> u32 {
    if let Some(f) = close_frame(site::PUT) {
        on_put_exit(f.pool, f.netmem, f.released != 0);
    }
    0
}

/// `page_pool_put_page_bulk(pool, data, count)` (kernels before 6.14).
#[kprobe]
pub fn pp_bulk_entry_pool(ctx: ProbeContext) -> u32 {
    bulk_entry(arg(&ctx, 0), arg(&ctx, 2) & 0xffff_ffff);
    0
}

/// `page_pool_put_netmem_bulk(data, count)`.
#[kprobe]
pub fn pp_bulk_entry(ctx: ProbeContext) -> u32 {
    bulk_entry(bulk_pool(arg(&ctx, 0)), arg(&ctx, 1) & 0xffff_ffff);
    0
}

#[kretprobe]
pub fn pp_bulk_exit(_ctx: RetProbeContext) -> u32 {
    on_bulk_exit();
    0
}

#[kprobe]
pub fn pp_hold(ctx: ProbeContext) -> u32 {
    on_hold(arg(&ctx, 0));
    0
}

#[kprobe]
pub fn pp_release(ctx: ProbeContext) -> u32 {
    on_release(arg(&ctx, 0));
    0
}

#[kprobe]
pub fn pp_return_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::PAGE_RETURN, 0, 0, true);
    0
}

#[kretprobe]
pub fn pp_return_exit(_ctx: RetProbeContext) -> u32 {
    on_site_exit(site::PAGE_RETURN, site_stat::PAGE_RETURN, None);
    0
}

#[kprobe]
pub fn dm_dontneed_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::DONTNEED, 0, 0, true);
    0
}

#[kretprobe]
pub fn dm_dontneed_exit(ctx: RetProbeContext) -> u32 {
    on_site_exit(
        site::DONTNEED,
        site_stat::DONTNEED,
        Some(ctx.ret::<i32>() as i64),
    );
    0
}

#[kprobe]
pub fn dm_free_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::DEVMEM_FREE, 0, 0, true);
    0
}

#[kretprobe]
pub fn dm_free_exit(_ctx: RetProbeContext) -> u32 {
    on_site_exit(site::DEVMEM_FREE, site_stat::DEVMEM_FREE, None);
    0
}

#[kprobe]
pub fn gve_alloc_entry(_ctx: ProbeContext) -> u32 {
    open_frame(site::GVE_ALLOC, 0, 0, true);
    0
}

#[kretprobe]
pub fn gve_alloc_exit(ctx: RetProbeContext) -> u32 {
    on_site_exit(
        site::GVE_ALLOC,
        site_stat::GVE_ALLOC,
        Some(ctx.ret::<i32>() as i64).filter(|v| *v < 0),
    );
    0
}

/// `gve_rx_poll_dqo(block, budget)`: the queue is `block->rx->q_num`.
#[kprobe]
pub fn gve_poll_entry(ctx: ProbeContext) -> u32 {
    let o = config().offsets;
    let rx = read_field::<u64>(arg(&ctx, 0), o.gve_block_rx).unwrap_or(0);
    let queue = gve_queue_of_rx(rx).unwrap_or(u32::MAX);
    open_frame(site::GVE_POLL, queue as u64, 0, true);
    0
}

#[kretprobe]
pub fn gve_poll_exit(ctx: RetProbeContext) -> u32 {
    on_gve_poll_exit(ctx.ret::<i32>() as i64);
    0
}

/// `gve_rx_create_page_pool(priv, rx, ...)` returns the pool of queue `rx->q_num`.
#[kprobe]
pub fn gve_create_entry(ctx: ProbeContext) -> u32 {
    open_frame(site::GVE_CREATE, 0, arg(&ctx, 1), false);
    0
}

#[kretprobe]
pub fn gve_create_exit(ctx: RetProbeContext) -> u32 {
    on_gve_create_exit(ctx.ret::<u64>());
    0
}

// ---- fentry / fexit (BTF trampolines: cheaper, and fexit sees arguments and return) --------

#[fentry]
pub fn fe_alloc(ctx: FEntryContext) -> u32 {
    on_alloc(ctx.arg::<u64>(0));
    0
}

/// A second instance for an alloc wrapper that carries its own copy (one target per fentry).
#[fentry]
pub fn fe_alloc_wrapper(ctx: FEntryContext) -> u32 {
    on_alloc(ctx.arg::<u64>(0));
    0
}

#[fentry]
pub fn fe_alloc_frag(ctx: FEntryContext) -> u32 {
    on_alloc_frag(ctx.arg::<u64>(0));
    0
}

#[fexit]
pub fn fx_refill(ctx: FExitContext) -> u32 {
    on_refill_exit(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

#[fentry]
pub fn fe_slow_entry(ctx: FEntryContext) -> u32 {
    open_frame(site::SLOW, ctx.arg::<u64>(0), 0, true);
    0
}

#[fexit]
pub fn fx_slow_exit(_ctx: FExitContext) -> u32 {
    on_slow_exit();
    0
}

#[fentry]
pub fn fe_mp_entry(ctx: FEntryContext) -> u32 {
    open_frame(site::PROVIDER_ALLOC, ctx.arg::<u64>(0), 0, true);
    0
}

#[fexit]
pub fn fx_mp_exit(_ctx: FExitContext) -> u32 {
    on_provider_alloc_exit();
    0
}

#[fentry]
pub fn fe_mp_entry_2(ctx: FEntryContext) -> u32 {
    open_frame(site::PROVIDER_ALLOC, ctx.arg::<u64>(0), 0, true);
    0
}

#[fexit]
pub fn fx_mp_exit_2(_ctx: FExitContext) -> u32 {
    on_provider_alloc_exit();
    0
}

#[fentry]
pub fn fe_put_entry(ctx: FEntryContext) -> u32 {
    open_frame(site::PUT, ctx.arg::<u64>(0), ctx.arg::<u64>(1), false);
    0
}

#[fexit]
pub fn fx_put_exit(ctx: FExitContext) -> u32 {
    // fexit has the arguments: only "released meanwhile" comes from the frame.
    let released = close_frame(site::PUT).is_some_and(|f| f.released != 0);
    on_put_exit(ctx.arg::<u64>(0), ctx.arg::<u64>(1), released);
    0
}

#[fentry]
pub fn fe_bulk_entry_pool(ctx: FEntryContext) -> u32 {
    bulk_entry(ctx.arg::<u64>(0), ctx.arg::<u64>(2) & 0xffff_ffff);
    0
}

#[fentry]
pub fn fe_bulk_entry(ctx: FEntryContext) -> u32 {
    bulk_entry(
        bulk_pool(ctx.arg::<u64>(0)),
        ctx.arg::<u64>(1) & 0xffff_ffff,
    );
    0
}

#[fexit]
pub fn fx_bulk_exit(_ctx: FExitContext) -> u32 {
    on_bulk_exit();
    0
}

#[fentry]
pub fn fe_hold(ctx: FEntryContext) -> u32 {
    on_hold(ctx.arg::<u64>(0));
    0
}

#[fentry]
pub fn fe_release(ctx: FEntryContext) -> u32 {
    on_release(ctx.arg::<u64>(0));
    0
}

#[fentry]
pub fn fe_return_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::PAGE_RETURN, 0, 0, true);
    0
}

#[fexit]
pub fn fx_return_exit(_ctx: FExitContext) -> u32 {
    on_site_exit(site::PAGE_RETURN, site_stat::PAGE_RETURN, None);
    0
}

#[fentry]
pub fn fe_dontneed_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::DONTNEED, 0, 0, true);
    0
}

/// `sock_devmem_dontneed(sk, optval, optlen)` returns the frags freed. `sockptr_t optval` is
/// a 16-byte struct passed in two argument slots, so the return value is not `arg(3)`: ask
/// the kernel for it (`bpf_get_func_ret`).
#[fexit]
pub fn fx_dontneed_exit(ctx: FExitContext) -> u32 {
    let ret = ctx.ret::<i64>().map(|r| r as i32 as i64).ok();
    on_site_exit(site::DONTNEED, site_stat::DONTNEED, ret);
    0
}

#[fentry]
pub fn fe_devmem_free_entry(_ctx: FEntryContext) -> u32 {
    open_frame(site::DEVMEM_FREE, 0, 0, true);
    0
}

#[fexit]
pub fn fx_devmem_free_exit(_ctx: FExitContext) -> u32 {
    on_site_exit(site::DEVMEM_FREE, site_stat::DEVMEM_FREE, None);
    0
}

// ---- tracepoints (raw: the pool is argument 0 in every kernel's TP_PROTO) ----------------

#[raw_tracepoint(tracepoint = "page_pool_state_hold")]
pub fn tp_state_hold(ctx: RawTracePointContext) -> i32 {
    on_hold(ctx.arg::<u64>(0));
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_release")]
pub fn tp_state_release(ctx: RawTracePointContext) -> i32 {
    on_release(ctx.arg::<u64>(0));
    0
}

// ---- around the pool: NAPI work and drops ----------------------------------------------

#[inline(always)]
fn device_identity(netdev: u64, napi: u64) -> DeviceIdentity {
    let o = config().offsets;
    DeviceIdentity {
        ifindex: read_field::<u32>(netdev, o.netdev_ifindex).unwrap_or(0),
        napi_id: read_field::<u32>(napi, o.napi_id).unwrap_or(0),
        netdev,
        ifname: read_field::<[u8; 16]>(netdev, o.netdev_name).unwrap_or([0; 16]),
    }
}

/// `napi:napi_poll(napi, work, budget)`: how much of its budget each poll used.
#[raw_tracepoint(tracepoint = "napi_poll")]
pub fn tp_napi_poll(ctx: RawTracePointContext) -> i32 {
    let napi = ctx.arg::<u64>(0);
    let work = ctx.arg::<u64>(1) as i32;
    let budget = ctx.arg::<u64>(2) as i32;
    if napi == 0 {
        return 0;
    }
    if NAPI_COUNTERS.get_ptr_mut(napi).is_none() {
        // SAFETY: read-only lookup of an identity record.
        if unsafe { NAPI_IDENTITY.get(napi) }.is_none() {
            let netdev = read_field::<u64>(napi, config().offsets.napi_dev).unwrap_or(0);
            let _ = NAPI_IDENTITY.insert(napi, device_identity(netdev, napi), 0);
        }
        let _ = NAPI_COUNTERS.insert(napi, NapiCounters::default(), 0);
    }
    if let Some(c) = NAPI_COUNTERS.get_ptr_mut(napi) {
        // SAFETY: per-CPU value of this CPU.
        let c = unsafe { &mut *c };
        c.polls += 1;
        c.work += work.max(0) as u64;
        c.budget += budget.max(0) as u64;
        if work >= budget && budget > 0 {
            c.full_budget += 1;
        }
    }
    0
}

/// `skb:kfree_skb(skb, location, reason, ...)`: a packet dropped, and why.
#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn tp_kfree_skb(ctx: RawTracePointContext) -> i32 {
    let cfg = config();
    let reason = ctx.arg::<u64>(2) as u32;
    if reason == cfg.skb_consumed_reason {
        return 0;
    }
    let netdev = read_field::<u64>(ctx.arg::<u64>(0), cfg.offsets.skb_dev).unwrap_or(0);
    let key = DropKey {
        netdev,
        reason,
        _pad: 0,
    };
    if let Some(n) = DROPS.get_ptr_mut(key) {
        // SAFETY: per-CPU value of this CPU.
        unsafe { *n += 1 };
        return 0;
    }
    if netdev != 0 {
        // SAFETY: read-only lookup of an identity record.
        if unsafe { DROP_DEVICES.get(netdev) }.is_none() {
            let _ = DROP_DEVICES.insert(netdev, device_identity(netdev, 0), 0);
        }
    }
    let _ = DROPS.insert(key, 1u64, 0);
    0
}

// ---- benchmark floors ---------------------------------------------------------------------
//
// Empty programs on the same hot hooks as ppscope's (one per backend). They do nothing on
// purpose: their BPF run time per call is the floor of that backend on that hook (the cost of
// entering and leaving a program, stats accounting included), which `cargo xtask bench`
// compares ppscope's bodies against. Only the bench helper (`xtask/src/bin/bench-probe.rs`)
// loads them; the product's attach plan never names them.

#[fentry]
pub fn bench_fe_alloc(_ctx: FEntryContext) -> u32 {
    0
}

#[fentry]
pub fn bench_fe_frag(_ctx: FEntryContext) -> u32 {
    0
}

#[fentry]
pub fn bench_fe_put(_ctx: FEntryContext) -> u32 {
    0
}

#[fexit]
pub fn bench_fx_put(_ctx: FExitContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_alloc(_ctx: ProbeContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_frag(_ctx: ProbeContext) -> u32 {
    0
}

#[kprobe]
pub fn bench_kp_put(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn bench_krp_put(_ctx: RetProbeContext) -> u32 {
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_hold")]
pub fn bench_tp_hold(_ctx: RawTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "page_pool_state_release")]
pub fn bench_tp_release(_ctx: RawTracePointContext) -> i32 {
    0
}

// ---- lab helper ---------------------------------------------------------------------------

/// Passes every packet: attached to a veth it makes the kernel give that veth page_pools
/// (veth only runs its NAPI + page_pool receive path with an XDP program). Used by the lab
/// and the tests, never by the probes.
#[xdp]
pub fn xdp_pass(_ctx: XdpContext) -> u32 {
    aya_ebpf::bindings::xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

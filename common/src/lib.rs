//! Types shared by the eBPF programs (`ebpf/`) and userspace (`agent/`).
//!
//! Everything here is `#[repr(C)]`, plain old data, and free of `std`: the eBPF crate builds it
//! for `bpfel-unknown-none`. Field order is part of the contract between the two sides; the
//! object is always built from the same checkout as the agent, so there is no versioning.
#![cfg_attr(not(test), no_std)]

/// Number of log2 latency buckets: bucket `i` holds durations `d` with `2^i <= d < 2^(i+1)` ns
/// (bucket 0 also holds 0 ns); the last bucket also holds everything larger (≥ 2^31 ns ≈ 2.1 s).
pub const LATENCY_BUCKETS: usize = 32;

/// The log2 bucket of `v` (see [`LATENCY_BUCKETS`]): ⌊log2 v⌋, 0 for 0 and 1, the last bucket
/// for anything larger. Counted from the leading zeros, with no branch but the clamp: the
/// programs index their histograms with it, and a loop of compares made the verifier walk
/// everything after it once per bucket the index could be (an array index is a value it
/// tracks exactly), the larger part of the instructions it walked for a hook at start-up.
pub const fn log2_bucket(v: u64) -> usize {
    let b = 63 - (v | 1).leading_zeros() as usize;
    if b < LATENCY_BUCKETS {
        b
    } else {
        LATENCY_BUCKETS - 1
    }
}

/// Pools tracked at once unless `--map-capacity` says otherwise (LRU maps: the least
/// recently seen pool is evicted). The agent sets every pool-keyed map to the capacity.
pub const MAX_POOLS: u32 = 4096;

/// A field offset the agent could not resolve from BTF. The programs skip reading such a field.
pub const OFFSET_UNKNOWN: u32 = u32::MAX;

/// Offsets into kernel structures, resolved by the agent from the running kernel's BTF and
/// passed to the programs as the global `PPSCOPE_CONFIG` before load (Rust eBPF has no CO-RE).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `struct page_pool`: `alloc.count` (u32).
    pub pool_alloc_count: u32,
    /// `struct page_pool`: `alloc.cache` (array of netmem_ref / page pointers).
    pub pool_alloc_cache: u32,
    /// `struct page_pool`: `slow.netdev` or, on older kernels, `p.netdev` (pointer).
    pub pool_netdev: u32,
    /// `struct page_pool`: `p.napi` (pointer): the device of pools created without a netdev
    /// (veth) is found through their NAPI instance.
    pub pool_napi: u32,
    /// `struct napi_struct`: `dev` (pointer to the net_device).
    pub napi_dev: u32,
    /// `struct page_pool`: `p.dev` (the `struct device *` used for DMA). veth passes the
    /// device embedded in its net_device; drivers of real hardware pass their bus device.
    pub pool_dev: u32,
    /// `struct page_pool`: `destroy_cnt` (u64), non-zero once the pool's destruction began.
    /// A destroyed pool can outlive the device its `p.dev` names (the pool takes no reference
    /// on it without DMA mapping, as veth's), so that pointer is not followed then.
    pub pool_destroy_cnt: u32,
    /// `struct net_device`: `dev` (the embedded `struct device`), for container_of.
    pub netdev_dev: u32,
    /// `struct device`: `class` (pointer), and `struct class`: `name` (pointer): a device
    /// whose class is named "net" is embedded in a net_device.
    pub device_class: u32,
    pub class_name: u32,
    /// `struct page_pool`: `slow.queue_idx` or `p.queue_idx` (u32).
    pub pool_queue_idx: u32,
    /// `struct page_pool`: `p.pool_size` (u32).
    pub pool_size: u32,
    /// `struct page_pool`: `ring.size` (int).
    pub pool_ring_size: u32,
    /// `struct page_pool`: `user.id` (u32, the netlink page-pool id).
    pub pool_user_id: u32,
    /// `struct page_pool`: `p.order` (u32).
    pub pool_order: u32,
    /// `struct page_pool`: `mp_ops` (≥ 6.15) or `mp_priv` (pointer, non-null = memory provider).
    pub pool_mp: u32,
    /// `struct net_device`: `ifindex` (int).
    pub netdev_ifindex: u32,
    /// `struct net_device`: `name` (`char[16]`).
    pub netdev_name: u32,
    /// `struct page` / `struct net_iov`: `pp` (the owning pool), for bulk frees without a pool arg.
    pub page_pp: u32,
    /// `struct page_pool`: `ring.producer`, `ring.consumer_head` (int), `ring.queue` (void **).
    pub pool_ring_producer: u32,
    pub pool_ring_consumer_head: u32,
    pub pool_ring_queue: u32,
    /// `struct page_pool`: `pages_state_hold_cnt` (u32), `pages_state_release_cnt` (atomic_t).
    pub pool_hold_cnt: u32,
    pub pool_release_cnt: u32,
    /// The driver of a net_device: `net_device.dev` → `device.parent` → `device.driver` →
    /// `device_driver.name` (a bus driver: virtio_net, gve, mlx5_core), else
    /// `net_device.rtnl_link_ops` → `rtnl_link_ops.kind` (a software device: veth).
    pub device_parent: u32,
    pub device_driver: u32,
    pub driver_name: u32,
    pub netdev_link_ops: u32,
    pub link_ops_kind: u32,
    /// `struct napi_struct`: `napi_id` (u32).
    pub napi_id: u32,
    /// `struct sk_buff`: `dev` (pointer).
    pub skb_dev: u32,
    /// gve (module BTF): `struct gve_rx_ring`: `q_num`; `struct gve_notify_block`: `rx`.
    pub gve_rx_q_num: u32,
    pub gve_block_rx: u32,
}

impl KernelOffsets {
    pub const UNKNOWN: Self = Self {
        pool_alloc_count: OFFSET_UNKNOWN,
        pool_alloc_cache: OFFSET_UNKNOWN,
        pool_netdev: OFFSET_UNKNOWN,
        pool_napi: OFFSET_UNKNOWN,
        napi_dev: OFFSET_UNKNOWN,
        pool_dev: OFFSET_UNKNOWN,
        pool_destroy_cnt: OFFSET_UNKNOWN,
        netdev_dev: OFFSET_UNKNOWN,
        device_class: OFFSET_UNKNOWN,
        class_name: OFFSET_UNKNOWN,
        pool_queue_idx: OFFSET_UNKNOWN,
        pool_size: OFFSET_UNKNOWN,
        pool_ring_size: OFFSET_UNKNOWN,
        pool_user_id: OFFSET_UNKNOWN,
        pool_order: OFFSET_UNKNOWN,
        pool_mp: OFFSET_UNKNOWN,
        netdev_ifindex: OFFSET_UNKNOWN,
        netdev_name: OFFSET_UNKNOWN,
        page_pp: OFFSET_UNKNOWN,
        pool_ring_producer: OFFSET_UNKNOWN,
        pool_ring_consumer_head: OFFSET_UNKNOWN,
        pool_ring_queue: OFFSET_UNKNOWN,
        pool_hold_cnt: OFFSET_UNKNOWN,
        pool_release_cnt: OFFSET_UNKNOWN,
        device_parent: OFFSET_UNKNOWN,
        device_driver: OFFSET_UNKNOWN,
        driver_name: OFFSET_UNKNOWN,
        netdev_link_ops: OFFSET_UNKNOWN,
        link_ops_kind: OFFSET_UNKNOWN,
        napi_id: OFFSET_UNKNOWN,
        skb_dev: OFFSET_UNKNOWN,
        gve_rx_q_num: OFFSET_UNKNOWN,
        gve_block_rx: OFFSET_UNKNOWN,
    };
}

/// The global configuration handed to the programs at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    pub offsets: KernelOffsets,
    /// Only count pools whose netdev has this ifindex (0 = all pools).
    pub only_ifindex: u32,
    /// `SKB_CONSUMED` in `enum skb_drop_reason` (a normal free, not a drop); u32::MAX unknown.
    pub skb_consumed_reason: u32,
    /// What `bpf_rdonly_cast` casts to (see [`CastTypes`]).
    pub cast: CastTypes,
    /// Whether `page_release` tells the recycle hooks of each page that left inside their call:
    /// the mark a single recycle takes (`ReleaseMark`) and the count in a bulk recycle's
    /// frame, two per-CPU lookups on a program that runs per page in a ring-full churn. 0
    /// where the run's flags leave no recycle hook a backend (`--detail light`,
    /// `--backend tracepoint`; the agent's `hooks::recycles_fed`). This struct is read-only
    /// data fixed before load, which the verifier reads as constants, so it drops the code a
    /// 0 leaves out (a map value such as `ReleaseMark::on` prunes nothing). 1, the default,
    /// keeps it; the marks then still wait for `ReleaseMark::on`, set once a single recycle
    /// attached and `page_release` is on its tracepoint.
    pub feed_recycles: u32,
}

/// The kernel's BTF ids of the types the programs cast untyped kernel pointers to with the
/// `bpf_rdonly_cast` kfunc (Linux 6.2+): a field of the object is then one load the kernel
/// makes fault-safe, where `bpf_probe_read_kernel` is a helper call (the largest part of a
/// recycle's cost in the VM lab). 0: not cast (the kernel lacks the kfunc, or its BTF the
/// type): read through the helper. The agent sets them only after rewriting the object's
/// marked calls (see [`RDONLY_CAST_MARKER`]) into calls of the kfunc.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CastTypes {
    /// `struct page_pool`.
    pub page_pool: u32,
    /// `struct page` (a netmem's `pp` is read through it, as the kernel reads a net_iov's).
    pub page: u32,
}

impl CastTypes {
    pub const NONE: Self = Self {
        page_pool: 0,
        page: 0,
    };
}

/// The immediate of the BPF helper call that stands for `bpf_rdonly_cast` in the eBPF object.
/// Neither aya nor bpf-linker relocates kfunc calls, so the programs call this (no helper has
/// this number) and the agent rewrites each such call before load: into a call of the kfunc by
/// its BTF id in the running kernel, or into `r0 = r1` where the kernel lacks it (the code
/// that would use the cast is then dead to the verifier: [`CastTypes`] are 0).
pub const RDONLY_CAST_MARKER: i32 = 0x7ead_ca57;

impl ProbeConfig {
    pub const DEFAULT: Self = Self {
        offsets: KernelOffsets::UNKNOWN,
        only_ifindex: 0,
        skb_consumed_reason: u32::MAX,
        cast: CastTypes::NONE,
        feed_recycles: 1,
    };
}

/// Per-pool, per-CPU counters of the hot paths, keyed by the kernel address of the
/// `struct page_pool`: small, so that a per-CPU map of thousands of pools stays small on
/// hosts with many CPUs. Raw event counts: the agent's model turns them into the
/// cache/ring/slow and cached/ring/ring_full splits (see `agent/src/model/pools.rs`).
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolHot {
    /// The [`HotSlot::seq`] of the last slot occupancy of this pool on this CPU folded in
    /// here (0: none yet). Written first-field-last and last-field-first around a fold (see
    /// [`HotSlot`]): a copy whose `fold_head` and `fold_tail` differ raced a fold.
    pub fold_head: u64,
    /// Calls of the page allocation entry (`page_pool_alloc_netmems` or its older names).
    pub alloc_calls: u64,
    /// Calls of the fragment allocator (`page_pool_alloc_frag_netmem`): not allocations by
    /// themselves, shown apart so nobody divides by them.
    pub frag_calls: u64,
    /// Calls of `page_pool_refill_alloc_cache` (the alloc cache was empty).
    pub refill_calls: u64,
    /// Refills that found the ptr_ring empty (returned nothing): a ring miss.
    pub refill_empty: u64,
    /// Pages moved from the ring into the alloc cache by refills (including the one returned).
    pub refill_pages: u64,
    /// Calls of the slow path (page allocator, 64 pages at a time).
    pub slow_calls: u64,
    /// Sum of slow-path durations in ns.
    pub slow_ns_sum: u64,
    /// Calls of a memory provider's alloc (devmem, io_uring zcrx) instead of the slow path.
    pub mp_alloc_calls: u64,
    /// Calls of the single-page recycle entry (`page_pool_put_unrefed_netmem`).
    pub put_calls: u64,
    /// Of those, pages that ended in the alloc cache (direct recycling).
    pub put_cached: u64,
    /// Of those, pages that left the pool instead (ring full, or not recyclable).
    pub put_released: u64,
    /// Calls of the bulk recycle entry.
    pub bulk_calls: u64,
    /// Pages handed to the bulk recycle entry.
    pub bulk_pages: u64,
    /// Pages that left the pool during a bulk recycle (ring full).
    pub bulk_released: u64,
    /// Pages entering the pool from the page allocator or provider (`page_pool_state_hold`).
    pub hold_pages: u64,
    /// Pages leaving the pool (`page_pool_state_release`): ring full, unrecyclable or teardown.
    pub release_pages: u64,
    /// Of those, pages released into a full ring whose fill was counted here instead of
    /// filed in the pool's `PoolRare::release_fill_hist` (see [`HotSlot::release_full`]).
    pub release_full: u64,
    /// Sum of memory-provider allocation durations in ns (calls are `mp_alloc_calls`).
    pub mp_ns_sum: u64,
    /// The ring-full run in progress on this CPU, counted here only while the CPU's
    /// [`HotSlot`] was being switched (nested programs); the slot holds the run otherwise.
    pub full_run: u64,
    /// The empty-ring run of this pool on this CPU parked here while the slot holds another
    /// pool (the slot takes it up again with the pool).
    pub empty_run: u64,
    /// This pool's events on this CPU that pace its device check (see
    /// [`HotSlot::paced_events`]), parked here while the slot holds another pool. Not a
    /// count the agent reads.
    pub paced_events: u64,
    /// When this pool's device was last checked on this CPU (see
    /// [`HotSlot::device_checked_ns`]), parked here with `paced_events`.
    pub device_checked_ns: u64,
    /// The weight of this pool's next filed refill fill on this CPU (see
    /// [`HotSlot::fill_weight`]), parked here with `paced_events`. Not a count the agent
    /// reads.
    pub fill_weight: u64,
    /// Equal to `fold_head` when no fold is in progress.
    pub fold_tail: u64,
}

/// The per-page counts of the pool this CPU saw last of those sharing a slot
/// ([`HotSlot::index`]): allocations, fragment allocations, recycles, pages in and out,
/// refills, in a per-CPU array: an array lookup the verifier inlines, instead of a hash
/// lookup per page. NAPI keeps a queue's pool on one CPU, so a slot changes pools rarely;
/// when it does, its counts are folded into the old pool's [`PoolHot`] and the slot starts
/// again for the new one.
///
/// A reader copies the slot while a fold may be changing it, so the fold is bracketed: it
/// makes `seq_end` odd first, changes the counts and the pool, then writes the new `seq`
/// (the occupancy's number, 2, 4, …) and finally `seq_end`. A copy taken in field order
/// whose `seq` and `seq_end` are equal and even is one whole state (stores and loads keep
/// their order on x86; the kernel copies map values forward, word by word).
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotSlot {
    pub seq: u64,
    /// The pool whose counts these are (0: none yet).
    pub pool: u64,
    pub alloc_calls: u64,
    pub frag_calls: u64,
    pub put_calls: u64,
    pub put_cached: u64,
    pub put_released: u64,
    /// The ring-full run of this pool in progress on this CPU (a switch ends it).
    pub full_run: u64,
    pub hold_pages: u64,
    pub release_pages: u64,
    /// Releases that found the ring full to its producers (its next slot taken), counted here
    /// instead of filed in the pool's `PoolRare::release_fill_hist`: a ring-full churn
    /// releases every page it recycles, and the filing (the pool's record looked up, an
    /// atomic add) was more than half of the release program's time on the development host
    /// (`xtask/src/bench/report.rs`). Their fill is the ring's size, which the agent's model
    /// adds to the fill distribution (`PoolCounters::release_full`). The first release of a
    /// slot occupancy and every 64th after are filed as before, which keeps the ring's state
    /// in `PoolRare::state` fresh.
    pub release_full: u64,
    /// Refills (`--detail light` counts these per CPU too: they are its most frequent event
    /// after NAPI polls).
    pub refill_calls: u64,
    pub refill_empty: u64,
    pub refill_pages: u64,
    /// The empty-ring run of this pool in progress on this CPU (parked in the pool's entry
    /// while the slot holds another pool).
    pub empty_run: u64,
    /// Refills (eight each) and pages entering the pool on this CPU: at the first and at every
    /// multiple of 64 crossed, the pool's device check is considered, and made when a second
    /// has passed since the last (`device_checked_ns`; ebpf `Hot::device_check_due`).
    /// It goes with the pool (parked in its entry at a switch, taken up again with it): when
    /// it started again at every switch, a CPU whose NAPIs served two pools in turn checked
    /// at nearly every switch, and the check was two fifths of the refill program's time in
    /// the VM lab (BENCHMARKS.md). Not a count the agent reads.
    pub paced_events: u64,
    /// When the pool's device was last checked on this CPU (`bpf_ktime_get_ns`; 0: never):
    /// the check is made at most once a second per pool and CPU, whatever the event rate.
    /// Goes with the pool like `paced_events`. Not a figure the agent reads.
    pub device_checked_ns: u64,
    /// The weight a filing of the ring's fill at the pool's next refill that takes pages would
    /// carry: one more than such refills since the last filing on this CPU (0: none filed
    /// yet). A refill that takes pages reads the ring and files its fill in the pool's record
    /// at the first, at every 8th after, and when it ends a run of empty refills, with this
    /// weight: the distribution keeps the refills' share of it, from an eighth of the reads
    /// (ebpf `hooks::refill`). An empty refill files its own. The record's lookup and the
    /// ring's reads at every refill were most of the refill program's time, the largest of
    /// `--detail light` (BENCHMARKS.md). Goes with the pool like `paced_events`, so pools
    /// taking turns on a CPU are each sampled. Not a count the agent reads.
    pub fill_weight: u64,
    /// Events of other pools seen while the slot held this one (not a count of any pool: it
    /// paces how often the slot changes hands).
    pub misses: u64,
    pub seq_end: u64,
}

/// Slots per CPU in `HOT_SLOT`. A CPU's NAPIs serve a few pools in turn (a NIC's queue and
/// the one its acknowledgements come back on, a veth): with one slot, their refills (one in
/// up to 64 pages, so mostly the first event of a pool in a poll) found it held by the other
/// pool nearly every time, and paid the hash lookup and every 8th a fold (BENCHMARKS.md).
pub const HOT_SLOTS: u32 = 4;
// `HotSlot::index` takes the slot from the hash's top bits: a power of two, and more than one.
const _: () = assert!(HOT_SLOTS.is_power_of_two() && HOT_SLOTS > 1);

impl HotSlot {
    /// The slot of `pool` on every CPU (kernel and agent must agree). Pools are kmalloc'ed
    /// objects, aligned to their size class, so the low bits say nothing: a multiplicative
    /// hash takes the slot from the product's top bits, which every address bit below them
    /// moves. Of the low 32 bits only: a typed program's pool is a pointer to the verifier,
    /// which refuses arithmetic on it but takes its 32-bit copy as a number.
    pub fn index(pool: u64) -> u32 {
        Self::index_of_low_bits(pool as u32)
    }

    /// [`HotSlot::index`] from the address's low 32 bits (what a program has of a typed
    /// pointer: ebpf `kmem::address_low_bits`).
    pub fn index_of_low_bits(low: u32) -> u32 {
        low.wrapping_mul(0x9E37_79B9) >> (32 - HOT_SLOTS.trailing_zeros())
    }

    /// A copy of one whole state (not one taken while a fold was changing it).
    pub fn settled(&self) -> bool {
        self.seq == self.seq_end && self.seq.is_multiple_of(2)
    }
}

/// What a pool's rare events (refill, slow path, page release) leave behind: the ring's state
/// at the last one and the histograms, shared by all CPUs: one copy per pool, not one per CPU,
/// and one map lookup per event for all of it.
///
/// Who adds to a histogram decides how. The allocation side (refill, slow path) runs in one
/// context per pool at a time, the pool's NAPI, as the kernel's own `alloc_stats` assume (plain
/// increments): its histograms take plain adds. Pages are released and runs end on any CPU: those
/// histograms take atomic adds, and never share a word with a plain writer.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolRare {
    /// Ring fill and inflight pages at the last rare event filed here (`known` 0: never
    /// read). Of a churn's releases into a full ring, the first after a slot switch and one
    /// in 64 after are (`HotSlot::release_full`): under a churn the gauge lags the pool by
    /// up to 63 releases per CPU; of the refills that took pages, one in 8
    /// (`HotSlot::fill_weight`).
    pub state: PoolState,
    /// Slow-path duration histogram, log2 ns buckets (see [`LATENCY_BUCKETS`]). Allocation
    /// side: plain adds.
    pub slow_hist: [u64; LATENCY_BUCKETS],
    /// Burst profile, kept in the kernel. Runs of consecutive recycles that found the ring
    /// full (how far a burst overran the ring), log2 buckets of run length. Atomic adds.
    pub full_run_hist: [u64; LATENCY_BUCKETS],
    /// Runs of consecutive refills that found the ring empty (how far allocations drained it).
    /// Atomic adds: a run parked on one CPU may end on another's slot switch.
    pub empty_run_hist: [u64; LATENCY_BUCKETS],
    /// Ring fill at each slow path and empty refill, and at the refills that took pages one
    /// filing in 8 per CPU, weighted by the refills it stands for (`HotSlot::fill_weight`);
    /// log2 buckets of entries (bucket 0 also holds an empty ring). Allocation side: plain
    /// adds.
    pub fill_hist: [u64; LATENCY_BUCKETS],
    /// Ring fill at each page release, as `fill_hist`, but for the releases into a full ring
    /// counted in `PoolHot::release_full` instead. Atomic adds.
    pub release_fill_hist: [u64; LATENCY_BUCKETS],
}

/// Everything known of a pool's activity, summed over CPUs: what the agent's model reads.
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Calls of the page allocation entry (`page_pool_alloc_netmems` or its older names).
    pub alloc_calls: u64,
    /// Calls of the fragment allocator (`page_pool_alloc_frag_netmem`): not allocations by
    /// themselves, shown apart so nobody divides by them.
    pub frag_calls: u64,
    /// Calls of `page_pool_refill_alloc_cache` (the alloc cache was empty).
    pub refill_calls: u64,
    /// Refills that found the ptr_ring empty (returned nothing): a ring miss.
    pub refill_empty: u64,
    /// Pages moved from the ring into the alloc cache by refills (including the one returned).
    pub refill_pages: u64,
    /// Calls of the slow path (page allocator, 64 pages at a time).
    pub slow_calls: u64,
    /// Sum of slow-path durations in ns.
    pub slow_ns_sum: u64,
    /// Calls of a memory provider's alloc (devmem, io_uring zcrx) instead of the slow path.
    pub mp_alloc_calls: u64,
    /// Calls of the single-page recycle entry (`page_pool_put_unrefed_netmem`).
    pub put_calls: u64,
    /// Of those, pages that ended in the alloc cache (direct recycling).
    pub put_cached: u64,
    /// Of those, pages that left the pool instead (ring full, or not recyclable).
    pub put_released: u64,
    /// Calls of the bulk recycle entry.
    pub bulk_calls: u64,
    /// Pages handed to the bulk recycle entry.
    pub bulk_pages: u64,
    /// Pages that left the pool during a bulk recycle (ring full).
    pub bulk_released: u64,
    /// Pages entering the pool from the page allocator or provider (`page_pool_state_hold`).
    pub hold_pages: u64,
    /// Pages leaving the pool (`page_pool_state_release`): ring full, unrecyclable or teardown.
    pub release_pages: u64,
    /// Of those, releases into a ring full to its producers that the programs counted
    /// instead of filing their fill in `fill_hist` (`HotSlot::release_full`): their fill is
    /// the ring's size, which the model adds to the distribution (`model::pools`). A
    /// recording made before this count existed holds them in `fill_hist` (0 here).
    #[cfg_attr(feature = "user", serde(default))]
    pub release_full: u64,
    /// Sum of memory-provider allocation durations in ns (calls are `mp_alloc_calls`).
    pub mp_ns_sum: u64,
    /// The ring-full run in progress on this CPU.
    pub full_run: u64,
    pub empty_run: u64,
    /// Slow-path duration histogram, log2 ns buckets (see [`LATENCY_BUCKETS`]).
    pub slow_hist: [u64; LATENCY_BUCKETS],
    /// Burst profile, kept in the kernel. Runs of consecutive recycles that found the ring
    /// full (how far a burst overran the ring), log2 buckets of run length.
    pub full_run_hist: [u64; LATENCY_BUCKETS],
    /// Runs of consecutive refills that found the ring empty (how far allocations drained it).
    pub empty_run_hist: [u64; LATENCY_BUCKETS],
    /// Ring fill at each slow path, empty refill and filed release, and at refills that took
    /// pages weighted (`PoolRare::fill_hist`), log2 buckets of entries (bucket 0 also holds an
    /// empty ring); the releases only counted are `release_full`.
    pub fill_hist: [u64; LATENCY_BUCKETS],
}

/// Calls `$m! { field, field, ... }` (braces: `$m` may declare items) with every summed hot
/// counter of [`PoolHot`] (not the per-CPU runs in progress): one list for every place that
/// walks them.
#[macro_export]
macro_rules! hot_fields {
    ($m:ident) => {
        $m! {
            alloc_calls,
            frag_calls,
            refill_calls,
            refill_empty,
            refill_pages,
            slow_calls,
            slow_ns_sum,
            mp_alloc_calls,
            put_calls,
            put_cached,
            put_released,
            bulk_calls,
            bulk_pages,
            bulk_released,
            hold_pages,
            release_pages,
            release_full,
            mp_ns_sum
        }
    };
}

impl PoolCounters {
    pub fn set_hists(&mut self, h: &PoolRare) {
        self.slow_hist = h.slow_hist;
        self.full_run_hist = h.full_run_hist;
        self.empty_run_hist = h.empty_run_hist;
        // One distribution of the ring's fill at every rare event, whoever filed it.
        for (sum, (alloc_side, release)) in self
            .fill_hist
            .iter_mut()
            .zip(h.fill_hist.iter().zip(&h.release_fill_hist))
        {
            *sum = alloc_side.wrapping_add(*release);
        }
    }
}

/// Identity of a pool, read once from kernel memory when the pool is first seen.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolIdentity {
    /// Kernel address of the pool's net_device (0: none found); joins NAPI and drop records.
    pub netdev: u64,
    pub ifindex: u32,
    pub queue_idx: u32,
    pub pool_size: u32,
    pub ring_size: u32,
    pub netlink_id: u32,
    pub order: u32,
    /// 1 when a memory provider (devmem, io_uring zcrx) backs the pool.
    pub has_memory_provider: u32,
    /// Bit i set when field i (in the order above, then `ifname`) could be read.
    pub known: u32,
    pub ifname: [u8; 16],
    /// The device's driver (see `KernelOffsets::device_parent`), NUL-padded; empty if unknown.
    pub driver: [u8; 16],
}

impl PoolIdentity {
    pub const KNOWN_IFINDEX: u32 = 1 << 0;
    pub const KNOWN_QUEUE: u32 = 1 << 1;
    pub const KNOWN_POOL_SIZE: u32 = 1 << 2;
    pub const KNOWN_RING_SIZE: u32 = 1 << 3;
    pub const KNOWN_NETLINK_ID: u32 = 1 << 4;
    pub const KNOWN_ORDER: u32 = 1 << 5;
    pub const KNOWN_MEMORY_PROVIDER: u32 = 1 << 6;
    pub const KNOWN_IFNAME: u32 = 1 << 7;
    /// Not a known field: the pool at this address was destroyed (its last release attempt
    /// found no page out), so the next device check reads the whole identity again: a new
    /// pool born at the address on the same device has its own netlink id, sizes and queue.
    pub const FREED: u32 = 1 << 8;

    pub const EMPTY: Self = Self {
        netdev: 0,
        ifindex: 0,
        queue_idx: 0,
        pool_size: 0,
        ring_size: 0,
        netlink_id: 0,
        order: 0,
        has_memory_provider: 0,
        known: 0,
        ifname: [0; 16],
        driver: [0; 16],
    };
}

/// A pool's ring fill and inflight pages, read from kernel memory at its last refill, slow
/// path or page release (rare events: they are what make the state change that matters).
/// Kept in the pool's [`PoolRare`].
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolState {
    pub stamp_ns: u64,
    /// Entries in the ptr_ring; its size when it was full to its producers (its next slot
    /// taken: the consumer clears the slots it took in batches; see ebpf `RingSide`).
    pub ring_fill: u32,
    /// Pages held by the pool or its users: hold − release.
    pub inflight: u32,
    /// Bit 0: ring_fill read; bit 1: inflight read.
    pub known: u32,
    pub _pad: u32,
}

/// A pool being destroyed (`page_pool:page_pool_release`): the kernel tries to release it at
/// `page_pool_destroy` and again every second while pages are still out, so many attempts
/// mean pages that do not come back (a leak, or sockets holding them).
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolTeardown {
    /// Release attempts so far, of the pool now at this address.
    pub attempts: u64,
    /// Pages still out of the pool at the last attempt.
    pub inflight: i64,
    /// Pools at this address freed before this one (an attempt that found no page out freed
    /// one; the next attempt here is a new pool's first): a change says the attempts started
    /// again, not that they went backwards. Absent (0) in recordings made before it.
    #[cfg_attr(feature = "user", serde(default))]
    pub freed_before: u64,
}

/// NAPI polls of one NAPI instance (`napi:napi_poll`), per CPU.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NapiCounters {
    pub polls: u64,
    pub work: u64,
    /// Polls that used their whole budget (the softirq had more to do: a loop falling behind).
    pub full_budget: u64,
    pub budget: u64,
}

/// NAPI polls of one NAPI instance on one CPU, as the kernel side keeps them in
/// `NAPI_COUNTERS`: [`NapiCounters`] plus the fold bracket of [`NapiSlot`] (as [`PoolHot`]'s
/// for [`HotSlot`]). The agent folds the slots in and keeps only the counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NapiHot {
    /// The [`NapiSlot::seq`] of the last occupancy of this instance folded in here.
    pub fold_head: u64,
    pub counts: NapiCounters,
    /// Equal to `fold_head` when no fold is in progress.
    pub fold_tail: u64,
}

/// The NAPI counts of the instance this CPU polled last of those sharing a slot
/// ([`NapiSlot::index`]), in a per-CPU array: the poll hook counts here (an array lookup the
/// verifier inlines) and folds into the instance's [`NapiHot`] only when the slot goes to
/// another instance, bracketed as [`HotSlot`]'s fold is.
/// A CPU polls a few instances over and over, so switches are rare next to polls (an LRU hash
/// lookup per poll was most of `--detail light`'s cost: BENCHMARKS.md).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NapiSlot {
    pub seq: u64,
    /// The NAPI instance (`struct napi_struct *`) whose counts these are (0: none yet).
    pub napi: u64,
    pub counts: NapiCounters,
    /// Polls of other instances of this slot seen while it held this one (paces how often
    /// the slot changes hands).
    pub misses: u64,
    pub seq_end: u64,
}

/// Slots per CPU in `NAPI_SLOT`: a CPU polls several instances in turn (a NIC's rx and tx
/// queues, a veth, the backlog), so one slot thrashed; each instance has its slot by
/// [`NapiSlot::index`], and each slot folds on its own.
pub const NAPI_SLOTS: u32 = 4;

impl NapiSlot {
    /// The slot of `napi` on every CPU (kernel and agent must agree): bits above the
    /// allocation alignment, mixed.
    pub fn index(napi: u64) -> u32 {
        ((napi >> 6) ^ (napi >> 12) ^ (napi >> 18)) as u32 & (NAPI_SLOTS - 1)
    }

    /// A copy of one whole state (not one taken while a fold was changing it).
    pub fn settled(&self) -> bool {
        self.seq == self.seq_end && self.seq.is_multiple_of(2)
    }
}

/// Identity of a net_device seen by the NAPI or drop hooks.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub ifindex: u32,
    pub napi_id: u32,
    pub netdev: u64,
    pub ifname: [u8; 16],
}

/// A drop record key: device and `enum skb_drop_reason` value.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DropKey {
    pub netdev: u64,
    pub reason: u32,
    pub _pad: u32,
}

/// Call sites whose entry and exit are paired through a per-CPU frame.
pub mod site {
    pub const REFILL: u32 = 0;
    pub const SLOW: u32 = 1;
    pub const PUT: u32 = 2;
    pub const BULK: u32 = 3;
    pub const PROVIDER_ALLOC: u32 = 4;
    pub const DONTNEED: u32 = 5;
    pub const DEVMEM_FREE: u32 = 6;
    pub const GVE_ALLOC: u32 = 7;
    pub const GVE_POLL: u32 = 8;
    pub const GVE_CREATE: u32 = 9;
    pub const PAGE_RETURN: u32 = 10;
    pub const COUNT: u32 = 11;
}

/// Sites measured as a whole (not per pool) in `SITE_STATS`, indexed by these numbers.
pub mod site_stat {
    /// Memory-provider allocations (devmem gen_pool, io_uring zcrx): ns; value = 1 per call.
    pub const PROVIDER_ALLOC: u32 = 0;
    /// `sock_devmem_dontneed`: ns; value = frags freed (its return value).
    pub const DONTNEED: u32 = 1;
    /// A page leaving its pool (`page_pool_return_netmem`): unmap and free, or hand back to
    /// the memory provider.
    pub const PAGE_RETURN: u32 = 4;
    /// `net_devmem_free_dmabuf`: ns (the gen_pool walk of the seed case).
    pub const DEVMEM_FREE: u32 = 2;
    /// `gve_alloc_buffer`: ns.
    pub const GVE_ALLOC: u32 = 3;
    pub const COUNT: u32 = 5;
}

/// Calls, time and a second value (frags, work) of one site, with log2 histograms of both.
#[repr(C)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    pub calls: u64,
    pub ns_sum: u64,
    pub ns_hist: [u64; LATENCY_BUCKETS],
    /// Sum of the site's value (e.g. frags freed); negative returns (errors) are counted apart.
    pub value_sum: u64,
    pub value_hist: [u64; LATENCY_BUCKETS],
    pub errors: u64,
}

/// What an entry probe leaves for the matching exit probe on the same CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Frame {
    /// Who opened the frame; 0 when it is free. The entry's task (`bpf_get_current_pid_tgid()`
    /// with [`Frame::OPEN`] set), or for a kprobe pair that knows its call by the stack (the
    /// single recycle's) the stack pointer at the call (`frames::Owner` in `ebpf/`). An exit
    /// of another task or call (the caller migrated, or a nested call consumed the frame)
    /// finds no match and is not classified, rather than misattributed; one that finds the
    /// frame still open is counted in [`UnmatchedReturns`].
    pub owner: u64,
    pub pool: u64,
    pub netmem: u64,
    pub start_ns: u64,
    /// Pages released (left the pool) while this frame was open.
    pub released: u64,
}

impl Frame {
    /// Set in an open task frame's `owner`: a softirq on an idle CPU runs in the idle task,
    /// whose pid_tgid is 0, the free frame's mark: without the bit, a call entered there
    /// (a NAPI poll's recycles and bulk frees on a quiet host) was never taken back at its
    /// exit, and went uncounted. A tgid is below 2^22, so the bit is never a task's own.
    pub const OPEN: u64 = 1 << 63;
}

/// Per CPU: the page this CPU last saw leave a pool (`page_release`), for the single recycle
/// whose exit follows on the same CPU: the page it was handed left the pool if it is the one
/// marked and the pool took no page in since (`holds`: a page that left and came back into
/// the pool came through a hold; a mark it left then is an old one). The recycle otherwise
/// learns it by reading the page (a load through the cast, else a helper call). `on` is set by the agent once both
/// `recycle` and `page_release` (on its tracepoint, which fires for every page leaving) are
/// attached; until then no mark is made and the recycle reads the page.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReleaseMark {
    pub netmem: u64,
    pub pool: u64,
    /// The pool's `pages_state_hold_cnt` at the release.
    pub holds: u64,
    pub on: u64,
}

/// Per CPU, by `site::*`: returns of an entry/exit pair that found their site's frame open
/// but another call's (`Frame::owner`), so went uncounted. A few are expected (a task that
/// slept in the call and came back on another CPU); most of a site's returns would say the
/// pair cannot tell its own call on this kernel (the kprobe recycle's by the stack pointer:
/// a return handler that reports another than the one it was built for), which the agent
/// says aloud rather than showing a quiet host. Counted only on that path: a matched return
/// or a free frame adds nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UnmatchedReturns {
    pub by_site: [u64; site::COUNT as usize],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] structs of integers and integer arrays, with no
    // padding holes that could leak uninitialised bytes (checked by the size asserts in the
    // agent's tests), so any bit pattern is valid.
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PoolHot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HotSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NapiHot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NapiSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PoolRare {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PoolIdentity {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SiteStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NapiCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PoolState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PoolTeardown {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DeviceIdentity {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DropKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ReleaseMark {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UnmatchedReturns {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pools kmalloc'ed side by side, in any size class a `struct page_pool` may fall in,
    /// spread over every slot: none left idle, none holding more than twice its share.
    #[test]
    fn pools_side_by_side_spread_over_the_slots() {
        for base in [
            0xffff_8881_0000_0000u64,
            0xffff_8881_234a_5000,
            0xffff_9e3c_05c0_0000,
        ] {
            for size in [1024u64, 2048, 4096, 8192] {
                let mut per_slot = [0u32; HOT_SLOTS as usize];
                for i in 0..64 {
                    per_slot[HotSlot::index(base + i * size) as usize] += 1;
                }
                let share = 64 / HOT_SLOTS;
                assert!(
                    per_slot.iter().all(|n| *n > share / 2 && *n < share * 2),
                    "{base:#x} + i * {size}: {per_slot:?}"
                );
            }
        }
    }

    /// The buckets as the programs filled them before (a loop halving the shift), which the
    /// agent's percentiles read: the same for every value.
    fn by_halving(mut v: u64) -> usize {
        let mut b = 0usize;
        let mut shift = 32u32;
        while shift > 0 {
            if v >> shift != 0 {
                v >>= shift;
                b += shift as usize;
            }
            shift >>= 1;
        }
        b.min(LATENCY_BUCKETS - 1)
    }

    #[test]
    fn log2_buckets_hold_powers_of_two_and_clamp_at_the_last() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(3), 1);
        assert_eq!(log2_bucket(1023), 9);
        assert_eq!(log2_bucket(1024), 10);
        assert_eq!(log2_bucket((1 << 31) - 1), 30);
        assert_eq!(log2_bucket(1 << 31), LATENCY_BUCKETS - 1);
        assert_eq!(log2_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, (1u64 << shift) + 1] {
                assert_eq!(log2_bucket(v), by_halving(v), "{v}");
            }
        }
    }
}

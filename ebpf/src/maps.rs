//! Every BPF map. A map's ELF name is its static's name, which the agent opens it by.

use aya_ebpf::{
    macros::map,
    maps::{Array, LruHashMap, LruPerCpuHashMap, PerCpuArray},
};
use ppscope_common::{
    site, site_stat, DeviceIdentity, DropKey, Frame, HotSlot, NapiHot, NapiSlot, PoolHot,
    PoolIdentity, PoolRare, PoolTeardown, ReleaseMark, SiteStats, UnmatchedReturns, HOT_SLOTS,
    MAX_POOLS, NAPI_SLOTS,
};

#[map]
pub(crate) static POOL_COUNTERS: LruPerCpuHashMap<u64, PoolHot> =
    LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// The per-page and refill counts of the pool each CPU saw last, of those sharing a slot (see
/// `HotSlot`, `HotSlot::index`): those hooks count here, and fold into `POOL_COUNTERS` only
/// when a slot switches pools.
#[map]
pub(crate) static HOT_SLOT: PerCpuArray<HotSlot> = PerCpuArray::with_max_entries(HOT_SLOTS, 0);

/// Ring state and rare-event histograms per pool, shared by all CPUs (see `PoolRare`).
#[map]
pub(crate) static POOL_RARE: LruHashMap<u64, PoolRare> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
pub(crate) static ZERO_RARE: PerCpuArray<PoolRare> = PerCpuArray::with_max_entries(1, 0);

#[map]
pub(crate) static POOL_IDENTITY: LruHashMap<u64, PoolIdentity> =
    LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
pub(crate) static FRAMES: PerCpuArray<Frame> = PerCpuArray::with_max_entries(site::COUNT, 0);

/// Whole-site stats (devmem, provider, gve alloc), indexed by `site_stat::*`.
#[map]
pub(crate) static SITE_STATS: PerCpuArray<SiteStats> =
    PerCpuArray::with_max_entries(site_stat::COUNT, 0);

/// gve NAPI poll duration and work, per rx queue.
#[map]
pub(crate) static GVE_POLL: LruPerCpuHashMap<u32, SiteStats> =
    LruPerCpuHashMap::with_max_entries(1024, 0);

/// Which gve rx queue a pool belongs to (from `gve_rx_create_page_pool`).
#[map]
pub(crate) static GVE_POOL_QUEUE: LruHashMap<u64, u32> = LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
pub(crate) static ZERO_SITE: PerCpuArray<SiteStats> = PerCpuArray::with_max_entries(1, 0);

/// NAPI polls per NAPI instance (key: `struct napi_struct *`), folded from `NAPI_SLOT`.
#[map]
pub(crate) static NAPI_COUNTERS: LruPerCpuHashMap<u64, NapiHot> =
    LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// The NAPI counts of the instances each CPU polled last, one per slot (see `NapiSlot`).
#[map]
pub(crate) static NAPI_SLOT: PerCpuArray<NapiSlot> = PerCpuArray::with_max_entries(NAPI_SLOTS, 0);

/// Device behind each NAPI instance (key: napi pointer) and each dropping device (key: netdev).
#[map]
pub(crate) static NAPI_IDENTITY: LruHashMap<u64, DeviceIdentity> =
    LruHashMap::with_max_entries(MAX_POOLS, 0);

#[map]
pub(crate) static DROP_DEVICES: LruHashMap<u64, DeviceIdentity> =
    LruHashMap::with_max_entries(MAX_POOLS, 0);

/// skb drops per device and reason (normal frees, SKB_CONSUMED, are not counted).
#[map]
pub(crate) static DROPS: LruPerCpuHashMap<DropKey, u64> =
    LruPerCpuHashMap::with_max_entries(MAX_POOLS, 0);

/// Pools added to `POOL_COUNTERS` (first sight, on any CPU), for the agent: added minus
/// present is what the LRU evicted when the map was full.
#[map]
pub(crate) static POOL_INSERTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A zeroed counter set to insert on first sight; a map value is too big for the BPF stack.
#[map]
pub(crate) static ZERO_COUNTERS: PerCpuArray<PoolHot> = PerCpuArray::with_max_entries(1, 0);

/// Per pool being destroyed: release attempts and the pages still out at the last one.
#[map]
pub(crate) static POOL_TEARDOWN: LruHashMap<u64, PoolTeardown> =
    LruHashMap::with_max_entries(MAX_POOLS, 0);

/// When a pool was last freed (`pool_release`, `bpf_ktime_get_ns`): a pool born at a freed
/// pool's address inherits its per-CPU entries, whose last device check is then older than
/// this, and the next check is made without waiting out the second (`Hot::device_check_due`).
/// One time for all pools: while pools churn somewhere, every busy pool is checked at every
/// pace (every 8th refill), as before the second's wait. Slots by address would spare them,
/// but a typed program's pool is a pointer the verifier lets no hash touch ("math between
/// ptr_ pointer and ... is not allowed", `fx_refill` refused in the VM lab).
#[map]
pub(crate) static LAST_POOL_FREE: Array<u64> = Array::with_max_entries(1, 0);

/// The page each CPU last saw leave a pool, for the single recycle returning it (see
/// `ReleaseMark`, and `pool::take_release_mark`).
#[map]
pub(crate) static RELEASE_MARK: PerCpuArray<ReleaseMark> = PerCpuArray::with_max_entries(1, 0);

/// Returns that found their site's frame open but another call's (see `UnmatchedReturns`).
#[map]
pub(crate) static UNMATCHED_RETURNS: PerCpuArray<UnmatchedReturns> =
    PerCpuArray::with_max_entries(1, 0);

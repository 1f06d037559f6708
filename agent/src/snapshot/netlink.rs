//! The kernel's own view of its pools (netlink `netdev` family), as the snapshot shows it.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kernel's facts about one pool, as netlink reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetlinkPoolView {
    pub ifindex: Option<u32>,
    pub napi_id: Option<u32>,
    pub inflight_pages: Option<u64>,
    pub inflight_bytes: Option<u64>,
    /// The driver let go of the pool; it lingers until its pages come back.
    pub detached: bool,
    pub dmabuf: Option<u32>,
    pub io_uring: bool,
    /// The kernel's own counters over the window (CONFIG_PAGE_POOL_STATS).
    pub stats: Option<NetlinkPoolStats>,
}

/// The kernel side of the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetlinkSourceView {
    /// Whether the kernel's page_pool stats were read; if not, why (`stats_missing`).
    pub stats_available: bool,
    pub stats_missing: Option<String>,
    /// Why netlink could not be asked, if it could not.
    pub error: Option<String>,
}

/// One pool's counters as `page-pool-stats-get` reports them (`struct page_pool_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NetlinkPoolStats {
    pub id: u32,
    pub ifindex: Option<u32>,
    /// Allocations served from the per-pool alloc cache.
    pub alloc_fast: u64,
    /// Slow-path allocations of order-0 pages (page allocator or memory provider).
    pub alloc_slow: u64,
    pub alloc_slow_high_order: u64,
    /// Times the ptr_ring was empty when the cache needed a refill.
    pub alloc_empty: u64,
    /// Cache refills from the ptr_ring.
    pub alloc_refill: u64,
    /// Pages refused by a refill because they were on the wrong NUMA node.
    pub alloc_waive: u64,
    /// Recycles straight into the alloc cache.
    pub recycle_cached: u64,
    pub recycle_cache_full: u64,
    /// Recycles into the ptr_ring.
    pub recycle_ring: u64,
    /// Recycles refused because the ring was full (page returned to the allocator).
    pub recycle_ring_full: u64,
    pub recycle_released_refcnt: u64,
}

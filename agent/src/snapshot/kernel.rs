//! The kernel's own view of its pools (netlink `netdev` family), as the snapshot shows it.
use serde::{Deserialize, Serialize};

use crate::host::netlink::NetlinkPoolStats;

/// The kernel's facts about one pool, as netlink reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelPoolView {
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelSourceView {
    /// Whether the kernel's page_pool stats were read; if not, why (`stats_missing`).
    pub stats_available: bool,
    pub stats_missing: Option<String>,
    /// Why netlink could not be asked, if it could not.
    pub error: Option<String>,
}

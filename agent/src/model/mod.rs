//! The model: raw per-pool counters in, a [`Snapshot`](crate::snapshot::Snapshot) of what they mean out.
//!
//! Pure functions only, so every split and rate here is unit-tested without a kernel.
//!
//! Allocation split (per allocation call, the kernel's own `alloc_*` stats definitions):
//! **cache** = served from the alloc cache, **ring** = served by a refill from the ptr_ring,
//! **slow** = served by the slow path (page allocator) or a memory provider.
//! Recycle split (per page): **cached** = into the alloc cache (direct), **ring** = into the
//! ptr_ring, **ring_full** = left the pool instead (ring full, or the page was not recyclable).
//!
//! Nothing here reads the host: what a sample needs from it (page size, device names) travels
//! in the sample or in the [`SourceFacts`] of its source, so a recording replays the same
//! anywhere.
mod counters;
mod devices;
mod interval;
mod moved;
pub mod netlink_merge;
mod pools;
mod sample;

pub use counters::{accumulate_site, delta_site, pool_delta, since};
pub use devices::{device_views, keep_steps_of, name_drop_reasons, pool_netdevs, timeline_step};
pub use interval::snapshot;
pub use moved::moved_pools;
pub use pools::{apply_state, pool_view};
pub use sample::{
    BpfStats, ByAddr, Coverage, PoolCounts, PoolHists, PoolIds, ProgramRuntime, RawPool, RawSample,
    SkippedRunsCounted, SourceFacts,
};

pub use crate::snapshot::ratio;

/// A kernel name field (`char[16]`, NUL-padded) as text; None when empty.
pub fn c_name(raw: &[u8; 16]) -> Option<String> {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    let name = String::from_utf8_lossy(&raw[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;

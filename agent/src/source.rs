//! Sources of the snapshot stream (DESIGN.md: source → snapshot → consumers). `top` reads
//! one of these without knowing which: the live kernel, a recording, a simulated scenario or a
//! remote agent's `/api/v1/snapshot`.
use std::time::Duration;

use anyhow::Result;

use crate::model::Snapshot;

/// Yields snapshots, each covering what happened since the previous one.
pub trait Source: Send {
    /// What feeds the stream, for a footer: `live`, `replay FILE`, `sim NAME`, `agent URL`.
    fn describe(&self) -> String;

    /// The snapshot of everything since the previous call (the first call: since the source
    /// started). Live sources and remote agents cover the wall time that passed; a replay or
    /// a simulation advances by `interval` of its own time. `Ok(None)`: the source has ended
    /// (a replay at the end of its file).
    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>>;
}

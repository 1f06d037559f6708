//! Sources of the snapshot stream: the live kernel, a recording, a simulated scenario or a
//! remote agent's `/api/v1/snapshot`. `top` reads one of these without knowing which; every
//! one but the remote agent assembles its snapshots with [`crate::pipeline::assemble`] (the
//! agent already did).
use std::time::Duration;

use anyhow::Result;

use crate::{pipeline, snapshot::Snapshot};

mod connect;
pub mod live;
pub mod replay;
mod sim;

pub use connect::ConnectSource;
pub use live::{Collected, Collection, LiveSource};
pub use replay::ReplaySource;
pub use sim::{SimSource, SIM_DONTNEED_TOKENS};

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

/// Only the pools (and devices) of one interface, whichever source feeds the stream.
pub struct OnlyDevice<S> {
    pub inner: S,
    pub dev: String,
}

impl<S: Source> Source for OnlyDevice<S> {
    fn describe(&self) -> String {
        format!("{}, only {}", self.inner.describe(), self.dev)
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        Ok(self.inner.next(interval)?.map(|mut snap| {
            pipeline::only_device(&mut snap, &self.dev);
            snap
        }))
    }
}

impl Source for Box<dyn Source> {
    fn describe(&self) -> String {
        (**self).describe()
    }

    fn next(&mut self, interval: Duration) -> Result<Option<Snapshot>> {
        (**self).next(interval)
    }
}

#[cfg(test)]
mod tests;

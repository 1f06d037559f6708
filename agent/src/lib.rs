//! ppscope: make the Linux networking page_pool visible.
//!
//! One pipeline, each folder one layer (see `ARCHITECTURE.md` at the repository root):
//!
//! ```text
//! probes/ (kernel hooks → RawSample) ─┐
//! recording (a file of RawSamples) ───┼─► pipeline::assemble ─► snapshot::Snapshot ─► report/, export/, the TUI
//! advice/scenario (simulated pools) ──┘   (model/ + advice/)
//! ```
//!
//! - [`snapshot`]: the output types every face reads, and the health verdict;
//! - [`model`]: pure: samples in, snapshot parts out;
//! - [`advice`]: burst profiles, the page_pool simulator, ring-size advice;
//! - [`pipeline`]: the one assembly of a snapshot from a window of samples;
//! - [`probes`]: the hook table, attaching, reading the maps;
//! - [`host`]: BTF, kallsyms, netlink, ethtool: what the running host says;
//! - [`source`]: live, replay, simulation and remote agent as one stream of snapshots;
//! - [`recording`]: the file format of `ppscope record`;
//! - [`export`]: the agent: metrics, HTTP, the collection loop;
//! - [`report`]: `diagnose`, `doctor` and `simulate` output.
pub mod advice;
pub mod args;
pub mod export;
pub mod host;
pub mod model;
pub mod pipeline;
pub mod probes;
pub mod recording;
pub mod report;
pub mod snapshot;
pub mod source;
#[doc(hidden)]
pub mod testing;
pub mod units;

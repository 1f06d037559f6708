//! Ring-size advice: a pool's burst profile (from a window of samples) replayed through a
//! model of the page_pool at other ring sizes, and the verdict that weighs recycled pages
//! against the memory a bigger ring pins.
//!
//! - [`profile`]: samples → a burst profile per pool;
//! - [`window`]: the rolling window (per-pool deltas) a live source keeps for it;
//! - [`simulator`]: the page_pool model that replays a profile at any ring size;
//! - [`advise`](mod@advise): the rule that turns replays into an [`crate::snapshot::Advice`];
//! - [`pools`]: every pool of a window advised, with its context read off its identity;
//! - [`scenario`]: built-in profiles (`simulate --scenario`, `top --sim`).
pub mod advise;
pub mod pools;
pub mod profile;
pub mod scenario;
pub mod simulator;
pub mod window;

pub use advise::{advise, advise_with, PoolContext};
pub use pools::{advise_window, DEFAULT_TARGET};

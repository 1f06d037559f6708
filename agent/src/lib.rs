//! ppscope: make the Linux networking page_pool visible.
//!
//! One pipeline: kernel hooks (`ebpf/`) → maps → [`probes`] (the live source) →
//! [`model::Snapshot`] → consumers ([`report`] for `diagnose`; the TUI and exporter to come).
pub mod advice;
pub mod advise_pools;
pub mod args;
pub mod btf;
pub mod ethtool;
pub mod exporter;
pub mod kernel;
pub mod kernel_view;
pub mod lab;
pub mod model;
pub mod netlink;
pub mod probes;
pub mod profile;
pub mod record;
pub mod report;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod source;
#[doc(hidden)]
pub mod testing;
pub mod window;

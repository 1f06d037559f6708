//! Log lines from the programs (aya-log), only at rare sites: a map that refused an entry, a
//! kernel state the accounting does not expect, a pool's identity as first read. Never a
//! kernel address, and no site on a per-page path that runs while all is well (the refused
//! counters' line is on a pool's first page, and repeats only while the map refuses it).
//!
//! Compiled in, but switched off at load: the agent sets aya-log's `AYA_LOG_LEVEL` global to 0
//! unless `--bpf-log` asks, or the logger shows `ppscope::bpf`'s debug lines
//! (`RUST_LOG=ppscope::bpf=debug`, or debug for everything). That global is read-only data the
//! kernel freezes, so with it at 0 the verifier drops every site's code as dead: off costs no
//! run time (aya-log's 128 KiB ring buffer is still made). Each line goes to the logger under
//! the target [`TARGET`] (`ppscope: <level> from ppscope::bpf: …`).

/// The `log` target of every line the programs write (RUST_LOG picks it, as any target).
pub(crate) const TARGET: &str = "ppscope::bpf";

/// `warn!` for the programs: `bpf_warn!("…", args…)`.
macro_rules! bpf_warn {
    ($($arg:tt)+) => {
        aya_log_ebpf::warn!(&(), target: $crate::log::TARGET, $($arg)+)
    };
}
pub(crate) use bpf_warn;

/// `debug!` for the programs: `bpf_debug!("…", args…)`.
macro_rules! bpf_debug {
    ($($arg:tt)+) => {
        aya_log_ebpf::debug!(&(), target: $crate::log::TARGET, $($arg)+)
    };
}
pub(crate) use bpf_debug;

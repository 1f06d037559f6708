//! One module per hook of the agent's hook table (`HOOKS` in `agent/src/probes/`), named
//! after the hook. Each holds the hook's body, shared by every backend, and every program that
//! carries it, side by side: kprobe/kretprobe; fentry/fexit (BTF trampolines: cheaper, and
//! fexit sees arguments and return); raw tracepoint. The programs only fetch their arguments
//! and call the body.
//!
//! A program's function name is its ELF symbol, the name the agent attaches it by, whichever
//! module holds it.

mod alloc;
mod alloc_frag;
mod devmem_dontneed;
mod devmem_free;
mod drops;
mod gve_alloc;
mod gve_pool_queue;
mod gve_rx_poll;
mod napi_poll;
mod page_hold;
mod page_release;
mod page_return;
mod pool_release;
mod provider_alloc;
mod recycle;
mod recycle_bulk;
mod refill;
mod slow_path;

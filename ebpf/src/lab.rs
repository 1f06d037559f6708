//! Lab helper.

use aya_ebpf::{macros::xdp, programs::XdpContext};

/// Passes every packet: attached to a veth it makes the kernel give that veth page_pools
/// (veth only runs its NAPI + page_pool receive path with an XDP program). Used by the lab
/// and the tests, never by the probes.
#[xdp]
pub fn xdp_pass(_ctx: XdpContext) -> u32 {
    aya_ebpf::bindings::xdp_action::XDP_PASS
}

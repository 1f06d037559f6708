//! Lab helper: give a veth a page_pool by attaching an XDP program that passes everything.
//!
//! veth only runs its NAPI + page_pool receive path while an XDP program is attached. The
//! program stays attached while the process that attached it lives (an fd-based link): the
//! lab runs `ppscope lab xdp DEV &` and kills it to detach. No pin is needed, which matters
//! because `ip netns exec` hides the host's /sys/fs/bpf.
use anyhow::{Context, Result};
use aya::{
    programs::{Xdp, XdpMode},
    Ebpf,
};

use super::EBPF_OBJECT;

/// Attaches `xdp_pass` to `dev` in native mode; it detaches when the returned value drops.
pub fn attach_xdp_pass(dev: &str) -> Result<Ebpf> {
    let mut ebpf = Ebpf::load(EBPF_OBJECT).context("cannot load ppscope's eBPF object")?;
    let prog: &mut Xdp = ebpf
        .program_mut("xdp_pass")
        .context("xdp_pass missing from the object")?
        .try_into()?;
    prog.load()?;
    prog.attach(dev, XdpMode::Driver)
        .with_context(|| format!("cannot attach native XDP to {dev}"))?;
    Ok(ebpf)
}

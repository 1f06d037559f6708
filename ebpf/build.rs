//! Tells this crate which architecture's kernel its programs run on (`bpf_target_arch`, as
//! aya-ebpf is told): the registers a kprobe is handed are laid out by architecture
//! (`frames::Owner::call`). `agent/build.rs` names the agent's target architecture
//! (`AYA_BPF_TARGET_ARCH`); built by hand, the build machine's.
fn main() -> aya_build::Result<()> {
    aya_build::emit_bpf_target_arch_cfg()
}

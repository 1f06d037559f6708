//! The one place ppscope calls `bpf(2)` itself, for what aya 0.14 does not do: batch lookups
//! (`batch.rs`), a program's count of skipped runs and its kprobe links' count of dropped hits
//! (`skipped.rs`). The attribute is aya-obj's generated `bpf_attr` (the kernel's own layout).
use std::{io, mem};

use aya_obj::generated::{bpf_attr, bpf_cmd};

/// `bpf(cmd, attr)`; the kernel's error number on failure. `attr` may hold what the kernel
/// wrote back either way (a batch's count).
///
/// # Safety
/// Every pointer in `attr` must point to memory that outlives the call and has room for what
/// the command writes there.
pub(super) unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<()> {
    // SAFETY: `attr` is a whole `bpf_attr`, its size passed with it; its pointers are the
    // caller's to vouch for.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

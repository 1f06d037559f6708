//! Entry/exit frames: an entry program opens its site's per-CPU frame, the exit program of the
//! same task takes it back (see `Frame` for how a stale or foreign frame is rejected).

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use ppscope_common::Frame;

use crate::{kmem::now_ns, maps::FRAMES, pool::site_record};

#[inline(always)]
fn frame(site: u32) -> Option<&'static mut Frame> {
    // SAFETY: per-CPU slot; see `Frame` for how a stale or foreign frame is rejected.
    FRAMES.get_ptr_mut(site).map(|f| unsafe { &mut *f })
}

/// What an open frame of this task holds in `pid_tgid` (see `Frame::OPEN`).
#[inline(always)]
fn this_task() -> u64 {
    bpf_get_current_pid_tgid() | Frame::OPEN
}

/// This task's open frame for `site`, left open. A free frame is told without the helper
/// call: most programs that look are not inside such a call.
#[inline(always)]
pub(crate) fn own_frame(site: u32) -> Option<&'static mut Frame> {
    let f = frame(site)?;
    (f.pid_tgid != 0 && f.pid_tgid == this_task()).then_some(f)
}

#[inline(always)]
pub(crate) fn open_frame(site: u32, pool: u64, netmem: u64, with_time: bool) {
    if let Some(f) = frame(site) {
        f.pid_tgid = this_task();
        f.pool = pool;
        f.netmem = netmem;
        f.released = 0;
        // SAFETY: helper without arguments.
        f.start_ns = if with_time {
            unsafe { bpf_ktime_get_ns() }
        } else {
            0
        };
    }
}

/// Takes this task's open frame for `site`, if it is still there.
#[inline(always)]
pub(crate) fn close_frame(site: u32) -> Option<Frame> {
    let f = own_frame(site)?;
    let taken = *f;
    f.pid_tgid = 0;
    Some(taken)
}

/// Closes a timed frame of a whole-site hook and records it.
#[inline(always)]
pub(crate) fn on_site_exit(frame_site: u32, stat: u32, value: Option<i64>) {
    if let Some(f) = close_frame(frame_site) {
        site_record(stat, now_ns().saturating_sub(f.start_ns), value);
    }
}

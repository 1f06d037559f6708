//! Entry/exit frames: an entry program opens its site's per-CPU frame, the exit program of the
//! same call takes it back (see `Frame` for how a stale or foreign frame is rejected).

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
};
use ppscope_common::Frame;

use crate::{
    kmem::now_ns,
    maps::{FRAMES, UNMATCHED_RETURNS},
    pool::{put, site_record},
};

#[inline(always)]
fn frame(site: u32) -> Option<&'static mut Frame> {
    // SAFETY: per-CPU slot; see `Frame` for how a stale or foreign frame is rejected.
    FRAMES.get_ptr_mut(site).map(|f| unsafe { &mut *f })
}

/// Who opened a frame, and so who may take it back: what `Frame::owner` holds.
#[derive(Clone, Copy)]
pub(crate) enum Owner {
    /// The task: its exit, and any program of the task inside the call (`own_frame`: a
    /// release inside a bulk recycle), find the frame. A helper call on each side.
    Task,
    /// A kprobe pair's call, by the stack pointer in the registers its program was handed
    /// (see [`Owner::call`]): a load on each side instead of a helper call.
    Stack(u64),
}

impl Owner {
    /// The owner of a kprobe pair's frame, from the registers the kprobe or the kretprobe was
    /// handed. The return runs on the stack the call was made on, one return address above
    /// where the entry saw it: x86-64's `ret` popped it, and the kernel's return trampoline
    /// hands the return handler that stack pointer (`arch_rethook_trampoline_callback`). A
    /// nested call (a softirq's recycle inside a task's) is deeper on the same stack or on
    /// another, and another task's on another stack: neither is taken for this call's. On
    /// other architectures (`bpf_target_arch`: the agent's, `agent/build.rs`), by the task,
    /// as before: where their return's stack pointer sits against the entry's is unchecked.
    #[inline(always)]
    pub(crate) fn call(regs: *mut pt_regs) -> Owner {
        #[cfg(bpf_target_arch = "x86_64")]
        {
            // SAFETY: the program's context, the registers it was handed.
            Owner::Stack(unsafe { (*regs).rsp })
        }
        #[cfg(not(bpf_target_arch = "x86_64"))]
        {
            let _ = regs;
            Owner::Task
        }
    }

    /// What an open frame of this owner holds in `owner` (never 0: see `Frame::OPEN`; a stack
    /// pointer is a kernel address).
    #[inline(always)]
    fn mark(self) -> u64 {
        match self {
            Owner::Task => bpf_get_current_pid_tgid() | Frame::OPEN,
            Owner::Stack(sp) => sp,
        }
    }

    /// Whether an open frame marked `opened` is this owner's: the same task, or a stack
    /// pointer at most [`RETURN_SP_ABOVE`] bytes above the entry's.
    #[inline(always)]
    fn owns(self, opened: u64) -> bool {
        opened != 0
            && match self {
                Owner::Task => opened == self.mark(),
                Owner::Stack(sp) => sp.wrapping_sub(opened) <= RETURN_SP_ABOVE,
            }
    }
}

/// How far above the entry's stack pointer a return's may be and still be the same call's:
/// one return address on x86-64 (8 bytes), with room for a kernel whose trampoline reports it
/// a word further; a nested call's entry is deeper (below), another stack far away.
const RETURN_SP_ABOVE: u64 = 16;

/// This task's open frame for `site`, left open: most programs that look are not inside
/// such a call, and find it free (without the task's helper call: [`Owner::owns`] looks at
/// 0 first).
#[inline(always)]
pub(crate) fn own_frame(site: u32) -> Option<&'static mut Frame> {
    let f = frame(site)?;
    Owner::Task.owns(f.owner).then_some(f)
}

/// Opens `owner`'s frame for `site`. The fields are written one by one (`put!`): plain
/// stores of the two zeros side by side were merged into a call of the object's `memset`, a
/// byte-at-a-time loop, on every kprobe recycle's entry (`llvm-objdump` of `pp_put_entry`).
#[inline(always)]
pub(crate) fn open_frame(site: u32, owner: Owner, pool: u64, netmem: u64, with_time: bool) {
    if let Some(f) = frame(site) {
        // SAFETY: helper without arguments.
        let start_ns = if with_time {
            unsafe { bpf_ktime_get_ns() }
        } else {
            0
        };
        put!(f.owner, owner.mark());
        put!(f.pool, pool);
        put!(f.netmem, netmem);
        put!(f.released, 0);
        put!(f.start_ns, start_ns);
    }
}

/// Takes `owner`'s open frame for `site`, if it is still there. A frame open but another
/// call's is counted (`UNMATCHED_RETURNS`) and left: the agent tells a pair that cannot find
/// its own calls on this kernel from the few a task's move between CPUs leaves.
#[inline(always)]
pub(crate) fn close_frame(site: u32, owner: Owner) -> Option<Frame> {
    let f = frame(site)?;
    if !owner.owns(f.owner) {
        if f.owner != 0 {
            count_unmatched(site);
        }
        return None;
    }
    let taken = *f;
    f.owner = 0;
    Some(taken)
}

#[cold]
#[inline(never)]
fn count_unmatched(site: u32) {
    if let Some(u) = UNMATCHED_RETURNS.get_ptr_mut(0) {
        // SAFETY: this CPU's element of a per-CPU array.
        if let Some(n) = unsafe { &mut *u }.by_site.get_mut(site as usize) {
            *n += 1;
        }
    }
}

/// Closes a timed frame of a whole-site hook and records it.
#[inline(always)]
pub(crate) fn on_site_exit(frame_site: u32, stat: u32, value: Option<i64>) {
    if let Some(f) = close_frame(frame_site, Owner::Task) {
        site_record(stat, now_ns().saturating_sub(f.start_ns), value);
    }
}

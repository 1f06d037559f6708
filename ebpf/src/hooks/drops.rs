//! `drops` (around the pool, any driver): packet drops by device and reason.
//!
//! Raw tracepoint `skb:kfree_skb` (`tp_kfree_skb`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use ppscope_common::DropKey;

use crate::{
    config,
    kmem::{device_identity, read_field},
    maps::{DROPS, DROP_DEVICES},
};

/// `skb:kfree_skb(skb, location, reason, ...)`: a packet dropped, and why.
#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn tp_kfree_skb(ctx: RawTracePointContext) -> i32 {
    let cfg = config();
    let reason = ctx.arg::<u64>(2) as u32;
    if reason == cfg.skb_consumed_reason {
        return 0;
    }
    let netdev = read_field::<u64>(ctx.arg::<u64>(0), cfg.offsets.skb_dev).unwrap_or(0);
    let key = DropKey {
        netdev,
        reason,
        _pad: 0,
    };
    if let Some(n) = DROPS.get_ptr_mut(key) {
        // SAFETY: per-CPU value of this CPU.
        unsafe { *n += 1 };
        return 0;
    }
    if netdev != 0 {
        // SAFETY: read-only lookup of an identity record.
        if unsafe { DROP_DEVICES.get(netdev) }.is_none() {
            let _ = DROP_DEVICES.insert(netdev, device_identity(netdev, 0), 0);
        }
    }
    let _ = DROPS.insert(key, 1u64, 0);
    0
}

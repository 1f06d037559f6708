//! Per-pool state shared by the hooks: counters per CPU, identity, ring gauges and rare-event
//! histograms; and per-site stats (whole-site hooks, gve polls).
use ppscope_common::{
    HotSlot, KernelOffsets, PoolHot, PoolIdentity, PoolRare, PoolState, ProbeConfig, SiteStats,
};

use crate::{
    config,
    kmem::{
        address_low_bits, bucket_index, driver_name, now_ns, pool_netdev, read_field, read_word,
        PoolRead,
    },
    maps::{
        HOT_SLOT, LAST_POOL_FREE, POOL_COUNTERS, POOL_IDENTITY, POOL_INSERTS, POOL_RARE,
        RELEASE_MARK, SITE_STATS, ZERO_COUNTERS, ZERO_RARE,
    },
};

/// Reads the identity of a pool the first time it is seen.
#[inline(always)]
pub(crate) fn record_identity(pool: u64, cfg: &ProbeConfig) {
    // SAFETY: read-only lookup; a value aliased by a concurrent update is only an identity.
    if unsafe { POOL_IDENTITY.get(pool) }.is_some() {
        return;
    }
    let _ = POOL_IDENTITY.insert(pool, read_identity(pool, cfg), 0);
}

/// What the kernel says about `pool` and its device now.
///
/// Every field is given a value whichever way its read went (0, its `known` bit clear), and
/// the struct is made once at the end: the verifier walks the code after a branch once per
/// state that reaches it, and a field left unwritten on one way and written on the other
/// made those states differ, so each read that could fail doubled what followed: the read
/// was 8,000 of the 13,500 instructions the verifier walked for `page_hold` on the
/// development host, and is ~1,700 written this way.
#[inline(always)]
pub(crate) fn read_identity(pool: u64, cfg: &ProbeConfig) -> PoolIdentity {
    let o = &cfg.offsets;
    let mut known = 0;
    // The queue index means something only when the driver registered the pool with its netdev.
    let registered = read_field::<u64>(pool, o.pool_netdev).unwrap_or(0) != 0;
    let queue_idx = read_known(
        if registered { pool } else { 0 },
        o.pool_queue_idx,
        PoolIdentity::KNOWN_QUEUE,
        &mut known,
    );
    let pool_size = read_known(pool, o.pool_size, PoolIdentity::KNOWN_POOL_SIZE, &mut known);
    let ring_size = read_known(
        pool,
        o.pool_ring_size,
        PoolIdentity::KNOWN_RING_SIZE,
        &mut known,
    );
    let netlink_id = read_known(
        pool,
        o.pool_user_id,
        PoolIdentity::KNOWN_NETLINK_ID,
        &mut known,
    );
    let order = read_known(pool, o.pool_order, PoolIdentity::KNOWN_ORDER, &mut known);
    let mp: u64 = read_known(
        pool,
        o.pool_mp,
        PoolIdentity::KNOWN_MEMORY_PROVIDER,
        &mut known,
    );
    let netdev = pool_netdev(pool, o).unwrap_or(0);
    let ifindex = read_known(
        netdev,
        o.netdev_ifindex,
        PoolIdentity::KNOWN_IFINDEX,
        &mut known,
    );
    let ifname = read_known(
        netdev,
        o.netdev_name,
        PoolIdentity::KNOWN_IFNAME,
        &mut known,
    );
    // `driver_name` of 0 is empty too, but skipping it is fewer instructions to walk.
    let driver = if netdev != 0 {
        driver_name(netdev, o)
    } else {
        [0; 16]
    };
    PoolIdentity {
        netdev,
        ifindex,
        queue_idx,
        pool_size,
        ring_size,
        netlink_id,
        order,
        has_memory_provider: (mp != 0) as u32,
        known,
        ifname,
        driver,
    }
}

/// A `T` at `base + offset`, with `bit` set in `known` when it could be read; else the
/// default (zero) and the bit left clear: a value either way (see [`read_identity`]).
#[inline(always)]
fn read_known<T: Default>(base: u64, offset: u32, bit: u32, known: &mut u32) -> T {
    match read_field::<T>(base, offset) {
        Some(v) => {
            *known |= bit;
            v
        }
        None => T::default(),
    }
}

/// The identity is read once per pool address, but a pool's device can change under it: an
/// interface renamed, or a pool freed and a new one (another device's, or the same device's
/// next) born at its address. Rare events (pages entering the pool, refills) compare the
/// device and its name with what was recorded, about once a second per pool and CPU (and
/// sooner after a free: [`Hot::device_check_due`]), and read the whole identity again when
/// the device differs or the pool at the address was freed (`PoolIdentity::FREED`, set by
/// `pool_release`), so names follow within about a second of traffic. A pool with no
/// identity yet gets it here too: the programs that call this count through [`hot_unnamed`],
/// which leaves the identity to it (one copy of the identity read per program: the
/// verifier's time at start-up grows with each).
#[inline(always)]
pub(crate) fn refresh_device(pool: u64) {
    let cfg = config();
    let o = &cfg.offsets;
    let stale = match POOL_IDENTITY.get_ptr_mut(pool) {
        None => true,
        Some(id) => {
            // SAFETY: a value of the shared identity map; a concurrent refresh writes the
            // same facts.
            let id = unsafe { &mut *id };
            // A freed pool's identity is read again whatever the device reads give (the new
            // pool at the address may have no device).
            id.known & PoolIdentity::FREED != 0 || {
                let Some(netdev) = pool_netdev(pool, o) else {
                    return;
                };
                // Compared as two words: no memcmp in BPF.
                let Some(name) = read_field::<[u64; 2]>(netdev, o.netdev_name) else {
                    return;
                };
                // SAFETY: [u8; 16] and [u64; 2] have the same size; any bit pattern is valid
                // for both.
                let recorded: [u64; 2] = unsafe { core::mem::transmute(id.ifname) };
                if id.netdev == netdev && (recorded[0] != name[0] || recorded[1] != name[1]) {
                    // SAFETY: as above.
                    id.ifname = unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>(name) };
                    id.known |= PoolIdentity::KNOWN_IFNAME;
                }
                // Another device: another pool at this address; everything is read again.
                id.netdev != netdev
            }
        }
    };
    if stale {
        let id = read_identity(pool, &cfg);
        match POOL_IDENTITY.insert(pool, id, 0) {
            Ok(()) => crate::log::bpf_debug!(
                "pool identity read: ifindex {} queue {} pool_size {} ring_size {} netlink id {} (known fields {:x})",
                id.ifindex,
                id.queue_idx,
                id.pool_size,
                id.ring_size,
                id.netlink_id,
                id.known
            ),
            Err(e) => crate::log::bpf_warn!(
                "a pool's identity could not be stored (map insert: error {})",
                e
            ),
        }
    }
}

/// Marks the pool's entry recently used. While its slot on a CPU holds a pool nothing else looks
/// its entry up, and the LRU would take the busiest pool for the coldest when the map is full:
/// the slot's users call this now and then (the allocation every 64th page, refill and
/// `page_hold` with their device check: about once a second while the pool moves).
#[inline(always)]
pub(crate) fn touch_counters(pool: u64) {
    let _ = POOL_COUNTERS.get_ptr_mut(pool);
}

/// The counters of `pool` on this CPU, created (and the pool's identity read) on first sight.
#[inline(always)]
pub(crate) fn counters(pool: u64) -> Option<&'static mut PoolHot> {
    counters_named::<true>(pool)
}

/// [`counters`], reading the identity on first sight only when `NAMED`.
#[inline(always)]
fn counters_named<const NAMED: bool>(pool: u64) -> Option<&'static mut PoolHot> {
    if pool == 0 {
        return None;
    }
    if let Some(c) = POOL_COUNTERS.get_ptr_mut(pool) {
        // SAFETY: per-CPU value of this CPU; programs do not nest on one CPU for one map
        // value except through NMI, which none of these hooks run in.
        return Some(unsafe { &mut *c });
    }
    let cfg = config();
    if cfg.only_ifindex != 0 {
        let netdev = pool_netdev(pool, &cfg.offsets).unwrap_or(0);
        let ifindex = read_field::<u32>(netdev, cfg.offsets.netdev_ifindex).unwrap_or(0);
        if ifindex != cfg.only_ifindex {
            return None;
        }
    }
    if NAMED {
        record_identity(pool, &cfg);
    }
    insert_counters(pool)
}

/// A zeroed entry for `pool` (counted in `POOL_INSERTS`), and the entry.
#[inline(always)]
fn insert_counters(pool: u64) -> Option<&'static mut PoolHot> {
    let zero = ZERO_COUNTERS.get_ptr(0)?;
    // SAFETY: the zero slot is never written.
    match POOL_COUNTERS.insert(pool, unsafe { &*zero }, 0) {
        Ok(()) => {
            if let Some(n) = POOL_INSERTS.get_ptr_mut(0) {
                // SAFETY: this CPU's slot.
                unsafe { *n += 1 };
            }
        }
        Err(e) => crate::log::bpf_warn!(
            "a pool's counters could not be stored (map insert: error {}): its pages go uncounted",
            e
        ),
    }
    POOL_COUNTERS.get_ptr_mut(pool).map(|c| {
        // SAFETY: per-CPU value of this CPU, as in `counters`.
        unsafe { &mut *c }
    })
}

/// Where a per-page count of a pool goes on this CPU.
pub(crate) enum Hot {
    /// The pool's slot on the CPU, which holds this pool (see `HotSlot`).
    Slot(&'static mut HotSlot),
    /// The pool's hash entry: its slot holds another pool (see `hot`), or is being switched
    /// by a program this one interrupted (a softirq during a recycle in process context).
    Entry(&'static mut PoolHot),
}

/// Where to count a page of `pool` on this CPU: the pool's slot (`HotSlot::index`: a few per
/// CPU), switched to `pool` when it has held another pool for a while, else the pool's entry. None when the pool is not tracked (null, or filtered out by
/// `--dev`). The hash lookup (and the identity read on first sight) happens only for an event
/// of a pool the slot does not hold, once per program (it is inlined into every per-page program, whose size is what the
/// verifier pays for at start-up).
///
/// A program nested between another's `pool` check and its increment may move one count to
/// the other pool; the hash counters had the same (rare) lost update between nested
/// programs.
#[inline(always)]
pub(crate) fn hot(pool: u64) -> Option<Hot> {
    hot_named::<true>(pool)
}

/// [`hot`] for a program that calls [`refresh_device`] on a pool's first event: the identity
/// is left to it.
#[inline(always)]
pub(crate) fn hot_unnamed(pool: u64) -> Option<Hot> {
    hot_named::<false>(pool)
}

#[inline(always)]
fn hot_named<const NAMED: bool>(pool: u64) -> Option<Hot> {
    // SAFETY: this CPU's element of a per-CPU array; see above for nesting.
    let s =
        unsafe { &mut *HOT_SLOT.get_ptr_mut(HotSlot::index_of_low_bits(address_low_bits(pool)))? };
    if s.pool == pool && pool != 0 {
        return Some(Hot::Slot(s));
    }
    let c = counters_named::<NAMED>(pool)?;
    if s.seq_end != s.seq {
        return Some(Hot::Entry(c));
    }
    // Another pool's event is counted in its entry (just looked up), and the slot changes
    // hands only every `SWITCH_AFTER`th such event: a CPU that moved to another pool has the
    // slot within a few events, one that serves many pools in turn (thousands of veths)
    // pays one lookup an event, as before the slot, not a fold on top of it.
    s.misses += 1;
    if s.pool != 0 && s.misses % SWITCH_AFTER != 0 {
        return Some(Hot::Entry(c));
    }
    switch_slot(s, pool, c);
    Some(Hot::Slot(s))
}

impl Hot {
    /// Counts one event that paces the pool's device check, of `weight` paced events (a page
    /// entering the pool is one, a refill [`REFILL_WEIGHT`]), and says whether the check is
    /// due: at the pool's first such event on this CPU, and when the count crosses a multiple
    /// of [`DEVICE_CHECK_EVERY`] (however often the slot changed hands between: see
    /// `HotSlot::paced_events`) once [`DEVICE_CHECK_INTERVAL_NS`] has passed since the last
    /// check, or a pool was freed since (`LAST_POOL_FREE`). The
    /// count keeps the clock off most events; the clock keeps the check (helper reads of the
    /// device and its name, an identity lookup, an LRU touch) to once a second however busy
    /// the pool (BENCHMARKS.md priced it).
    #[inline(always)]
    pub(crate) fn device_check_due(&mut self, weight: u64) -> bool {
        let (paced, checked) = match self {
            Hot::Slot(s) => (&mut s.paced_events, &mut s.device_checked_ns),
            Hot::Entry(c) => (&mut c.paced_events, &mut c.device_checked_ns),
        };
        let before = *paced;
        *paced = before + weight;
        if before % DEVICE_CHECK_EVERY >= weight {
            return false;
        }
        let now = now_ns();
        if before != 0 && now.wrapping_sub(*checked) < DEVICE_CHECK_INTERVAL_NS {
            // Unless a pool was freed since: this may be a new pool at its address, whose
            // per-CPU entries (and pace) are the freed pool's.
            let freed = LAST_POOL_FREE.get_ptr(0).map_or(0, |t| {
                // SAFETY: the one slot of an array map.
                unsafe { *t }
            });
            if *checked >= freed {
                return false;
            }
        }
        *checked = now;
        true
    }
}

/// A pool's paced events (see [`Hot::device_check_due`]) per look at the clock: at every
/// page in, the device check tripled the cost of a program that runs per page entering the
/// pool (BENCHMARKS.md).
pub(crate) const DEVICE_CHECK_EVERY: u64 = 64;

/// A refill's weight in paced events: the clock read at every 8th refill. A refill brings up
/// to 64 pages, and a quiet pool refills rarely: at every 64th, a renamed virtio NIC's pool
/// still showed its old name after 3 s of TCP in the VM lab (a CI run of
/// `vm_reliability_kernel_changes_while_the_agent_is_attached`).
pub(crate) const REFILL_WEIGHT: u64 = 8;

/// The least time between two device checks of a pool on a CPU: a rename shows within about
/// this long of the pool's traffic, as fast as the agent's default interval collects it.
pub(crate) const DEVICE_CHECK_INTERVAL_NS: u64 = 1_000_000_000;

/// Events of other keys after which a slot changes hands (`hot`, and the NAPI slots).
pub(crate) const SWITCH_AFTER: u64 = 8;

/// Writes in program order (LLVM keeps volatile stores in order; x86 keeps stores in order):
/// what makes a bracketed fold readable (see `HotSlot`; the NAPI slots fold with it too).
/// Volatile stores are also never merged: plain stores of zeros side by side can become a
/// call of the object's byte-at-a-time `memset` (`frames::open_frame`).
macro_rules! put {
    ($place:expr, $value:expr) => {
        // SAFETY: a field of a map value this program holds.
        unsafe { core::ptr::write_volatile(&mut $place, $value) }
    };
}
pub(crate) use put;

/// Folds the slot's counts into its pool's hash entry (bracketed by `fold_tail` and
/// `fold_head`), ends the pool's ring-full run, parks its empty-ring run in the entry (a run
/// of refills that found the ring empty goes on across another pool's activity on this CPU,
/// as it did when refills counted in the entry), parks what goes with a pool (its device
/// check's pace and time, the weight of its next refill fill: `HotSlot`), and gives the slot
/// to `pool`, whose parked run and pace it takes up. An old entry the LRU evicted while the
/// slot held its pool is made again with the slot's counts (the agent takes the drop for a
/// restart), not lost.
#[inline(always)]
fn switch_slot(s: &mut HotSlot, pool: u64, new: &mut PoolHot) {
    let seq = s.seq;
    put!(s.seq_end, seq | 1);
    // What the slot takes up from the new pool's entry is read first: making the old pool's
    // entry again below may evict the new pool's from a full map and reuse its memory.
    let (new_empty_run, new_paced_events, new_checked_ns, new_fill_weight) = (
        new.empty_run,
        new.paced_events,
        new.device_checked_ns,
        new.fill_weight,
    );
    new.empty_run = 0;
    let old = s.pool;
    let entry = match POOL_COUNTERS.get_ptr_mut(old) {
        // SAFETY: this CPU's value of the old pool's entry.
        Some(c) => Some(unsafe { &mut *c }),
        None if old != 0 => insert_counters(old),
        None => None,
    };
    let mut parked = false;
    if let Some(c) = entry {
        put!(c.fold_tail, seq | 1);
        put!(c.alloc_calls, c.alloc_calls + s.alloc_calls);
        put!(c.frag_calls, c.frag_calls + s.frag_calls);
        put!(c.put_calls, c.put_calls + s.put_calls);
        put!(c.put_cached, c.put_cached + s.put_cached);
        put!(c.put_released, c.put_released + s.put_released);
        put!(c.hold_pages, c.hold_pages + s.hold_pages);
        put!(c.release_pages, c.release_pages + s.release_pages);
        put!(c.release_full, c.release_full + s.release_full);
        put!(c.refill_calls, c.refill_calls + s.refill_calls);
        put!(c.refill_empty, c.refill_empty + s.refill_empty);
        put!(c.refill_pages, c.refill_pages + s.refill_pages);
        put!(c.empty_run, s.empty_run);
        put!(c.paced_events, s.paced_events);
        put!(c.device_checked_ns, s.device_checked_ns);
        put!(c.fill_weight, s.fill_weight);
        parked = true;
        put!(c.fold_head, seq);
        put!(c.fold_tail, seq);
    }
    if s.full_run > 0 {
        hist_add(old, Hist::FullRun, s.full_run);
    }
    if !parked && s.empty_run > 0 {
        hist_add(old, Hist::EmptyRun, s.empty_run);
    }
    put!(s.alloc_calls, 0);
    put!(s.frag_calls, 0);
    put!(s.put_calls, 0);
    put!(s.put_cached, 0);
    put!(s.put_released, 0);
    put!(s.full_run, 0);
    put!(s.hold_pages, 0);
    put!(s.release_pages, 0);
    put!(s.release_full, 0);
    put!(s.refill_calls, 0);
    put!(s.refill_empty, 0);
    put!(s.refill_pages, 0);
    put!(s.empty_run, new_empty_run);
    put!(s.paced_events, new_paced_events);
    put!(s.device_checked_ns, new_checked_ns);
    put!(s.fill_weight, new_fill_weight);
    put!(s.pool, pool);
    put!(s.seq, seq + 2);
    put!(s.seq_end, seq + 2);
}

/// Adds one to a per-page count of `pool` on this CPU (see [`hot`]); evaluates to the count
/// after the add (0 for an untracked pool).
macro_rules! count_page {
    ($pool:expr, $field:ident) => {{
        match $crate::pool::hot($pool) {
            Some($crate::pool::Hot::Slot(s)) => {
                s.$field += 1;
                s.$field
            }
            Some($crate::pool::Hot::Entry(c)) => {
                c.$field += 1;
                c.$field
            }
            None => 0,
        }
    }};
}
pub(crate) use count_page;

/// The ring's fill (entries) and size, as the program can read the pool (`R`) from `side`;
/// None when they cannot be read or make no sense.
#[inline(always)]
pub(crate) fn ring_fill<R: PoolRead>(pool: u64, side: RingSide) -> Option<RingFill> {
    let o = &config().offsets;
    let size = R::field::<i32>(pool, o.pool_ring_size).unwrap_or(0);
    let prod = R::field::<i32>(pool, o.pool_ring_producer)?;
    if size <= 0 || !(0..size).contains(&prod) {
        return None;
    }
    let full = RingFill {
        fill: size as u32,
        size: size as u32,
    };
    // A full ring's consumer is not read: its cache line is the consumer's (another CPU's,
    // in a churn), and a release into a full ring is per page.
    if matches!(side, RingSide::Producer) && next_slot_taken::<R>(pool, prod, o) {
        return Some(full);
    }
    let cons = R::field::<i32>(pool, o.pool_ring_consumer_head)?;
    if !(0..size).contains(&cons) {
        return None;
    }
    let mut f = prod - cons;
    if f < 0 {
        f += size;
    }
    // producer == consumer_head is empty or full: a full ring's next slot is taken.
    if f == 0
        && matches!(side, RingSide::Consumer { found_empty: false })
        && next_slot_taken::<R>(pool, prod, o)
    {
        return Some(full);
    }
    Some(RingFill {
        fill: f as u32,
        size: size as u32,
    })
}

/// Whether the ring's producer's next slot is taken. The queue pointer is a plain number even
/// to a typed program, and the slot at a run-time index: one word read (`read_word`). `o`:
/// the offsets [`ring_fill`] already holds (each `config()` is a load of its own).
#[inline(always)]
fn next_slot_taken<R: PoolRead>(pool: u64, prod: i32, o: &KernelOffsets) -> bool {
    let queue = R::field::<u64>(pool, o.pool_ring_queue).unwrap_or(0);
    queue != 0 && read_word(queue + prod as u64 * 8).unwrap_or(0) != 0
}

/// Whose view of the ring [`ring_fill`] takes.
#[derive(Clone, Copy)]
pub(crate) enum RingSide {
    /// A release's: the producers'. A ring whose producer's next slot is taken is full, the
    /// kernel's own test (`__ptr_ring_full`), which a recycle into it fails (a page also
    /// leaves unrecyclable, or at teardown, whatever the ring).
    /// The consumer clears the slots it took in batches (`ptr_ring::batch`, 16 on x86-64), so
    /// a ring is full to its producers up to a batch before producer meets consumer: on the
    /// development host's veth churn most releases found 240-255 of 256 entries behind
    /// `consumer_head` and the next slot taken. So the slot is read first, at every release.
    Producer,
    /// The allocation side's (refill, slow path): the entries behind `consumer_head`, the
    /// slot read only to tell full from empty when producer == consumer. A refill that took
    /// pages has cleared all but a batch behind it, and the slow path runs after the ring
    /// gave nothing, so reading the slot first there would be a load (a cache line the
    /// recycling CPU writes) for nothing. `found_empty`: the caller knows the ring was empty
    /// a moment ago (a refill that got no page), so equal indices mean empty unread.
    Consumer { found_empty: bool },
}

/// A ring's fill and size (see [`ring_fill`]).
#[derive(Clone, Copy)]
pub(crate) struct RingFill {
    pub(crate) fill: u32,
    pub(crate) size: u32,
}

impl RingFill {
    #[inline(always)]
    pub(crate) fn full(&self) -> bool {
        self.fill == self.size
    }
}

/// Reads the pool's ring fill and inflight pages into its rare-event record, files the fill,
/// and hands the record back for the caller's own histograms: one map lookup for all of it
/// (refill, slow path, release). Release is rare only while the pool is healthy: a ring-full
/// churn (veth + XDP on the host: ~26k releases/s) runs it per page, so it stays cheap: no
/// timestamp (`stamp_ns` is read by nobody; it was 5× the floor's cost with a map update,
/// measured by `cargo xtask bench`) and in-place writes instead of a map update; and most of
/// a churn's releases skip it (`page_release`).
///
/// `found_empty`: as in [`RingSide::Consumer`] (the allocation side's view: a release reads
/// the fill itself and calls [`record_fill`]). `fill_into`: the caller's side's fill
/// histogram (`Hist::Fill` on the allocation side), where the fill counts `weight` times (the
/// events it stands for: a refill's filing stands for the refills not filed since,
/// `HotSlot::fill_weight`).
#[inline(always)]
pub(crate) fn record_state<R: PoolRead>(
    pool: u64,
    found_empty: bool,
    fill_into: Hist,
    weight: u64,
) -> Option<&'static mut PoolRare> {
    record_fill::<R>(
        pool,
        ring_fill::<R>(pool, RingSide::Consumer { found_empty }),
        fill_into,
        weight,
    )
}

/// [`record_state`] with the ring's fill already read.
#[inline(always)]
pub(crate) fn record_fill<R: PoolRead>(
    pool: u64,
    fill: Option<RingFill>,
    fill_into: Hist,
    weight: u64,
) -> Option<&'static mut PoolRare> {
    let o = &config().offsets;
    let mut st = PoolState::default();
    if let Some(f) = fill {
        st.ring_fill = f.fill;
        st.known |= 1;
    }
    let (hold, release) = (
        R::field::<u32>(pool, o.pool_hold_cnt),
        R::field::<u32>(pool, o.pool_release_cnt),
    );
    if hold.is_some() && release.is_some() {
        // Both unwrapped to a defined value: on a failed read the payload is undefined, and
        // LLVM computed the difference before the test, which the verifier refuses as a read
        // of an uninitialised register.
        st.inflight = hold.unwrap_or(0).wrapping_sub(release.unwrap_or(0));
        st.known |= 2;
    }
    let r = rare(pool)?;
    // A reader racing the write may see fields of two events mixed: both are gauges of the
    // same moment, good enough for a gauge.
    r.state = st;
    if let Some(f) = fill {
        file_weighted(r, fill_into, u64::from(f.fill), weight);
    }
    Some(r)
}

/// Which rare-event histogram of a pool (see `PoolRare` for who adds to which, and how).
#[derive(Clone, Copy)]
pub(crate) enum Hist {
    /// Allocation side: plain adds.
    Slow,
    FullRun,
    EmptyRun,
    /// Allocation side: plain adds.
    Fill,
    ReleaseFill,
}

/// The pool's rare-event record, created on first use.
#[inline(always)]
pub(crate) fn rare(pool: u64) -> Option<&'static mut PoolRare> {
    if let Some(r) = POOL_RARE.get_ptr_mut(pool) {
        // SAFETY: a map value lives as long as the program runs; a histogram is added to
        // plainly only by its pool's one allocating context and atomically by everyone else,
        // never both in one word (see `Hist`), and the state is a gauge (see `record_state`).
        return Some(unsafe { &mut *r });
    }
    let zero = ZERO_RARE.get_ptr(0)?;
    // SAFETY: the zero slot is never written. BPF_NOEXIST: a racing CPU's entry stays.
    let _ = POOL_RARE.insert(pool, unsafe { &*zero }, 1);
    // SAFETY: as above.
    POOL_RARE.get_ptr_mut(pool).map(|r| unsafe { &mut *r })
}

/// Adds one sample of `value` to a pool's shared histogram (record created on first use).
#[inline(always)]
pub(crate) fn hist_add(pool: u64, which: Hist, value: u64) {
    if let Some(r) = rare(pool) {
        file(r, which, value);
    }
}

/// Adds one sample of `value` to one of a record's histograms.
#[inline(always)]
pub(crate) fn file(r: &mut PoolRare, which: Hist, value: u64) {
    file_weighted(r, which, value, 1);
}

/// Adds `weight` samples of `value` to one of a record's histograms.
#[inline(always)]
pub(crate) fn file_weighted(r: &mut PoolRare, which: Hist, value: u64, weight: u64) {
    let (arr, alloc_side) = match which {
        Hist::Slow => (&mut r.slow_hist, true),
        Hist::FullRun => (&mut r.full_run_hist, false),
        Hist::EmptyRun => (&mut r.empty_run_hist, false),
        Hist::Fill => (&mut r.fill_hist, true),
        Hist::ReleaseFill => (&mut r.release_fill_hist, false),
    };
    let Some(slot) = arr.get_mut(bucket_index(value)) else {
        return;
    };
    if alloc_side {
        // One writer at a time: the pool's allocation side (see `PoolRare`). The atomic add was
        // the largest part of a refill's cost under the VM lab's emulated CPUs (BENCHMARKS.md).
        *slot += weight;
    } else {
        // SAFETY: an aligned u64 inside the map value; BPF has an atomic add even though the
        // target lacks compare-and-swap (so core's AtomicU64 offers no fetch_add).
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                slot as *mut u64,
                weight,
            )
        };
    }
}

/// Notes on this CPU that `netmem` just left `pool`, with the pool's pages taken in so far
/// (see `ReleaseMark`), read as the program can read the pool (`R`).
#[inline(always)]
pub(crate) fn mark_released<R: PoolRead>(pool: u64, netmem: u64) {
    if let Some(m) = RELEASE_MARK.get_ptr_mut(0) {
        // SAFETY: this CPU's element of a per-CPU array.
        let m = unsafe { &mut *m };
        if m.on != 0 {
            m.netmem = netmem;
            m.pool = pool;
            m.holds =
                R::field::<u32>(pool, config().offsets.pool_hold_cnt).map_or(u64::MAX, u64::from);
        }
    }
}

/// Whether `netmem`, just handed to a single recycle of `pool` that is returning on this CPU,
/// left the pool in it: `page_release` marked it on this CPU ([`mark_released`]) and the
/// pool took no page in since (else the mark may be an old one: the page left before and
/// came back). The mark is taken either way. None when that cannot be told from the mark (the
/// marks are off, or the pool took pages in since: another CPU's allocation may have raced
/// this call's release): the caller reads the page instead.
///
/// What it may get wrong, and why that is rare: a release marked and the recycle's exit run
/// on different CPUs (the task migrated inside the call, which needs a preemptible kernel and
/// a recycle in process context), or a softirq's release between the mark and the exit
/// overwriting it: the page is then counted as kept. Reading the page had neither, at a
/// read (a helper call before the casts) for every recycle that did not keep it in the
/// cache.
#[inline(always)]
pub(crate) fn take_release_mark<R: PoolRead>(pool: u64, netmem: u64) -> Option<bool> {
    // SAFETY: this CPU's element of a per-CPU array.
    let m = unsafe { &mut *RELEASE_MARK.get_ptr_mut(0)? };
    if m.on == 0 {
        return None;
    }
    if m.netmem != netmem || m.pool != pool {
        return Some(false);
    }
    m.netmem = 0;
    let holds = R::field::<u32>(pool, config().offsets.pool_hold_cnt)?;
    (u64::from(holds) == m.holds).then_some(true)
}

/// Ends a run in progress (if any) and files its length.
#[inline(always)]
pub(crate) fn close_run(pool: u64, run: &mut u64, which: Hist) {
    if *run > 0 {
        hist_add(pool, which, *run);
        *run = 0;
    }
}

/// Adds one call of `elapsed` ns carrying `value` (when `Some`) to a site's stats.
#[inline(always)]
pub(crate) fn site_add(stats: &mut SiteStats, elapsed: u64, value: Option<i64>) {
    stats.calls += 1;
    stats.ns_sum += elapsed;
    if let Some(slot) = stats.ns_hist.get_mut(bucket_index(elapsed)) {
        *slot += 1;
    }
    match value {
        Some(v) if v < 0 => stats.errors += 1,
        Some(v) => {
            stats.value_sum += v as u64;
            if let Some(slot) = stats.value_hist.get_mut(bucket_index(v as u64)) {
                *slot += 1;
            }
        }
        None => {}
    }
}

#[inline(always)]
pub(crate) fn site_record(index: u32, elapsed: u64, value: Option<i64>) {
    if let Some(stats) = SITE_STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot of this CPU.
        site_add(unsafe { &mut *stats }, elapsed, value);
    }
}

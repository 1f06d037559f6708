//! The payload of a version-2 frame: a [`Frame`] as what changed since the frame before it.
//!
//! Counters are cumulative and most of them (histogram buckets above all) do not move in
//! 10 ms, so a frame writes, per pool and per site, only the counters that moved and by how
//! much (the index as a gap from the previous one, the change as a zigzag varint), and a
//! pool's identity, queue and state only when they differ from its last frame. serde's
//! data model is written by postcard (varints, no field names). A busy pool costs tens of
//! bytes a frame instead of JSON's kilobyte; the budget the tests hold is
//! [`BYTES_PER_POOL_FRAME`].
//!
//! A frame is decoded against the frame before it, so a reader reads from the start (as
//! every reader of a recording does: each frame's checksum is checked on the way).
use std::collections::HashMap;

use anyhow::{Context, Result};
use ppscope_common::{
    DeviceIdentity, DropKey, NapiCounters, PoolCounters, PoolIdentity, PoolState, PoolTeardown,
    SiteStats, LATENCY_BUCKETS,
};
use serde::{Deserialize, Serialize};

use super::{Frame, RecordedPool};

/// What a frame may cost per pool that moved in it (the budget; the tests measure it).
pub const BYTES_PER_POOL_FRAME: usize = 200;

/// Counters written as a flat list of words, the order of their fields. A new field in one of
/// these types is a compile error in `from_words` (the literals name every field), so it
/// cannot be silently left out of recordings.
trait Words: Sized + Default {
    fn words(&self) -> Vec<u64>;
    /// `w` holds what `words` gave (a decoded frame's are checked to be that long).
    fn from_words(w: &[u64]) -> Self;
}

fn hist(w: &[u64]) -> [u64; LATENCY_BUCKETS] {
    w[..LATENCY_BUCKETS]
        .try_into()
        .expect("a histogram's words")
}

impl Words for PoolCounters {
    fn words(&self) -> Vec<u64> {
        let mut w = vec![
            self.alloc_calls,
            self.frag_calls,
            self.refill_calls,
            self.refill_empty,
            self.refill_pages,
            self.slow_calls,
            self.slow_ns_sum,
            self.mp_alloc_calls,
            self.put_calls,
            self.put_cached,
            self.put_released,
            self.bulk_calls,
            self.bulk_pages,
            self.bulk_released,
            self.hold_pages,
            self.release_pages,
            self.mp_ns_sum,
            self.full_run,
            self.empty_run,
        ];
        for h in [
            &self.slow_hist,
            &self.full_run_hist,
            &self.empty_run_hist,
            &self.fill_hist,
        ] {
            w.extend_from_slice(h);
        }
        // After the histograms: a frame names a word by its index, so a count added later
        // goes last, and a recording made before it has none (0).
        w.push(self.release_full);
        w
    }

    fn from_words(w: &[u64]) -> Self {
        let h = 19;
        Self {
            alloc_calls: w[0],
            frag_calls: w[1],
            refill_calls: w[2],
            refill_empty: w[3],
            refill_pages: w[4],
            slow_calls: w[5],
            slow_ns_sum: w[6],
            mp_alloc_calls: w[7],
            put_calls: w[8],
            put_cached: w[9],
            put_released: w[10],
            bulk_calls: w[11],
            bulk_pages: w[12],
            bulk_released: w[13],
            hold_pages: w[14],
            release_pages: w[15],
            mp_ns_sum: w[16],
            full_run: w[17],
            empty_run: w[18],
            slow_hist: hist(&w[h..]),
            full_run_hist: hist(&w[h + LATENCY_BUCKETS..]),
            empty_run_hist: hist(&w[h + 2 * LATENCY_BUCKETS..]),
            fill_hist: hist(&w[h + 3 * LATENCY_BUCKETS..]),
            release_full: w[h + 4 * LATENCY_BUCKETS],
        }
    }
}

impl Words for SiteStats {
    fn words(&self) -> Vec<u64> {
        let mut w = vec![self.calls, self.ns_sum, self.value_sum, self.errors];
        w.extend_from_slice(&self.ns_hist);
        w.extend_from_slice(&self.value_hist);
        w
    }

    fn from_words(w: &[u64]) -> Self {
        Self {
            calls: w[0],
            ns_sum: w[1],
            value_sum: w[2],
            errors: w[3],
            ns_hist: hist(&w[4..]),
            value_hist: hist(&w[4 + LATENCY_BUCKETS..]),
        }
    }
}

impl Words for NapiCounters {
    fn words(&self) -> Vec<u64> {
        vec![self.polls, self.work, self.full_budget, self.budget]
    }

    fn from_words(w: &[u64]) -> Self {
        Self {
            polls: w[0],
            work: w[1],
            full_budget: w[2],
            budget: w[3],
        }
    }
}

/// The words that moved: (words skipped since the previous one moved, change). Changes are
/// wrapping differences, so a counter that went back (a reused slot) round-trips too.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
struct Moved(Vec<(u32, i64)>);

impl Moved {
    fn between<T: Words>(before: &T, now: &T) -> Self {
        let (before, now) = (before.words(), now.words());
        let mut moved = Vec::new();
        let mut next = 0;
        for (i, (b, n)) in before.iter().zip(&now).enumerate() {
            if b != n {
                moved.push(((i - next) as u32, n.wrapping_sub(*b) as i64));
                next = i + 1;
            }
        }
        Self(moved)
    }

    fn apply<T: Words>(&self, before: &T) -> Result<T> {
        let mut w = before.words();
        let mut at = 0usize;
        for (skip, change) in &self.0 {
            at = at
                .checked_add(*skip as usize)
                .filter(|i| *i < w.len())
                .context("a counter index past the end")?;
            w[at] = w[at].wrapping_add(*change as u64);
            at += 1;
        }
        Ok(T::from_words(&w))
    }
}

/// `None`: as in the entry's previous frame.
type Changed<T> = Option<T>;

fn changed<T: PartialEq + Copy>(before: Option<&T>, now: &T) -> Changed<T> {
    (before != Some(now)).then_some(*now)
}

#[derive(Debug, Serialize, Deserialize)]
struct PackedPool {
    pool: u64,
    counters: Moved,
    identity: Changed<Option<PoolIdentity>>,
    gve_queue: Changed<Option<u32>>,
    state: Changed<Option<PoolState>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PackedFrame {
    /// Nanoseconds since the frame before (the first: since the recording started).
    dt_ns: u64,
    pools: Vec<PackedPool>,
    sites: Vec<Moved>,
    gve_poll: Vec<(u32, Moved)>,
    napi: Vec<(u64, Moved)>,
    napi_devices: Changed<Vec<(u64, u64)>>,
    devices: Changed<Vec<(u64, DeviceIdentity)>>,
    drops: Changed<Vec<(DropKey, u64)>>,
    runtime: Option<(u64, u64)>,
    teardowns: Changed<Vec<(u64, PoolTeardown)>>,
}

fn changed_list<T: PartialEq + Clone>(before: &[T], now: &[T]) -> Changed<Vec<T>> {
    (before != now).then(|| now.to_vec())
}

/// The keyed counters of a frame (its pools, NAPI instances, gve queues) by key.
fn by_key<K: std::hash::Hash + Eq + Copy, V>(list: &[V], key: impl Fn(&V) -> K) -> HashMap<K, &V> {
    list.iter().map(|v| (key(v), v)).collect()
}

/// Packs frames, each against the one it packed before.
#[derive(Default)]
pub struct Packer {
    before: Frame,
}

impl Packer {
    pub fn pack(&mut self, frame: Frame) -> Result<Vec<u8>> {
        let before = &self.before;
        let pools_before = by_key(&before.pools, |p| p.pool);
        let zero = PoolCounters::default();
        let pools = frame
            .pools
            .iter()
            .map(|p| {
                let b = pools_before.get(&p.pool);
                PackedPool {
                    pool: p.pool,
                    counters: Moved::between(b.map_or(&zero, |b| &b.counters), &p.counters),
                    identity: changed(b.map(|b| &b.identity), &p.identity),
                    gve_queue: changed(b.map(|b| &b.gve_queue), &p.gve_queue),
                    state: changed(b.map(|b| &b.state), &p.state),
                }
            })
            .collect();
        let packed = PackedFrame {
            dt_ns: frame.t_ns.wrapping_sub(before.t_ns),
            pools,
            sites: frame
                .sites
                .iter()
                .enumerate()
                .map(|(i, s)| Moved::between(before.sites.get(i).unwrap_or(&Default::default()), s))
                .collect(),
            gve_poll: keyed_moves(&before.gve_poll, &frame.gve_poll),
            napi: keyed_moves(&before.napi, &frame.napi),
            napi_devices: changed_list(&before.napi_devices, &frame.napi_devices),
            devices: changed_list(&before.devices, &frame.devices),
            drops: changed_list(&before.drops, &frame.drops),
            runtime: frame.runtime,
            teardowns: changed_list(&before.teardowns, &frame.teardowns),
        };
        let bytes = postcard::to_stdvec(&packed).context("a frame does not pack")?;
        self.before = frame;
        Ok(bytes)
    }
}

fn keyed_moves<K: std::hash::Hash + Eq + Copy, T: Words>(
    before: &[(K, T)],
    now: &[(K, T)],
) -> Vec<(K, Moved)> {
    let before = by_key(before, |(k, _)| *k);
    now.iter()
        .map(|(k, v)| {
            let b = before.get(k).map(|(_, b)| b);
            (*k, Moved::between(b.unwrap_or(&T::default()), v))
        })
        .collect()
}

fn keyed_apply<K: std::hash::Hash + Eq + Copy, T: Words + Copy>(
    before: &[(K, T)],
    moved: &[(K, Moved)],
) -> Result<Vec<(K, T)>> {
    let before = by_key(before, |(k, _)| *k);
    moved
        .iter()
        .map(|(k, m)| {
            let b = before.get(k).map_or_else(T::default, |(_, b)| *b);
            Ok((*k, m.apply(&b)?))
        })
        .collect()
}

/// Unpacks frames, each against the one it unpacked before.
#[derive(Default)]
pub struct Unpacker {
    before: Frame,
}

impl Unpacker {
    pub fn unpack(&mut self, bytes: &[u8]) -> Result<Frame> {
        let (packed, rest): (PackedFrame, _) = postcard::take_from_bytes(bytes)?;
        anyhow::ensure!(rest.is_empty(), "{} bytes after the frame", rest.len());
        anyhow::ensure!(
            packed.sites.len() <= SITE_LIMIT,
            "{} sites in a frame",
            packed.sites.len()
        );
        // A pool that did not move is a few bytes written and a kilobyte read back: more
        // than ppscope can track is a forged frame, refused before it is built.
        let keyed = packed
            .pools
            .len()
            .max(packed.napi.len())
            .max(packed.gve_poll.len());
        anyhow::ensure!(
            keyed <= ENTRY_LIMIT,
            "{keyed} pools or NAPI instances in a frame (ppscope tracks at most {ENTRY_LIMIT})"
        );
        let before = &self.before;
        let pools_before = by_key(&before.pools, |p| p.pool);
        let pools = packed
            .pools
            .iter()
            .map(|p| {
                let b = pools_before.get(&p.pool);
                Ok(RecordedPool {
                    pool: p.pool,
                    counters: p
                        .counters
                        .apply(b.map_or(&PoolCounters::default(), |b| &b.counters))?,
                    identity: p.identity.unwrap_or_else(|| b.and_then(|b| b.identity)),
                    gve_queue: p.gve_queue.unwrap_or_else(|| b.and_then(|b| b.gve_queue)),
                    state: p.state.unwrap_or_else(|| b.and_then(|b| b.state)),
                })
            })
            .collect::<Result<_>>()?;
        let frame = Frame {
            t_ns: before.t_ns.wrapping_add(packed.dt_ns),
            pools,
            sites: packed
                .sites
                .iter()
                .enumerate()
                .map(|(i, m)| m.apply(before.sites.get(i).unwrap_or(&Default::default())))
                .collect::<Result<_>>()?,
            gve_poll: keyed_apply(&before.gve_poll, &packed.gve_poll)?,
            napi: keyed_apply(&before.napi, &packed.napi)?,
            napi_devices: packed
                .napi_devices
                .unwrap_or_else(|| before.napi_devices.clone()),
            devices: packed.devices.unwrap_or_else(|| before.devices.clone()),
            drops: packed.drops.unwrap_or_else(|| before.drops.clone()),
            runtime: packed.runtime,
            teardowns: packed.teardowns.unwrap_or_else(|| before.teardowns.clone()),
        };
        self.before = frame.clone();
        Ok(frame)
    }
}

/// More sites than any ppscope records means a corrupt frame (a reader must not build
/// millions of them from a forged length).
const SITE_LIMIT: usize = 64;
/// The most pools (or NAPI instances, gve queues) a frame can hold: the largest
/// `--map-capacity`.
const ENTRY_LIMIT: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word in its place: distinct values survive words → fields → words.
    #[test]
    fn words_round_trip_every_field() {
        fn check<T: Words>() {
            let w: Vec<u64> = (1..=T::default().words().len() as u64).collect();
            assert_eq!(T::from_words(&w).words(), w);
        }
        check::<PoolCounters>();
        check::<SiteStats>();
        check::<NapiCounters>();
        assert_eq!(
            PoolCounters::default().words().len(),
            19 + 4 * LATENCY_BUCKETS + 1
        );
    }

    #[test]
    fn moved_holds_only_what_moved_and_goes_back_too() {
        let before = NapiCounters {
            polls: 10,
            work: 100,
            full_budget: 3,
            budget: 64,
        };
        let now = NapiCounters {
            polls: 12,
            full_budget: 1,
            ..before
        };
        let m = Moved::between(&before, &now);
        assert_eq!(m, Moved(vec![(0, 2), (1, -2)]));
        assert_eq!(m.apply(&before).unwrap(), now);
        assert!(Moved(vec![(4, 1)]).apply(&before).is_err());
        assert!(Moved(vec![(u32::MAX, 1)]).apply(&before).is_err());
    }
}

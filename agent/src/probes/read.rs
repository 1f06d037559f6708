//! Reading the maps: one [`RawSample`] of every pool, site, NAPI instance and drop.
use std::{sync::Arc, time::Instant};

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, IterableMap, Map, MapError, PerCpuArray, PerCpuHashMap},
    Pod,
};
use ppscope_common::{
    site_stat, DeviceIdentity, DropKey, HotSlot, NapiCounters, NapiHot, NapiSlot, PoolIdentity,
    PoolRare, PoolTeardown, SiteStats,
};

use super::{
    batch::{self, PerCpuRows},
    hot_slot,
    kept::{KeptRecords, Records, Seen},
    kept_devices::Devices,
    Probes,
};
use crate::model::{accumulate_site, ByAddr, PoolHists, ProgramRuntime, RawPool, RawSample};

impl Probes {
    /// Reads the cumulative counters of every pool and site seen so far.
    pub fn sample(&mut self) -> Result<RawSample> {
        let map = |name: &str| {
            self.ebpf
                .map(name)
                .with_context(|| format!("map {name} missing from the object"))
        };
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow::anyhow!("{what}: {e}"))?;

        let rows = with_slots::<HotSlot>(map("HOT_SLOT")?, map("POOL_COUNTERS")?, cpus)?;
        // Sized once: growing it moved every pool's kilobyte of counters at each doubling.
        let mut pools: ByAddr<u64, RawPool> =
            ByAddr::with_capacity_and_hasher(rows.len(), Default::default());
        // Each pool's folds (the sum of its entries' `fold_head`): with its summed counts, what
        // tells the kept records whether it moved.
        let mut folds: ByAddr<u64, u64> =
            ByAddr::with_capacity_and_hasher(rows.len(), Default::default());
        for (pool, per_cpu) in rows.iter() {
            let entry = pools.entry(pool).or_default();
            let f = folds.entry(pool).or_default();
            for c in per_cpu {
                entry.counters.add_hot(c);
                *f = f.wrapping_add(c.fold_head);
            }
        }
        drop(rows);
        // Records and identities: taken from the last sample for the pools whose counts held
        // still (`kept`), read for the others, pool by pool while they are few.
        let mut stale = Vec::new();
        for (pool, entry) in pools.iter_mut() {
            match self.kept.unchanged(*pool, &seen_of(entry, &folds, pool)) {
                Some(r) => {
                    entry.hists = r.hists.clone();
                    entry.state = r.state;
                    entry.identity = r.identity;
                }
                None => stale.push(*pool),
            }
        }
        // A pool's histograms that did not change since the last read are that read's,
        // shared (`RawPool::hists`).
        let take_record = |kept: &KeptRecords, entry: &mut RawPool, pool: u64, r: &PoolRare| {
            let now = PoolHists::of(r);
            entry.hists = Some(match kept.hists(pool) {
                Some(h) if **h == now => Arc::clone(h),
                _ => Arc::new(now),
            });
            entry.state = (r.state.known != 0).then_some(r.state);
        };
        let whole = self.kept.read_whole(stale.len(), pools.len());
        if whole {
            // Every pool read again (one the maps no longer hold has none), kept for the
            // pools the counters know as they are read (a copy of the whole map at 10,000
            // pools was the agent's largest allocation). What was taken from the last read
            // above is undone here: at 10,000 pools that is every 60th sample or when a
            // quarter moved (`KeptRecords::read_whole`); with a few busy pools, every sample.
            for entry in pools.values_mut() {
                entry.hists = None;
                entry.state = None;
                entry.identity = None;
            }
            each::<u64, PoolRare>(map("POOL_RARE")?, |pool, r| {
                if let Some(entry) = pools.get_mut(&pool) {
                    take_record(&self.kept, entry, pool, &r);
                }
            })?;
            each::<u64, PoolIdentity>(map("POOL_IDENTITY")?, |pool, id| {
                if let Some(entry) = pools.get_mut(&pool) {
                    entry.identity = Some(id);
                }
            })?;
        } else {
            let records: BpfHashMap<_, u64, PoolRare> = BpfHashMap::try_from(map("POOL_RARE")?)?;
            let identities: BpfHashMap<_, u64, PoolIdentity> =
                BpfHashMap::try_from(map("POOL_IDENTITY")?)?;
            for pool in &stale {
                let Some(entry) = pools.get_mut(pool) else {
                    continue;
                };
                if let Some(r) = found(records.get(pool, 0))? {
                    take_record(&self.kept, entry, *pool, &r);
                }
                entry.identity = found(identities.get(pool, 0))?;
            }
        }
        let known = pools.len();
        self.kept.replace(
            pools.iter().map(|(pool, e)| {
                let records = Records {
                    hists: e.hists.clone(),
                    state: e.state,
                    identity: e.identity,
                };
                (*pool, seen_of(e, &folds, pool), records)
            }),
            known,
            whole,
        );
        self.ids.name(&mut pools);
        each::<u64, u32>(map("GVE_POOL_QUEUE")?, |pool, queue| {
            if let Some(entry) = pools.get_mut(&pool) {
                entry.gve_queue = Some(queue);
            }
        })?;
        let site_stats: PerCpuArray<_, SiteStats> = PerCpuArray::try_from(map("SITE_STATS")?)?;
        let mut sites = [SiteStats::default(); site_stat::COUNT as usize];
        for (i, slot) in sites.iter_mut().enumerate() {
            if let Ok(per_cpu) = site_stats.get(&(i as u32), 0) {
                for s in per_cpu.iter() {
                    accumulate_site(slot, s);
                }
            }
        }
        let mut gve = ByAddr::default();
        for (queue, per_cpu) in all_per_cpu::<u32, SiteStats>(map("GVE_POLL")?, cpus)?.iter() {
            let slot: &mut SiteStats = gve.entry(queue).or_default();
            for s in per_cpu {
                accumulate_site(slot, s);
            }
        }
        let mut napi = ByAddr::default();
        let napi_rows = with_slots::<NapiSlot>(map("NAPI_SLOT")?, map("NAPI_COUNTERS")?, cpus)?;
        for (key, per_cpu) in napi_rows.iter() {
            let slot: &mut NapiCounters = napi.entry(key).or_default();
            for NapiHot { counts: c, .. } in per_cpu {
                slot.polls += c.polls;
                slot.work += c.work;
                slot.full_budget += c.full_budget;
                slot.budget += c.budget;
            }
        }
        let mut drop_counts = ByAddr::default();
        for (key, per_cpu) in all_per_cpu::<DropKey, u64>(map("DROPS")?, cpus)?.iter() {
            *drop_counts.entry(key).or_insert(0u64) += per_cpu.iter().sum::<u64>();
        }
        // The identities after the counts: each is written before the first count naming it,
        // so a count read has its identity in the map by then, unless the LRU evicted it (see
        // `kept_devices`).
        let Devices {
            napi_devices,
            devices,
        } = match self
            .kept_devices
            .unchanged(napi.keys().copied(), drop_counts.keys().map(|k| k.netdev))
        {
            Some(kept) => kept,
            None => {
                let read = Devices::of(
                    all::<u64, DeviceIdentity>(map("NAPI_IDENTITY")?)?,
                    all::<u64, DeviceIdentity>(map("DROP_DEVICES")?)?,
                );
                self.kept_devices.replace(
                    &read,
                    napi.keys().copied(),
                    drop_counts.keys().map(|k| k.netdev),
                );
                read
            }
        };
        // Read in batches (a churning device leaves thousands of destroyed pools here: one by
        // one that was a syscall pair per entry per collection, and the agent fell behind in
        // the VM lab's churn test; a lookup per known pool was 10,000 syscalls a collection
        // at 10,000 pools), kept for the pools the counters know.
        let teardowns = all::<u64, PoolTeardown>(map("POOL_TEARDOWN")?)?
            .into_iter()
            .filter(|(pool, _)| pools.contains_key(pool))
            .collect();
        if let Some(clock) = self.startup.take() {
            clock.mark("first sample taken");
        }
        Ok(RawSample {
            at: Instant::now(),
            pools,
            sites,
            gve_poll: gve,
            napi,
            napi_devices,
            devices,
            drops: drop_counts,
            runtime: self.runtime(),
            teardowns,
        })
    }

    /// Pools ever added to the pool map (on first sight): minus the pools in it, what the
    /// LRU evicted because the map was full.
    pub fn pools_added(&self) -> Result<u64> {
        let map = self
            .ebpf
            .map("POOL_INSERTS")
            .context("map POOL_INSERTS missing from the object")?;
        let added: PerCpuArray<_, u64> = PerCpuArray::try_from(map)?;
        Ok(added.get(&0, 0)?.iter().sum())
    }

    /// Run time and run count of ppscope's own programs: only while the kernel keeps BPF
    /// stats (`SourceFacts::bpf_stats`). Without them the kernel's counters do not move, and
    /// reporting them would print a guessed 0.
    fn runtime(&self) -> Option<ProgramRuntime> {
        if !self.facts.bpf_stats.on() {
            return None;
        }
        let mut total = ProgramRuntime::default();
        for (_, prog) in self.ebpf.programs() {
            if let Ok(info) = prog.info() {
                total.run_ns += info.run_time().as_nanos() as u64;
                total.runs += info.run_count();
            }
        }
        Some(total)
    }
}

/// How often a copy taken while a fold was writing it is taken again: a fold is a few dozen
/// stores, so a second copy is almost always whole; past this the last copy is used.
const SETTLE_TRIES: usize = 32;

/// Every key's per-CPU entries of a slotted hash map, each with what the key's slot on its CPU holds
/// for the key folded in. The slots, the hash, the slots again: see `hot_slot` for why in
/// this order. A hash copy that caught a fold is only right between slot copies taken around
/// it, so the three are read again together.
fn with_slots<S: hot_slot::Slot + Pod>(
    slots: &Map,
    hash: &Map,
    cpus: usize,
) -> Result<PerCpuRows<u64, S::Entry>>
where
    S::Entry: Pod + Default,
{
    let read = || -> Result<_> {
        let before = settled_slots::<S>(slots)?;
        let rows = all_per_cpu::<u64, S::Entry>(hash, cpus)?;
        Ok((before, rows, settled_slots::<S>(slots)?))
    };
    let (mut before, mut rows, mut after) = read()?;
    for _ in 1..SETTLE_TRIES {
        if rows.iter().all(|(_, c)| c.iter().all(S::entry_settled)) {
            break;
        }
        (before, rows, after) = read()?;
    }
    rows.fold_in(|key, cpu, entry| {
        let slot = S::index(key) as usize;
        let per_cpu = |copy: &[Vec<S>]| copy.get(slot).and_then(|c| c.get(cpu)).copied();
        if let (Some(b), Some(a)) = (per_cpu(&before), per_cpu(&after)) {
            hot_slot::fold(entry, key, &b, &a);
        }
    });
    Ok(rows)
}

/// Every slot on every CPU (see `hot_slot`), `[slot][cpu]`, each copied again while any of
/// its copies caught a fold.
fn settled_slots<S: hot_slot::Slot + Pod>(map: &Map) -> Result<Vec<Vec<S>>> {
    let slots: PerCpuArray<_, S> = PerCpuArray::try_from(map)?;
    (0..S::SLOTS)
        .map(|i| {
            let mut copy: Vec<S> = slots.get(&i, 0)?.iter().copied().collect();
            for _ in 1..SETTLE_TRIES {
                if copy.iter().all(S::settled) {
                    break;
                }
                copy = slots.get(&i, 0)?.iter().copied().collect();
            }
            Ok(copy)
        })
        .collect()
}

/// What the kept records compare a pool by (its counts summed over CPUs, and its folds).
fn seen_of(entry: &RawPool, folds: &ByAddr<u64, u64>, pool: &u64) -> Seen {
    Seen {
        counts: entry.counters,
        folds: folds.get(pool).copied().unwrap_or(0),
    }
}

/// A lookup's value, None when the key is not there (evicted since the counters were read).
fn found<V>(got: Result<V, MapError>) -> Result<Option<V>> {
    match got {
        Ok(v) => Ok(Some(v)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every entry of a hash map: in batches where the kernel does them ([`batch`]), else one by
/// one. An entry evicted between the key and value lookups of the one-by-one walk is skipped,
/// not fatal.
fn all<K: Pod, V: Pod>(map: &Map) -> Result<Vec<(K, V)>> {
    let mut rows = Vec::new();
    each(map, |k, v| rows.push((k, v)))?;
    Ok(rows)
}

/// Calls `f` with every entry of a hash map, as [`all`] reads them, without keeping them.
fn each<K: Pod, V: Pod>(map: &Map, mut f: impl FnMut(K, V)) -> Result<()> {
    let typed: BpfHashMap<_, K, V> = BpfHashMap::try_from(map)?;
    if !batch::for_each::<K, V>(typed.map(), &mut f)? {
        for (k, v) in typed.iter().filter_map(|item| item.ok()) {
            f(k, v);
        }
    }
    Ok(())
}

/// Every entry of a per-CPU hash map, one value per possible CPU, as [`all`] reads them.
fn all_per_cpu<K: Pod, V: Pod + Default>(map: &Map, cpus: usize) -> Result<PerCpuRows<K, V>> {
    let typed: PerCpuHashMap<_, K, V> = PerCpuHashMap::try_from(map)?;
    if let Some(rows) = batch::per_cpu_entries::<K, V>(typed.map(), cpus)? {
        return Ok(rows);
    }
    let mut rows = PerCpuRows::new(cpus);
    for (k, per_cpu) in typed.iter().filter_map(|item| item.ok()) {
        rows.push(k, per_cpu.iter().copied());
    }
    Ok(rows)
}

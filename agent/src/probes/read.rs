//! Reading the maps: one [`RawSample`] of every pool, site, NAPI instance and drop.
use std::{collections::HashMap, time::Instant};

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, PerCpuArray, PerCpuHashMap};
use ppscope_common::{
    site_stat, DeviceIdentity, DropKey, NapiCounters, PoolHists, PoolHot, PoolIdentity, PoolState,
    PoolTeardown, SiteStats,
};

use super::Probes;
use crate::model::{accumulate_site, ProgramRuntime, RawPool, RawSample};

impl Probes {
    /// Reads the cumulative counters of every pool and site seen so far.
    pub fn sample(&self) -> Result<RawSample> {
        let map = |name: &str| {
            self.ebpf
                .map(name)
                .with_context(|| format!("map {name} missing from the object"))
        };
        let counters: PerCpuHashMap<_, u64, PoolHot> =
            PerCpuHashMap::try_from(map("POOL_COUNTERS")?)?;
        let hists: BpfHashMap<_, u64, PoolHists> = BpfHashMap::try_from(map("POOL_HISTS")?)?;
        let identities: BpfHashMap<_, u64, PoolIdentity> =
            BpfHashMap::try_from(map("POOL_IDENTITY")?)?;
        let gve_queues: BpfHashMap<_, u64, u32> = BpfHashMap::try_from(map("GVE_POOL_QUEUE")?)?;
        let site_stats: PerCpuArray<_, SiteStats> = PerCpuArray::try_from(map("SITE_STATS")?)?;
        let gve_poll: PerCpuHashMap<_, u32, SiteStats> = PerCpuHashMap::try_from(map("GVE_POLL")?)?;

        let mut pools: HashMap<u64, RawPool> = HashMap::new();
        for item in counters.iter() {
            // A pool evicted between key and value lookups is skipped, not fatal.
            let Ok((pool, per_cpu)) = item else { continue };
            let entry = pools.entry(pool).or_default();
            for c in per_cpu.iter() {
                entry.counters.add_hot(c);
            }
        }
        for item in hists.iter() {
            let Ok((pool, h)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.counters.set_hists(&h);
            }
        }
        for item in identities.iter() {
            let Ok((pool, id)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.identity = Some(id);
            }
        }
        for item in gve_queues.iter() {
            let Ok((pool, queue)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.gve_queue = Some(queue);
            }
        }
        let states: BpfHashMap<_, u64, PoolState> = BpfHashMap::try_from(map("POOL_STATE")?)?;
        for item in states.iter() {
            let Ok((pool, st)) = item else { continue };
            if let Some(entry) = pools.get_mut(&pool) {
                entry.state = Some(st);
            }
        }
        let mut sites = [SiteStats::default(); site_stat::COUNT as usize];
        for (i, slot) in sites.iter_mut().enumerate() {
            if let Ok(per_cpu) = site_stats.get(&(i as u32), 0) {
                for s in per_cpu.iter() {
                    accumulate_site(slot, s);
                }
            }
        }
        let mut gve = HashMap::new();
        for item in gve_poll.iter() {
            let Ok((queue, per_cpu)) = item else { continue };
            let slot: &mut SiteStats = gve.entry(queue).or_default();
            for s in per_cpu.iter() {
                accumulate_site(slot, s);
            }
        }
        let napi_counters: PerCpuHashMap<_, u64, NapiCounters> =
            PerCpuHashMap::try_from(map("NAPI_COUNTERS")?)?;
        let napi_ids: BpfHashMap<_, u64, DeviceIdentity> =
            BpfHashMap::try_from(map("NAPI_IDENTITY")?)?;
        let drops: PerCpuHashMap<_, DropKey, u64> = PerCpuHashMap::try_from(map("DROPS")?)?;
        let drop_devices: BpfHashMap<_, u64, DeviceIdentity> =
            BpfHashMap::try_from(map("DROP_DEVICES")?)?;
        let mut napi = HashMap::new();
        for item in napi_counters.iter() {
            let Ok((key, per_cpu)) = item else { continue };
            let slot: &mut NapiCounters = napi.entry(key).or_default();
            for c in per_cpu.iter() {
                slot.polls += c.polls;
                slot.work += c.work;
                slot.full_budget += c.full_budget;
                slot.budget += c.budget;
            }
        }
        let mut devices = HashMap::new();
        let mut napi_devices = HashMap::new();
        for item in napi_ids.iter() {
            let Ok((key, id)) = item else { continue };
            napi_devices.insert(key, id.netdev);
            devices.insert(id.netdev, id);
        }
        for item in drop_devices.iter() {
            let Ok((key, id)) = item else { continue };
            devices.entry(key).or_insert(id);
        }
        let mut drop_counts = HashMap::new();
        for item in drops.iter() {
            let Ok((key, per_cpu)) = item else { continue };
            *drop_counts.entry(key).or_insert(0u64) += per_cpu.iter().sum::<u64>();
        }
        let teardown_map: BpfHashMap<_, u64, PoolTeardown> =
            BpfHashMap::try_from(map("POOL_TEARDOWN")?)?;
        // Looked up for the pools the counters know, not iterated: a churning device leaves
        // thousands of destroyed pools in this map, and a syscall pair per entry per
        // collection made the agent fall behind (VM lab churn test).
        let teardowns = pools
            .keys()
            .filter_map(|pool| Some((*pool, teardown_map.get(pool, 0).ok()?)))
            .collect();
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

    /// Run time and run count of ppscope's own programs (only while BPF stats are on).
    fn runtime(&self) -> Option<ProgramRuntime> {
        self._stats.as_ref()?;
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

//! Returns that found their call's frame taken by another call (`UnmatchedReturns`): read per
//! hook for the self-metrics, and a warning when the recycle pair finds fewer of its own calls
//! than it loses.
//!
//! An entry/exit pair knows its call by an owner kept in a per-CPU frame: the task, or for the
//! kprobe recycle on x86-64 the stack pointer, whose place at the return is the architecture's
//! return handler's (`frames::Owner` in `ebpf/`). A kernel whose handler reported another
//! would leave every recycle uncounted without a sign: the returns would find their entries'
//! frames and take none. Counted, that is loud. A few are expected anywhere (a task that slept
//! or was preempted inside the call came back on another CPU, whose frame another call holds),
//! so only a recycle pair whose unmatched returns outnumber the recycles it counted is warned
//! of. Returns whose entry never ran, or entries whose return the kernel dropped, leave no
//! frame to find and are not counted here.
use anyhow::{Context, Result};
use aya::maps::PerCpuArray;
use ppscope_common::{site, UnmatchedReturns};

use super::{hooks::HOOKS, Probes};
use crate::{
    model::{since, RawSample},
    snapshot::Backend,
};

/// Unmatched returns below this many are never warned of, however few the calls counted: a
/// quiet host's handful of recycles, one of them in a task that moved, is not a broken pair.
const WARN_FROM: u64 = 32;

/// A hook's unmatched returns since its programs were loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmatched {
    pub hook: &'static str,
    pub returns: u64,
}

/// The recycle pair's returns against its counts since the first check, and whether it was
/// warned of (once a run).
#[derive(Debug, Default)]
pub(super) struct RecyclePairCheck {
    /// The pair's unmatched returns at the first check (the baseline).
    unmatched_at_start: Option<u64>,
    /// Single recycles counted since the first check: each check's difference over the pools
    /// of both samples, added up, so a pool the map evicted takes none of it back.
    counted: u64,
    warned: bool,
}

impl RecyclePairCheck {
    /// One check: the pair's unmatched returns now (since load), and the recycles counted
    /// since the last check. The warning, the first time the unmatched returns since the
    /// first check reach [`WARN_FROM`] and outnumber the recycles counted meanwhile.
    fn observe(&mut self, unmatched_now: u64, counted_since_last: u64) -> Option<String> {
        let start = *self.unmatched_at_start.get_or_insert(unmatched_now);
        self.counted += counted_since_last;
        let lost = since(unmatched_now, start);
        if self.warned || lost < WARN_FROM || lost <= self.counted {
            return None;
        }
        self.warned = true;
        Some(format!(
            "recycle: {lost} returns found their call's frame held by another call, against \
             {} recycles counted: the kprobe pair cannot tell its own calls on this kernel, \
             so recycles go uncounted; use --backend fentry where the kernel has it, and report \
             the kernel (uname -r)",
            self.counted
        ))
    }
}

/// Single recycles counted between two samples, over the pools of the later one (a pool's
/// count that went backwards was made again: all of it is new, `since`).
fn recycles_counted(earlier: &RawSample, later: &RawSample) -> u64 {
    later
        .pools
        .iter()
        .map(|(pool, p)| {
            let before = earlier.pools.get(pool).map_or(0, |e| e.counters.put_calls);
            since(p.counters.put_calls, before)
        })
        .sum()
}

impl Probes {
    /// Whether the recycle pair was found to lose more of its calls than it counts (and
    /// warned of): for the self-metrics.
    pub fn recycle_pair_lost(&self) -> bool {
        self.recycle_pair.warned
    }

    /// Every attached hook whose entry/exit pair may use a frame on some backend (an fexit
    /// alone uses none and shows 0), and its returns that found another call's frame since
    /// the start: one read of a per-CPU array.
    pub fn unmatched_returns(&self) -> Result<Vec<Unmatched>> {
        let map = self
            .ebpf
            .map("UNMATCHED_RETURNS")
            .context("map UNMATCHED_RETURNS missing from the object")?;
        let counts: PerCpuArray<_, UnmatchedReturns> = PerCpuArray::try_from(map)?;
        let per_cpu = counts.get(&0, 0)?;
        let attached = |name: &str| {
            self.facts
                .hooks
                .iter()
                .any(|h| h.hook == name && h.attached())
        };
        Ok(HOOKS
            .iter()
            .filter(|def| attached(def.name))
            .filter_map(|def| {
                let site = def.frame_site? as usize;
                Some(Unmatched {
                    hook: def.name,
                    returns: per_cpu.iter().filter_map(|c| c.by_site.get(site)).sum(),
                })
            })
            .collect())
    }

    /// Reads the unmatched returns, and warns once a run of a recycle pair that lost more of
    /// its calls than it counted since the first check. `earlier` is the sample the last check
    /// was made at (the first check's: the same as `now`), `now` one taken just before.
    ///
    /// The recycles counted (a pass over every pool) are added up only while there is a pair
    /// to judge: the recycle on its kprobe pair (its fexit opens no frame, so never loses a
    /// return) and not yet warned of.
    pub fn check_unmatched(
        &mut self,
        earlier: &RawSample,
        now: &RawSample,
    ) -> Result<Vec<Unmatched>> {
        let unmatched = self.unmatched_returns()?;
        if self.recycle_pair.warned {
            return Ok(unmatched);
        }
        let on_kprobes = |name: &str| {
            self.facts
                .hooks
                .iter()
                .any(|h| h.hook == name && h.backend == Some(Backend::Kprobe))
        };
        let recycle = HOOKS
            .iter()
            .find(|def| def.frame_site == Some(site::PUT))
            .filter(|def| on_kprobes(def.name))
            .and_then(|def| unmatched.iter().find(|u| u.hook == def.name));
        if let Some(r) = recycle {
            let counted = recycles_counted(earlier, now);
            if let Some(warning) = self.recycle_pair.observe(r.returns, counted) {
                log::warn!("{warning}");
            }
        }
        Ok(unmatched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RawPool;

    #[test]
    fn a_recycle_pair_that_loses_most_of_its_returns_is_warned_of_once() {
        let mut check = RecyclePairCheck::default();
        // Loaded before the baseline: what it lost then is not this run's.
        assert_eq!(check.observe(7, 0), None);
        assert_eq!(check.observe(7 + 20, 0), None);
        let w = check.observe(7 + 51, 0).expect("a warning");
        assert!(w.starts_with("recycle: 51 returns"), "{w}");
        assert!(w.contains("against 0 recycles counted"), "{w}");
        assert!(w.contains("--backend fentry"), "{w}");
        assert_eq!(check.observe(7 + 5_000, 0), None, "warned once");
    }

    #[test]
    fn a_busy_pair_losing_a_few_is_not_warned_of_whatever_the_map_evicts() {
        let mut check = RecyclePairCheck::default();
        check.observe(0, 0);
        // A trickle of moved tasks against many recycles, check after check; the counts are
        // differences, so pools leaving the map take none of them back.
        for i in 1..=100 {
            assert_eq!(check.observe(i * 40, 1_000), None);
        }
        // Fewer than WARN_FROM with nothing counted: a quiet host, not a broken pair.
        let mut quiet = RecyclePairCheck::default();
        quiet.observe(0, 0);
        assert_eq!(quiet.observe(WARN_FROM - 1, 0), None);
        assert!(quiet.observe(WARN_FROM, 0).is_some());
    }

    #[test]
    fn recycles_counted_are_the_later_samples_pools_differences() {
        let at = std::time::Instant::now();
        let pool = |put_calls| {
            let mut p = RawPool::default();
            p.counters.put_calls = put_calls;
            p
        };
        let mut earlier = RawSample::empty(at);
        earlier.pools.insert(1, pool(100));
        earlier.pools.insert(2, pool(500));
        earlier.pools.insert(3, pool(900));
        let mut later = RawSample::empty(at);
        later.pools.insert(1, pool(130)); // 30 more
        later.pools.insert(2, pool(20)); // evicted and made again: 20 new
        later.pools.insert(4, pool(5)); // new: 5 ; pool 3 evicted: nothing
        assert_eq!(recycles_counted(&earlier, &later), 55);
    }
}

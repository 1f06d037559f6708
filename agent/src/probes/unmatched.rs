//! Returns that found their call's frame taken by another call (`UnmatchedReturns`): read per
//! hook for the self-metrics, and a warning when a pair finds almost none of its own calls.
//!
//! An entry/exit pair knows its call by an owner kept in a per-CPU frame: the task, or for the
//! kprobe recycle the stack pointer, whose place at the return is the architecture's return
//! handler's (`frames::Owner` in `ebpf/`). A kernel whose handler reported another would leave
//! every recycle uncounted without a sign: the returns would find their entries' frames and
//! take none. Counted, that is loud. A few are expected anywhere (a task that slept inside
//! the call came back on another CPU, whose frame another call holds), so only a pair whose
//! unmatched returns outnumber the calls it counted is warned of.
use anyhow::{Context, Result};
use aya::maps::PerCpuArray;
use ppscope_common::UnmatchedReturns;

use super::{hooks::HOOKS, Probes};
use crate::model::RawSample;

/// Unmatched returns below this many are never warned of, however few the calls counted: a
/// quiet host's handful of recycles, one of them in a task that moved, is not a broken pair.
pub const WARN_FROM: u64 = 32;

/// A hook's unmatched returns since its programs were loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmatched {
    pub hook: &'static str,
    pub returns: u64,
}

impl Probes {
    /// Every attached hook with an entry/exit pair, and its returns that found another call's
    /// frame since the start: one read of a per-CPU array.
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

    /// Reads the unmatched returns and warns, once a run, of the recycle pair that finds
    /// fewer of its own calls than it loses (`sample`: a sample taken just before, whose
    /// recycles counted are the matched returns). What was read is returned either way.
    pub fn check_unmatched(&mut self, sample: &RawSample) -> Result<Vec<Unmatched>> {
        let unmatched = self.unmatched_returns()?;
        if !self.unmatched_warned {
            let counted = sample.pools.values().map(|p| p.counters.put_calls).sum();
            if let Some(warning) = recycle_pair_lost(&unmatched, counted) {
                log::warn!("{warning}");
                self.unmatched_warned = true;
            }
        }
        Ok(unmatched)
    }
}

/// The warning for a recycle pair whose unmatched returns (at least [`WARN_FROM`]) outnumber
/// the recycles counted (`counted`), or None.
pub fn recycle_pair_lost(unmatched: &[Unmatched], counted: u64) -> Option<String> {
    let lost = unmatched.iter().find(|u| u.hook == "recycle")?.returns;
    (lost >= WARN_FROM && lost > counted).then(|| {
        format!(
            "recycle: {lost} returns found their call's frame held by another call, against \
             {counted} recycles counted: on this kernel the kprobe pair cannot tell its own \
             calls (the return handler reports a stack pointer ppscope was not built for), so \
             recycles go uncounted; use --backend fentry where the kernel has it, and report \
             the kernel (uname -r)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recycle(returns: u64) -> Vec<Unmatched> {
        vec![
            Unmatched {
                hook: "refill",
                returns: 1_000,
            },
            Unmatched {
                hook: "recycle",
                returns,
            },
        ]
    }

    #[test]
    fn a_recycle_pair_that_loses_most_of_its_returns_is_warned_of() {
        let w = recycle_pair_lost(&recycle(51), 0).expect("a warning");
        assert!(w.starts_with("recycle: 51 returns"), "{w}");
        assert!(w.contains("0 recycles counted"), "{w}");
        assert!(w.contains("--backend fentry"), "{w}");
        assert!(recycle_pair_lost(&recycle(5_000), 4_999).is_some());
    }

    #[test]
    fn a_few_unmatched_returns_or_a_pair_that_counts_more_is_not_warned_of() {
        // A handful on a quiet host, and a busy pair's few moved tasks.
        assert_eq!(recycle_pair_lost(&recycle(WARN_FROM - 1), 0), None);
        assert_eq!(recycle_pair_lost(&recycle(5_000), 5_000), None);
        // Another pair's count is not the recycle's; nor is an unhooked recycle warned of.
        assert_eq!(recycle_pair_lost(&recycle(0), 0), None);
        assert_eq!(recycle_pair_lost(&recycle(9_999)[..1], 0), None);
    }
}

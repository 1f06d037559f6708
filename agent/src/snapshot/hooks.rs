//! Per hook: which backend served it, where, or why nothing did (doctor, reports, metrics).
use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The reason a hook of a kernel module that is not loaded gives (not a failure).
pub const MODULE_NOT_LOADED: &str = "module not loaded";

/// The kind of program that carries a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Fentry,
    Kprobe,
    Tracepoint,
}

/// What a hook is about, for grouping in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    PagePool,
    /// Around the pool: NAPI work and packet drops, any driver.
    Chain,
    Devmem,
    Gve,
}

/// How one hook ended up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookStatus {
    pub hook: Cow<'static, str>,
    pub group: Group,
    /// The backend serving it, None when nothing attached.
    pub backend: Option<Backend>,
    /// Kernel functions or tracepoints attached.
    pub targets: Vec<String>,
    /// Why each candidate that was tried did not attach.
    pub reasons: Vec<String>,
    /// What is lost while the hook is missing.
    pub loses: Cow<'static, str>,
    /// What attaching it took (None: not tried here, or a recording of an earlier version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<HookLoad>,
    /// Events its programs missed since it attached (not only in the window shown), as the
    /// kernel counts them at the source's last check. None: not attached, the kernel counts
    /// none for its programs, their info could not be read, not checked yet (`doctor`), or a
    /// recording, which does not carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<HookMissed>,
}

/// Events a hook's programs missed since it attached, as the kernel counts them
/// (`probes/skipped.rs`): the figures of any window since lack up to that many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HookMissed {
    /// Runs of its programs the kernel skipped (they would have nested: a kprobe program
    /// while another kprobe or perf program or a BPF map system call held the CPU).
    pub skipped_runs: u64,
    /// Hits of its kprobes the kernel dropped before any program ran (another kprobe's
    /// handler held the CPU, or a kretprobe's instances were all in use); None off kprobes,
    /// or where they could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kprobe_hits_dropped: Option<u64>,
}

/// What a report says of a hook's missed events ([`HookStatus::missed_note`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissedNote {
    /// Not attached: nothing to say.
    NotAttached,
    /// Attached, and the kernel's counts are not known here ("?").
    Unknown,
    /// Counted, none missed.
    None,
    /// Counted, some missed (or a kprobe's count unread): what, and what it means for the
    /// figures, for people.
    Some(String),
}

impl HookStatus {
    /// What a report says of the events this hook's programs missed: counted ones in words
    /// ("the kernel skipped 5 runs of its programs …"), and on kprobes a dropped-hit count
    /// that could not be read said so rather than taken for none.
    pub fn missed_note(&self) -> MissedNote {
        let (Some(backend), Some(m)) = (self.backend, self.missed) else {
            return match self.backend {
                None => MissedNote::NotAttached,
                Some(_) => MissedNote::Unknown,
            };
        };
        let hits_unread = backend == Backend::Kprobe && m.kprobe_hits_dropped.is_none();
        let lack = "the figures lack up to that many events";
        match (m.any(), hits_unread) {
            (false, false) => MissedNote::None,
            (true, false) => MissedNote::Some(format!("{}: {lack}", m.describe())),
            (true, true) => MissedNote::Some(format!(
                "{}, and its kprobes' dropped hits could not be read: {lack}, or more",
                m.describe()
            )),
            (false, true) => MissedNote::Some(
                "the kernel skipped no run of its programs, but its kprobes' dropped hits could \
                 not be read: the figures may lack events"
                    .into(),
            ),
        }
    }
}

impl HookMissed {
    /// Whether anything was missed.
    fn any(&self) -> bool {
        self.skipped_runs > 0 || self.kprobe_hits_dropped.is_some_and(|d| d > 0)
    }

    /// What was missed, for people: "the kernel skipped 5 runs of its programs and dropped 40
    /// hits of its kprobes" (only where [`Self::any`]).
    fn describe(&self) -> String {
        use crate::units::count_of;
        let mut parts = Vec::new();
        if self.skipped_runs > 0 {
            parts.push(format!(
                "skipped {} of its programs",
                count_of(self.skipped_runs, "run", "runs")
            ));
        }
        if let Some(dropped) = self.kprobe_hits_dropped.filter(|d| *d > 0) {
            parts.push(format!(
                "dropped {} of its kprobes",
                count_of(dropped, "hit", "hits")
            ));
        }
        format!("the kernel {}", parts.join(" and "))
    }
}

/// What attaching one hook took at start-up: `doctor` shows it, so that a slow start can be
/// traced to the hooks (and the verifier's work on them) that make it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookLoad {
    /// Wall time loading (verifying) and attaching, over every backend tried.
    pub ms: f64,
    /// Instructions the verifier walked for the programs attached (kernel ≥ 5.16), summed.
    pub verified_insns: Option<u64>,
}

impl HookStatus {
    pub fn attached(&self) -> bool {
        self.backend.is_some()
    }

    /// Missing only because its kernel module is not loaded (not a failure).
    pub fn module_absent(&self) -> bool {
        !self.attached() && self.reasons.iter().any(|r| r.ends_with(MODULE_NOT_LOADED))
    }
}

/// How much ppscope hooks (`--detail`). `light` leaves off every program that runs once per
/// page on the allocation or recycle path (what made ppscope cost as much as bpftrace), the
/// one on every NAPI poll and the pair timing every page's return to the allocator (its
/// count stays): what it shows comes from the kernel's own page_pool stats and
/// from events that happen once per refill or slow-path batch (up to 64 pages) or when a page
/// leaves its pool. `full` adds those hooks: the exact allocation and recycle split on any
/// kernel, per-page bursts, NAPI work per poll and page-return latency.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    Light,
    // The default: older recordings (made before the choice existed) were made with every
    // hook. (Not a doc comment: clap would show it as the value's help.)
    #[default]
    Full,
}

impl Detail {
    pub fn name(self) -> &'static str {
        match self {
            Detail::Light => "light",
            Detail::Full => "full",
        }
    }
}

/// The reason a per-page or per-poll hook gives under `--detail light` (a choice, not a
/// failure).
pub const LEFT_OFF_LIGHT: &str =
    "left off by --detail light (it runs on every page or NAPI poll; --detail full attaches it)";

impl HookStatus {
    /// Not attached because `--detail light` leaves frequent hooks off (not a failure). By
    /// the reason's start: recordings and agents of earlier versions worded the rest otherwise.
    pub fn left_off(&self) -> bool {
        !self.attached()
            && self
                .reasons
                .iter()
                .any(|r| r.starts_with("left off by --detail light"))
    }
}

/// What a pool's burst profile (the advice's input) is made of, by the hooks that feed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileBasis {
    /// Every allocation and recycle (the `alloc` and `recycle` hooks: `--detail full`).
    Pages,
    /// Pages the ring hands the alloc cache at refills, pages from the page allocator, pages
    /// leaving the pool, and the ring's fill at those events (`refill`, `page_hold`,
    /// `page_release`: what `--detail light` keeps). Exact at the ring, in steps of up to one
    /// refill (64 pages); direct recycles into the alloc cache are not in it, and need not
    /// be: they never reach the ring whose size is advised.
    Refills,
}

impl ProfileBasis {
    /// The basis the attached hooks give (`on(hook name)`), the finer one first; None when
    /// no profile can be made.
    pub fn from_hooks(on: impl Fn(&str) -> bool) -> Option<Self> {
        if on("alloc") && on("recycle") {
            Some(Self::Pages)
        } else if on("refill") && on("page_hold") && on("page_release") {
            Some(Self::Refills)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_hook_missed_is_said_with_what_it_means_for_the_figures() {
        let note = |backend, skipped_runs, kprobe_hits_dropped| {
            crate::testing::hook_status(
                "recycle",
                backend,
                Some(HookMissed {
                    skipped_runs,
                    kprobe_hits_dropped,
                }),
            )
            .missed_note()
        };
        let kprobe = Some(Backend::Kprobe);
        assert_eq!(note(kprobe, 0, Some(0)), MissedNote::None);
        assert_eq!(
            note(kprobe, 1, Some(0)),
            MissedNote::Some(
                "the kernel skipped 1 run of its programs: the figures lack up to that many \
                 events"
                    .into()
            )
        );
        assert_eq!(
            note(kprobe, 2, None),
            MissedNote::Some(
                "the kernel skipped 2 runs of its programs, and its kprobes' dropped hits could \
                 not be read: the figures lack up to that many events, or more"
                    .into()
            )
        );
        // Off kprobes there is no dropped-hit count to miss.
        assert_eq!(note(Some(Backend::Fentry), 0, None), MissedNote::None);
        assert_eq!(note(None, 5, None), MissedNote::NotAttached);
        let unknown = crate::testing::hook_status("recycle", kprobe, None);
        assert_eq!(unknown.missed_note(), MissedNote::Unknown);
    }
}

//! The one place a [`Snapshot`] is assembled from samples. Every source (live, replay,
//! simulation) and so every face that shows samples (`top`, `diagnose`, `simulate --replay`,
//! the agent, and through it `top --connect`) goes through [`assemble`], so a stage added here
//! reaches all of them (`simulate --scenario` advises a built-in profile, no samples, and
//! `top --dev` filters any source, a remote agent's too, with [`only_device`]):
//!
//! 1. **model**: two samples → pools, devices, sites ([`model::snapshot`]);
//! 2. **netlink stats**: netlink's view of the same window merged in, where the source has it;
//! 3. **names**: drop reasons named from BTF;
//! 4. **timeline**: per step and device, the chain slow path → NAPI → drops, where the source
//!    has the intermediate samples;
//! 5. **advice**: each pool's ring size replayed from its burst profile;
//! 6. **ring check**: a device whose configured rx ring no longer matches its pool, where the
//!    source read the rings;
//! 7. **filter**: only the pools, devices and timeline rows of one interface (`--dev`).
//!
//! Pure: what a stage needs from the host comes in [`Window`] (read by the source).
use std::{collections::HashMap, time::Duration};

use crate::{
    advice,
    host::{ethtool, netlink::NetlinkSample},
    model::{self, Coverage, RawSample, SourceFacts},
    snapshot::{Advice, Snapshot, TimelineStep},
};

/// Where the advice of a window comes from.
#[derive(Clone, Copy)]
pub enum AdviceFrom<'a> {
    /// No advice (the source has nothing to replay).
    None,
    /// Computed from these fine-grained samples (a recording, a diagnose window).
    Samples(&'a [RawSample]),
    /// Already known, per pool address: a live source's rolling window keeps its advice
    /// ([`crate::advice::window::AdviceWindow::current_advice`]) for its interval and its
    /// totals since the start alike.
    Given(&'a HashMap<u64, Advice>),
}

/// Everything one snapshot is made from.
pub struct Window<'a> {
    pub facts: &'a SourceFacts,
    /// The window's first and last sample.
    pub earlier: &'a RawSample,
    pub later: &'a RawSample,
    /// Netlink's answers at the window's start and end.
    pub netlink: Option<(&'a NetlinkSample, &'a NetlinkSample)>,
    /// Samples through the window (first to last) and the timeline's step.
    pub timeline: Option<(&'a [RawSample], Duration)>,
    pub advice: AdviceFrom<'a>,
    /// The recycled share a ring must reach.
    pub target: f64,
    /// Configured rx ring (`ethtool -g`) per ifindex, for the ring check.
    pub rx_rings: Option<&'a HashMap<u32, u32>>,
    /// Only this interface's pools, devices and timeline rows.
    pub only_dev: Option<&'a str>,
}

impl<'a> Window<'a> {
    /// A window from `earlier` to `later` with no optional stage: add what the source has.
    pub fn between(facts: &'a SourceFacts, earlier: &'a RawSample, later: &'a RawSample) -> Self {
        Self {
            facts,
            earlier,
            later,
            netlink: None,
            timeline: None,
            advice: AdviceFrom::None,
            target: advice::DEFAULT_TARGET,
            rx_rings: None,
            only_dev: None,
        }
    }

    /// A window over fine-grained samples (at least one): first to last, with the advice
    /// computed from them.
    pub fn over(facts: &'a SourceFacts, samples: &'a [RawSample]) -> Self {
        let mut w = Self::between(facts, &samples[0], &samples[samples.len() - 1]);
        w.advice = AdviceFrom::Samples(samples);
        w
    }
}

/// The snapshot of a window, every stage in order.
pub fn assemble(w: &Window) -> Snapshot {
    let mut snap = model::snapshot(w.facts, w.earlier, w.later);
    if let Some((start, end)) = w.netlink {
        model::netlink_merge::merge(&mut snap, start, end);
    }
    model::name_drop_reasons(&mut snap, &w.facts.drop_reasons);
    if let Some((samples, step)) = w.timeline {
        let steps = timeline(samples, step, &w.facts.coverage);
        snap.timeline = model::keep_steps_of(steps, &snap.devices);
    }
    match w.advice {
        AdviceFrom::None => {}
        AdviceFrom::Samples(samples) => {
            let mut advice =
                advice::advise_window(samples, &w.facts.coverage, w.facts.page_size, w.target);
            for p in &mut snap.pools {
                p.advice = advice.remove(&p.addr);
            }
        }
        // The snapshot owns its advice: one copy per pool shown, none of the rest.
        AdviceFrom::Given(given) => {
            for p in &mut snap.pools {
                p.advice = given.get(&p.addr).cloned();
            }
        }
    }
    if let Some(rings) = w.rx_rings {
        flag_unrebuilt_pools(&mut snap, rings);
    }
    if let Some(dev) = w.only_dev {
        only_device(&mut snap, dev);
    }
    snap
}

/// Timeline steps of `step` through fine-grained samples (the last sample always ends one).
fn timeline(samples: &[RawSample], step: Duration, cov: &Coverage) -> Vec<TimelineStep> {
    let Some(first) = samples.first() else {
        return Vec::new();
    };
    let mut steps = Vec::new();
    let mut last = first;
    for (i, s) in samples.iter().enumerate().skip(1) {
        if s.at.duration_since(last.at) >= step || i == samples.len() - 1 {
            let netdevs = model::pool_netdevs(s);
            steps.push(model::timeline_step(
                s.at.duration_since(first.at).as_secs_f64(),
                last,
                s,
                &netdevs,
                cov,
            ));
            last = s;
        }
    }
    steps
}

/// A device whose configured rx ring (ethtool -g) no longer matches its pool: the resize did
/// not rebuild the pool (virtio-net builds it once, at probe). Said in the pool's advice.
fn flag_unrebuilt_pools(snap: &mut Snapshot, rx_rings: &HashMap<u32, u32>) {
    for p in &mut snap.pools {
        let (Some(name), Some(index), Some(driver), Some(ring)) =
            (p.ifname.clone(), p.ifindex, p.driver.clone(), p.ring_size)
        else {
            continue;
        };
        let Some(&rx) = rx_rings.get(&index) else {
            continue;
        };
        p.device_rx_ring = Some(rx);
        match ethtool::pool_size_for(&driver, rx) {
            Some(expected) if expected != ring => {
                let note = format!(
                    "{name}'s rx ring is {rx} (ethtool -g) but its page_pool still has {ring} entries: the resize did not rebuild the pool ({driver} builds it when the device probes)"
                );
                if let Some(a) = &mut p.advice {
                    a.evidence.push(note);
                    a.resize_suspect = Some(ring);
                }
            }
            _ => {}
        }
    }
}

/// Keeps one interface's pools, devices and timeline rows.
pub fn only_device(snap: &mut Snapshot, dev: &str) {
    let is_dev = |name: &Option<String>| name.as_deref() == Some(dev);
    snap.pools.retain(|p| is_dev(&p.ifname));
    snap.devices.retain(|d| is_dev(&d.ifname));
    for step in &mut snap.timeline {
        step.devices.retain(|d| is_dev(&d.ifname));
    }
    snap.timeline.retain(|s| !s.devices.is_empty());
}

//! `ppscope simulate`: a burst profile (a scenario, or each pool of a recording) replayed at
//! other ring sizes, and the advice, as text or JSON.
use std::fmt::Write;

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use crate::{
    advice::{self, scenario},
    pipeline::{self, Window},
    recording::Recording,
    snapshot::Advice,
};

/// One advised profile: a scenario's, or a recorded pool's.
#[derive(Debug, Clone, Serialize)]
pub struct SimulateResult {
    /// The scenario's name (scenarios only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// A built-in workload: its devices (eth0, eth1) are examples, not this host's.
    pub synthetic: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The recorded pool (recordings only), its device and driver, and what it measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifname: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_fast_path_rate: Option<Option<f64>>,
    pub summary: String,
    pub advice: Advice,
}

/// A built-in scenario advised at `target`.
pub fn scenario(name: &str, target: f64) -> Result<Vec<SimulateResult>> {
    let sc = scenario::by_name(name).ok_or_else(|| {
        anyhow!(
            "no scenario named '{name}' (there are: {})",
            scenario::NAMES.join(", ")
        )
    })?;
    let a = advice::advise(&sc.profile, &sc.context, target);
    Ok(vec![SimulateResult {
        synthetic: true,
        scenario: Some(sc.name.to_string()),
        description: Some(sc.description.to_string()),
        pool: None,
        ifname: None,
        driver: None,
        measured_fast_path_rate: None,
        summary: a.summary(),
        advice: a,
    }])
}

/// Every pool of a recording (of one interface with `dev`) whose profile can be replayed;
/// `name` names the recording in the error when there is none.
pub fn recording(
    rec: &Recording,
    name: &str,
    dev: Option<&str>,
    target: f64,
) -> Result<Vec<SimulateResult>> {
    let samples = rec.samples();
    let facts = rec.header.facts();
    let mut w = Window::over(&facts, &samples);
    w.target = target;
    w.only_dev = dev;
    let snap = pipeline::assemble(&w);
    let results: Vec<SimulateResult> = snap
        .pools
        .into_iter()
        .filter_map(|p| {
            let a = p.advice?;
            Some(SimulateResult {
                synthetic: false,
                scenario: None,
                description: None,
                pool: Some(p.pool),
                ifname: Some(p.ifname),
                driver: Some(p.driver),
                measured_fast_path_rate: Some(p.fast_path_rate),
                summary: a.summary(),
                advice: a,
            })
        })
        .collect();
    if results.is_empty() {
        bail!(
            "no pool in {name} has a profile to replay (needs the alloc and recycle probes: kprobes or fentry)"
        );
    }
    Ok(results)
}

/// `simulate --json`.
pub fn json(results: &[SimulateResult]) -> serde_json::Value {
    serde_json::json!({ "version": 1, "results": results })
}

/// `simulate` as text: per profile its name, the summary, the evidence and the confidence.
pub fn text(results: &[SimulateResult]) -> String {
    let mut t = String::new();
    for r in results {
        let name = match (&r.scenario, &r.ifname) {
            (Some(s), _) => format!("{s} (synthetic: its devices are examples, not this host's)"),
            (None, Some(Some(dev))) => dev.clone(),
            _ => "pool".into(),
        };
        let _ = writeln!(t, "{name}\n  {}", r.summary);
        for e in &r.advice.evidence {
            let _ = writeln!(t, "    - {e}");
        }
        let level = match r.advice.confidence.level {
            crate::snapshot::ConfidenceLevel::Low => "Low",
            crate::snapshot::ConfidenceLevel::Medium => "Medium",
            crate::snapshot::ConfidenceLevel::High => "High",
        };
        let _ = writeln!(
            t,
            "  confidence: {level} ({})\n",
            r.advice.confidence.reason
        );
    }
    t
}

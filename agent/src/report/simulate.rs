//! `ppscope simulate`: a burst profile (a scenario, or each pool of a recording) replayed at
//! other ring sizes, and the advice, as text or JSON.
use std::fmt::Write;

use anyhow::{anyhow, bail, Result};
use schemars::JsonSchema;
use serde::Serialize;

use crate::{
    advice::{self, scenario},
    pipeline::{self, Window},
    recording::Recording,
    snapshot::Advice,
};

/// One advised profile: a scenario's, or a recorded pool's.
#[derive(Debug, Clone, Serialize, JsonSchema)]
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

/// `simulate --json`: the layout version and one result per advised profile.
#[derive(Serialize, JsonSchema)]
#[schemars(title = "ppscope simulate --json")]
struct SimulateJson<'a> {
    /// Version of this layout (the same as `diagnose --json`'s).
    version: u32,
    results: &'a [SimulateResult],
}

/// `simulate --json`.
pub fn json(results: &[SimulateResult]) -> serde_json::Value {
    serde_json::to_value(SimulateJson {
        version: super::json::JSON_VERSION,
        results,
    })
    .expect("simulate results serialize")
}

/// The JSON Schema of [`json`]'s output (`schema/simulate.schema.json`).
pub fn schema() -> schemars::Schema {
    schemars::schema_for!(SimulateJson<'static>)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{report::json::assert_schema_file, testing::schema_errors};

    #[test]
    fn the_schema_file_is_what_the_types_say() {
        assert_schema_file("simulate.schema.json", &schema());
    }

    #[test]
    fn every_scenario_result_fits_the_schema_file() {
        for name in scenario::NAMES {
            for target in [0.5, 0.99] {
                let v = json(&super::scenario(name, target).unwrap());
                let errors = schema_errors("simulate.schema.json", &v);
                assert!(errors.is_empty(), "{name} at {target}: {errors:#?}");
                assert_eq!(v["results"][0]["synthetic"], true);
            }
        }
    }
}

//! `diagnose --json` (and the agent's `/api/v1/snapshot`): the snapshot as a stable object
//! for scripts. Its layout is the types it serializes; [`schema`] gives it as a JSON Schema,
//! which `schema/diagnose.schema.json` holds for users (a test keeps the file equal to the
//! types, and others check real output against it).
use schemars::{JsonSchema, Schema};
use serde::Serialize;

use crate::snapshot::Snapshot;

/// Version of the JSON layout; bumped when a field changes meaning or goes away.
pub const JSON_VERSION: u32 = 1;

/// `diagnose --json`: the layout version, then every field of the snapshot.
#[derive(Serialize, JsonSchema)]
#[schemars(title = "ppscope diagnose --json")]
struct DiagnoseJson<'a> {
    /// Version of this layout.
    version: u32,
    #[serde(flatten)]
    snapshot: &'a Snapshot,
}

pub fn json(s: &Snapshot) -> serde_json::Value {
    serde_json::to_value(DiagnoseJson {
        version: JSON_VERSION,
        snapshot: s,
    })
    .expect("snapshot serializes")
}

/// The JSON Schema of [`json`]'s output.
pub fn schema() -> Schema {
    schemars::schema_for!(DiagnoseJson<'static>)
}

/// `schema/NAME` holds `schema`: fails with the difference unless `UPDATE_SCHEMA=1`, which
/// writes it (a layout change is then a reviewed diff of the file).
#[cfg(test)]
pub(crate) fn assert_schema_file(name: &str, schema: &Schema) {
    let path = crate::testing::schema_file(name);
    let want = serde_json::to_string_pretty(schema).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the types say; if the layout change is meant, run \
         `UPDATE_SCHEMA=1 cargo test -p ppscope-agent schema` and review the diff",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        source::{SimSource, Source},
        testing::schema_errors,
    };

    /// The agent serves this as text, and the benchmark's VM phase reads it with sed, grep
    /// and awk (`pools_moved` in xtask/vm-tests/bench-vm.sh), counting on sorted keys:
    /// "pools" before "timeline", and in a pool "alloc", then "pages", then "recycle".
    #[test]
    fn keys_come_sorted_for_the_benchmarks_shell_reader() {
        let snap = Snapshot::with_pools(
            "k",
            1.0,
            vec![crate::snapshot::PoolView::unprobed(3, None, None)],
        );
        let text = serde_json::to_string(&json(&snap)).unwrap();
        let at = |k: &str| text.find(k).unwrap_or_else(|| panic!("no {k} in {text}"));
        assert!(at("\"pools\":[") < at("],\"timeline\":"), "{text}");
        assert!(at("\"alloc\":{") < at("\"pages\":{"), "{text}");
        assert!(at("\"pages\":{") < at("\"recycle\":{"), "{text}");
    }

    #[test]
    fn the_schema_file_is_what_the_types_say() {
        assert_schema_file("diagnose.schema.json", &schema());
    }

    #[test]
    fn every_scenario_snapshot_fits_the_schema_file() {
        for name in crate::advice::scenario::NAMES {
            let mut src = SimSource::new(name).unwrap();
            let mut advised = false;
            for _ in 0..8 {
                let snap = src.next(Duration::from_secs(1)).unwrap().unwrap();
                advised |= snap.pools.iter().any(|p| p.advice.is_some());
                let errors = schema_errors("diagnose.schema.json", &json(&snap));
                assert!(errors.is_empty(), "{name}: {errors:#?}");
            }
            assert!(advised, "{name}: no advice to check in eight snapshots");
        }
    }

    /// The schema is not a formality: a field of the wrong type is caught.
    #[test]
    fn output_off_the_schema_is_caught() {
        let mut src = SimSource::new("healthy").unwrap();
        let mut v = json(&src.next(Duration::from_secs(1)).unwrap().unwrap());
        v["pools"][0]["alloc"]["cache"] = "many".into();
        v["version"] = serde_json::Value::Null;
        let errors = schema_errors("diagnose.schema.json", &v);
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(errors.iter().any(|e| e.starts_with("/pools/0/alloc/cache")));
    }
}

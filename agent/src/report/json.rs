//! `diagnose --json`: the snapshot as a stable object for scripts (layout in the README).

use crate::snapshot::Snapshot;

/// Version of the JSON layout; bumped when a field changes meaning or goes away.
pub const JSON_VERSION: u32 = 1;

pub fn json(s: &Snapshot) -> serde_json::Value {
    let mut v = serde_json::to_value(s).expect("snapshot serializes");
    v["version"] = JSON_VERSION.into();
    v
}

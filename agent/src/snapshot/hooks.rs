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

//! A remote `ppscope agent`, read over HTTP.
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::Source;
use crate::snapshot::Snapshot;

/// A remote `ppscope agent`: its last interval, through `/api/v1/snapshot?window=interval`.
pub struct ConnectSource {
    url: String,
    agent: ureq::Agent,
}

impl ConnectSource {
    /// `URL` is the agent's base (`http://host:9464`) or the snapshot endpoint itself.
    pub fn new(url: &str) -> Result<Self> {
        let base = url.trim_end_matches('/');
        let base = base.strip_suffix("/api/v1/snapshot").unwrap_or(base);
        if !base.starts_with("http://") {
            bail!("'{url}' is not an http:// URL of a ppscope agent (e.g. http://127.0.0.1:9464)");
        }
        Ok(Self {
            url: format!("{base}/api/v1/snapshot?window=interval"),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(5))
                .build(),
        })
    }
}

impl Source for ConnectSource {
    fn describe(&self) -> String {
        let base = self.url.split("/api/").next().unwrap_or(&self.url);
        format!("agent {base}")
    }

    fn next(&mut self, _interval: Duration) -> Result<Option<Snapshot>> {
        let resp = match self.agent.get(&self.url).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(503, _)) => {
                bail!("the agent has not collected yet (503); retrying")
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.url)),
        };
        let body = resp
            .into_string()
            .with_context(|| format!("reading {}", self.url))?;
        let snap: Snapshot = serde_json::from_str(&body)
            .with_context(|| format!("{} did not answer with a ppscope snapshot", self.url))?;
        Ok(Some(snap))
    }
}

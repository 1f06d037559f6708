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
        let url = crate::args::parse_agent_url(url).map_err(anyhow::Error::msg)?;
        let base = url.trim_end_matches('/');
        let base = base.strip_suffix("/api/v1/snapshot").unwrap_or(base);
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
            Err(ureq::Error::Status(code, _)) => {
                bail!("{} answered HTTP {code}", self.url)
            }
            // ureq's own text names the URL again: say it once, then the cause.
            Err(ureq::Error::Transport(t)) => {
                let mut why = t
                    .message()
                    .map_or_else(|| t.kind().to_string(), str::to_string);
                if let Some(cause) = std::error::Error::source(&t) {
                    why = format!("{why}: {cause}");
                }
                bail!("cannot read {}: {why}", self.url)
            }
        };
        let body = resp
            .into_string()
            .with_context(|| format!("reading {}", self.url))?;
        let snap: Snapshot = serde_json::from_str(&body)
            .with_context(|| format!("{} did not answer with a ppscope snapshot", self.url))?;
        Ok(Some(snap))
    }
}

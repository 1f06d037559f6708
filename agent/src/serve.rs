//! The agent's HTTP side: `/metrics`, `/api/v1/snapshot`, `/healthz`, served from the last
//! collected snapshot (no BPF and no kernel access while a request is answered).
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};
use tiny_http::{Header, Method, Response, Server};

use crate::{
    exporter::{self, Format, SelfStats},
    model::Snapshot,
    report,
};

/// What the collector hands to the server.
#[derive(Default)]
pub struct Shared {
    pub snapshot: Option<Snapshot>,
    pub stats: SelfStats,
    pub last_collection: Option<Instant>,
}

pub struct HttpServer {
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl HttpServer {
    /// Binds and starts answering. A busy port or an address this host does not have is an
    /// error naming both.
    pub fn start(
        listen: SocketAddr,
        shared: Arc<Mutex<Shared>>,
        interval: Duration,
        max_pools: usize,
    ) -> Result<Self> {
        let server = Server::http(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow!("cannot listen on {listen}: not an IP address"))?;
        let server = Arc::new(server);
        let s = server.clone();
        let thread = thread::spawn(move || {
            for request in s.incoming_requests() {
                let response = answer(&request, &shared, interval, max_pools);
                let _ = request.respond(response);
            }
        });
        Ok(Self {
            server,
            thread: Some(thread),
            addr,
        })
    }

    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

fn text(status: u16, body: String, content_type: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type))
}

fn answer(
    request: &tiny_http::Request,
    shared: &Mutex<Shared>,
    interval: Duration,
    max_pools: usize,
) -> Response<std::io::Cursor<Vec<u8>>> {
    if *request.method() != Method::Get && *request.method() != Method::Head {
        return text(405, "only GET\n".into(), "text/plain");
    }
    let path = request.url().split('?').next().unwrap_or("");
    match path {
        "/metrics" => {
            let accept = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str().to_string());
            let format = Format::from_accept(accept.as_deref());
            let started = Instant::now();
            let mut sh = shared.lock().expect("not poisoned");
            let Some(snap) = sh.snapshot.as_ref() else {
                return text(503, "no collection yet\n".into(), "text/plain");
            };
            let (body, _) = exporter::render(snap, &sh.stats, format, max_pools);
            sh.stats.last_scrape_seconds = started.elapsed().as_secs_f64();
            text(200, body, format.content_type())
        }
        "/api/v1/snapshot" => {
            let sh = shared.lock().expect("not poisoned");
            match sh.snapshot.as_ref() {
                Some(s) => text(
                    200,
                    serde_json::to_string(&report::json(s)).unwrap_or_default(),
                    "application/json",
                ),
                None => text(
                    503,
                    "{\"error\":\"no collection yet\"}".into(),
                    "application/json",
                ),
            }
        }
        "/healthz" => {
            let sh = shared.lock().expect("not poisoned");
            let fresh = sh
                .last_collection
                .is_some_and(|t| t.elapsed() <= interval * 3 + Duration::from_secs(1));
            if fresh {
                text(200, "ok\n".into(), "text/plain")
            } else {
                text(503, "collection is late\n".into(), "text/plain")
            }
        }
        _ => text(
            404,
            "not found: try /metrics, /api/v1/snapshot, /healthz\n".into(),
            "text/plain",
        ),
    }
}

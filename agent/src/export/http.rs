//! The agent's HTTP side: `/metrics`, `/api/v1/snapshot` (since start, or `?window=interval`:
//! the last interval), `/healthz`, served from the last collection (no BPF and no kernel
//! access while a request is answered).
//!
//! The collector hands each collection over as a [`Publication`], an `Arc` swapped in
//! ([`ServerState::publish`]); a request takes the current one without a lock. Each of its
//! answers (`/metrics` in either format, each snapshot's JSON, and their gzip) is rendered
//! once, on the first request that asks, on tokio's blocking pool; every other request of
//! that collection is answered from it, and concurrent ones wait for it without holding a
//! thread. At most [`RENDERS_AT_ONCE`] renderings run at once, so a burst of scrapes never
//! takes every blocking thread from the collection, and a 10,000-pool rendering never
//! stalls the threads that accept.
//!
//! hyper serves HTTP/1 (its parser, its 400s), axum routes, tower-http turns a panicking
//! handler into a 500 (a bug in rendering costs one answer, not the agent); gzip (when the
//! client accepts it) is flate2's, made once per answer like the answer. Around them, what a
//! server next to production workloads must bound, whatever clients do:
//!
//! - at most [`MAX_CONNECTIONS`] connections at once; at the cap the listener stops accepting,
//!   so further clients wait in the kernel's backlog instead of costing memory;
//! - a request head larger than [`MAX_HEAD`] gets `431`; one that has not fully arrived within
//!   [`HEAD_DEADLINE`] (a slow or silent client) gets `408`; a request line that is not
//!   HTTP/1 gets `400` (an HTTP/2 preface hyper's HTTP/1 side would drop silently). These are
//!   told before hyper reads anything (the head is peeked at, not consumed);
//! - a connection ends after [`CONNECTION_DEADLINE`] whatever it is doing (a client that does
//!   not read its answer);
//! - a failed `accept` (EMFILE under a burst) is waited out and retried, never fatal;
//! - every answer closes its connection: no idle keep-alive connection is kept.
use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};
use arc_swap::ArcSwapOption;
use axum::{
    extract::{Query, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use bytes::Bytes;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::sync::OnceCell;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpSocket, TcpStream},
    sync::{watch, Semaphore},
    task::JoinHandle,
};
use tower_http::catch_panic::CatchPanicLayer;

use super::{
    metrics::{self, Format, SelfStats},
    retire::Retirement,
};
use crate::{report, snapshot::Snapshot, source::Collected};

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// Largest request head (request line and headers) read.
pub const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Time a connection may take in all, its answer's rendering and sending included.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);
/// Connections the kernel queues for us (further capped by `net.core.somaxconn`): std's and
/// tokio's 128 overflowed under 1,000 concurrent scrapers, and with SYN cookies a client that
/// wrote its request in pieces was then reset.
const BACKLOG: u32 = 4096;
/// Time the server gives the connections in flight when it is stopped.
const DRAIN: Duration = Duration::from_secs(5);
/// Renderings (and compressions) on the blocking pool at once: fewer than the agent's
/// blocking threads ([`super::agent::BLOCKING_THREADS`]), so one is always there for the
/// collection.
pub const RENDERS_AT_ONCE: usize = 2;

/// What one collection serves.
#[derive(Clone)]
enum Served {
    /// A live collection: its snapshots assembled when first asked for
    /// ([`Collected::since_start_once`]), the totals without the pools past their grace.
    Collected {
        collected: Arc<Collected>,
        retirement: Arc<Retirement>,
    },
    /// Snapshots served as they are (a server fed snapshots directly: tests, tools).
    Fixed {
        since_start: Arc<Snapshot>,
        interval: Arc<Snapshot>,
    },
}

/// One collection as the server serves it, until the next is published.
pub struct Publication {
    served: Served,
    /// When it was collected (`/healthz` and the retirement's clock).
    pub at: Instant,
    pub stats: SelfStats,
    answers: Answers,
}

/// A collection's answers, each rendered on the first request that asks for it.
#[derive(Default)]
struct Answers {
    /// `/metrics`: Prometheus text, OpenMetrics.
    metrics: [OnceCell<Answer>; 2],
    /// `/api/v1/snapshot`: since the start, of the last interval.
    json: [OnceCell<Answer>; 2],
}

/// One rendered answer, and its gzip once a client accepted it.
struct Answer {
    body: Bytes,
    gzip: OnceCell<Option<Bytes>>,
}

impl Answer {
    fn new(body: String) -> Self {
        Self {
            body: Bytes::from(body),
            gzip: OnceCell::new(),
        }
    }
}

/// Which snapshot a request wants.
#[derive(Clone, Copy)]
enum Window {
    SinceStart,
    Interval,
}

impl Publication {
    /// A live collection, with when each pool last moved as of it.
    pub fn collected(
        collected: Arc<Collected>,
        retirement: Arc<Retirement>,
        stats: SelfStats,
        at: Instant,
    ) -> Self {
        Self {
            served: Served::Collected {
                collected,
                retirement,
            },
            at,
            stats,
            answers: Answers::default(),
        }
    }

    /// Snapshots to serve as they are.
    pub fn fixed(since_start: Snapshot, interval: Snapshot, at: Instant) -> Self {
        Self {
            served: Served::Fixed {
                since_start: Arc::new(since_start),
                interval: Arc::new(interval),
            },
            at,
            stats: SelfStats::default(),
            answers: Answers::default(),
        }
    }

    /// The same collection with other self-statistics (a failed collection counted).
    pub fn with_stats(&self, stats: SelfStats) -> Self {
        Self {
            served: self.served.clone(),
            at: self.at,
            stats,
            answers: Answers::default(),
        }
    }

    /// The snapshot a request wants, assembled on the first ask (concurrent first asks wait
    /// for one assembly).
    fn snapshot(&self, window: Window) -> Arc<Snapshot> {
        match (&self.served, window) {
            (
                Served::Collected {
                    collected,
                    retirement,
                },
                Window::SinceStart,
            ) => collected
                .since_start_once(|snap| retirement.retire(snap, self.at))
                .clone(),
            (Served::Collected { collected, .. }, Window::Interval) => {
                collected.interval_once().clone()
            }
            (Served::Fixed { since_start, .. }, Window::SinceStart) => since_start.clone(),
            (Served::Fixed { interval, .. }, Window::Interval) => interval.clone(),
        }
    }
}

/// What the collector and the requests share.
pub struct ServerState {
    published: ArcSwapOption<Publication>,
    interval: Duration,
    max_pools: usize,
    /// The last `/metrics` rendering's time in ns (the server measures it; `/metrics`
    /// reports it).
    last_scrape_ns: AtomicU64,
    /// Permits for [`RENDERS_AT_ONCE`] renderings, each held by the rendering itself (a
    /// request that gives up waiting for it does not free its permit early).
    renders: Arc<Semaphore>,
    /// Renderings (and compressions) done so far.
    renderings: AtomicU64,
}

impl ServerState {
    /// `interval`: the collection's, which `/healthz` holds collections to; `max_pools`: the
    /// pool series exported at most.
    pub fn new(interval: Duration, max_pools: usize) -> Arc<Self> {
        Arc::new(Self {
            published: ArcSwapOption::empty(),
            interval,
            max_pools,
            last_scrape_ns: AtomicU64::new(0),
            renders: Arc::new(Semaphore::new(RENDERS_AT_ONCE)),
            renderings: AtomicU64::new(0),
        })
    }

    /// Serves `p` from now on; requests still answering from the previous one finish with it.
    pub fn publish(&self, p: Publication) {
        self.published.store(Some(Arc::new(p)));
    }

    /// The collection being served, if there is one yet.
    pub fn current(&self) -> Option<Arc<Publication>> {
        self.published.load_full()
    }

    /// Time the last `/metrics` rendering took.
    pub fn last_scrape_seconds(&self) -> f64 {
        self.last_scrape_ns.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Runs `work` on the blocking pool once a rendering permit is free; `None` if it
    /// panicked.
    async fn render<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let permit = self
            .renders
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        self.renderings.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .ok()
    }

    /// Renderings (and compressions) done so far: one per answer and collection, whatever
    /// the number of requests.
    pub fn renderings(&self) -> u64 {
        self.renderings.load(Ordering::Relaxed)
    }

    /// `answer`'s body, gzipped when the client accepts it (made once per answer).
    async fn reply(
        &self,
        answer: &Answer,
        content_type: &'static str,
        headers: &HeaderMap,
    ) -> Response {
        let gzipped = if accepts_gzip(headers) {
            let body = answer.body.clone();
            answer
                .gzip
                .get_or_init(|| self.render(move || gzip(&body)))
                .await
                .clone()
        } else {
            None
        };
        let mut response = (
            [
                (header::CONTENT_TYPE, content_type),
                (header::VARY, "accept-encoding"),
            ],
            gzipped.clone().unwrap_or_else(|| answer.body.clone()),
        )
            .into_response();
        if gzipped.is_some() {
            response.headers_mut().insert(
                header::CONTENT_ENCODING,
                header::HeaderValue::from_static("gzip"),
            );
        }
        response
    }
}

fn gzip(body: &[u8]) -> Bytes {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(body).expect("writing to memory");
    Bytes::from(gz.finish().expect("writing to memory"))
}

/// Whether `Accept-Encoding` takes gzip (RFC 9110): gzip's own entry decides when it is
/// listed, else `*`'s; an entry with `q=0` refuses.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    let codings = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for coding in codings {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let accepted = !parts.any(|p| {
            let (key, value) = p.split_once('=').unwrap_or((p, ""));
            key.trim().eq_ignore_ascii_case("q")
                && value.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
        });
        if name.eq_ignore_ascii_case("gzip") {
            gzip = Some(accepted);
        } else if name == "*" {
            any = Some(accepted);
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// The running server: dropped or [`HttpServer::shutdown`], it stops accepting.
pub struct HttpServer {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Binds and starts answering (on the current tokio runtime). A busy port or an address
    /// this host does not have is an error naming both.
    pub async fn bind(listen: SocketAddr, state: Arc<ServerState>) -> Result<Self> {
        let cannot = |e: std::io::Error| anyhow!("cannot listen on {listen}: {e}");
        let socket = match listen {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(cannot)?;
        // A restarted agent binds while its predecessor's connections are in TIME_WAIT.
        socket.set_reuseaddr(true).map_err(cannot)?;
        socket.bind(listen).map_err(cannot)?;
        let listener = socket.listen(BACKLOG).map_err(cannot)?;
        let addr = listener.local_addr().map_err(cannot)?;
        let (stop, stopped) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, router(state), stopped));
        Ok(Self {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// Stops accepting, then gives the connections in flight up to [`DRAIN`] to finish.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The routes, with a 500 for a handler that panics.
fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/api/v1/snapshot", get(snapshot_json))
        .route("/healthz", get(healthz))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: try /metrics, /api/v1/snapshot, /healthz\n",
            )
        })
        .layer(CatchPanicLayer::new())
        .with_state(state)
}

async fn accept_loop(listener: TcpListener, app: Router, mut stopped: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = stopped.changed() => break,
        };
        let stream = tokio::select! {
            conn = listener.accept() => match conn {
                Ok((stream, _)) => stream,
                // EMFILE/ENFILE/ENOBUFS or an aborted handshake: the listener is fine, so
                // wait a moment (no busy loop) and go on accepting.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let app = app.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, serve_connection(stream, app)).await;
        });
    }
    drop(listener);
    // Every slot back: the connections in flight have ended.
    let _ = tokio::time::timeout(DRAIN, slots.acquire_many(MAX_CONNECTIONS as u32)).await;
}

/// What the head of a request, peeked at, says before hyper reads it.
enum Head {
    /// Complete and HTTP/1: hyper takes it from here.
    Ready,
    /// The client went away (or sent nothing): there is no one to answer.
    Gone,
    /// Answer with this status, then close.
    Refuse(StatusCode, &'static str),
}

/// Waits, within [`HEAD_DEADLINE`] for the whole head, until the blank line that ends it has
/// arrived (a client trickling a byte at a time cannot hold a connection longer than that),
/// looking without consuming.
async fn peek_head(stream: &TcpStream) -> Head {
    let deadline = tokio::time::Instant::now() + HEAD_DEADLINE;
    // Most heads fit in a kilobyte: room for the largest is made only when one needs it (a
    // burst of connections would otherwise hold 16 KiB each).
    let mut buf = vec![0u8; 1024];
    let mut pause = PEEK_PAUSE;
    loop {
        // (A peek at bytes already there is ready at once, so the timeout below alone would
        // never fire for a head that stopped half-way.)
        if tokio::time::Instant::now() >= deadline {
            return Head::Refuse(StatusCode::REQUEST_TIMEOUT, "request timeout\n");
        }
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Err(_) => return Head::Refuse(StatusCode::REQUEST_TIMEOUT, "request timeout\n"),
            Ok(Ok(0)) | Ok(Err(_)) => return Head::Gone,
            Ok(Ok(n)) => n,
        };
        let line_end = buf[..n].iter().position(|b| *b == b'\n');
        if let Some(end) = line_end {
            let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
            if !(line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0")) {
                return Head::Refuse(StatusCode::BAD_REQUEST, "not an HTTP/1 request\n");
            }
        }
        if head_end(&buf[..n]).is_some() {
            return Head::Ready;
        }
        if n == buf.len() && n <= MAX_HEAD {
            buf.resize(MAX_HEAD + 1, 0);
            continue;
        }
        if n > MAX_HEAD {
            return Head::Refuse(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request header fields too large\n",
            );
        }
        // Part of the head is here: peeking again returns the same bytes at once, so wait a
        // little for the rest, longer each time (a client trickling its head costs a copy
        // of it every quarter second at most, not a hundred a second).
        tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + pause)).await;
        pause = (pause * 2).min(PEEK_PAUSE_MAX);
    }
}

/// The first pause between two looks at a head that has not fully arrived, and the longest.
const PEEK_PAUSE: Duration = Duration::from_millis(10);
const PEEK_PAUSE_MAX: Duration = Duration::from_millis(250);

/// Whether `buf` holds the blank line that ends a head (`\r\n\r\n`, or a bare `\n\n`).
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

async fn serve_connection(mut stream: TcpStream, app: Router) {
    let _ = stream.set_nodelay(true);
    match peek_head(&stream).await {
        Head::Gone => return,
        Head::Refuse(status, body) => {
            let answer = format!(
                "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                body.len()
            );
            if stream.write_all(answer.as_bytes()).await.is_ok() {
                close_gently(stream).await;
            }
            return;
        }
        Head::Ready => {}
    }
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        // A client may shut its side down once its request is sent (curl does not, scripts
        // and probes do): that end of input is not the end of the exchange. Without this,
        // hyper closes when it reads that end, before an answer still being rendered (every
        // `/metrics`) or one whose body it skipped (a POST's 405, lost in a CI run).
        .half_close(true)
        .max_buf_size(MAX_HEAD.max(8192))
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        .without_shutdown()
        .await;
    if let Ok(parts) = served {
        close_gently(parts.io.into_inner()).await;
    }
}

/// Closes after an answer so that the client gets it: our side first (FIN after the
/// answer), then what the client still sends is read and dropped for a moment. Closing with
/// unread bytes (a request body nobody read, the rest of an oversized head) would send a
/// reset, and the client could lose the answer with it.
async fn close_gently(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// How long a closing connection reads what its client still sends.
const LINGER: Duration = Duration::from_secs(1);

fn no_collection_yet() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "no collection yet\n").into_response()
}

/// `/metrics`: Prometheus text, or OpenMetrics when the `Accept` header asks for it.
async fn metrics_text(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let Some(p) = state.current() else {
        return no_collection_yet();
    };
    let slot = match format {
        Format::Prometheus => 0,
        Format::OpenMetrics => 1,
    };
    let answer = p.answers.metrics[slot]
        .get_or_try_init(|| async {
            let started = Instant::now();
            let (pub_, rendering) = (p.clone(), state.clone());
            let body = state
                .render(move || {
                    let snap = pub_.snapshot(Window::SinceStart);
                    let last = pub_.snapshot(Window::Interval);
                    let mut stats = pub_.stats.clone();
                    stats.last_scrape_seconds = rendering.last_scrape_seconds();
                    metrics::render(&snap, &last, &stats, format, rendering.max_pools).0
                })
                .await
                .ok_or(())?;
            state
                .last_scrape_ns
                .store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Ok::<_, ()>(Answer::new(body))
        })
        .await;
    match answer {
        Ok(answer) => state.reply(answer, format.content_type(), &headers).await,
        Err(()) => (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed\n").into_response(),
    }
}

#[derive(serde::Deserialize)]
struct SnapshotQuery {
    window: Option<String>,
}

/// `/api/v1/snapshot`: the `diagnose --json` model since the start, or of the last interval
/// (`?window=interval`: what a remote `ppscope top --connect` shows as rates).
async fn snapshot_json(
    State(state): State<Arc<ServerState>>,
    Query(q): Query<SnapshotQuery>,
    headers: HeaderMap,
) -> Response {
    let window = match q.window.as_deref() {
        Some("interval") => Window::Interval,
        _ => Window::SinceStart,
    };
    let Some(p) = state.current() else {
        // `top --connect` tells this apart from an agent that failed by the body.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/json")],
            "{\"error\":\"no collection yet\"}",
        )
            .into_response();
    };
    let slot = match window {
        Window::SinceStart => 0,
        Window::Interval => 1,
    };
    let answer = p.answers.json[slot]
        .get_or_try_init(|| async {
            let pub_ = p.clone();
            state
                .render(move || {
                    serde_json::to_string(&report::json(&pub_.snapshot(window))).unwrap_or_default()
                })
                .await
                .map(Answer::new)
                .ok_or(())
        })
        .await;
    match answer {
        Ok(answer) => state.reply(answer, "application/json", &headers).await,
        Err(()) => (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed\n").into_response(),
    }
}

/// `/healthz`: 200 while collections keep coming (the last one within three intervals and
/// a second), 503 when they are late or none came yet.
async fn healthz(State(state): State<Arc<ServerState>>) -> Response {
    let Some(p) = state.current() else {
        return no_collection_yet();
    };
    if p.at.elapsed() <= state.interval * 3 + Duration::from_secs(1) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "collection is late\n").into_response()
    }
}

/// The server on a runtime of its own, for callers that are not async (tests; a tool fed
/// snapshots directly). Stopped when dropped.
pub struct BlockingServer {
    pub addr: SocketAddr,
    server: Option<HttpServer>,
    runtime: tokio::runtime::Runtime,
}

impl BlockingServer {
    pub fn start(listen: SocketAddr, state: Arc<ServerState>) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(8)
            .thread_name("ppscope-http")
            .enable_all()
            .build()?;
        let server = runtime.block_on(HttpServer::bind(listen, state))?;
        Ok(Self {
            addr: server.addr,
            server: Some(server),
            runtime,
        })
    }

    pub fn stop(mut self) {
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    /// One request through the routes (no socket): status and body.
    async fn get(state: &Arc<ServerState>, target: &str) -> (StatusCode, String) {
        let req = axum::http::Request::get(target)
            .body(Body::empty())
            .unwrap();
        let res = router(state.clone()).oneshot(req).await.unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// The agent collects every interval; its snapshots are assembled on the first scrape
    /// after a collection, once, with the pools that stopped moving retired.
    #[tokio::test]
    async fn snapshots_are_assembled_when_asked_once_per_collection() {
        use crate::model::{Coverage, RawPool, RawSample};
        let t0 = Instant::now();
        let sample = |secs: u64, hold: u64| {
            let mut s = RawSample::empty(t0 + Duration::from_secs(secs));
            let mut pool = RawPool::default();
            pool.counters.hold_pages = hold;
            pool.id = 1;
            s.pools.insert(0x1000, pool);
            Arc::new(s)
        };
        let facts = crate::testing::facts(
            "k",
            Coverage {
                hold: true,
                release: true,
                ..Default::default()
            },
        );
        let collected = |samples| {
            Arc::new(Collected::new(
                facts.clone(),
                samples,
                Default::default(),
                Default::default(),
            ))
        };
        let state = ServerState::new(Duration::from_secs(1), 100);
        assert_eq!(get(&state, "/metrics").await.0, 503, "no collection yet");
        assert_eq!(
            get(&state, "/healthz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "no collection yet\n".into()
            )
        );
        let mut retirement = Retirement::new(Duration::from_secs(60));
        let mut publish = |c: Arc<Collected>, at: Instant| {
            retirement.moved(c.moved(), at);
            let p =
                Publication::collected(c, Arc::new(retirement.clone()), SelfStats::default(), at);
            state.publish(p);
        };

        let (first, cur) = (sample(0, 0), sample(1, 10));
        publish(collected([first.clone(), first.clone(), cur.clone()]), t0);
        let (status, body) = get(&state, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.contains("pool=\"ppscope:1\""),
            "the pool's series: {body}"
        );
        // Assembled once for the collection: every later ask shares it.
        let p = state.current().unwrap();
        let a = p.snapshot(Window::SinceStart);
        assert!(Arc::ptr_eq(&a, &p.snapshot(Window::SinceStart)));
        assert_eq!(a.pools.len(), 1);
        let (status, body) = get(&state, "/api/v1/snapshot?window=interval").await;
        assert_eq!(status, 200);
        assert!(body.contains("\"pools\""), "{body}");

        // A collection two minutes on: the pool has not moved since, past its grace.
        publish(
            collected([first, cur, sample(120, 10)]),
            t0 + Duration::from_secs(120),
        );
        let c = state.current().unwrap().snapshot(Window::SinceStart);
        assert!(!Arc::ptr_eq(&a, &c), "a new collection, a new snapshot");
        assert_eq!(c.pools.len(), 0, "retired");
        assert_eq!(get(&state, "/api/v1/snapshot").await.0, 200);
        assert_eq!(get(&state, "/nowhere").await.0, 404);
    }

    /// Each answer is rendered once per collection however many ask at once, and gzipped
    /// once for the clients that accept it (the same bytes, compressed); `q=0` refuses gzip.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_are_rendered_once_per_collection_and_gzipped_when_accepted() {
        use std::io::Read;
        let snap = crate::testing::snapshot_with_pools(50);
        let state = ServerState::new(Duration::from_secs(1), 100);
        state.publish(Publication::fixed(snap.clone(), snap, Instant::now()));
        let request = |encoding: Option<&str>| {
            let mut req = axum::http::Request::get("/metrics");
            if let Some(e) = encoding {
                req = req.header(header::ACCEPT_ENCODING, e);
            }
            let req = req.body(Body::empty()).unwrap();
            let app = router(state.clone());
            async move {
                let res = app.oneshot(req).await.unwrap();
                let gzipped = res.headers().get(header::CONTENT_ENCODING).is_some();
                let body = axum::body::to_bytes(res.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (gzipped, body)
            }
        };
        let many: Vec<_> = (0..32).map(|_| tokio::spawn(request(None))).collect();
        let mut bodies = Vec::new();
        for r in many {
            bodies.push(r.await.unwrap());
        }
        assert!(bodies.iter().all(|b| b == &bodies[0] && !b.0));
        assert!(String::from_utf8_lossy(&bodies[0].1).contains("ppscope_page_pool"));
        assert_eq!(state.renderings(), 1, "32 scrapes, one rendering");
        for accept in ["gzip", "br;q=1.0, gzip;q=0.5", "*"] {
            let (gzipped, gz) = request(Some(accept)).await;
            assert!(gzipped, "{accept}");
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut plain)
                .unwrap();
            assert_eq!(plain, bodies[0].1);
        }
        assert_eq!(state.renderings(), 2, "and one compression");
        for refused in ["gzip;q=0", "br", "identity", "gzip; Q = 0.0", "gzip;q=0, *"] {
            let (gzipped, body) = request(Some(refused)).await;
            assert!(!gzipped && body == bodies[0].1, "{refused}");
        }
        // A new collection, new answers.
        let snap = crate::testing::snapshot_with_pools(1);
        state.publish(Publication::fixed(snap.clone(), snap, Instant::now()));
        let (_, body) = request(None).await;
        assert_ne!(body, bodies[0].1);
        assert_eq!(state.renderings(), 3);
    }

    #[test]
    fn head_ends_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}

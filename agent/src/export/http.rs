//! The agent's HTTP side: `/metrics`, `/api/v1/snapshot` (since start, or `?window=interval`:
//! the last interval), `/healthz`, served from the last collection (no BPF and no kernel
//! access while a request is answered): its snapshots are assembled on the first request that
//! needs them, once per collection, outside the lock the collector publishes under.
//!
//! A small HTTP/1.1 server of our own, because the agent runs for months next to workloads
//! that matter and its endpoint must stay up whatever clients do. tiny_http 0.12 (used before)
//! stops accepting for good after one failed `accept` (EMFILE under a burst of connections),
//! buffers a header line of any length, and starts a thread per connection without a bound.
//! Here everything is bounded:
//!
//! - one thread per connection, at most [`MAX_CONNECTIONS`] at once (small stacks); at the
//!   cap the listener stops accepting until one ends, so further clients wait in the kernel's
//!   backlog instead of costing memory;
//! - a request head larger than [`MAX_HEAD`] gets `431`; one that has not fully arrived
//!   within [`HEAD_DEADLINE`] (a slow or silent client) gets `408`; writes time out after
//!   [`WRITE_TIMEOUT`] (a client that does not read): a slow client holds only its own thread;
//! - a failed `accept` is waited out and retried, never fatal;
//! - every answer closes its connection (`Connection: close`): no idle keep-alive
//!   connection is kept.
use std::{
    collections::HashSet,
    io::{ErrorKind, Read, Write},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream},
    panic::{catch_unwind, AssertUnwindSafe},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Condvar, Mutex, MutexGuard,
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};

use super::{
    metrics::{self, Format, SelfStats},
    retire::Retirement,
};
use crate::{
    report,
    snapshot::{PoolKey, Snapshot},
    source::Collected,
};

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// Stack of a connection's thread: parsing a head and rendering need little.
const STACK: usize = 256 * 1024;
/// Largest request head (request line and headers) read.
pub const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Time a client has to take each part of the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the collector hands to the server.
#[derive(Default)]
pub struct Shared {
    /// A snapshot since the start to serve as it is, when no collection is published (tests,
    /// and a server fed snapshots directly).
    pub snapshot: Option<Arc<Snapshot>>,
    /// Likewise for the last interval (`/api/v1/snapshot?window=interval`: what a remote
    /// `ppscope top --connect` shows as rates).
    pub interval_snapshot: Option<Arc<Snapshot>>,
    /// The last collection: its snapshots are assembled from it when first asked for
    /// ([`Collected::since_start_once`]).
    pub collected: Option<Arc<Collected>>,
    /// When each pool last moved (noted at every collection), to drop the still ones from the
    /// totals when they are assembled.
    pub retirement: Retirement,
    pub stats: SelfStats,
    pub last_collection: Option<Instant>,
}

impl Shared {
    /// Hands over a new collection and the pools that moved in it (found before the lock is
    /// taken: [`Collected::moved`] compares every pool).
    pub fn publish(&mut self, collected: Arc<Collected>, moved: HashSet<PoolKey>, at: Instant) {
        self.retirement.moved(moved, at);
        self.collected = Some(collected);
        self.last_collection = Some(at);
    }
}

/// Which snapshot a request wants.
#[derive(Clone, Copy)]
enum Window {
    SinceStart,
    Interval,
}

/// The snapshot of the last collection, assembled on the first ask (concurrent first asks wait
/// for one assembly). The lock is held only to take the collection and, for the totals, to
/// drop the pools still for longer than their grace as of that collection.
fn snapshot(shared: &Mutex<Shared>, window: Window) -> Option<Arc<Snapshot>> {
    let (collected, at) = {
        let sh = lock(shared);
        match (&sh.collected, window) {
            (Some(c), _) => (c.clone(), sh.last_collection.unwrap_or_else(Instant::now)),
            (None, Window::SinceStart) => return sh.snapshot.clone(),
            (None, Window::Interval) => return sh.interval_snapshot.clone(),
        }
    };
    Some(match window {
        Window::SinceStart => collected
            .since_start_once(|snap| lock(shared).retirement.retire(snap, at))
            .clone(),
        Window::Interval => collected.interval_once().clone(),
    })
}

pub struct HttpServer {
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

/// The collector's lock, even if a thread panicked while holding it: the data is a finished
/// snapshot, never half-written, so serving it is still right.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
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
        let listener =
            TcpListener::bind(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        widen_backlog(&listener);
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let slots = Arc::new(Slots::default());
        let accept = thread::Builder::new()
            .name("ppscope-http-accept".into())
            .spawn(move || loop {
                slots.wait_for_room();
                let conn = listener.accept();
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let stream = match conn {
                    Ok((stream, _)) => stream,
                    // EMFILE/ENFILE/ENOBUFS or an aborted handshake: the listener is fine,
                    // so wait a moment (no busy loop) and go on accepting.
                    Err(_) => {
                        thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                let slot = slots.take();
                let shared = shared.clone();
                let spawned = thread::Builder::new()
                    .name("ppscope-http".into())
                    .stack_size(STACK)
                    .spawn(move || {
                        let _slot = slot;
                        // A bug in rendering must cost one answer, not the process.
                        let _ = catch_unwind(AssertUnwindSafe(|| {
                            serve_connection(stream, &shared, interval, max_pools)
                        }));
                    });
                if spawned.is_err() {
                    // No thread to be had (the closure, slot and stream are dropped with
                    // the error): back off.
                    thread::sleep(Duration::from_millis(20));
                }
            })
            .map_err(|e| anyhow!("cannot start the HTTP listener: {e}"))?;
        Ok(Self {
            stop,
            accept: Some(accept),
            addr,
        })
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        // Joined only when it is surely leaving: at the connection cap it waits for a slot
        // (at most HEAD_DEADLINE + WRITE_TIMEOUT), and shutting down must not wait for that.
        if let Some(t) = self.accept.take() {
            let deadline = Instant::now() + Duration::from_secs(1);
            while !t.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// std listens with a backlog of 128. A burst of scrapers beyond that overflows the accept
/// queue, and with SYN cookies on (the default) a client that wrote its request in pieces is
/// then reset (seen: half of 1,000 concurrent scrapes). Listening again on the same socket
/// only changes the backlog; the kernel caps it at `net.core.somaxconn`.
fn widen_backlog(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: listen(2) on a socket we own and that is already bound and listening.
    unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
}

/// Connections the kernel queues for us (further capped by `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// Connections in service, bounded by [`MAX_CONNECTIONS`].
#[derive(Default)]
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
}

/// One connection's place; given back when its thread ends, however it ends.
struct Slot(Arc<Slots>);

impl Slots {
    fn wait_for_room(&self) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used >= MAX_CONNECTIONS {
            used = self.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn take(self: &Arc<Self>) -> Slot {
        *self.used.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Slot(self.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.used.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        self.0.freed.notify_one();
    }
}

/// One answer: status, content type, body, extra headers.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    allow: bool,
}

fn text(status: u16, body: impl Into<String>, content_type: &'static str) -> Reply {
    Reply {
        status,
        content_type,
        body: body.into(),
        allow: false,
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Why no request came out of a connection.
enum HeadError {
    /// The client went away (or sent nothing): there is no one to answer.
    Gone,
    /// Answer with this status, then close.
    Status(u16),
}

/// Reads up to the blank line that ends a request head, within [`MAX_HEAD`] bytes and
/// [`HEAD_DEADLINE`] for the whole head (a client trickling one byte at a time cannot hold a
/// worker longer than that).
fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Status(408));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let room = (MAX_HEAD + 1 - head.len()).min(chunk.len());
        let n = match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(HeadError::Status(408))
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Gone),
        };
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&head[from..]) {
            head.truncate(from + end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(HeadError::Status(431));
        }
    }
}

/// Where the head ends (after `\r\n\r\n`, or a bare `\n\n`), if it does in `buf`.
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

/// A parsed request head: what the endpoints look at.
#[derive(Debug, PartialEq)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    pub accept: Option<String>,
}

/// `METHOD SP TARGET SP HTTP/1.x` and headers; None when it is not HTTP/1.
pub fn parse_head(head: &[u8]) -> Option<RequestHead> {
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
        || !version.starts_with("HTTP/1.")
    {
        return None;
    }
    let mut accept = None;
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("accept") {
            accept = Some(value.trim().to_string());
        }
    }
    Some(RequestHead {
        method: method.into(),
        target: target.into(),
        accept,
    })
}

fn serve_connection(
    mut stream: TcpStream,
    shared: &Mutex<Shared>,
    interval: Duration,
    max_pools: usize,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let (reply, head_only) = match read_head(&mut stream) {
        Err(HeadError::Gone) => return,
        Err(HeadError::Status(status)) => (
            text(status, format!("{}\n", reason(status)), "text/plain"),
            false,
        ),
        Ok(head) => match parse_head(&head) {
            None => (text(400, "not an HTTP/1 request\n", "text/plain"), false),
            Some(req) => (
                answer(&req, shared, interval, max_pools),
                req.method == "HEAD",
            ),
        },
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len()
    );
    if reply.allow {
        out += "Allow: GET, HEAD\r\n";
    }
    out += "\r\n";
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(reply.body.as_bytes());
    }
    if stream.write_all(&bytes).is_ok() {
        let _ = stream.flush();
        // Whatever the client sent beyond the head is not read: close our side first so the
        // answer is delivered before the socket goes.
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

/// The answer to one request, from the last collection.
pub fn answer(
    req: &RequestHead,
    shared: &Mutex<Shared>,
    interval: Duration,
    max_pools: usize,
) -> Reply {
    if req.method != "GET" && req.method != "HEAD" {
        let mut r = text(405, "only GET\n", "text/plain");
        r.allow = true;
        return r;
    }
    let (path, query) = req
        .target
        .split_once('?')
        .unwrap_or((req.target.as_str(), ""));
    match path {
        "/metrics" => {
            let format = Format::from_accept(req.accept.as_deref());
            let started = Instant::now();
            let Some(snap) = snapshot(shared, Window::SinceStart) else {
                return text(503, "no collection yet\n", "text/plain");
            };
            let stats = lock(shared).stats.clone();
            let (body, _) = metrics::render(&snap, &stats, format, max_pools);
            lock(shared).stats.last_scrape_seconds = started.elapsed().as_secs_f64();
            text(200, body, format.content_type())
        }
        "/api/v1/snapshot" => {
            let last_interval = query.split('&').any(|kv| kv == "window=interval");
            let window = if last_interval {
                Window::Interval
            } else {
                Window::SinceStart
            };
            match snapshot(shared, window) {
                Some(s) => text(
                    200,
                    serde_json::to_string(&report::json(&s)).unwrap_or_default(),
                    "application/json",
                ),
                None => text(503, "{\"error\":\"no collection yet\"}", "application/json"),
            }
        }
        "/healthz" => {
            let sh = lock(shared);
            let fresh = sh
                .last_collection
                .is_some_and(|t| t.elapsed() <= interval * 3 + Duration::from_secs(1));
            if fresh {
                text(200, "ok\n", "text/plain")
            } else {
                text(503, "collection is late\n", "text/plain")
            }
        }
        _ => text(
            404,
            "not found: try /metrics, /api/v1/snapshot, /healthz\n",
            "text/plain",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads() {
        let h = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: application/openmetrics-text\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "/metrics?x=1");
        assert_eq!(h.accept.as_deref(), Some("application/openmetrics-text"));
        assert!(parse_head(b"GET /metrics HTTP/1.0\n\n").is_some());
        for bad in [
            &b""[..],
            b"\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/2\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_head(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// The agent collects every interval; its snapshots are assembled on the first scrape
    /// after a collection, once, with the pools that stopped moving retired.
    #[test]
    fn snapshots_are_assembled_when_asked_once_per_collection() {
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
        let shared = Mutex::new(Shared {
            retirement: Retirement::new(Duration::from_secs(60)),
            ..Shared::default()
        });
        let get = |target: &str| {
            let head = format!("GET {target} HTTP/1.1\r\n\r\n");
            let req = parse_head(head.as_bytes()).unwrap();
            answer(&req, &shared, Duration::from_secs(1), 100)
        };
        assert_eq!(get("/metrics").status, 503, "no collection yet");

        let (first, cur) = (sample(0, 0), sample(1, 10));
        let c = collected([first.clone(), first.clone(), cur.clone()]);
        let moved = c.moved();
        lock(&shared).publish(c, moved, t0);
        let metrics = get("/metrics");
        assert_eq!(metrics.status, 200);
        assert!(
            metrics.body.contains("pool=\"ppscope:1\""),
            "the pool's series: {}",
            metrics.body
        );
        // Assembled once for the collection: every later ask shares it.
        let a = snapshot(&shared, Window::SinceStart).unwrap();
        let b = snapshot(&shared, Window::SinceStart).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.pools.len(), 1);
        let interval = get("/api/v1/snapshot?window=interval");
        assert_eq!(interval.status, 200);
        assert!(interval.body.contains("\"pools\""), "{}", interval.body);

        // A collection two minutes on: the pool has not moved since, past its grace.
        let later = sample(120, 10);
        let c = collected([first, cur, later]);
        let moved = c.moved();
        lock(&shared).publish(c, moved, t0 + Duration::from_secs(120));
        let c = snapshot(&shared, Window::SinceStart).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "a new collection, a new snapshot");
        assert_eq!(c.pools.len(), 0, "retired");
        assert_eq!(get("/api/v1/snapshot").status, 200);
    }

    #[test]
    fn head_ends_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}

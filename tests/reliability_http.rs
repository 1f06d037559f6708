//! Reliability: the agent's metrics endpoint against hostile and careless clients. These
//! drive the very server `ppscope agent` runs (`export::http`, on a tokio runtime of its own
//! here), fed a 300-pool snapshot, so they need no root and run in every `cargo test`;
//! `tests/reliability.rs` repeats the burst against the real agent process to bound its memory.
//!
//! What a user must be able to trust: oversized or malformed requests get a status and a
//! closed connection, slow or silent clients delay nobody else, 1,000 concurrent scrapes
//! each get a complete answer on a fixed pool of threads, and afterwards the server holds no
//! more connections (fds) than before.
use std::{
    collections::HashMap,
    io::{Read, Write},
    net::{Shutdown, TcpStream},
    sync::{Arc, Barrier, Mutex},
    thread,
    time::{Duration, Instant},
};

use ppscope::export::http::{
    BlockingServer, Publication, ServerState, HEAD_DEADLINE, MAX_HEAD, RENDERS_AT_ONCE,
};

mod common;

use common::{http_get_timeout, metric_series};

const POOLS: u64 = 300;

/// The tests count this process's threads and fds, so they take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server like the agent's, with a collected snapshot of `POOLS` busy pools (what the
/// tracepoint backend covers: this host's case).
fn server() -> BlockingServer {
    let snap = ppscope::testing::snapshot_with_pools(POOLS);
    assert_eq!(snap.pools.len() as u64, POOLS);
    let state = ServerState::new(Duration::from_secs(3600), 10_000);
    state.publish(Publication::fixed(snap.clone(), snap, Instant::now()));
    BlockingServer::start("127.0.0.1:0".parse().unwrap(), state).unwrap()
}

/// Sends `request` (whatever it is), then reads the answer's status line; None when the
/// connection closed without one.
fn raw_exchange(addr: &str, request: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(HEAD_DEADLINE + Duration::from_secs(5)))
        .unwrap();
    // The server may close before taking all of an oversized request: a failed write is
    // part of the test, the answer is what counts.
    let _ = s.write_all(request);
    let _ = s.shutdown(Shutdown::Write);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Threads of this test process that serve HTTP (the server's runtime names them: its
/// workers and its blocking pool).
fn server_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "ppscope-http")
        })
        .count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Waits until this process holds at most `fds` fds again (each connection's socket is
/// closed right after its answer); returns how many are open then.
fn settle(fds: usize, limit: Duration) -> usize {
    let start = Instant::now();
    while open_fds() > fds && start.elapsed() < limit {
        thread::sleep(Duration::from_millis(20));
    }
    open_fds()
}

#[test]
fn oversized_and_malformed_requests_get_a_status_and_change_nothing() {
    let _turn = one_at_a_time();
    let srv = server();
    let addr = srv.addr.to_string();
    let fds_before = open_fds();
    let huge_line = [
        &b"GET /metrics HTTP/1.1\r\nX-Big: "[..],
        &vec![b'a'; 4 << 20],
        b"\r\n\r\n",
    ]
    .concat();
    let many_headers = [
        &b"GET /metrics HTTP/1.1\r\n"[..],
        &b"X-A: b\r\n".repeat(MAX_HEAD / 4),
        b"\r\n",
    ]
    .concat();
    let huge_target = format!("GET /{} HTTP/1.1\r\n\r\n", "m".repeat(1 << 20));
    let cases: &[(&str, &[u8], u16)] = &[
        ("a 4 MiB header line", &huge_line, 431),
        ("thousands of headers", &many_headers, 431),
        ("a 1 MiB path", huge_target.as_bytes(), 431),
        (
            "binary garbage",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            400,
        ),
        ("no version", b"GET /metrics\r\n\r\n", 400),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
        (
            "header without colon",
            b"GET /metrics HTTP/1.1\r\nbroken\r\n\r\n",
            400,
        ),
        ("not UTF-8", b"GET /\xff\xfe HTTP/1.1\r\n\r\n", 400),
        (
            "POST",
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            405,
        ),
        (
            "unknown path",
            b"GET /../../etc/passwd HTTP/1.1\r\n\r\n",
            404,
        ),
        ("bare newlines", b"GET /healthz HTTP/1.0\n\n", 200),
    ];
    let mut tried = 0;
    for (what, request, want) in cases {
        let started = Instant::now();
        let got = raw_exchange(&addr, request);
        assert_eq!(got, Some(*want), "{what}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{what}: took {:?}",
            started.elapsed()
        );
        tried += 1;
    }
    // HEAD: the length of the body, not the body.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"HEAD /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.ends_with("\r\n\r\n"), "HEAD carried a body: {raw}");
    // A client that connects and leaves at once gets nothing and costs nothing.
    for _ in 0..100 {
        drop(TcpStream::connect(&addr).unwrap());
    }
    // Still serving, every pool there, nothing left open.
    let (status, body) = http_get_timeout(&addr, "/metrics", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        metric_series(&body, "ppscope_page_pool_pages_allocated_total", ""),
        POOLS as usize
    );
    let fds = settle(fds_before + 1, Duration::from_secs(5));
    assert!(fds <= fds_before + 1, "fds: {fds_before} → {fds}");
    eprintln!("reliability: {tried} bad requests + 100 empty connections answered, none leaked");
    srv.stop();
}

/// A client that shuts its side down once its request is sent (scripts and probes do) still
/// gets every answer: the end of its input is not the end of the exchange. With hyper's
/// default (close on that end) /metrics was lost every time and a POST's 405 in a CI run;
/// here every kind of answer is asked for many times.
#[test]
fn a_client_that_half_closes_gets_every_answer() {
    let _turn = one_at_a_time();
    let srv = server();
    let addr = srv.addr.to_string();
    let cases: &[(&[u8], u16)] = &[
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            405,
        ),
        (
            b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            200,
        ),
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404),
        (b"GET /metrics HTTP/1.1\r\n\r\n", 200),
    ];
    for round in 0..200 {
        for (request, want) in cases {
            let got = raw_exchange(&addr, request);
            assert_eq!(
                got,
                Some(*want),
                "round {round}: {}",
                String::from_utf8_lossy(request)
            );
        }
    }
    srv.stop();
}

#[test]
fn slow_and_silent_clients_delay_no_one_else() {
    let _turn = one_at_a_time();
    let srv = server();
    let addr = srv.addr.to_string();
    let fds_before = open_fds();
    // 40 clients that send half a request and go silent, 10 that trickle a byte every
    // 300 ms, and 10 that ask for /metrics and never read the answer.
    let mut silent: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    let trickle = thread::spawn({
        let addr = addr.clone();
        move || {
            let mut conns: Vec<TcpStream> = (0..10)
                .map(|_| TcpStream::connect(&addr).unwrap())
                .collect();
            let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
            // Per connection: did the server close it (a write failed)?
            let mut closed = vec![false; conns.len()];
            for b in request.iter() {
                for (c, shut) in conns.iter_mut().zip(closed.iter_mut()) {
                    if !*shut && c.write_all(&[*b]).is_err() {
                        *shut = true;
                    }
                }
                thread::sleep(Duration::from_millis(300));
            }
            closed.iter().filter(|c| **c).count()
        }
    });
    let unread: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            s
        })
        .collect();
    // Meanwhile, a scraper every 100 ms must be answered promptly.
    let mut worst = Duration::ZERO;
    for _ in 0..30 {
        let started = Instant::now();
        let (status, body) =
            http_get_timeout(&addr, "/metrics", Duration::from_secs(5)).expect("answered");
        assert_eq!(status, 200);
        assert!(body.len() > 10_000);
        worst = worst.max(started.elapsed());
        thread::sleep(Duration::from_millis(100));
    }
    assert!(
        worst < Duration::from_secs(1),
        "a scrape waited {worst:?} behind slow clients"
    );
    // The silent ones are told off (408) and closed once their time is up.
    thread::sleep(HEAD_DEADLINE + Duration::from_secs(1));
    let mut timed_out = 0;
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        if raw.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        }
    }
    assert_eq!(timed_out, silent.len(), "silent clients not closed");
    // Trickling clients hit the same deadline: the server closed on them.
    let closed = trickle.join().unwrap();
    assert_eq!(
        closed, 10,
        "every client trickling bytes is closed at the deadline, not only some"
    );
    drop(unread);
    drop(silent);
    // The non-reading clients' answers end with them, or at the connection's deadline.
    let fds = settle(fds_before, Duration::from_secs(35));
    assert!(
        fds <= fds_before,
        "connections left open: fds {fds_before} → {fds}"
    );
    eprintln!(
        "reliability: 60 slow/silent/non-reading clients; worst scrape beside them {worst:?}"
    );
    srv.stop();
}

#[test]
fn a_thousand_concurrent_scrapes_all_get_complete_answers() {
    let _turn = one_at_a_time();
    const CLIENTS: usize = 1000;
    // The clients' 1,000 sockets are ours too: make room for them.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(8192);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let srv = server();
    let addr = srv.addr.to_string();
    let fds_before = open_fds();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let peak = Arc::new(Mutex::new(0usize));
    let watcher = {
        let peak = peak.clone();
        thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                let n = server_threads();
                let mut p = peak.lock().unwrap();
                *p = (*p).max(n);
                drop(p);
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = addr.clone();
            let barrier = barrier.clone();
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    barrier.wait();
                    // Written in pieces (`write!`), as many clients do: the case the listen
                    // backlog once broke (resets under SYN cookies).
                    http_get_timeout(&addr, "/metrics", Duration::from_secs(30))
                        .map(|(status, body)| (status, body.len()))
                })
                .unwrap()
        })
        .collect();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut lengths = Vec::new();
    for c in clients {
        let key = match c.join().unwrap() {
            Some((200, len)) => {
                lengths.push(len);
                "200".to_string()
            }
            Some((s, _)) => s.to_string(),
            None => "no complete answer".to_string(),
        };
        *outcomes.entry(key).or_default() += 1;
    }
    let took = started.elapsed();
    let peak = *peak.lock().unwrap();
    eprintln!(
        "reliability: {CLIENTS} concurrent scrapes in {took:?}: {outcomes:?}, peak {peak} server threads"
    );
    assert_eq!(outcomes.get("200"), Some(&CLIENTS), "{outcomes:?}");
    // Every answer is the whole exposition, the same bytes: one rendering for the collection.
    let (min, max) = (lengths.iter().min().unwrap(), lengths.iter().max().unwrap());
    assert_eq!(min, max, "answers differ: {min}..{max} bytes");
    // Connections are tasks, not threads: the server's threads are its runtime's two workers
    // and the few renderings allowed at once, however many clients come.
    assert!(peak <= 2 + RENDERS_AT_ONCE, "{peak} server threads");
    watcher.join().unwrap();
    let fds = settle(fds_before + 1, Duration::from_secs(5));
    assert!(fds <= fds_before + 1, "fds leaked: {fds_before} → {fds}");
    srv.stop();
}

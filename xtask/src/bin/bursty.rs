//! `bursty`: the lab's bursty TCP workload (the seed case's dynamics on any NIC).
//!
//! `bursty recv ADDR:PORT SECONDS STALL_MS DRAIN_MS` accepts one connection, then for SECONDS
//! alternates: stop reading for STALL_MS (the socket's queue fills: the driver keeps
//! allocating, nothing is freed), then read flat out for DRAIN_MS (process-context frees, so
//! every recycle goes to the ptr_ring in a burst). `bursty send ADDR:PORT SECONDS` connects and
//! writes flat out. Prints one line with the bytes moved. Only for the lab's own namespaces.
use std::{
    env,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::ExitCode,
    thread,
    time::{Duration, Instant},
};

fn usage() -> ExitCode {
    eprintln!(
        "usage: bursty recv ADDR:PORT SECONDS STALL_MS DRAIN_MS | bursty send ADDR:PORT SECONDS"
    );
    ExitCode::from(2)
}

fn num(s: Option<&String>) -> Option<u64> {
    s?.parse().ok()
}

fn recv(addr: &str, secs: u64, stall: u64, drain: u64) -> std::io::Result<u64> {
    let listener = TcpListener::bind(addr)?;
    let (mut conn, _) = listener.accept()?;
    conn.set_read_timeout(Some(Duration::from_millis(50)))?;
    let end = Instant::now() + Duration::from_secs(secs);
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(stall));
        let until = Instant::now() + Duration::from_millis(drain);
        while Instant::now() < until {
            match conn.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(total)
}

fn send(addr: &str, secs: u64) -> std::io::Result<u64> {
    let mut conn = TcpStream::connect(addr)?;
    conn.set_write_timeout(Some(Duration::from_millis(200)))?;
    let end = Instant::now() + Duration::from_secs(secs);
    let buf = vec![0x5au8; 64 * 1024];
    let mut total = 0u64;
    while Instant::now() < end {
        match conn.write(&buf) {
            Ok(n) => total += n as u64,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    Ok(total)
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("recv") => match (
            args.get(2),
            num(args.get(3)),
            num(args.get(4)),
            num(args.get(5)),
        ) {
            (Some(a), Some(s), Some(st), Some(dr)) => recv(a, s, st, dr),
            _ => return usage(),
        },
        Some("send") => match (args.get(2), num(args.get(3))) {
            (Some(a), Some(s)) => send(a, s),
            _ => return usage(),
        },
        _ => return usage(),
    };
    match result {
        Ok(bytes) => {
            println!("bytes={bytes}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bursty: {e}");
            ExitCode::FAILURE
        }
    }
}

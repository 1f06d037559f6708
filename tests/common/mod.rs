//! Test hosts shared by the root-only integration tests: two network namespaces joined by a
//! veth pair, XDP on the receiving end (which gives veth its page_pool), iperf3 between them.
//! Addresses come from 198.18.SUBNET.0/24 (the benchmark range); everything made is removed
//! on drop, whatever the test did.
#![allow(dead_code)] // each test crate uses its own part

use std::{
    io::{BufRead, BufReader},
    process::{Child, ChildStdout, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

pub const PPSCOPE: &str = env!("CARGO_BIN_EXE_ppscope");

/// The most instructions the verifier may walk for one hook's programs (`doctor`'s "verifier:
/// N instructions"). Loading the programs is most of the start-up, and it grows with that
/// walk: 13,000-27,000 a hook made the VM lab's start 1.8× bpftrace's; at most 5,600 since
/// the programs stopped branching on every kernel read (BENCHMARKS.md, start-up). The VM lab's
/// tests hold sid and trixie to the same figure (`xtask/tests/vm.rs`).
pub const WALK_BUDGET: u64 = 8_000;

pub fn run(cmd: &str, args: &[&str]) -> Output {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

pub struct VethLab {
    pub ns_tx: String,
    pub ns_rx: String,
    pub dev_tx: String,
    pub dev_rx: String,
    pub tx_addr: String,
    pub rx_addr: String,
    /// `ppscope lab xdp`, with its stdout kept open so a later print cannot hit EPIPE.
    xdp: Option<(Child, BufReader<ChildStdout>)>,
    iperf_server: Option<Child>,
}

impl VethLab {
    /// Namespaces and the veth pair, up and addressed; no XDP yet.
    pub fn new(tag: &str, subnet: u8) -> Self {
        let id = std::process::id() % 100_000;
        let lab = Self {
            ns_tx: format!("ppt-{tag}-tx-{id}"),
            ns_rx: format!("ppt-{tag}-rx-{id}"),
            dev_tx: format!("pt{tag}{id}"),
            dev_rx: format!("pr{tag}{id}"),
            tx_addr: format!("198.18.{subnet}.1"),
            rx_addr: format!("198.18.{subnet}.2"),
            xdp: None,
            iperf_server: None,
        };
        // From here on, Drop removes whatever was made.
        run("ip", &["netns", "add", &lab.ns_tx]);
        run("ip", &["netns", "add", &lab.ns_rx]);
        run(
            "ip",
            &[
                "link",
                "add",
                &lab.dev_tx,
                "netns",
                &lab.ns_tx,
                "type",
                "veth",
                "peer",
                "name",
                &lab.dev_rx,
                "netns",
                &lab.ns_rx,
            ],
        );
        for (ns, dev, addr) in [
            (&lab.ns_tx, &lab.dev_tx, &lab.tx_addr),
            (&lab.ns_rx, &lab.dev_rx, &lab.rx_addr),
        ] {
            run(
                "ip",
                &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev],
            );
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        lab
    }

    /// XDP pass on the receiving veth, held until the lab drops: veth's page_pools appear.
    pub fn attach_xdp(&mut self) {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns_rx,
                PPSCOPE,
                "lab",
                "xdp",
                &self.dev_rx,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn ppscope lab xdp");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (_, out) = self.xdp.insert((child, out));
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.contains("attached"), "lab xdp said: {line:?}");
    }

    /// Detaches the XDP program (ends `ppscope lab xdp`): veth destroys its page_pools.
    pub fn detach_xdp(&mut self) {
        if let Some((mut child, _)) = self.xdp.take() {
            stop(&mut child);
        }
    }

    /// iperf3 from tx to rx for `secs` seconds.
    pub fn traffic(&mut self, secs: u32) {
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns_rx,
                "iperf3",
                "-s",
                "-1",
                "-B",
                &self.rx_addr,
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("iperf3 server (is iperf3 installed? cargo xtask setup)");
        self.iperf_server = Some(server);
        thread::sleep(Duration::from_millis(500));
        let client = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns_tx,
                "iperf3",
                "-c",
                &self.rx_addr,
                "-t",
                &secs.to_string(),
                "--connect-timeout",
                "3000",
            ])
            .output()
            .expect("iperf3 client");
        assert!(
            client.status.success(),
            "iperf3: {}",
            String::from_utf8_lossy(&client.stderr)
        );
        // The one-off server exits after its client; do not wait for it forever.
        let mut server = self.iperf_server.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        stop(&mut server);
    }

    /// `n` UDP datagrams from tx to a port nobody listens on at rx: the receiver drops each
    /// (no socket) on its veth, where the drop hook sees it.
    pub fn datagrams_to_a_closed_port(&self, n: u32) {
        let script = format!(
            "for i in $(seq {n}); do echo x > /dev/udp/{}/9; done",
            self.rx_addr
        );
        let out = run("ip", &["netns", "exec", &self.ns_tx, "bash", "-c", &script]);
        assert!(
            out.status.success(),
            "datagrams: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Whether the receiving veth reports page_pool counters through ethtool (`rx_pp_*`),
    /// which it does exactly when the kernel has `CONFIG_PAGE_POOL_STATS`.
    pub fn ethtool_has_pp_stats(&self) -> bool {
        let out = run(
            "ip",
            &["netns", "exec", &self.ns_rx, "ethtool", "-S", &self.dev_rx],
        );
        String::from_utf8_lossy(&out.stdout).contains("rx_pp_")
    }
}

impl Drop for VethLab {
    fn drop(&mut self) {
        if let Some(s) = self.iperf_server.as_mut() {
            stop(s);
        }
        if let Some((c, _)) = self.xdp.as_mut() {
            stop(c);
        }
        for ns in [&self.ns_tx, &self.ns_rx] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

// ---- Reliability helpers (tests/reliability*.rs): the agent as a process, its HTTP side,
// ---- and what it owns in the kernel and in memory.

/// A plain HTTP/1.1 GET on loopback: (status, body); None when nothing answers in `timeout`.
pub fn http_get_timeout(addr: &str, path: &str, timeout: Duration) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    // A complete answer only: the body must be as long as the head says.
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(body.len());
    (len == body.len()).then(|| (status, body.to_string()))
}

/// Sum of the samples of metric `name` whose labels contain `label` ("" for all).
pub fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Number of samples (series) of metric `name` whose labels contain `label`.
pub fn metric_series(text: &str, name: &str, label: &str) -> usize {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name) && l.contains(label))
        .count()
}

/// A free loopback TCP port (racy by nature; good enough for tests).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Resident memory of a process, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Threads and open fds of a process.
pub fn threads_and_fds(pid: u32) -> (usize, usize) {
    let count = |d: String| std::fs::read_dir(d).map(|r| r.count()).unwrap_or(0);
    (
        count(format!("/proc/{pid}/task")),
        count(format!("/proc/{pid}/fd")),
    )
}

/// The BPF objects a process holds fds of, by kind (`prog_id`, `link_id`, `map_id` from
/// `/proc/PID/fdinfo`): exactly what must disappear when it dies, whoever else runs BPF.
#[derive(Debug, Default, Clone)]
pub struct BpfOwned {
    pub progs: Vec<u32>,
    pub links: Vec<u32>,
    pub maps: Vec<u32>,
}

pub fn bpf_owned_by(pid: u32) -> BpfOwned {
    let mut owned = BpfOwned::default();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return owned;
    };
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let Ok(id) = v.trim().parse::<u32>() else {
                continue;
            };
            match k.trim() {
                "prog_id" => owned.progs.push(id),
                "link_id" => owned.links.push(id),
                "map_id" => owned.maps.push(id),
                _ => {}
            }
        }
    }
    for v in [&mut owned.progs, &mut owned.links, &mut owned.maps] {
        v.sort_unstable();
        v.dedup();
    }
    owned
}

/// Which of `owned` the kernel still has (by id), listed the way bpftool does.
pub fn bpf_still_loaded(owned: &BpfOwned) -> BpfOwned {
    let progs: Vec<u32> = aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .map(|p| p.id())
        .filter(|id| owned.progs.contains(id))
        .collect();
    let links: Vec<u32> = aya::programs::loaded_links()
        .filter_map(|l| l.ok())
        .map(|l| l.id())
        .filter(|id| owned.links.contains(id))
        .collect();
    let maps: Vec<u32> = aya::maps::loaded_maps()
        .filter_map(|m| m.ok())
        .map(|m| m.id())
        .filter(|id| owned.maps.contains(id))
        .collect();
    BpfOwned { progs, links, maps }
}

/// `ppscope agent` as a child process, killed on drop; stderr lines are collected.
pub struct AgentProc {
    pub child: Child,
    pub addr: String,
    pub stderr: std::sync::mpsc::Receiver<String>,
}

impl AgentProc {
    /// Starts `ppscope agent --listen ADDR ARGS` (a free loopback port when `listen` is None;
    /// no `--listen` at all, the default, when it is `Some("")`) and waits for its "agent
    /// serving" line.
    pub fn start(listen: Option<&str>, args: &[&str]) -> Self {
        let addr = match listen {
            Some("") => "127.0.0.1:9464".to_string(),
            Some(a) => a.to_string(),
            None => format!("127.0.0.1:{}", free_tcp_port()),
        };
        let mut cmd = Command::new(PPSCOPE);
        cmd.arg("agent");
        if listen != Some("") {
            cmd.args(["--listen", &addr]);
        }
        let mut child = cmd
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ppscope agent");
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let agent = Self {
            child,
            addr,
            stderr: rx,
        };
        let line = agent
            .stderr
            .recv_timeout(Duration::from_secs(30))
            .expect("the agent says it is serving");
        assert!(line.contains("agent serving"), "agent said: {line}");
        agent
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn metrics(&self) -> String {
        let (status, body) = http_get_timeout(&self.addr, "/metrics", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("nothing answers on {}", self.addr));
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits for the first collection (the agent answers 503 until then); returns how long.
    pub fn wait_first_collection(&self, limit: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some((200, _)) = http_get_timeout(&self.addr, "/metrics", Duration::from_secs(2))
            {
                return start.elapsed();
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the agent on {} never collected within {limit:?}",
            self.addr
        );
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus (the Debian package `cargo xtask setup` installs) scraping `target`
/// every second, in a directory of its own; killed and removed on drop.
pub struct Prometheus {
    child: Child,
    dir: std::path::PathBuf,
    pub addr: String,
}

impl Prometheus {
    /// `tag` names its directory (one per test).
    pub fn scraping(target: &str, tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ppscope-prom-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ppscope\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_tcp_port());
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            // Kept for `why_not`: what Prometheus said when a test finds nothing in it.
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian package prometheus; cargo xtask setup installs it)");
        Self { child, dir, addr }
    }

    /// The answer to a PromQL instant query (`data.result`), None while Prometheus is not up
    /// or the query fails.
    pub fn query(&self, promql: &str) -> Option<serde_json::Value> {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = http_get_timeout(
            &self.addr,
            &format!("/api/v1/query?query={q}"),
            Duration::from_secs(5),
        )?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (status == 200).then(|| v["data"]["result"].clone())
    }

    /// The first result's value of an instant query.
    pub fn value(&self, promql: &str) -> Option<f64> {
        self.query(promql)?[0]["value"][1].as_str()?.parse().ok()
    }

    /// For a failed wait: whether Prometheus still runs, how its scrapes of the target went
    /// (health, last error, last scrape's duration), and the end of its log.
    pub fn why_not(&mut self) -> String {
        let running = match self.child.try_wait() {
            Ok(None) => "running".to_string(),
            Ok(Some(status)) => format!("exited: {status}"),
            Err(e) => format!("unknown: {e}"),
        };
        let targets = http_get_timeout(&self.addr, "/api/v1/targets", Duration::from_secs(5))
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .map(|v| {
                v["data"]["activeTargets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{} health {} last error {:?} last scrape {} ({} s)",
                            t["scrapeUrl"],
                            t["health"],
                            t["lastError"],
                            t["lastScrape"],
                            t["lastScrapeDuration"]
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_else(|| "no answer from /api/v1/targets".into());
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(15)..];
        format!(
            "Prometheus {running}; targets: {targets}\nits log ends:\n{}",
            tail.join("\n")
        )
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `promtool check metrics` on `exposition` (Prometheus' own parser and linter of the 0.0.4
/// text): what it said when it refused it.
pub fn promtool_check_metrics(exposition: &str) -> Result<(), String> {
    use std::{io::Write, process::Stdio};
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (is prometheus installed? cargo xtask setup)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

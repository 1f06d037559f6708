//! Reliability on this host's kernel (root): process faults, least privilege, the real
//! agent's endpoint under load, and page_pool churn while the agent runs. What a user must be
//! able to trust: ppscope never leaves BPF behind, never needs more than the capabilities it
//! names, never grows, and never reports a pool that is gone or a number that belongs to
//! another pool.
//!
//! `#[ignore]`d for a plain `cargo test` (root, namespaces, BPF); `cargo xtask test` runs
//! them. `PPSCOPE_CHURN_CYCLES` (default 1000) sets the churn length; `cargo xtask soak`
//! runs them longer.
use std::{
    fs,
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

mod common;

use common::{
    bpf_owned_by, bpf_still_loaded, http_get_timeout, metric_sum, rss_kib, run, stop,
    threads_and_fds, AgentProc, VethLab, PPSCOPE,
};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until `cond` holds or `limit` passes; true when it held.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------------ 4. process faults

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_killed_agent_leaves_no_bpf_program_link_or_map_behind() {
    // SIGKILL: no handler runs. SIGABRT: what a panic does under panic=abort (and an
    // assertion in C code). SIGQUIT: a core-dumping crash. SIGTERM: the clean path. (Not a
    // SIGSEGV sent with kill(2): Rust's stack-overflow handler takes it, resets to the default
    // and returns, so only a real fault kills; a sent one is survived, seen here.)
    let rounds = env_u64("PPSCOPE_FAULT_ROUNDS", 3);
    // ABRT and QUIT dump core by default: not into the checkout.
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a valid pointer to a local struct; children inherit it.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let mut tried = 0;
    for sig in [libc::SIGKILL, libc::SIGABRT, libc::SIGQUIT, libc::SIGTERM] {
        for _ in 0..rounds {
            let agent = AgentProc::start(None, &["--interval", "200ms"]);
            agent.wait_first_collection(Duration::from_secs(10));
            let owned = bpf_owned_by(agent.pid());
            assert!(
                !owned.progs.is_empty() && !owned.links.is_empty() && !owned.maps.is_empty(),
                "the agent holds no BPF? {owned:?}"
            );
            agent.signal(sig);
            let mut agent = agent;
            let mut status = None;
            let died = eventually(Duration::from_secs(10), || {
                status = agent.child.try_wait().unwrap();
                status.is_some()
            });
            assert!(died, "the agent survived signal {sig}");
            if sig == libc::SIGTERM {
                assert_eq!(status.unwrap().code(), Some(0), "SIGTERM must exit 0");
            }
            // The kernel frees programs, links and maps once their last fd closes (RCU).
            let gone = eventually(Duration::from_secs(10), || {
                let left = bpf_still_loaded(&owned);
                left.progs.is_empty() && left.links.is_empty() && left.maps.is_empty()
            });
            assert!(
                gone,
                "signal {sig}: left behind {:?} of {owned:?}",
                bpf_still_loaded(&owned)
            );
            tried += 1;
        }
    }
    eprintln!("reliability: {tried} agents killed (KILL/ABRT/QUIT/TERM), nothing left behind");
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_killed_recording_stays_readable_up_to_its_last_frame() {
    let dir = std::env::temp_dir().join(format!("ppscope-rel-rec-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("killed.ppscope");
    let mut rec = Command::new(PPSCOPE)
        .args(["record", "--duration", "1m", "--interval", "50ms", "-o"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    let _ = rec.stderr.as_mut().unwrap().read(&mut first);
    thread::sleep(Duration::from_millis(1500));
    rec.kill().unwrap();
    rec.wait().unwrap();
    let out = run(
        PPSCOPE,
        &["diagnose", "--json", "--replay", file.to_str().unwrap()],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["duration_seconds"].as_f64() > Some(1.0),
        "a SIGKILLed recording lost more than its last frame: {}",
        v["duration_seconds"]
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_restarted_agent_serves_within_one_interval_and_a_neighbour_keeps_counting() {
    let mut lab = VethLab::new("r", 40);
    let interval = Duration::from_millis(500);
    let a = AgentProc::start(None, &["--interval", "500ms"]);
    let b = AgentProc::start(None, &["--interval", "500ms"]);
    lab.attach_xdp();
    lab.traffic(1);
    thread::sleep(interval * 3);
    let label = format!("device=\"{}\"", lab.dev_rx);
    let name = "ppscope_page_pool_pages_allocated_total";
    let a1 = metric_sum(&a.metrics(), name, &label);
    let b1 = metric_sum(&b.metrics(), name, &label);
    assert!(a1 > 0.0, "agent A saw nothing");
    assert!((a1 - b1).abs() <= 0.02 * a1, "side by side: {a1} vs {b1}");

    // B dies without a word; a new B takes its port at once.
    let addr_b = b.addr.clone();
    b.signal(libc::SIGKILL);
    drop(b);
    let spawned = Instant::now();
    let b2 = AgentProc::start(Some(&addr_b), &["--interval", "500ms"]);
    let ready = spawned.elapsed();
    let first = b2.wait_first_collection(Duration::from_secs(10));
    eprintln!(
        "reliability: restart: serving {ready:?} after spawn, first collection {first:?} later (interval {interval:?})"
    );
    assert!(
        first <= interval + Duration::from_millis(400),
        "restart took {first:?} after serving to collect (interval {interval:?})"
    );

    // More traffic: A (undisturbed by the kill) and the new B count the same pages.
    lab.traffic(1);
    thread::sleep(interval * 3);
    let a2 = metric_sum(&a.metrics(), name, &label);
    let b2v = metric_sum(&b2.metrics(), name, &label);
    assert!(b2v > 0.0, "the restarted agent saw nothing");
    let a_delta = a2 - a1;
    assert!(
        (a_delta - b2v).abs() <= 0.02 * a_delta.max(1.0) + 64.0,
        "after the neighbour was killed: A counted {a_delta} new pages, restarted B {b2v}"
    );
    let (status, _) = http_get_timeout(&a.addr, "/healthz", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200);
}

// ------------------------------------------------------------------ 5. least privilege

/// The binary where an unprivileged user can run it (the build folder may be root's only).
fn binary_for_nobody() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ppscope-rel-bin-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("ppscope");
    fs::copy(PPSCOPE, &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Runs `ppscope ARGS` as nobody with exactly `caps` (e.g. "bpf,perfmon"), as systemd's
/// AmbientCapabilities= would.
fn as_nobody(bin: &Path, caps: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if caps.is_empty() {
        cmd.arg("--inh-caps=-all");
    } else {
        let plus: Vec<String> = caps.split(',').map(|c| format!("+{c}")).collect();
        let plus = plus.join(",");
        cmd.arg(format!("--inh-caps=-all,{plus}"))
            .arg(format!("--ambient-caps=-all,{plus}"))
            .arg(format!("--bounding-set=-all,{plus}"));
    }
    cmd.arg(bin).args(args);
    cmd
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn least_privilege_bpf_perfmon_is_enough_and_a_missing_one_is_named() {
    let bin = binary_for_nobody();
    let mut lab = VethLab::new("p", 41);
    lab.attach_xdp();

    // Exactly the two capabilities the unit file grants: everything works, the kernel's
    // netlink page-pool dump included, which needs no CAP_NET_ADMIN.
    let mut diag = as_nobody(
        &bin,
        "bpf,perfmon",
        &["diagnose", "--duration", "4s", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Traffic once the window has started (its first line), not after a guessed delay: a
    // slow attach must not leave the traffic before the baseline.
    let mut stderr = BufReader::new(diag.stderr.take().unwrap());
    let mut err = String::new();
    stderr.read_line(&mut err).unwrap();
    assert!(err.contains("watching page_pools"), "{err}");
    lab.traffic(1);
    let mut out = String::new();
    diag.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    stderr.read_to_string(&mut err).unwrap();
    assert!(diag.wait().unwrap().success(), "as nobody+caps: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pool = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == lab.dev_rx.as_str())
        .unwrap_or_else(|| panic!("nobody+caps saw no {} pool: {v:#}", lab.dev_rx));
    assert!(pool["pages"]["allocated"].as_u64() > Some(0), "{pool:#}");
    assert!(
        v["kernel_source"].is_object() && v["kernel_source"]["error"].is_null(),
        "netlink refused nobody+bpf,perfmon: {:#}",
        v["kernel_source"]
    );

    // Each capability taken away in turn: exit 1 and one sentence that names it.
    // The sentence lists both capabilities it needs; what is checked is the one it says is
    // missing.
    for (caps, missing) in [
        ("perfmon", "(missing: CAP_BPF)"),
        ("bpf", "(missing: CAP_PERFMON)"),
        ("", "(missing: CAP_BPF, CAP_PERFMON)"),
    ] {
        let out = as_nobody(&bin, caps, &["diagnose", "--duration", "1s"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "caps {caps:?}: {err}");
        assert_eq!(
            err.lines().count(),
            1,
            "caps {caps:?}: not one sentence: {err}"
        );
        assert!(
            err.contains(missing),
            "caps {caps:?}: does not name {missing}: {err}"
        );
    }
    let _ = fs::remove_dir_all(bin.parent().unwrap());
}

// ------------------------------------------------------------------ 5. the endpoint, for real

/// Every TCP socket listening on `port`, as (address, port) from /proc/net/tcp{,6}.
fn listeners_on(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, rem_address, st (0A = LISTEN)
            if f.len() > 3 && f[3] == "0A" {
                if let Some((ip, p)) = f[1].split_once(':') {
                    if u16::from_str_radix(p, 16) == Ok(port) {
                        found.push(ip.to_string());
                    }
                }
            }
        }
    }
    found
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn the_agent_binds_loopback_by_default_and_stays_small_under_a_thousand_scrapes() {
    assert!(
        listeners_on(9464).is_empty(),
        "port 9464 is taken on this host: cannot check the default"
    );
    let agent = AgentProc::start(Some(""), &["--interval", "200ms"]);
    // 127.0.0.1 in /proc/net/tcp byte order; never 0.0.0.0 or ::.
    assert_eq!(listeners_on(9464), vec!["0100007F".to_string()]);
    agent.wait_first_collection(Duration::from_secs(10));
    let pid = agent.pid();
    // Warm up: the allocator's high-water mark for one scrape at a time.
    for _ in 0..50 {
        agent.metrics();
    }
    let rss0 = rss_kib(pid);
    let (threads0, fds0) = threads_and_fds(pid);
    let mut worst_rss = rss0;
    let mut worst_threads = threads0;
    let mut ok = 0;
    for round in 0..3 {
        let clients: Vec<_> = (0..1000)
            .map(|_| {
                let addr = agent.addr.clone();
                thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || http_get_timeout(&addr, "/metrics", Duration::from_secs(30)))
                    .unwrap()
            })
            .collect();
        for c in clients {
            if let Some((200, _)) = c.join().unwrap() {
                ok += 1;
            }
        }
        worst_rss = worst_rss.max(rss_kib(pid));
        worst_threads = worst_threads.max(threads_and_fds(pid).0);
        eprintln!(
            "reliability: real agent, burst {round}: RSS {} KiB",
            rss_kib(pid)
        );
    }
    assert_eq!(ok, 3000, "not every scrape was answered");
    // Connections are tasks on the agent's runtime: its threads stay within that runtime's
    // pools (and the main thread) during and after the bursts, and the sockets are closed.
    let threads_max =
        1 + ppscope::export::agent::WORKER_THREADS + ppscope::export::agent::BLOCKING_THREADS;
    let settled = eventually(Duration::from_secs(10), || {
        threads_and_fds(pid).0 <= threads_max && threads_and_fds(pid).1 <= fds0 + 1
    });
    let (threads1, fds1) = threads_and_fds(pid);
    let rss1 = rss_kib(pid);
    eprintln!(
        "reliability: real agent: RSS {rss0} → peak {worst_rss} → {rss1} KiB, threads {threads0} → peak {worst_threads} → {threads1}, fds {fds0} → {fds1}"
    );
    assert!(settled, "threads/fds did not come back: {threads1}/{fds1}");
    assert!(
        worst_threads <= threads_max,
        "{worst_threads} threads after a burst, for a runtime of {threads_max}"
    );
    // Bounded: 256 connections at most, each a task with its buffers.
    assert!(
        worst_rss < rss0 + 96 * 1024,
        "RSS grew from {rss0} to {worst_rss} KiB"
    );
    assert!(
        rss1 < rss0 + 32 * 1024,
        "RSS stayed up: {rss0} → {rss1} KiB"
    );
}

// ------------------------------------------------------------------ 2. pool churn

/// UDP traffic through the lab that survives the receiver going down and up (restarted when
/// iperf3 gives up), so every "up" gives the new pool pages to hold.
struct Flood(Child, Child);

impl Flood {
    fn start(lab: &VethLab) -> Self {
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.ns_rx,
                "iperf3",
                "-s",
                "-B",
                &lab.rx_addr,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(300));
        let script = format!(
            "while :; do iperf3 -u -b 200M -t 3600 -c {} >/dev/null 2>&1; sleep 0.1; done",
            lab.rx_addr
        );
        let client = Command::new("ip")
            .args(["netns", "exec", &lab.ns_tx, "sh", "-c", &script])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self(server, client)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        // The client loop and its iperf3: the whole process group we made for it.
        // SAFETY: kill(2) on the process group of our own child.
        unsafe { libc::kill(-(self.1.id() as i32), libc::SIGKILL) };
        let _ = self.1.wait();
        stop(&mut self.0);
    }
}

fn link(ns: &str, dev: &str, state: &str) {
    run("ip", &["-n", ns, "link", "set", "dev", dev, state]);
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn pool_churn_keeps_the_agent_flat_and_its_pools_true() {
    let cycles = env_u64("PPSCOPE_CHURN_CYCLES", 1000);
    let mut lab = VethLab::new("h", 42);
    let grace = Duration::from_secs(2);
    // 100 ms: the agent's 61-sample advice window (6 s) is full within the first half of the
    // churn, so the second half measures growth, not the window filling.
    let agent = AgentProc::start(None, &["--interval", "100ms", "--grace", "2s"]);
    let pid = agent.pid();
    lab.attach_xdp();
    let flood = Flood::start(&lab);
    thread::sleep(Duration::from_secs(1));
    let (ns, dev) = (lab.ns_rx.clone(), lab.dev_rx.clone());
    let label = format!("device=\"{dev}\"");

    // Churn: every down destroys the veth's page_pool, every up (XDP attached) makes a new
    // one, which the flood fills with pages.
    let mut rss = Vec::new();
    let mut max_entries = 0.0f64;
    let started = Instant::now();
    for i in 0..cycles {
        link(&ns, &dev, "down");
        link(&ns, &dev, "up");
        thread::sleep(Duration::from_millis(15));
        if i % 100 == 0 {
            rss.push(rss_kib(pid));
            let m = agent.metrics();
            max_entries = max_entries.max(metric_sum(&m, "ppscope_map_entries", ""));
        }
    }
    let churn_time = started.elapsed();
    let m = agent.metrics();
    let capacity = metric_sum(&m, "ppscope_map_capacity", "");
    let errors = metric_sum(&m, "ppscope_collection_errors_total", "");
    let allocated_during = metric_sum(&m, "ppscope_page_pool_pages_allocated_total", &label);
    eprintln!(
        "reliability: churn: {cycles} down/up cycles in {churn_time:.1?}; RSS every 100 cycles {rss:?} KiB; map entries peak {max_entries} of {capacity}; collection errors {errors}; {allocated_during} pages seen on {dev}"
    );
    let mut failures = Vec::new();
    if allocated_during <= 0.0 {
        failures.push("the churned pools never held pages".to_string());
    }
    if errors != 0.0 {
        failures.push(format!("{errors} collections failed during churn"));
    }
    if max_entries >= capacity {
        failures.push(format!("the pool map filled: {max_entries}"));
    }
    // RSS flat: once the agent's one-minute sample window is full and the slab's pool
    // addresses are all known (the first half), the second half may not add more than
    // 8 MiB (allocator noise).
    let half = rss.len() / 2;
    let first = *rss[..half].iter().max().unwrap();
    let second = *rss[half..].iter().max().unwrap();
    if second > first + 8192 {
        failures.push(format!(
            "RSS still growing: first half peak {first} KiB, second half peak {second} KiB"
        ));
    }

    // The link goes down for good: its pools are gone. Once they stopped moving (the flood's
    // last in-flight pages came home) and the grace period passed, the agent must not show
    // them, then or later: each poll for three more grace periods lists what it still shows.
    link(&ns, &dev, "down");
    drop(flood);
    // The premise is that the pools stopped moving: wait until the agent itself sees that
    // (its last interval lists no pool of the device for a whole second; the last in-flight
    // pages may come home a while after the link went down), then two grace periods.
    let quiet_wait = Instant::now();
    let mut quiet: Option<Instant> = None;
    let moving_tag = format!("\"ifname\":\"{dev}\"");
    while quiet_wait.elapsed() < Duration::from_secs(30) {
        let moving = http_get_timeout(
            &agent.addr,
            "/api/v1/snapshot?window=interval",
            Duration::from_secs(5),
        )
        .is_none_or(|(_, body)| body.contains(&moving_tag));
        if moving {
            quiet = None;
        } else if quiet.get_or_insert_with(Instant::now).elapsed() >= Duration::from_secs(1) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    if quiet.is_none() {
        failures.push(format!(
            "{dev}'s pools still moving 30 s after the link went down for good"
        ));
    }
    thread::sleep(grace * 2 + Duration::from_secs(1));
    let watch = Instant::now();
    let mut shown = std::collections::BTreeMap::new();
    while watch.elapsed() < grace * 3 {
        for l in agent.metrics().lines() {
            if l.starts_with("ppscope_page_pool_pages_allocated_total{") && l.contains(&label) {
                let pool = l.split("pool=\"").nth(1).unwrap_or("").split('"').next();
                shown
                    .entry(pool.unwrap_or("").to_string())
                    .or_insert(watch.elapsed());
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    if !shown.is_empty() {
        failures.push(format!(
            "{} vanished pool(s) shown again more than 2 grace periods after the link went down (pool → first seen in the watch): {shown:?}",
            shown.len()
        ));
    }
    let (status, _) = http_get_timeout(&agent.addr, "/healthz", Duration::from_secs(5)).unwrap();
    if status != 200 {
        failures.push(format!("/healthz {status} after the churn"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A pool map smaller than the pools that move (`--map-capacity 2`, three flooded veth
/// pools): the kernel's LRU evicts, the map never holds more than its capacity, and the agent
/// counts the evictions in `/metrics` instead of losing pools silently.
#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn a_full_pool_map_evicts_and_the_agent_counts_it() {
    let mut labs: Vec<VethLab> = (0..3u8)
        .map(|i| VethLab::new(&format!("m{i}"), 47 + i))
        .collect();
    let agent = AgentProc::start(None, &["--interval", "200ms", "--map-capacity", "2"]);
    for lab in &mut labs {
        lab.attach_xdp();
    }
    let floods: Vec<Flood> = labs.iter().map(Flood::start).collect();
    let mut last = String::new();
    let evicted = eventually(Duration::from_secs(30), || {
        last = agent.metrics();
        // Once all three pools took their first pages, one of them cannot be in the map.
        metric_sum(&last, "ppscope_map_evictions_total", "") >= 1.0
    });
    drop(floods);
    assert!(
        evicted,
        "no evictions counted with 3 pools in a map of 2:\n{last}"
    );
    assert_eq!(metric_sum(&last, "ppscope_map_capacity", ""), 2.0, "{last}");
    let entries = metric_sum(&last, "ppscope_map_entries", "");
    assert!(
        (1.0..=2.0).contains(&entries),
        "map entries {entries}:\n{last}"
    );
    // A capacity no map can have is a bad argument, said before anything loads.
    let out = Command::new(PPSCOPE)
        .args(["agent", "--map-capacity", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
#[ignore = "needs root: run through `cargo xtask test`"]
fn churned_pools_are_never_counted_under_another_device() {
    // Two labs churn in turn, so a new pool of one device often lands at the address a dead
    // pool of the other device had (the slab reuses it). Then X goes down for good and only Y
    // keeps making pools: a diagnose window must show Y's pools taking pages and none under X,
    // which has no pool left.
    let cycles = env_u64("PPSCOPE_CHURN_CYCLES", 1000) / 5;
    let mut x = VethLab::new("x", 43);
    let mut y = VethLab::new("y", 44);
    x.attach_xdp();
    y.attach_xdp();
    let fx = Flood::start(&x);
    let fy = Flood::start(&y);
    thread::sleep(Duration::from_secs(1));
    let churn = |labs: &[&VethLab], n: u64| {
        for _ in 0..n {
            for lab in labs {
                link(&lab.ns_rx, &lab.dev_rx, "down");
            }
            for lab in labs.iter().rev() {
                link(&lab.ns_rx, &lab.dev_rx, "up");
            }
            thread::sleep(Duration::from_millis(15));
        }
    };
    churn(&[&x, &y], cycles);
    // X's flood stops, so its last pool (whose pages made its identity "X") holds nothing in
    // flight and is freed the moment X goes down.
    drop(fx);
    thread::sleep(Duration::from_secs(1));
    let mut diag = Command::new(PPSCOPE)
        .args(["diagnose", "--duration", "4s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(diag.stderr.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("watching"), "{line}");
    }
    // Y down, then X down, then Y up: the slab hands Y's new pool the address X's pool had
    // just freed (last freed, first reused), the flood fills it with pages.
    link(&y.ns_rx, &y.dev_rx, "down");
    link(&x.ns_rx, &x.dev_rx, "down");
    link(&y.ns_rx, &y.dev_rx, "up");
    thread::sleep(Duration::from_millis(500));
    churn(&[&y], 40);
    let out = diag.wait_with_output().unwrap();
    drop(fy);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Pools that took pages from the allocator in the window. (A dead pool may still see
    // its last in-flight pages released: that is X's own, and allowed.)
    let moved = |dev: &str| -> Vec<String> {
        v["pools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["ifname"] == dev && p["pages"]["allocated"].as_u64() > Some(0))
            .map(|p| format!("{} {}", p["pool"], p["pages"]))
            .collect()
    };
    let (on_x, on_y) = (moved(&x.dev_rx), moved(&y.dev_rx));
    eprintln!(
        "reliability: two devices churned {cycles} times each, then only {} for 40 more: {} pools took pages under its name, {} under {}'s (down)",
        y.dev_rx,
        on_y.len(),
        on_x.len(),
        x.dev_rx
    );
    assert!(!on_y.is_empty(), "Y's new pools were not seen: {v:#}");
    assert!(
        on_x.is_empty(),
        "pools of {} reported under {} (down, no pools): a reused pool address kept a dead pool's identity: {on_x:?}",
        y.dev_rx,
        x.dev_rx
    );
}

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

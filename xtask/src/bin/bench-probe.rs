//! `bench-probe`: the benchmark suite's kernel-side helper (see `cargo xtask bench`).
//!
//! It loads ppscope's eBPF object from a file (not embedded: xtask must build on a machine
//! without the BPF toolchain) and uses only the programs the product never attaches:
//!
//! - `bench-probe floor OBJECT BACKEND SECONDS`: attaches the empty programs of BACKEND
//!   (`fentry`, `kprobe` or `tracepoint`; `light`: fentry's, and empty programs on the
//!   per-event hooks `--detail light` keeps, the refill's fexit and `skb:kfree_skb`) to the
//!   hot hooks, [`FLOOR_COPIES`] copies of each (and of each counting program), keeps
//!   `BPF_ENABLE_STATS` on for SECONDS, then prints `prog NAME RUNS RUN_NS` for every program
//!   on the system that ran (ppscope's, running beside it, and every copy of the floors, in
//!   the order they were loaded), `floor-attached HOOK TARGET` lines (` (N of M copies)`
//!   when only some copies attached), `floor-missing HOOK TARGET: ERROR` lines, a
//!   `floor-attached count PROGRAM` line per counting copy, and first a `ppscope-prog NAME`
//!   line for each of ppscope's own programs in the object.
//! - `bench-probe xdp OBJECT DEV...`: attaches `xdp_pass` to every DEV (gives each veth its
//!   page_pools), prints `attached N`, and holds them until killed.
//! - `bench-probe udp ADDR...`: sends one datagram to port 9 of every IPv4 ADDR, written in
//!   two parts so that it takes a fragment of a page from the receiving veth's pool
//!   ([`send_paged`]).
//! - `bench-probe udp-every SECONDS ADDR...`: the same every SECONDS, until killed. Both take
//!   `--bytes N` before the addresses: the datagram's size (a page of its own above half a
//!   page, where the link's MTU lets it through whole).
//! - `bench-probe stats-cost OBJECT ROUNDS`: what the kernel's BPF run-time stats cost every
//!   program while they are on: `xdp_pass` run by `BPF_PROG_TEST_RUN` (the kernel's own loop,
//!   `STATS_RUNS` runs a window) with the stats off, then on (`BPF_ENABLE_STATS` held), ROUNDS
//!   times, each window printed as `stats-cost off|on NS_PER_RUN`.
//! - `bench-probe startup TIMEOUT_S PATTERN CMD ARGS...`: runs CMD and prints `startup-ms X`,
//!   the time from exec until PATTERN appears on its stdout or stderr, then stops it (SIGINT).
use std::{
    env, fs,
    io::{BufRead, BufReader},
    net::{Ipv4Addr, UdpSocket},
    os::fd::AsRawFd,
    process::{Command, ExitCode, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use aya::{
    programs::{
        loaded_programs, BtfTracePoint, FEntry, FExit, KProbe, RawTracePoint, Xdp, XdpMode,
    },
    Btf, Ebpf,
};
use xtask::bench::FLOOR_COPIES;

/// Alternatives across kernel versions, newest first (as in agent/src/probes/hooks.rs HOOKS).
const ALLOC: &[&str] = &["page_pool_alloc_netmems", "page_pool_alloc_netmem"];
const FRAG: &[&str] = &["page_pool_alloc_frag_netmem", "page_pool_alloc_frag"];
const REFILL: &[&str] = &["page_pool_refill_alloc_cache"];
const PUT: &[&str] = &[
    "page_pool_put_unrefed_netmem",
    "page_pool_put_defragged_page",
];

fn kallsyms() -> String {
    fs::read_to_string("/proc/kallsyms").unwrap_or_default()
}

fn first_present(syms: &str, names: &[&'static str]) -> Option<&'static str> {
    names.iter().copied().find(|n| {
        syms.lines()
            .any(|l| l.split_whitespace().nth(2).is_some_and(|s| s == *n))
    })
}

fn floor(object: &str, backend: &str, secs: u64) -> Result<()> {
    let data = fs::read(object).with_context(|| format!("reading {object}"))?;
    let mut copies = (0..FLOOR_COPIES)
        .map(|_| Ebpf::load(&data).context("loading the eBPF object"))
        .collect::<Result<Vec<Ebpf>>>()?;
    // ppscope's own programs (the object's, but the floors and the lab's XDP pass), by the
    // name the kernel keeps (15 bytes): what a window's run time of ppscope sums.
    for (name, _) in copies[0].programs() {
        if !name.starts_with("bench_") && name != "xdp_pass" {
            println!("ppscope-prog {}", name.chars().take(15).collect::<String>());
        }
    }
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("BPF_ENABLE_STATS refused: no run-time figures")?;
    let syms = kallsyms();
    // Parsed once: every typed floor needs it, and under TCG a parse takes seconds.
    let btf = Btf::from_sys_fs().ok();
    let mut attached = 0;
    match backend {
        "fentry" | "kprobe" | "light" => {
            // Per hook: its empty programs, fentry and fexit or kprobe and kretprobe ("": none),
            // and its counting programs (one add, `ebpf/src/bench.rs`; the recycle's kprobe
            // pair hands the arguments over, then adds one), typed and kprobe, each where
            // ppscope's programs sit (the recycle's fexit, or its kprobe pair); none under
            // light, whose windows time ppscope against the empty programs alone. The benchmark
            // sums them per table row as `HOOK_PROGS` (`xtask/src/bench/host.rs`) says.
            for (names, hook, progs, counting) in [
                (
                    ALLOC,
                    "alloc",
                    ["bench_fe_alloc", "", "bench_kp_alloc", ""],
                    [
                        &[On::Fentry("bench_cfe_alloc")][..],
                        &[On::Kprobe("bench_ckp_alloc")],
                    ],
                ),
                (
                    FRAG,
                    "alloc_frag",
                    ["bench_fe_frag", "", "bench_kp_frag", ""],
                    [
                        &[On::Fentry("bench_cfe_frag")][..],
                        &[On::Kprobe("bench_ckp_frag")],
                    ],
                ),
                (
                    PUT,
                    "recycle",
                    [
                        "bench_fe_put",
                        "bench_fx_put",
                        "bench_kp_put",
                        "bench_krp_put",
                    ],
                    [
                        &[On::Fexit("bench_cfx_put")][..],
                        &[On::Kprobe("bench_ckp_put"), On::Kprobe("bench_ckrp_put")],
                    ],
                ),
            ] {
                let Some(sym) = first_present(&syms, names) else {
                    println!("floor-missing {hook} not in kallsyms");
                    continue;
                };
                let typed = backend != "kprobe";
                let empty = if typed {
                    [On::Fentry(progs[0]), On::Fexit(progs[1])]
                } else {
                    [On::Kprobe(progs[2]), On::Kprobe(progs[3])]
                };
                // Copy by copy, each copy's empty programs and then its counting ones: the
                // copies sit at different places in the hook's list too.
                let any = attach_copies(&mut copies, hook, sym, |ebpf| {
                    let r = empty
                        .into_iter()
                        .filter(|on| !on.prog().is_empty())
                        .try_for_each(|on| attach_on(ebpf, on, sym, btf.as_ref()));
                    if r.is_err() {
                        // Half a pair would run alone and pair with the next copy's other
                        // half in the benchmark's count of copies: none of it runs.
                        for on in empty {
                            unload(ebpf, on);
                        }
                    } else if backend != "light" {
                        for on in counting[usize::from(!typed)] {
                            attach_counting(ebpf, *on, sym, btf.as_ref());
                        }
                    }
                    r
                });
                if any {
                    attached += 1;
                }
            }
        }
        "tracepoint" => {}
        other => bail!("unknown backend {other} (fentry, kprobe, tracepoint, light)"),
    }
    if backend == "light" {
        match first_present(&syms, REFILL) {
            Some(sym) => {
                attach_copies(&mut copies, "refill", sym, |ebpf| {
                    attach_on(ebpf, On::Fexit("bench_fx_refill"), sym, btf.as_ref())
                });
            }
            None => println!("floor-missing refill not in kallsyms"),
        }
        attach_copies(&mut copies, "drops", "kfree_skb", |ebpf| {
            attach_on(ebpf, On::Raw("bench_tp_drops"), "kfree_skb", None)
        });
    }
    if backend == "tracepoint" {
        // ppscope's page_release runs as tp_btf where the kernel allows it: its floor and its
        // counting program too, beside the raw floor.
        for (on, tp, hook, tail, counting) in [
            (
                On::Raw("bench_tp_hold"),
                "page_pool_state_hold",
                "page_hold",
                "",
                &[On::Raw("bench_ctp_hold")][..],
            ),
            (
                On::Raw("bench_tp_release"),
                "page_pool_state_release",
                "page_release",
                "",
                &[On::TpBtf("bench_ctb_rel")],
            ),
            (
                On::TpBtf("bench_tb_release"),
                "page_pool_state_release",
                "page_release",
                " (tp_btf)",
                &[],
            ),
        ] {
            let any = attach_copies(&mut copies, hook, &format!("{tp}{tail}"), |ebpf| {
                let r = attach_on(ebpf, on, tp, btf.as_ref());
                if r.is_ok() {
                    for on in counting {
                        attach_counting(ebpf, *on, tp, btf.as_ref());
                    }
                }
                r
            });
            if any {
                attached += 1;
            }
        }
    }
    if attached == 0 {
        bail!("no empty program could be attached with {backend}");
    }
    println!("floor-ready");
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(100));
    }
    for info in loaded_programs().flatten() {
        let runs = info.run_count();
        if runs == 0 {
            continue;
        }
        let name = info.name_as_str().unwrap_or("?");
        println!("prog {name} {runs} {}", info.run_time().as_nanos() as u64);
    }
    drop(stats);
    Ok(())
}

/// A program of the object and how it attaches.
#[derive(Clone, Copy)]
enum On<'a> {
    Fentry(&'a str),
    Fexit(&'a str),
    Kprobe(&'a str),
    Raw(&'a str),
    TpBtf(&'a str),
}

impl On<'_> {
    fn prog(&self) -> &str {
        match *self {
            On::Fentry(p) | On::Fexit(p) | On::Kprobe(p) | On::Raw(p) | On::TpBtf(p) => p,
        }
    }
}

/// Unloads `on`'s program, and so detaches it, if it was loaded.
fn unload(ebpf: &mut Ebpf, on: On) {
    let Some(program) = ebpf.program_mut(on.prog()) else {
        return;
    };
    let _ = match on {
        On::Fentry(_) => <&mut FEntry>::try_from(program).map(|p| p.unload()),
        On::Fexit(_) => <&mut FExit>::try_from(program).map(|p| p.unload()),
        On::Kprobe(_) => <&mut KProbe>::try_from(program).map(|p| p.unload()),
        On::Raw(_) => <&mut RawTracePoint>::try_from(program).map(|p| p.unload()),
        On::TpBtf(_) => <&mut BtfTracePoint>::try_from(program).map(|p| p.unload()),
    };
}

/// Loads `on`'s program and attaches it to `target` (a kernel function, or a tracepoint's
/// name); the typed kinds need vmlinux BTF.
fn attach_on(ebpf: &mut Ebpf, on: On, target: &str, btf: Option<&Btf>) -> Result<()> {
    let btf = || btf.context("no vmlinux BTF");
    let program = ebpf
        .program_mut(on.prog())
        .with_context(|| format!("{} missing from the object", on.prog()))?;
    match on {
        On::Fentry(_) => {
            let p: &mut FEntry = program.try_into()?;
            p.load(target, btf()?)?;
            p.attach()?;
        }
        On::Fexit(_) => {
            let p: &mut FExit = program.try_into()?;
            p.load(target, btf()?)?;
            p.attach()?;
        }
        On::Kprobe(_) => {
            let p: &mut KProbe = program.try_into()?;
            p.load()?;
            p.attach(target, 0)?;
        }
        On::Raw(_) => {
            let p: &mut RawTracePoint = program.try_into()?;
            p.load()?;
            p.attach(target)?;
        }
        On::TpBtf(_) => {
            let p: &mut BtfTracePoint = program.try_into()?;
            p.load(target, btf()?)?;
            p.attach()?;
        }
    }
    Ok(())
}

/// Attaches a hook's programs in every copy, one copy after the other (`attach` does one
/// copy: its empty programs, and the counting ones beside them), and says how the empty
/// programs attached ([`report_copies`]). True when any copy attached.
fn attach_copies(
    copies: &mut [Ebpf],
    hook: &str,
    target: &str,
    attach: impl FnMut(&mut Ebpf) -> Result<()>,
) -> bool {
    let results = copies.iter_mut().map(attach).collect();
    report_copies(hook, target, results)
}

/// Says how a hook's empty programs attached, one result per copy: `floor-attached HOOK
/// TARGET` when every copy did (` (N of M copies)` added when only some did), and a
/// `floor-missing HOOK TARGET: ERROR` line with the first error when one did not (the
/// benchmark shows those as notes; a row is still made from the copies that ran). True when
/// any copy attached.
fn report_copies(hook: &str, target: &str, results: Vec<Result<()>>) -> bool {
    let copies = results.len();
    let mut ok = 0;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(()) => ok += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if ok > 0 {
        let some = if ok < copies {
            format!(" ({ok} of {copies} copies)")
        } else {
            String::new()
        };
        println!("floor-attached {hook} {target}{some}");
    }
    if let Some(e) = first_error {
        println!("floor-missing {hook} {target}: {e:#}");
    }
    ok > 0
}

/// A counting program beside the empty ones (one add, or half of the kprobe recycle's counting
/// pair, `ebpf/src/bench.rs`): a
/// "floor-attached count …" or "floor-missing count …" line; the benchmark reads it by its
/// run time, so a missing one only leaves a column blank.
fn attach_counting(ebpf: &mut Ebpf, on: On, target: &str, btf: Option<&Btf>) {
    match attach_on(ebpf, on, target, btf) {
        Ok(()) => println!("floor-attached count {}", on.prog()),
        Err(e) => println!("floor-missing count {} {e:#}", on.prog()),
    }
}

fn xdp(object: &str, devs: &[String]) -> Result<()> {
    let data = fs::read(object).with_context(|| format!("reading {object}"))?;
    let mut ebpf = Ebpf::load(&data).context("loading the eBPF object")?;
    let p: &mut Xdp = ebpf
        .program_mut("xdp_pass")
        .context("xdp_pass")?
        .try_into()?;
    p.load()?;
    for dev in devs {
        p.attach(dev, XdpMode::Driver)
            .with_context(|| format!("attaching XDP to {dev}"))?;
    }
    println!("attached {}", devs.len());
    // Held until killed: the links are fd-based and go with the process.
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn ipv4s(addrs: &[String]) -> Result<Vec<Ipv4Addr>> {
    addrs
        .iter()
        .map(|a| {
            a.parse()
                .with_context(|| format!("{a}: not an IPv4 address"))
        })
        .collect()
}

/// One datagram of `bytes` to port 9 of `to`, written in two parts, the first with
/// `MSG_MORE`: the second part lands in a page fragment (veth has scatter-gather), so the
/// datagram is nonlinear, and a veth with XDP copies it into its page_pool: a small one into
/// a fragment of a page (`page_pool_alloc_frag_netmem`, which reuses its page in place), one
/// over half a page (on a link whose MTU lets it through whole) into a page of its own,
/// allocated and recycled page by page (`page_pool_alloc_netmems`, then a put). Written at
/// once, a small datagram reached veth's XDP without taking a page from its pool (in the VM
/// lab, 7.2, `ethtool -S` of a lab veth: 7 XDP packets, 2 pool allocations).
fn send_paged(sock: &UdpSocket, to: Ipv4Addr, rest: &[u8]) -> std::io::Result<()> {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 9u16.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(to).to_be(),
        },
        sin_zero: [0; 8],
    };
    for (part, flags) in [(&FIRST_PART[..], libc::MSG_MORE), (rest, 0)] {
        // SAFETY: a valid buffer and a sockaddr_in of the size given.
        let n = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                part.as_ptr().cast(),
                part.len(),
                flags,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `[--bytes N] ADDR...`: the datagram's size (default [`SMALL_DATAGRAM`] bytes) and where to.
fn size_and_addrs(args: &[String]) -> Result<(usize, Vec<Ipv4Addr>)> {
    match args {
        [flag, n, addrs @ ..] if flag == "--bytes" && !addrs.is_empty() => {
            let n: usize = n.parse().context("--bytes N: N must be a number")?;
            if !(SMALL_DATAGRAM..=9000).contains(&n) {
                bail!("--bytes {n}: from {SMALL_DATAGRAM} to 9000");
            }
            Ok((n, ipv4s(addrs)?))
        }
        _ => Ok((SMALL_DATAGRAM, ipv4s(args)?)),
    }
}

/// The smallest datagram: its first part and a second of five bytes.
const SMALL_DATAGRAM: usize = 13;

/// What a datagram's first part (sent with `MSG_MORE`) holds.
const FIRST_PART: &[u8; 8] = b"ppscope-";

/// A datagram's second part, made once for every datagram of `bytes`.
fn second_part(bytes: usize) -> Vec<u8> {
    vec![b'b'; bytes.saturating_sub(FIRST_PART.len()).max(1)]
}

fn udp(args: &[String]) -> Result<()> {
    let (bytes, addrs) = size_and_addrs(args)?;
    let rest = second_part(bytes);
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    let mut sent = 0;
    for a in addrs {
        if send_paged(&sock, a, &rest).is_ok() {
            sent += 1;
        }
    }
    println!("sent {sent}");
    Ok(())
}

/// One packet to each address every `every`, until killed: pools that keep receiving (each
/// packet takes a page from its pool), as an always-on agent sees them on a busy host.
fn udp_every(every: Duration, args: &[String]) -> Result<()> {
    let (bytes, addrs) = size_and_addrs(args)?;
    let rest = second_part(bytes);
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    let mut next = Instant::now();
    loop {
        for a in &addrs {
            let _ = send_paged(&sock, *a, &rest);
        }
        next += every;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

fn startup(timeout: u64, pattern: &str, cmd: &[String]) -> Result<()> {
    let start = Instant::now();
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", cmd[0]))?;
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    for r in [
        Box::new(out) as Box<dyn std::io::Read + Send>,
        Box::new(err) as Box<dyn std::io::Read + Send>,
    ] {
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let deadline = start + Duration::from_secs(timeout);
    let mut seen = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((at, line)) if line.contains(pattern) => break Some(at),
            Ok((_, line)) => seen.push(line),
            Err(_) => break None,
        }
    };
    // SIGINT: both ppscope and bpftrace end cleanly on it.
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc_kill(child.id() as i32, 2) };
    // bpftrace 0.17 sometimes sits on SIGINT right after start: the figure is taken, so a
    // tool that does not end within 5 s is killed rather than waited for.
    let stop = Instant::now() + Duration::from_secs(5);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > stop {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    match found {
        Some(at) => {
            println!("startup-ms {:.1}", (at - start).as_secs_f64() * 1e3);
            Ok(())
        }
        None => bail!(
            "'{pattern}' did not appear within {timeout} s; output: {}",
            seen.join(" | ")
        ),
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Runs of the empty XDP program in one `stats-cost` window: long enough that the kernel's
/// whole-window clock reads vanish, short enough (a fraction of a second) to alternate many
/// windows.
const STATS_RUNS: u32 = 2_000_000;

/// Whether the kernel's BPF run-time stats are already on: the sysctl, or another process
/// holding `BPF_ENABLE_STATS` (its descriptor is an anonymous inode named `bpf-stats`).
fn stats_already_on() -> Option<String> {
    if fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1") {
        return Some("kernel.bpf_stats_enabled=1".into());
    }
    let procs = fs::read_dir("/proc").ok()?;
    procs.flatten().find_map(|p| {
        let fds = fs::read_dir(p.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| {
                fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:bpf-stats")
            })
            .then(|| {
                format!(
                    "process {} holds BPF_ENABLE_STATS",
                    p.file_name().to_string_lossy()
                )
            })
    })
}

fn stats_cost(object: &str, rounds: u32) -> Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    if let Some(who) = stats_already_on() {
        bail!("the stats are already on ({who}): no window would run without them");
    }
    let data = fs::read(object).with_context(|| format!("reading {object}"))?;
    let mut ebpf = Ebpf::load(&data).context("loading the eBPF object")?;
    let p: &mut Xdp = ebpf
        .program_mut("xdp_pass")
        .context("xdp_pass missing from the object")?
        .try_into()?;
    p.load()?;
    let fd = p.fd()?.as_fd().as_raw_fd();
    // A frame the XDP test run accepts (at least an Ethernet header).
    let frame = [0u8; 64];
    let run = || -> Result<u32> {
        // union bpf_attr's `test` member (include/uapi/linux/bpf.h), padded to its size.
        #[repr(C)]
        #[derive(Default)]
        struct TestRun {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            _pad: u32,
        }
        const _: () = assert!(
            std::mem::size_of::<TestRun>() == 80 && std::mem::offset_of!(TestRun, duration) == 36
        );
        let mut attr = TestRun {
            prog_fd: fd as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat: STATS_RUNS,
            ..TestRun::default()
        };
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        // SAFETY: attr is a valid bpf_attr prefix of the size passed, its data pointer and
        // length name `frame`, which outlives the call; the kernel writes only into attr.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestRun,
                std::mem::size_of::<TestRun>() as u32,
            )
        };
        if r < 0 {
            bail!("BPF_PROG_TEST_RUN: {}", std::io::Error::last_os_error());
        }
        // The kernel's own figure: the window's time over its runs, in whole ns (each run a
        // step of its loop, the program and the loop's own work).
        Ok(attr.duration)
    };
    println!("stats-cost runs {STATS_RUNS}");
    for _ in 0..rounds {
        println!("stats-cost off {}", run()?);
        let stats =
            aya::sys::enable_stats(aya::sys::Stats::RunTime).context("BPF_ENABLE_STATS refused")?;
        println!("stats-cost on {}", run()?);
        drop(stats);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let r = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["floor", object, backend, secs] => match secs.parse() {
            Ok(s) => floor(object, backend, s),
            Err(_) => Err(anyhow::anyhow!("SECONDS must be a number")),
        },
        ["xdp", object, devs @ ..] if !devs.is_empty() => xdp(object, &args[2..]),
        ["udp", addrs @ ..] if !addrs.is_empty() => udp(&args[1..]),
        ["udp-every", secs, addrs @ ..] if !addrs.is_empty() => match secs.parse() {
            Ok(s) => udp_every(Duration::from_secs(s), &args[2..]),
            Err(_) => Err(anyhow::anyhow!("SECONDS must be a number")),
        },
        ["stats-cost", object, rounds] => match rounds.parse() {
            Ok(n) => stats_cost(object, n),
            Err(_) => Err(anyhow::anyhow!("ROUNDS must be a number")),
        },
        ["startup", timeout, pattern, cmd @ ..] if !cmd.is_empty() => match timeout.parse() {
            Ok(t) => startup(t, pattern, &args[3..]),
            Err(_) => Err(anyhow::anyhow!("TIMEOUT_S must be a number")),
        },
        _ => {
            eprintln!("usage: bench-probe floor OBJECT fentry|kprobe|tracepoint SECONDS | xdp OBJECT DEV... | udp [--bytes N] ADDR... | udp-every SECONDS [--bytes N] ADDR... | stats-cost OBJECT ROUNDS | startup TIMEOUT_S PATTERN CMD ARGS...");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-probe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

//! Host tests of the netlink page-pool source (`ppscope::netlink`) on this machine's kernel:
//! a veth pair between two network namespaces the test creates, the lab's XDP program on the
//! receiving end (veth only runs its page_pool receive path with XDP), a little iperf3 traffic,
//! then `page-pool-get` / `page-pool-stats-get` asked from inside the receiving namespace
//! (netlink answers for the caller's namespace only, so the query runs in a thread that has
//! `setns(2)`-ed there).
//!
//! They need root (namespaces, BPF), so they are `#[ignore]`d for a plain `cargo test`;
//! `cargo xtask test` runs them. Traffic stays between the test's own namespaces
//! (198.18.0.0/15, the benchmark range).
use std::{ffi::CString, fs::File, os::fd::AsRawFd, thread};

use ppscope::host::netlink::{self, NetlinkPool, StatsAvailability};

mod common;

use common::VethLab;

/// Runs `f` in a thread that has entered the network namespace `ns` (setns on
/// `/run/netns/NS`): netlink sockets it opens answer for that namespace.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: a valid namespace fd; CLONE_NEWNET changes this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the thread inside the namespace panicked")
}

fn ifindex_in(ns: &str, dev: &str) -> u32 {
    let dev = CString::new(dev).unwrap();
    // if_nametoindex asks through a socket of the calling thread's namespace.
    let idx = in_netns(ns, move || {
        // SAFETY: `dev` is a NUL-terminated string that outlives the call.
        unsafe { libc::if_nametoindex(dev.as_ptr()) }
    });
    assert_ne!(idx, 0, "no device in {ns}");
    idx
}

/// veth creates its page_pools without `page_pool_params.netdev` (mainline up to at least
/// 6.18), and `page-pool-get` lists only pools linked to a netdev, so this host (no NIC with a
/// page_pool, no netdevsim) lists none: what holds here is that the query answers from inside
/// the namespace, that the veth pool is not in the answer (so the report's `kernel` is null
/// for it, as the README says), and that whatever is listed is well formed. A listed pool's
/// facts (NAPI id, inflight, not detached, stats) and the per-namespace answer with a real
/// pool are checked in the VM lab, on virtio-net (`vm_sid_fentry_and_kprobe_…` in
/// `xtask/tests/vm.rs`).
#[test]
#[ignore = "needs root: run through cargo xtask test"]
fn netlink_page_pool_get_answers_inside_a_namespace_and_leaves_out_veth_pools() {
    let mut lab = VethLab::new("na", 40);
    lab.attach_xdp();
    lab.traffic(2);
    let ifindex = ifindex_in(&lab.ns_rx, &lab.dev_rx);

    let pools = in_netns(&lab.ns_rx, || {
        netlink::page_pools().map_err(|e| format!("{e:#}"))
    })
    .expect("page-pool-get in the receiving namespace");
    eprintln!("pools in {}: {pools:#?}", lab.ns_rx);
    for p in &pools {
        assert!(p.id > 0, "{p:?}");
        assert_ne!(p.ifindex, Some(0), "{p:?}");
    }
    let ours: Vec<&NetlinkPool> = pools
        .iter()
        .filter(|p| p.ifindex == Some(ifindex))
        .collect();
    assert!(
        ours.is_empty(),
        "{} lists a pool: veth now links its page_pools to the netdev, so the README's \
         'kernel: null for veth' and this test need updating: {ours:#?}",
        lab.dev_rx
    );

    // Netlink answers for the caller's namespace: pool ids are global, so none of the pools
    // listed inside ns_rx may show up in the test's own namespace.
    let here = netlink::page_pools().expect("page-pool-get in the test's namespace");
    for p in &pools {
        assert!(
            !here.iter().any(|h| h.id == p.id),
            "pool {} of {} leaked into the caller's namespace: {here:#?}",
            p.id,
            lab.ns_rx
        );
    }
}

#[test]
#[ignore = "needs root: run through cargo xtask test"]
fn netlink_stats_match_the_kernel_config() {
    let mut lab = VethLab::new("nb", 41);
    lab.attach_xdp();
    lab.traffic(2);
    let ifindex = ifindex_in(&lab.ns_rx, &lab.dev_rx);
    let kernel_keeps_stats = lab.ethtool_has_pp_stats();

    let stats = in_netns(&lab.ns_rx, || {
        netlink::page_pool_stats().map_err(|e| format!("{e:#}"))
    })
    .expect("page-pool-stats-get must answer, supported or not");
    eprintln!("ethtool rx_pp_*: {kernel_keeps_stats}; netlink: {stats:#?}");
    match stats {
        StatsAvailability::Available(list) => {
            assert!(
                kernel_keeps_stats,
                "netlink has page_pool stats but ethtool -S shows no rx_pp_*: {list:#?}"
            );
            let ours: Vec<_> = list.iter().filter(|s| s.ifindex == Some(ifindex)).collect();
            assert!(
                !ours.is_empty(),
                "no stats for ifindex {ifindex}: {list:#?}"
            );
            let allocated: u64 = ours.iter().map(|s| s.alloc_fast + s.alloc_slow).sum();
            assert!(
                allocated > 0,
                "traffic went through but no allocations: {ours:#?}"
            );
        }
        StatsAvailability::NotSupported(why) => {
            assert!(
                !kernel_keeps_stats,
                "ethtool -S shows rx_pp_* yet netlink says: {why}"
            );
            assert!(
                why.contains("CONFIG_PAGE_POOL_STATS") && why.len() > 30,
                "not a sentence: {why:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: run through cargo xtask test"]
fn netdev_family_resolves_and_answers_in_the_callers_namespace() {
    let family = netlink::netdev_family().expect("netdev family (Linux >= 6.8)");
    eprintln!("netdev family: {family:?}");
    assert!(family.id >= 0x10, "a dynamic genetlink id: {family:?}");
    assert!(family.has_op(netlink::CMD_PAGE_POOL_GET), "{family:?}");
    let pools = netlink::page_pools().expect("page-pool-get in the test's namespace");
    eprintln!("pools in the test's namespace: {pools:#?}");
}

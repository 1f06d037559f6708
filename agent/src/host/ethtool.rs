//! A device's configured rx ring (`ethtool -g`), looked up in whichever network namespace the
//! device lives in, to tell when resizing the ring did not rebuild the page_pool.
//!
//! The pools ppscope sees belong to devices of any namespace; `ETHTOOL_GRINGPARAM` answers
//! only in the device's own. So the lookup tries this namespace, then each named one under
//! `/run/netns`, in a short-lived thread that `setns`es (a thread's namespace is its own).
use std::{ffi::CString, fs, os::fd::AsRawFd, path::PathBuf};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GRINGPARAM: u32 = 0x10;

/// `struct ethtool_ringparam`.
#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut RingParam,
    _pad: [u8; 16],
}

/// rx ring size of `ifname` with index `ifindex` in the calling thread's namespace.
fn rx_ring_here(ifname: &str, ifindex: u32) -> Option<u32> {
    let cname = CString::new(ifname).ok()?;
    // SAFETY: a NUL-terminated name; returns 0 when absent.
    if unsafe { libc::if_nametoindex(cname.as_ptr()) } != ifindex {
        return None;
    }
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    let mut ring = RingParam {
        cmd: ETHTOOL_GRINGPARAM,
        ..Default::default()
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut ring,
        _pad: [0; 16],
    };
    for (d, s) in req
        .name
        .iter_mut()
        .zip(cname.as_bytes().iter().take(libc::IFNAMSIZ - 1))
    {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCETHTOOL with a valid ifreq whose data points at a ringparam that outlives
    // the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req) };
    (rc == 0).then_some(ring.rx_pending)
}

/// The configured rx ring of the device, wherever it lives; None when no namespace has it or
/// the driver does not report rings.
pub fn rx_ring(ifname: &str, ifindex: u32) -> Option<u32> {
    let name = ifname.to_string();
    in_any_namespace(move || rx_ring_here(&name, ifindex))
}

/// Whether a device of this name exists in this network namespace or a named one
/// (`/run/netns`): what `--dev` can mean.
pub fn device_exists(ifname: &str) -> bool {
    let Ok(name) = CString::new(ifname) else {
        return false;
    };
    // SAFETY: a NUL-terminated name; returns 0 when absent.
    in_any_namespace(move || (unsafe { libc::if_nametoindex(name.as_ptr()) } != 0).then_some(()))
        .is_some()
}

/// `f` in this namespace, then in each named one under `/run/netns` (on a short-lived thread
/// that `setns`es: a thread's namespace is its own), until one gives an answer.
fn in_any_namespace<T: Send + 'static>(
    f: impl Fn() -> Option<T> + Send + Clone + 'static,
) -> Option<T> {
    if let Some(found) = f() {
        return Some(found);
    }
    let named: Vec<PathBuf> = fs::read_dir("/run/netns")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    for ns in named {
        let f = f.clone();
        let found = std::thread::spawn(move || {
            let file = fs::File::open(&ns).ok()?;
            // SAFETY: setns on this (new, short-lived) thread only.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return None;
            }
            f()
        })
        .join()
        .ok()
        .flatten();
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The pool size a driver builds from an rx ring of `rx` entries, when it is known.
pub fn pool_size_for(driver: &str, rx: u32) -> Option<u32> {
    match driver {
        "virtio_net" => Some(rx),
        // GVE_PAGE_POOL_SIZE_MULTIPLIER
        "gve" => Some(rx.saturating_mul(4)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_found_by_name() {
        assert!(device_exists("lo"));
        assert!(!device_exists("ppscope-none0"));
        assert!(!device_exists("bad\0name"));
    }

    #[test]
    fn loopback_has_no_ring_and_absent_devices_none() {
        assert_eq!(rx_ring("lo", 1), None, "lo reports no rings");
        assert_eq!(rx_ring("no-such-dev0", 4242), None);
    }

    #[test]
    fn driver_pool_sizes() {
        assert_eq!(pool_size_for("virtio_net", 256), Some(256));
        assert_eq!(pool_size_for("gve", 1024), Some(4096));
        assert_eq!(pool_size_for("veth", 256), None);
    }
}

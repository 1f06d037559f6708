//! `devmem-dontneed N`: call `setsockopt(SOL_SOCKET, SO_DEVMEM_DONTNEED)` N times on a fresh,
//! unconnected TCP socket with one token that names no frag, so that a probe on the kernel's
//! `sock_devmem_dontneed` sees exactly N calls, each freeing 0 frags.
//!
//! Why an unconnected socket is enough (net/core/sock.c, 6.12 to 7.x): `sk_setsockopt` checks
//! only `optlen >= sizeof(int)` and copies the first int, then its lock-free switch has
//! `case SO_DEVMEM_DONTNEED: return sock_devmem_dontneed(sk, optval, optlen);` (under
//! `CONFIG_PAGE_POOL`). The function itself wants `sk_is_tcp(sk)` (else -EBADF), `optlen` a
//! multiple of 8 and at most 128 tokens (else -EINVAL); the token xarray `sk_user_frags` is set
//! up by `tcp_init_sock`, so it is empty on a new socket and the call returns 0. No peer, no
//! connection, no devmem binding. Every errno other than the "option unknown" ones
//! (ENOPROTOOPT: kernel without devmem or !CONFIG_PAGE_POOL) still means the call reached
//! `sock_devmem_dontneed` (EBADF/EINVAL/EFAULT/ENOMEM are all returned from inside it).
//!
//! Prints `calls=N ok=A errors=E last_errno=X` (X is 0 when there was none, else the errno
//! number and name). Exit status 0 when every call reached the kernel function, 1 otherwise,
//! 2 on bad usage or when the socket cannot be created.
//!
//! std only plus three raw libc declarations, so it links statically with
//! `RUSTFLAGS='-C target-feature=+crt-static'` and runs in the VM lab without libraries.

use std::ffi::c_int;
use std::io;
use std::process::ExitCode;

const AF_INET: c_int = 2;
const SOCK_STREAM: c_int = 1;
const SOCK_CLOEXEC: c_int = 0o2000000;
const IPPROTO_TCP: c_int = 6;
/// `include/uapi/asm-generic/socket.h` (x86, arm64, ...): `#define SOL_SOCKET 1`.
const SOL_SOCKET: c_int = 1;
/// `include/uapi/asm-generic/socket.h` since 6.12: `#define SO_DEVMEM_DONTNEED 80`.
/// (alpha and mips also 80; parisc 0x4050 and sparc differ: this tool is for x86/arm64.)
const SO_DEVMEM_DONTNEED: c_int = 80;

/// `struct dmabuf_token` from `include/uapi/linux/uio.h`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DmabufToken {
    token_start: u32,
    token_count: u32,
}

extern "C" {
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const DmabufToken, len: u32)
        -> c_int;
    fn close(fd: c_int) -> c_int;
}

fn errno_name(e: i32) -> &'static str {
    match e {
        0 => "",
        1 => "EPERM",
        9 => "EBADF",
        12 => "ENOMEM",
        14 => "EFAULT",
        22 => "EINVAL",
        92 => "ENOPROTOOPT",
        95 => "EOPNOTSUPP",
        _ => "?",
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let n: u64 = match (args.next().map(|a| a.parse()), args.next()) {
        (Some(Ok(n)), None) => n,
        _ => {
            eprintln!("usage: devmem-dontneed N");
            return ExitCode::from(2);
        }
    };
    // SAFETY: plain syscall wrappers; the token array outlives every call.
    let fd = unsafe { socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP) };
    if fd < 0 {
        eprintln!("devmem-dontneed: socket: {}", io::Error::last_os_error());
        return ExitCode::from(2);
    }
    // Token ids start at 1 (the xarray is XA_FLAGS_ALLOC1) and the socket never received a
    // devmem frag, so {0, 1} names nothing whatever the kernel version.
    let tokens = [DmabufToken {
        token_start: 0,
        token_count: 1,
    }];
    let len = std::mem::size_of_val(&tokens) as u32;
    let (mut ok, mut errors, mut reached) = (0u64, 0u64, 0u64);
    let mut last_errno = 0i32;
    for _ in 0..n {
        // SAFETY: `tokens` outlives the call and `len` is its size in bytes.
        let r = unsafe { setsockopt(fd, SOL_SOCKET, SO_DEVMEM_DONTNEED, tokens.as_ptr(), len) };
        if r >= 0 {
            ok += 1;
            reached += 1;
        } else {
            errors += 1;
            last_errno = io::Error::last_os_error().raw_os_error().unwrap_or(-1);
            // ENOPROTOOPT: the switch in sk_setsockopt has no such case (kernel < 6.12 or
            // !CONFIG_PAGE_POOL). EPERM could be an LSM or a cgroup setsockopt hook
            // refusing it before sock_setsockopt. Anything else comes from the function.
            if last_errno != 92 && last_errno != 1 {
                reached += 1;
            }
        }
    }
    // SAFETY: `fd` is the socket opened above, closed once.
    unsafe { close(fd) };
    let name = errno_name(last_errno);
    if name.is_empty() {
        println!("calls={n} ok={ok} errors={errors} last_errno=0");
    } else {
        println!("calls={n} ok={ok} errors={errors} last_errno={last_errno} ({name})");
    }
    if reached == n {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

//! The kernel's own view of page_pools: the generic netlink family `netdev` (Linux ≥ 6.8).
//!
//! Two dumps, as described in the kernel's `Documentation/netlink/specs/netdev.yaml`:
//! - `page-pool-get`: identity and inflight memory of every pool ([`page_pools`]);
//! - `page-pool-stats-get`: the pool's own allocation and recycling counters
//!   ([`page_pool_stats`]), which exist only in kernels built with `CONFIG_PAGE_POOL_STATS`.
//!
//! The family id is resolved at run time through `nlctrl` (`CTRL_CMD_GETFAMILY`); it is never
//! hard-coded. Framing, `NLMSG_ERROR`/`NLMSG_DONE` and attribute bounds come from the
//! rust-netlink crates (`netlink-packet-core`, `netlink-packet-generic`, `netlink-sys`); the
//! netdev attributes are decoded here, by hand, so that an attribute a newer kernel adds is
//! skipped instead of failing the whole reply.
//!
//! **Network namespaces.** Netlink answers for the network namespace of the socket, which is
//! the namespace of the thread that opens it: [`page_pools`] and [`page_pool_stats`] list only
//! the pools of netdevs in the caller's namespace (plus pools orphaned there, which the kernel
//! parks on that namespace's loopback device and reports without an ifindex). To see the pools of
//! another namespace, call them from a thread that has `setns(2)`-ed into it.
//!
//! Everything from bytes to structs is a pure function ([`parse_page_pool_dump`],
//! [`parse_page_pool_stats_dump`], [`parse_family_reply`] and the per-message attribute
//! decoders), tested here without a kernel.
use std::{fmt, io, os::fd::AsRawFd, time::Duration};

use anyhow::{anyhow, bail, Context, Result};
use netlink_packet_core::{
    parse_string, parse_u16, parse_u32, parse_u64, DecodeError, DefaultNla, Emitable,
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator,
    ParseableParametrized, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP, NLM_F_MULTIPART,
    NLM_F_REQUEST,
};
use netlink_packet_generic::{
    constants::{
        CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_OPS, CTRL_ATTR_OP_ID,
        CTRL_ATTR_VERSION, CTRL_CMD_GETFAMILY, GENL_ID_CTRL,
    },
    GenlFamily, GenlHeader, GenlMessage,
};
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};
use serde::Serialize;

/// `NETDEV_FAMILY_NAME`.
pub const NETDEV_FAMILY: &str = "netdev";
/// `NETDEV_FAMILY_VERSION`.
const NETDEV_VERSION: u8 = 1;
/// `NETDEV_CMD_PAGE_POOL_GET`.
pub const CMD_PAGE_POOL_GET: u8 = 5;
/// `NETDEV_CMD_PAGE_POOL_STATS_GET`.
pub const CMD_PAGE_POOL_STATS_GET: u8 = 9;

// enum netdev_a_page_pool (include/uapi/linux/netdev.h)
const A_PAGE_POOL_ID: u16 = 1;
const A_PAGE_POOL_IFINDEX: u16 = 2;
const A_PAGE_POOL_NAPI_ID: u16 = 3;
const A_PAGE_POOL_INFLIGHT: u16 = 4;
const A_PAGE_POOL_INFLIGHT_MEM: u16 = 5;
const A_PAGE_POOL_DETACH_TIME: u16 = 6;
const A_PAGE_POOL_DMABUF: u16 = 7;
const A_PAGE_POOL_IO_URING: u16 = 8;

// enum netdev_a_page_pool_stats
const A_STATS_INFO: u16 = 1;
const A_STATS_ALLOC_FAST: u16 = 8;
const A_STATS_ALLOC_SLOW: u16 = 9;
const A_STATS_ALLOC_SLOW_HIGH_ORDER: u16 = 10;
const A_STATS_ALLOC_EMPTY: u16 = 11;
const A_STATS_ALLOC_REFILL: u16 = 12;
const A_STATS_ALLOC_WAIVE: u16 = 13;
const A_STATS_RECYCLE_CACHED: u16 = 14;
const A_STATS_RECYCLE_CACHE_FULL: u16 = 15;
const A_STATS_RECYCLE_RING: u16 = 16;
const A_STATS_RECYCLE_RING_FULL: u16 = 17;
const A_STATS_RECYCLE_RELEASED_REFCNT: u16 = 18;

/// `NLMSGERR_ATTR_MSG`: the extended-ack text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Message types below this are netlink control messages (`NLMSG_MIN_TYPE`).
const NLMSG_MIN_TYPE: u16 = 0x10;
/// How long to wait for each datagram of an answer.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive buffer; a datagram that does not fit is an error, never silently cut.
const RECV_BUF: usize = 64 * 1024;
/// Bound on datagrams per answer, so a misbehaving peer cannot keep us looping.
const MAX_DATAGRAMS: usize = 1 << 16;

/// One page_pool as `page-pool-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetlinkPool {
    /// Netlink id of the pool (`page_pool.user.id`), unique while the pool lives.
    pub id: u32,
    /// Netdev the pool belongs to; `None` for a pool no longer linked to a netdev (orphaned,
    /// waiting for its pages to come back; the kernel omits the attribute or reports 0).
    pub ifindex: Option<u32>,
    /// NAPI instance using the pool, when the driver told the pool.
    pub napi_id: Option<u32>,
    /// Pages allocated from the pool and not yet returned.
    pub inflight: Option<u64>,
    /// Bytes held by those pages.
    pub inflight_mem: Option<u64>,
    /// CLOCK_BOOTTIME seconds at which the driver detached the pool; `None` while it is in use.
    pub detach_time: Option<u64>,
    /// Id of the dmabuf binding (devmem TCP memory provider) the pool allocates from.
    pub dmabuf: Option<u32>,
    /// Whether the pool is backed by io_uring zero-copy receive (the `io-uring` nest is present).
    pub io_uring: bool,
}

pub use crate::snapshot::NetlinkPoolStats;

/// Whether the kernel keeps page_pool stats, and the stats when it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum StatsAvailability {
    Available(Vec<NetlinkPoolStats>),
    /// One sentence saying why not, e.g. "this kernel has no CONFIG_PAGE_POOL_STATS".
    NotSupported(String),
}

/// An error answer from the kernel (`NLMSG_ERROR` with a non-zero code, or a negative
/// `NLMSG_DONE`). Callers can `downcast_ref` it from the `anyhow::Error` to read the errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// Positive errno (`libc::EOPNOTSUPP`, `libc::EPERM`, ...).
    pub errno: i32,
    /// The kernel's extended-ack message, when it sent one.
    pub message: Option<String>,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the kernel answered: {}",
            io::Error::from_raw_os_error(self.errno)
        )?;
        if let Some(m) = &self.message {
            write!(f, " ({m})")?;
        }
        Ok(())
    }
}

impl std::error::Error for KernelError {}

/// What `CTRL_CMD_GETFAMILY` told about a family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyInfo {
    pub id: u16,
    pub version: Option<u32>,
    /// Commands the family implements (empty if the kernel did not list them).
    pub ops: Vec<u32>,
}

impl FamilyInfo {
    /// Whether the family implements `cmd` (assumed yes when the kernel listed no commands).
    pub fn has_op(&self, cmd: u8) -> bool {
        // An empty list means "not told", not "none".
        self.ops.is_empty() || self.ops.contains(&u32::from(cmd))
    }
}

// ---------------------------------------------------------------------------------------------
// Live queries

/// Resolves the `netdev` generic netlink family through `nlctrl`: its id on this kernel and the
/// commands it implements (`CMD_PAGE_POOL_GET` needs Linux ≥ 6.8, `CMD_PAGE_POOL_STATS_GET`
/// also `CONFIG_PAGE_POOL_STATS`). Useful for capability probing without a dump.
pub fn netdev_family() -> Result<FamilyInfo> {
    Ok(NetdevSocket::open()?.family)
}

/// Lists the page_pools of the caller's network namespace (`page-pool-get` dump).
///
/// Fails with a sentence saying why when the kernel has no `netdev` family or no page-pool
/// support (Linux < 6.8), or when permission is denied.
pub fn page_pools() -> Result<Vec<NetlinkPool>> {
    const NO_PAGE_POOL_GET: &str = "this kernel's netdev netlink family has no page-pool-get \
        (it needs Linux 6.8 or later, built with CONFIG_PAGE_POOL)";
    let mut nl = NetdevSocket::open()?;
    if !nl.family.has_op(CMD_PAGE_POOL_GET) {
        bail!(NO_PAGE_POOL_GET);
    }
    let msgs = nl.dump(CMD_PAGE_POOL_GET).map_err(|e| {
        if is_not_supported(&e) {
            anyhow!(NO_PAGE_POOL_GET)
        } else {
            explain(e, "page-pool-get")
        }
    })?;
    msgs.iter()
        .map(|m| parse_page_pool_attrs(&m.attrs))
        .collect()
}

/// The kernel's own page_pool counters for the pools of the caller's network namespace
/// (`page-pool-stats-get` dump), or why there are none (`CONFIG_PAGE_POOL_STATS` off).
///
/// Fails only when netlink itself cannot be used (no `netdev` family, permission denied, a
/// malformed answer).
pub fn page_pool_stats() -> Result<StatsAvailability> {
    let mut nl = NetdevSocket::open()?;
    if !nl.family.has_op(CMD_PAGE_POOL_STATS_GET) {
        return Ok(StatsAvailability::NotSupported(not_supported_sentence()));
    }
    match nl.dump(CMD_PAGE_POOL_STATS_GET) {
        Ok(msgs) => Ok(StatsAvailability::Available(
            msgs.iter()
                .map(|m| parse_page_pool_stats_attrs(&m.attrs))
                .collect::<Result<_>>()?,
        )),
        Err(e) if is_not_supported(&e) => {
            Ok(StatsAvailability::NotSupported(not_supported_sentence()))
        }
        Err(e) => Err(explain(e, "page-pool-stats-get")),
    }
}

fn not_supported_sentence() -> String {
    "this kernel has no CONFIG_PAGE_POOL_STATS, so it keeps no page_pool counters \
     (its netdev netlink family has no page-pool-stats-get)"
        .to_string()
}

fn is_not_supported(e: &anyhow::Error) -> bool {
    e.downcast_ref::<KernelError>()
        .is_some_and(|k| k.errno == libc::EOPNOTSUPP || k.errno == libc::ENOTSUP)
}

/// Turns a permission error into a sentence; other errors keep their chain.
fn explain(e: anyhow::Error, op: &str) -> anyhow::Error {
    match e.downcast_ref::<KernelError>() {
        Some(k) if k.errno == libc::EPERM || k.errno == libc::EACCES => {
            anyhow!("permission denied for netdev {op}: {k} (mainline kernels answer any user: a security policy here refuses it)")
        }
        _ => e.context(format!("netdev {op} failed")),
    }
}

struct NetdevSocket {
    sock: Socket,
    port: u32,
    seq: u32,
    family: FamilyInfo,
}

impl NetdevSocket {
    fn open() -> Result<Self> {
        let mut sock = Socket::new(NETLINK_GENERIC)
            .map_err(|e| permission_or(e, "cannot open a generic netlink socket"))?;
        let addr = sock
            .bind_auto()
            .context("cannot bind the generic netlink socket")?;
        set_recv_timeout(&sock, RECV_TIMEOUT)?;
        // Ask for extended-ack messages; ignore kernels that do not know the options.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        let mut s = Self {
            sock,
            port: addr.port_number(),
            seq: 0,
            family: FamilyInfo {
                id: 0,
                version: None,
                ops: Vec::new(),
            },
        };
        s.family = s.resolve_family(NETDEV_FAMILY)?;
        Ok(s)
    }

    fn resolve_family(&mut self, name: &str) -> Result<FamilyInfo> {
        let mut value = name.as_bytes().to_vec();
        value.push(0);
        let attrs = encode_attrs(&[DefaultNla::new(CTRL_ATTR_FAMILY_NAME, value)]);
        let req = RawGenl {
            family: GENL_ID_CTRL,
            cmd: CTRL_CMD_GETFAMILY,
            version: 2,
            attrs,
        };
        match self.request(req, NLM_F_REQUEST, GENL_ID_CTRL) {
            Ok(msgs) => family_from_messages(&msgs),
            Err(e) => match e.downcast_ref::<KernelError>() {
                Some(k) if k.errno == libc::ENOENT => Err(anyhow!(
                    "this kernel has no generic netlink family \"{name}\" \
                     (page-pool queries need Linux 6.8 or later)"
                )),
                Some(k) if k.errno == libc::EPERM || k.errno == libc::EACCES => Err(anyhow!(
                    "permission denied asking nlctrl for the \"{name}\" family: {k}"
                )),
                _ => Err(e.context(format!("cannot resolve generic netlink family \"{name}\""))),
            },
        }
    }

    fn dump(&mut self, cmd: u8) -> Result<Vec<RawGenl>> {
        let req = RawGenl {
            family: self.family.id,
            cmd,
            version: NETDEV_VERSION,
            attrs: Vec::new(),
        };
        let family = self.family.id;
        self.request(req, NLM_F_REQUEST | NLM_F_DUMP, family)
    }

    /// Sends one request and collects the payloads of its answer, however many datagrams it
    /// takes, until `NLMSG_DONE`, an ack, an error or a single (non-multipart) reply.
    fn request(&mut self, req: RawGenl, flags: u16, reply_type: u16) -> Result<Vec<RawGenl>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(
            header,
            NetlinkPayload::InnerMessage(GenlMessage::from_payload(req)),
        );
        msg.finalize();
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        self.sock
            .send_to(&buf, &SocketAddr::new(0, 0), 0)
            .map_err(|e| permission_or(e, "cannot send a netlink request"))?;

        let filter = ReplyFilter {
            seq: Some(self.seq),
            port: Some(self.port),
            msg_type: Some(reply_type),
        };
        let mut out = Vec::new();
        let mut rx = vec![0u8; RECV_BUF];
        for _ in 0..MAX_DATAGRAMS {
            let n = recv_datagram(&self.sock, &mut rx)?;
            if parse_messages(&rx[..n], &filter, &mut out)? == Step::Done {
                return Ok(out);
            }
        }
        bail!("netlink answer did not end after {MAX_DATAGRAMS} datagrams")
    }
}

fn permission_or(e: io::Error, what: &str) -> anyhow::Error {
    if e.kind() == io::ErrorKind::PermissionDenied {
        anyhow!("permission denied: {what}: {e}")
    } else {
        anyhow!("{what}: {e}")
    }
}

fn set_recv_timeout(sock: &Socket, t: Duration) -> Result<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a valid socket fd and a timeval of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).context("cannot set SO_RCVTIMEO on netlink socket");
    }
    Ok(())
}

/// Reads one datagram into `buf`; a datagram larger than `buf` is an error.
fn recv_datagram(sock: &Socket, buf: &mut [u8]) -> Result<usize> {
    loop {
        let mut slice = &mut buf[..];
        match sock.recv(&mut slice, libc::MSG_TRUNC) {
            Ok(n) if n > buf.len() => bail!(
                "netlink datagram of {n} bytes does not fit the {} byte buffer",
                buf.len()
            ),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                bail!("no netlink answer from the kernel within {RECV_TIMEOUT:?}")
            }
            Err(e) => return Err(e).context("netlink recv failed"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pure parsing

/// A generic netlink payload kept as raw attribute bytes: the family id, command and version
/// for requests; the command and the attribute bytes for replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawGenl {
    family: u16,
    pub cmd: u8,
    version: u8,
    /// The attributes after the genetlink header, undecoded.
    pub attrs: Vec<u8>,
}

impl GenlFamily for RawGenl {
    fn family_name() -> &'static str {
        // Not used: the family id is resolved at run time and carried in `family`.
        NETDEV_FAMILY
    }
    fn family_id(&self) -> u16 {
        self.family
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        self.version
    }
}

impl Emitable for RawGenl {
    fn buffer_len(&self) -> usize {
        self.attrs.len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        buffer[..self.attrs.len()].copy_from_slice(&self.attrs);
    }
}

impl ParseableParametrized<[u8], GenlHeader> for RawGenl {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        Ok(Self {
            family: 0,
            cmd: header.cmd,
            version: header.version,
            attrs: buf.to_vec(),
        })
    }
}

fn encode_attrs(nlas: &[DefaultNla]) -> Vec<u8> {
    let mut buf = vec![0u8; nlas.buffer_len()];
    nlas.emit(&mut buf);
    buf
}

/// Which replies belong to our request; `None` accepts any.
#[derive(Debug, Clone, Default)]
struct ReplyFilter {
    seq: Option<u32>,
    port: Option<u32>,
    msg_type: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The answer goes on in another datagram.
    More,
    /// The answer is complete.
    Done,
}

/// Parses the netlink messages of one datagram (or several concatenated), appending the
/// genetlink payloads that answer us to `out`.
fn parse_messages(buf: &[u8], filter: &ReplyFilter, out: &mut Vec<RawGenl>) -> Result<Step> {
    let mut offset = 0;
    let mut step = Step::More;
    while offset < buf.len() {
        let rest = &buf[offset..];
        let nl = NetlinkBuffer::new_checked(rest)
            .map_err(|e| anyhow!("malformed netlink message at byte {offset}: {e}"))?;
        let len = nl.length() as usize; // ≥ 16, checked by new_checked: the loop advances
        let msg = NetlinkMessage::<GenlMessage<RawGenl>>::deserialize(&rest[..len])
            .map_err(|e| anyhow!("malformed netlink message at byte {offset}: {e}"))?;
        offset += align4(len).min(rest.len());

        let h = msg.header;
        if filter.seq.is_some_and(|s| s != h.sequence_number)
            || filter
                .port
                .is_some_and(|p| h.port_number != 0 && h.port_number != p)
        {
            continue; // a stale answer to an earlier request
        }
        match msg.payload {
            NetlinkPayload::Done(d) => {
                if d.code < 0 {
                    return Err(KernelError {
                        errno: d.code.saturating_neg(),
                        message: ext_ack_message(&d.extended_ack),
                    }
                    .into());
                }
                return Ok(Step::Done);
            }
            NetlinkPayload::Error(e) => {
                let code = e.raw_code();
                if code == 0 {
                    return Ok(Step::Done); // an ack
                }
                return Err(KernelError {
                    errno: code.saturating_neg(),
                    message: error_ext_ack(h.flags, &e.header),
                }
                .into());
            }
            NetlinkPayload::Noop => {}
            NetlinkPayload::Overrun(_) => bail!("netlink overrun: the answer was lost"),
            NetlinkPayload::InnerMessage(g) => {
                if h.message_type < NLMSG_MIN_TYPE
                    || filter.msg_type.is_some_and(|t| t != h.message_type)
                {
                    bail!(
                        "unexpected netlink message type {} in the answer",
                        h.message_type
                    );
                }
                out.push(g.payload);
                if h.flags & NLM_F_MULTIPART == 0 {
                    step = Step::Done; // a single reply: no NLMSG_DONE follows
                }
            }
            _ => {}
        }
    }
    Ok(step)
}

/// The extended-ack text of an `NLMSG_ERROR`: `after_code` is what follows the error code
/// (the original request header, its payload unless capped, then the TLVs).
fn error_ext_ack(flags: u16, after_code: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || after_code.len() < 16 {
        return None;
    }
    let orig_len = parse_u32(&after_code[0..4]).ok()? as usize;
    let skip = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        align4(orig_len)
    };
    ext_ack_message(after_code.get(skip..)?)
}

fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    NlasIterator::new(tlvs)
        .map_while(|nla| nla.ok())
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .and_then(|nla| parse_string(nla.value()).ok())
        .filter(|s| !s.is_empty())
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses a whole answer: every datagram, in order, concatenated. A multipart answer must end
/// with `NLMSG_DONE`; an `NLMSG_ERROR` becomes a [`KernelError`].
fn parse_answer(buf: &[u8]) -> Result<Vec<RawGenl>> {
    let mut out = Vec::new();
    match parse_messages(buf, &ReplyFilter::default(), &mut out)? {
        Step::Done => Ok(out),
        Step::More => bail!("netlink answer ends before NLMSG_DONE (truncated dump)"),
    }
}

/// Decodes a complete `page-pool-get` dump answer (the received datagrams concatenated).
pub fn parse_page_pool_dump(buf: &[u8]) -> Result<Vec<NetlinkPool>> {
    parse_answer(buf)?
        .iter()
        .map(|m| parse_page_pool_attrs(&m.attrs))
        .collect()
}

/// Decodes a complete `page-pool-stats-get` dump answer (the received datagrams concatenated).
pub fn parse_page_pool_stats_dump(buf: &[u8]) -> Result<Vec<NetlinkPoolStats>> {
    parse_answer(buf)?
        .iter()
        .map(|m| parse_page_pool_stats_attrs(&m.attrs))
        .collect()
}

/// Decodes the answer to `CTRL_CMD_GETFAMILY`.
pub fn parse_family_reply(buf: &[u8]) -> Result<FamilyInfo> {
    family_from_messages(&parse_answer(buf)?)
}

fn family_from_messages(msgs: &[RawGenl]) -> Result<FamilyInfo> {
    let msg = msgs
        .first()
        .ok_or_else(|| anyhow!("nlctrl sent no family description"))?;
    let mut id = None;
    let mut version = None;
    let mut ops = Vec::new();
    for nla in NlasIterator::new(&msg.attrs[..]) {
        let nla = nla.map_err(|e| anyhow!("malformed nlctrl attribute: {e}"))?;
        match nla.kind() {
            CTRL_ATTR_FAMILY_ID => id = Some(parse_u16(nla.value()).map_err(bad("family id"))?),
            CTRL_ATTR_VERSION => version = Some(parse_u32(nla.value()).map_err(bad("version"))?),
            CTRL_ATTR_OPS => {
                for op in NlasIterator::new(nla.value()) {
                    let op = op.map_err(|e| anyhow!("malformed nlctrl op: {e}"))?;
                    for a in NlasIterator::new(op.value()) {
                        let a = a.map_err(|e| anyhow!("malformed nlctrl op attribute: {e}"))?;
                        if a.kind() == CTRL_ATTR_OP_ID {
                            ops.push(parse_u32(a.value()).map_err(bad("op id"))?);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(FamilyInfo {
        id: id.ok_or_else(|| anyhow!("nlctrl answer has no family id"))?,
        version,
        ops,
    })
}

fn bad(what: &'static str) -> impl Fn(DecodeError) -> anyhow::Error {
    move |e| anyhow!("bad {what} attribute: {e}")
}

/// Netlink `uint`: 4 or 8 bytes, host order.
fn parse_uint(v: &[u8]) -> Result<u64, DecodeError> {
    match v.len() {
        4 => parse_u32(v).map(u64::from),
        8 => parse_u64(v),
        n => Err(DecodeError::from(format!(
            "a netlink uint is 4 or 8 bytes, not {n}"
        ))),
    }
}

fn parse_uint_u32(v: &[u8]) -> Result<u32, DecodeError> {
    let x = parse_uint(v)?;
    u32::try_from(x).map_err(|_| DecodeError::from(format!("{x} does not fit 32 bits")))
}

/// Decodes the attributes of one `page-pool-get` reply (after the genetlink header).
/// Unknown attributes are skipped; a pool without an id is an error.
pub fn parse_page_pool_attrs(attrs: &[u8]) -> Result<NetlinkPool> {
    let mut id = None;
    let mut pool = NetlinkPool {
        id: 0,
        ifindex: None,
        napi_id: None,
        inflight: None,
        inflight_mem: None,
        detach_time: None,
        dmabuf: None,
        io_uring: false,
    };
    for nla in NlasIterator::new(attrs) {
        let nla = nla.map_err(|e| anyhow!("malformed page-pool attribute: {e}"))?;
        let v = nla.value();
        match nla.kind() {
            A_PAGE_POOL_ID => id = Some(parse_uint_u32(v).map_err(bad("page-pool id"))?),
            A_PAGE_POOL_IFINDEX => {
                pool.ifindex =
                    Some(parse_u32(v).map_err(bad("page-pool ifindex"))?).filter(|&i| i != 0)
            }
            A_PAGE_POOL_NAPI_ID => {
                pool.napi_id = Some(parse_uint_u32(v).map_err(bad("page-pool napi-id"))?)
            }
            A_PAGE_POOL_INFLIGHT => {
                pool.inflight = Some(parse_uint(v).map_err(bad("page-pool inflight"))?)
            }
            A_PAGE_POOL_INFLIGHT_MEM => {
                pool.inflight_mem = Some(parse_uint(v).map_err(bad("page-pool inflight-mem"))?)
            }
            A_PAGE_POOL_DETACH_TIME => {
                pool.detach_time = Some(parse_uint(v).map_err(bad("page-pool detach-time"))?)
            }
            A_PAGE_POOL_DMABUF => {
                pool.dmabuf = Some(parse_u32(v).map_err(bad("page-pool dmabuf"))?)
            }
            A_PAGE_POOL_IO_URING => pool.io_uring = true,
            _ => {}
        }
    }
    pool.id = id.ok_or_else(|| anyhow!("page-pool reply without an id"))?;
    Ok(pool)
}

/// Decodes the attributes of one `page-pool-stats-get` reply (after the genetlink header).
/// Unknown attributes are skipped; missing counters read 0; a reply without `info.id` is an
/// error.
pub fn parse_page_pool_stats_attrs(attrs: &[u8]) -> Result<NetlinkPoolStats> {
    let mut s = NetlinkPoolStats::default();
    let mut id = None;
    for nla in NlasIterator::new(attrs) {
        let nla = nla.map_err(|e| anyhow!("malformed page-pool-stats attribute: {e}"))?;
        let v = nla.value();
        let counter = match nla.kind() {
            A_STATS_INFO => {
                let info = parse_page_pool_attrs(v).context("in page-pool-stats info")?;
                id = Some(info.id);
                s.ifindex = info.ifindex;
                continue;
            }
            A_STATS_ALLOC_FAST => &mut s.alloc_fast,
            A_STATS_ALLOC_SLOW => &mut s.alloc_slow,
            A_STATS_ALLOC_SLOW_HIGH_ORDER => &mut s.alloc_slow_high_order,
            A_STATS_ALLOC_EMPTY => &mut s.alloc_empty,
            A_STATS_ALLOC_REFILL => &mut s.alloc_refill,
            A_STATS_ALLOC_WAIVE => &mut s.alloc_waive,
            A_STATS_RECYCLE_CACHED => &mut s.recycle_cached,
            A_STATS_RECYCLE_CACHE_FULL => &mut s.recycle_cache_full,
            A_STATS_RECYCLE_RING => &mut s.recycle_ring,
            A_STATS_RECYCLE_RING_FULL => &mut s.recycle_ring_full,
            A_STATS_RECYCLE_RELEASED_REFCNT => &mut s.recycle_released_refcnt,
            _ => continue,
        };
        *counter = parse_uint(v)
            .map_err(|e| anyhow!("bad page-pool-stats counter attribute {}: {e}", nla.kind()))?;
    }
    s.id = id.ok_or_else(|| anyhow!("page-pool-stats reply without info.id"))?;
    Ok(s)
}

use std::collections::HashMap;

/// What netlink said at one instant (a window takes one at its start and one at its end).
#[derive(Debug, Clone, Default)]
pub struct NetlinkSample {
    pub pools: Vec<NetlinkPool>,
    /// None when the kernel keeps no stats (with the reason in `stats_missing`).
    pub stats: Option<HashMap<u32, NetlinkPoolStats>>,
    pub stats_missing: Option<String>,
    /// Why netlink could not be asked at all (kernel < 6.8, permission).
    pub error: Option<String>,
    /// The name of each pool's device (by ifindex), read with the pools: the model does not
    /// ask the host.
    pub ifnames: HashMap<u32, String>,
}

impl NetlinkSample {
    /// Asks the kernel now; failures are kept as sentences, never fatal.
    pub fn read() -> Self {
        let mut s = Self::default();
        match page_pools() {
            Ok(p) => s.pools = p,
            Err(e) => s.error = Some(format!("{e:#}")),
        }
        match page_pool_stats() {
            Ok(StatsAvailability::Available(v)) => {
                s.stats = Some(v.into_iter().map(|p| (p.id, p)).collect());
            }
            Ok(StatsAvailability::NotSupported(why)) => s.stats_missing = Some(why),
            Err(e) => s.stats_missing = Some(format!("{e:#}")),
        }
        // One name lookup (a system call) per device, not per pool: a NIC has a pool per queue.
        let devices: std::collections::BTreeSet<u32> =
            s.pools.iter().filter_map(|p| p.ifindex).collect();
        s.ifnames = devices
            .into_iter()
            .filter_map(|i| Some((i, crate::host::system::ifname_of(i)?)))
            .collect();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // --- builders for hand-made kernel answers (host byte order, like the kernel) ---

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }
    fn a32(kind: u16, x: u32) -> Vec<u8> {
        attr(kind, &x.to_ne_bytes())
    }
    fn a64(kind: u16, x: u64) -> Vec<u8> {
        attr(kind, &x.to_ne_bytes())
    }
    fn nest(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
        attr(kind | netlink_packet_core::NLA_F_NESTED, &parts.concat())
    }
    fn nlmsg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&4242u32.to_ne_bytes());
        v.extend_from_slice(payload);
        v
    }
    fn genl(ty: u16, flags: u16, cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![cmd, 1, 0, 0];
        p.extend(attrs.concat());
        nlmsg(ty, flags, 1, &p)
    }
    fn done() -> Vec<u8> {
        nlmsg(3, NLM_F_MULTIPART, 1, &0i32.to_ne_bytes())
    }
    const FAM: u16 = 0x1d;

    fn pool_with_ifindex() -> Vec<u8> {
        genl(
            FAM,
            NLM_F_MULTIPART,
            CMD_PAGE_POOL_GET,
            &[
                a32(A_PAGE_POOL_ID, 7),
                a32(A_PAGE_POOL_IFINDEX, 12),
                a32(A_PAGE_POOL_NAPI_ID, 8195),
                a32(A_PAGE_POOL_INFLIGHT, 256),
                a64(A_PAGE_POOL_INFLIGHT_MEM, 1 << 40),
            ],
        )
    }

    #[test]
    fn pool_with_and_without_ifindex() {
        let orphan = genl(
            FAM,
            NLM_F_MULTIPART,
            CMD_PAGE_POOL_GET,
            &[
                a64(A_PAGE_POOL_ID, 3),
                a32(A_PAGE_POOL_INFLIGHT, 5),
                a32(A_PAGE_POOL_INFLIGHT_MEM, 5 * 4096),
                a32(A_PAGE_POOL_DETACH_TIME, 1234),
                a32(A_PAGE_POOL_DMABUF, 9),
                nest(A_PAGE_POOL_IO_URING, &[]),
            ],
        );
        let buf = [pool_with_ifindex(), orphan, done()].concat();
        let pools = parse_page_pool_dump(&buf).unwrap();
        assert_eq!(
            pools,
            vec![
                NetlinkPool {
                    id: 7,
                    ifindex: Some(12),
                    napi_id: Some(8195),
                    inflight: Some(256),
                    inflight_mem: Some(1 << 40),
                    detach_time: None,
                    dmabuf: None,
                    io_uring: false,
                },
                NetlinkPool {
                    id: 3,
                    ifindex: None,
                    napi_id: None,
                    inflight: Some(5),
                    inflight_mem: Some(5 * 4096),
                    detach_time: Some(1234),
                    dmabuf: Some(9),
                    io_uring: true,
                },
            ]
        );
        let json = serde_json::to_value(&pools[1]).unwrap();
        assert_eq!(json["ifindex"], serde_json::Value::Null);
        assert_eq!(json["io_uring"], true);
    }

    #[test]
    fn ifindex_zero_means_unlinked() {
        let p =
            parse_page_pool_attrs(&[a32(A_PAGE_POOL_ID, 1), a32(A_PAGE_POOL_IFINDEX, 0)].concat())
                .unwrap();
        assert_eq!(p.ifindex, None);
    }

    #[test]
    fn empty_dump_is_empty() {
        assert_eq!(parse_page_pool_dump(&done()).unwrap(), vec![]);
    }

    #[test]
    fn stats_reply() {
        let mut attrs = vec![nest(
            A_STATS_INFO,
            &[a32(A_PAGE_POOL_ID, 7), a32(A_PAGE_POOL_IFINDEX, 12)],
        )];
        for (i, kind) in (A_STATS_ALLOC_FAST..=A_STATS_RECYCLE_RELEASED_REFCNT).enumerate() {
            // alternate 4- and 8-byte uints, as nla_put_uint does by value
            if i % 2 == 0 {
                attrs.push(a32(kind, 100 + i as u32));
            } else {
                attrs.push(a64(kind, (1 << 33) + i as u64));
            }
        }
        let buf = [
            genl(FAM, NLM_F_MULTIPART, CMD_PAGE_POOL_STATS_GET, &attrs),
            done(),
        ]
        .concat();
        let stats = parse_page_pool_stats_dump(&buf).unwrap();
        assert_eq!(
            stats,
            vec![NetlinkPoolStats {
                id: 7,
                ifindex: Some(12),
                alloc_fast: 100,
                alloc_slow: (1 << 33) + 1,
                alloc_slow_high_order: 102,
                alloc_empty: (1 << 33) + 3,
                alloc_refill: 104,
                alloc_waive: (1 << 33) + 5,
                recycle_cached: 106,
                recycle_cache_full: (1 << 33) + 7,
                recycle_ring: 108,
                recycle_ring_full: (1 << 33) + 9,
                recycle_released_refcnt: 110,
            }]
        );
    }

    #[test]
    fn stats_without_info_is_an_error() {
        let err = parse_page_pool_stats_attrs(&a32(A_STATS_ALLOC_FAST, 1)).unwrap_err();
        assert!(err.to_string().contains("info.id"), "{err}");
    }

    fn error_msg(errno: i32, ext: Option<&str>) -> Vec<u8> {
        // NLMSG_ERROR, capped: code + the original request header + TLVs.
        let mut p = (-errno).to_ne_bytes().to_vec();
        p.extend(
            nlmsg(
                FAM,
                NLM_F_REQUEST | NLM_F_DUMP,
                1,
                &[CMD_PAGE_POOL_STATS_GET, 1, 0, 0],
            )[..16]
                .to_vec(),
        );
        let mut flags = NLM_F_CAPPED;
        if let Some(m) = ext {
            let mut s = m.as_bytes().to_vec();
            s.push(0);
            p.extend(attr(NLMSGERR_ATTR_MSG, &s));
            flags |= NLM_F_ACK_TLVS;
        }
        nlmsg(2, flags, 1, &p)
    }

    #[test]
    fn nlmsg_error_reply_is_a_kernel_error() {
        let err = parse_page_pool_stats_dump(&error_msg(libc::EOPNOTSUPP, None)).unwrap_err();
        let k = err.downcast_ref::<KernelError>().expect("a KernelError");
        assert_eq!(k.errno, libc::EOPNOTSUPP);
        assert!(is_not_supported(&err));

        let err = parse_page_pool_dump(&error_msg(libc::EPERM, Some("no way"))).unwrap_err();
        let k = err.downcast_ref::<KernelError>().unwrap();
        assert_eq!(k.errno, libc::EPERM);
        assert_eq!(k.message.as_deref(), Some("no way"));
        let sentence = explain(err, "page-pool-get").to_string();
        assert!(sentence.starts_with("permission denied"), "{sentence}");
    }

    #[test]
    fn error_inside_done_is_a_kernel_error() {
        let buf = [
            pool_with_ifindex(),
            nlmsg(3, NLM_F_MULTIPART, 1, &(-libc::EMSGSIZE).to_ne_bytes()),
        ]
        .concat();
        let err = parse_page_pool_dump(&buf).unwrap_err();
        assert_eq!(
            err.downcast_ref::<KernelError>().unwrap().errno,
            libc::EMSGSIZE
        );
    }

    #[test]
    fn ack_ends_an_answer() {
        let buf = error_msg(0, None);
        assert!(parse_page_pool_dump(&buf).unwrap().is_empty());
    }

    #[test]
    fn unknown_attribute_is_skipped() {
        let buf = [
            genl(
                FAM,
                NLM_F_MULTIPART,
                CMD_PAGE_POOL_GET,
                &[
                    attr(200, b"from a future kernel"),
                    a32(A_PAGE_POOL_ID, 11),
                    nest(99, &[a32(1, 1)]),
                    a64(A_PAGE_POOL_INFLIGHT, 2),
                ],
            ),
            done(),
        ]
        .concat();
        let pools = parse_page_pool_dump(&buf).unwrap();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].id, 11);
        assert_eq!(pools[0].inflight, Some(2));
    }

    #[test]
    fn truncated_attribute_is_an_error() {
        // attribute claims 8 bytes of value but only 4 follow, message length consistent
        let mut bad_attr = Vec::new();
        bad_attr.extend_from_slice(&12u16.to_ne_bytes());
        bad_attr.extend_from_slice(&A_PAGE_POOL_INFLIGHT.to_ne_bytes());
        bad_attr.extend_from_slice(&1u32.to_ne_bytes());
        let buf = [
            genl(
                FAM,
                NLM_F_MULTIPART,
                CMD_PAGE_POOL_GET,
                &[a32(A_PAGE_POOL_ID, 1), bad_attr],
            ),
            done(),
        ]
        .concat();
        let err = parse_page_pool_dump(&buf).unwrap_err();
        assert!(err.to_string().contains("malformed"), "{err}");
    }

    #[test]
    fn wrong_width_is_an_error() {
        let err = parse_page_pool_attrs(&[attr(A_PAGE_POOL_ID, &[1, 0])].concat()).unwrap_err();
        assert!(err.to_string().contains("id"), "{err}");
        let err = parse_page_pool_attrs(
            &[a32(A_PAGE_POOL_ID, 1), attr(A_PAGE_POOL_IFINDEX, &[0; 8])].concat(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("ifindex"), "{err}");
    }

    #[test]
    fn truncated_messages_are_errors_never_panics() {
        let full = [pool_with_ifindex(), done()].concat();
        // Every prefix: an error (or, for the cut right after the pool, "no NLMSG_DONE").
        for cut in 0..full.len() {
            assert!(parse_page_pool_dump(&full[..cut]).is_err(), "cut at {cut}");
        }
        assert!(parse_page_pool_dump(&full).is_ok());
        // A message whose length field is 0 or below the header size cannot loop forever.
        let mut zero = done();
        zero[0..4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(parse_page_pool_dump(&zero).is_err());
        // A genetlink message too short for its own header.
        assert!(parse_page_pool_dump(&nlmsg(FAM, NLM_F_MULTIPART, 1, &[5, 1])).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        // A small deterministic fuzz: flip bytes of a valid answer.
        let full = [pool_with_ifindex(), done()].concat();
        let mut x: u32 = 0x1234_5678;
        for _ in 0..20_000 {
            let mut b = full.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = x as usize % b.len();
                b[i] = (x >> 8) as u8;
            }
            let _ = parse_page_pool_dump(&b);
            let _ = parse_page_pool_stats_dump(&b);
            let _ = parse_family_reply(&b);
        }
    }

    #[test]
    fn single_reply_needs_no_done() {
        // The answer to a "do" request (e.g. CTRL_CMD_GETFAMILY) is one non-multipart message.
        let mut name = b"netdev".to_vec();
        name.push(0);
        let ops = nest(
            CTRL_ATTR_OPS,
            &[
                nest(1, &[a32(CTRL_ATTR_OP_ID, 5), a32(2, 0x0e)]),
                nest(2, &[a32(CTRL_ATTR_OP_ID, 9), a32(2, 0x0e)]),
            ],
        );
        let reply = genl(
            GENL_ID_CTRL,
            0,
            1, // CTRL_CMD_NEWFAMILY
            &[
                attr(CTRL_ATTR_FAMILY_NAME, &name),
                attr(CTRL_ATTR_FAMILY_ID, &FAM.to_ne_bytes()),
                a32(CTRL_ATTR_VERSION, 1),
                attr(77, b"??"),
                ops,
            ],
        );
        let fam = parse_family_reply(&reply).unwrap();
        assert_eq!(fam.id, FAM);
        assert_eq!(fam.version, Some(1));
        assert_eq!(fam.ops, vec![5, 9]);
        assert!(fam.has_op(CMD_PAGE_POOL_STATS_GET));
        let without = FamilyInfo {
            ops: vec![1, 5],
            ..fam
        };
        assert!(!without.has_op(CMD_PAGE_POOL_STATS_GET));
    }

    #[test]
    fn stale_replies_are_skipped_and_foreign_types_rejected() {
        let filter = ReplyFilter {
            seq: Some(2),
            port: None,
            msg_type: Some(FAM),
        };
        let mut out = Vec::new();
        // seq 1 belongs to an earlier request: skipped, the answer is not over.
        let step =
            parse_messages(&[pool_with_ifindex(), done()].concat(), &filter, &mut out).unwrap();
        assert_eq!(step, Step::More);
        assert!(out.is_empty());
        let filter = ReplyFilter {
            seq: Some(1),
            port: None,
            msg_type: Some(FAM + 1),
        };
        assert!(parse_messages(&pool_with_ifindex(), &filter, &mut out).is_err());
    }

    /// The live request/receive path on this machine's kernel, unprivileged: `dev-get` dumps a
    /// real multi-part answer (every netdev of this namespace, `lo` included), page-pool-get
    /// answers, and a command the family lacks comes back as EOPNOTSUPP. Skipped, with a note,
    /// where the kernel has no `netdev` family or netlink is unavailable.
    #[test]
    fn live_dump_machinery_reads_real_answers() {
        let mut nl = match NetdevSocket::open() {
            Ok(nl) => nl,
            Err(e) => {
                eprintln!("skipped, no netdev netlink here: {e:#}");
                return;
            }
        };
        const CMD_DEV_GET: u8 = 1;
        const A_DEV_IFINDEX: u16 = 1;
        let devs = nl.dump(CMD_DEV_GET).unwrap();
        let ifindexes: Vec<u32> = devs
            .iter()
            .filter_map(|m| {
                NlasIterator::new(&m.attrs[..])
                    .filter_map(Result::ok)
                    .find(|a| a.kind() == A_DEV_IFINDEX)
                    .and_then(|a| parse_u32(a.value()).ok())
            })
            .collect();
        assert!(
            ifindexes.contains(&1),
            "lo missing from dev-get: {ifindexes:?}"
        );
        // Another request on the same socket: sequence numbers keep the answers apart.
        if nl.family.has_op(CMD_PAGE_POOL_GET) {
            for m in nl.dump(CMD_PAGE_POOL_GET).unwrap() {
                parse_page_pool_attrs(&m.attrs).unwrap();
            }
        }
        if !nl.family.has_op(CMD_PAGE_POOL_STATS_GET) {
            let err = nl.dump(CMD_PAGE_POOL_STATS_GET).unwrap_err();
            assert!(is_not_supported(&err), "{err:#}");
        }
    }

    #[test]
    fn request_encodes_family_and_command() {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = 9;
        let mut msg = NetlinkMessage::new(
            header,
            NetlinkPayload::InnerMessage(GenlMessage::from_payload(RawGenl {
                family: FAM,
                cmd: CMD_PAGE_POOL_GET,
                version: NETDEV_VERSION,
                attrs: Vec::new(),
            })),
        );
        msg.finalize();
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        assert_eq!(buf.len(), 20);
        assert_eq!(u32::from_ne_bytes(buf[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes(buf[4..6].try_into().unwrap()), FAM);
        assert_eq!(
            u16::from_ne_bytes(buf[6..8].try_into().unwrap()),
            NLM_F_REQUEST | NLM_F_DUMP
        );
        assert_eq!(&buf[16..20], &[CMD_PAGE_POOL_GET, NETDEV_VERSION, 0, 0]);
    }
}

//! The agent's netlink codecs, one per kernel subsystem ([`nft`]: nf_tables, [`ipvs`]: IPVS
//! over generic netlink, [`conntrack`]: ctnetlink), and what they share: attributes
//! (type-length-value, 4-byte aligned), the address family numbers and the socket.

pub mod conntrack;
pub(crate) mod ipvs;
pub mod nft;

use tideway_core::net::IpFamily;

use crate::dataplane::backend::{DataplaneError, NetlinkError, Refusal};

/// The address family a netlink message carries: `AF_INET` (2) or `AF_INET6` (10), the same
/// numbers as nf_tables' `NFPROTO_IPV4` and `NFPROTO_IPV6`.
pub(crate) fn family_number(f: IpFamily) -> u8 {
    if f == IpFamily::V4 { 2 } else { 10 }
}

const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// `n` rounded up to the netlink alignment.
pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Attribute builder (type-length-value, 4-byte aligned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attrs(pub(crate) Vec<u8>);

impl Attrs {
    pub(crate) fn put(mut self, ty: u16, value: &[u8]) -> Self {
        let len = 4 + value.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(align4(self.0.len()), 0);
        self
    }
    pub(crate) fn u16(self, ty: u16, v: u16) -> Self {
        self.put(ty, &v.to_ne_bytes())
    }
    pub(crate) fn u32(self, ty: u16, v: u32) -> Self {
        self.put(ty, &v.to_ne_bytes())
    }
    pub(crate) fn be16(self, ty: u16, v: u16) -> Self {
        self.put(ty, &v.to_be_bytes())
    }
    pub(crate) fn string(self, ty: u16, s: &str) -> Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(ty, &v)
    }
    pub(crate) fn nested(self, ty: u16, inner: Attrs) -> Self {
        self.put(ty | NLA_F_NESTED, &inner.0)
    }
}

/// Iterates attributes: (type without flags, value).
pub(crate) fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let ty = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return None;
        }
        let value = &buf[4..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((ty, value))
    })
}

/// A netlink socket of `protocol` (`NETLINK_NETFILTER`, `NETLINK_GENERIC`), bound and
/// connected to the kernel, with a receive buffer of `rx_buffer` bytes.
pub(crate) fn netlink_socket(
    protocol: isize,
    rx_buffer: usize,
) -> Result<netlink_sys::Socket, DataplaneError> {
    let mut socket = netlink_sys::Socket::new(protocol).map_err(NetlinkError::socket("netlink socket"))?;
    socket.bind_auto().map_err(NetlinkError::socket("netlink bind"))?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0)).map_err(NetlinkError::socket("netlink connect"))?;
    // Past the system's limit where allowed (root), within it otherwise.
    if nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::RcvBufForce, &rx_buffer).is_err() {
        let _ = socket.set_rx_buf_sz(rx_buffer);
    }
    Ok(socket)
}

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// Set on dump answers when the objects changed while the dump ran (the answer may be torn).
const NLM_F_DUMP_INTR: u16 = 0x10;

/// One message of a datagram from the kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
    pub(crate) payload: &'a [u8],
}

/// The messages of one datagram.
pub(crate) fn messages(mut buf: &[u8]) -> Vec<Message<'_>> {
    let mut out = Vec::new();
    while buf.len() >= 16 {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < 16 || len > buf.len() {
            break;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let flags = u16::from_ne_bytes([buf[6], buf[7]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        out.push(Message { kind, flags, seq, payload: &buf[16..len] });
        buf = &buf[align4(len).min(buf.len())..];
    }
    out
}

/// The (positive) errno of an `NLMSG_ERROR` payload; 0 for an ack.
pub(crate) fn errno_of(payload: &[u8]) -> i32 {
    payload.get(..4).map_or(0, |b| -i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// The largest datagram a dump is read with.
const DATAGRAM: usize = 1 << 20;

/// How a dump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dumped {
    /// Every object was read.
    Complete,
    /// The objects changed during the dump: what was read may be torn; ask again.
    Interrupted,
}

/// Sends the dump request `request` (sequence `seq`) and gives each answer's type and payload
/// to `each` until the kernel says done. `what` names the dump in errors.
pub(crate) fn dump(
    socket: &netlink_sys::Socket,
    request: &[u8],
    seq: u32,
    what: &str,
    mut each: impl FnMut(u16, &[u8]),
) -> Result<Dumped, DataplaneError> {
    socket.set_non_blocking(false).map_err(NetlinkError::socket("blocking mode"))?;
    socket.send(request, 0).map_err(NetlinkError::socket("sending a dump request"))?;
    let mut dumped = Dumped::Complete;
    // One buffer for every datagram, one system call each (a dump's datagrams are at most
    // 32 KiB; an answer per element is far smaller); MSG_TRUNC tells a datagram that did not
    // fit.
    let mut buf: Vec<u8> = Vec::with_capacity(DATAGRAM);
    loop {
        buf.clear();
        let n = socket
            .recv(&mut buf, nix::sys::socket::MsgFlags::MSG_TRUNC.bits())
            .map_err(NetlinkError::socket("reading a dump"))?;
        if n > buf.len() {
            return Err(NetlinkError::Protocol(format!("{what}: a {n}-byte answer did not fit")).into());
        }
        for m in messages(&buf) {
            if m.seq != seq {
                continue;
            }
            if m.flags & NLM_F_DUMP_INTR != 0 {
                dumped = Dumped::Interrupted;
            }
            match m.kind {
                NLMSG_DONE => return Ok(dumped),
                NLMSG_ERROR if errno_of(m.payload) == 0 => return Ok(dumped),
                NLMSG_ERROR => {
                    let refusal =
                        Refusal { what: what.to_string(), errno: errno_of(m.payload), message: None };
                    return Err(NetlinkError::Refused(vec![refusal]).into());
                }
                kind => each(kind, m.payload),
            }
        }
    }
}

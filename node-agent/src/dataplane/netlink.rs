//! Netlink attributes (type-length-value, 4-byte aligned) and the socket every netlink
//! client of the agent opens: nf_tables, IPVS over generic netlink, ctnetlink.

use super::{DataplaneError, NetlinkError};

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
    let _ = socket.set_rx_buf_sz(rx_buffer);
    Ok(socket)
}

//! The netfilter netlink socket every part of the codec writes to and reads from.

use netlink_sys::Socket;

/// A netfilter netlink socket.
pub struct NftNetlink {
    pub(super) socket: Socket,
    pub(super) seq: u32,
}

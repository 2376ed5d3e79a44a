//! The nfnetlink batch writer: netlink messages for the `nf_tables` subsystem, written into one
//! buffer between a batch-begin and a batch-end message, so the kernel applies them as one
//! transaction. Pure bytes, no socket.

/// `NFNL_SUBSYS_NFTABLES`.
const SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;

pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_CREATE: u16 = 0x400;
pub(super) const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

/// `NFT_MSG_*` message types.
#[allow(missing_docs)]
pub(super) mod msg {
    pub(in super::super) const NEWTABLE: u8 = 0;
    pub(in super::super) const DELTABLE: u8 = 2;
    pub(in super::super) const NEWCHAIN: u8 = 3;
    pub(in super::super) const DELCHAIN: u8 = 5;
    pub(in super::super) const NEWRULE: u8 = 6;
    pub(in super::super) const DELRULE: u8 = 8;
    pub(in super::super) const NEWSET: u8 = 9;
    pub(in super::super) const DELSET: u8 = 11;
    pub(in super::super) const NEWSETELEM: u8 = 12;
    pub(in super::super) const DELSETELEM: u8 = 14;
}

/// Where an open nested attribute starts (its length is patched when it closes).
#[derive(Debug, Clone, Copy)]
#[must_use]
pub(super) struct Nest(usize);

/// A batch under construction.
#[derive(Debug)]
pub(super) struct Batch {
    buf: Vec<u8>,
    seq: u32,
    /// Start of the open message.
    open: Option<usize>,
    /// What each message does, by sequence number (for error reports).
    what: Vec<(u32, String)>,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl Batch {
    /// A batch whose messages are numbered from `first_seq`.
    pub(super) fn new(first_seq: u32) -> Batch {
        Batch::with_capacity(first_seq, 4096)
    }

    /// The same, with room for `bytes` reserved up front (a large batch then grows without
    /// being copied; reserved pages it never writes cost no memory).
    pub(super) fn with_capacity(first_seq: u32, bytes: usize) -> Batch {
        let mut b = Batch { buf: Vec::with_capacity(bytes), seq: first_seq, open: None, what: Vec::new() };
        b.header(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0);
        b.buf.extend_from_slice(&SUBSYS_NFTABLES.to_be_bytes());
        b.close_message();
        b
    }

    fn header(&mut self, ty: u16, flags: u16, family: u8) {
        let start = self.buf.len();
        self.open = Some(start);
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        // nfgenmsg: family, version, resource id (filled by the caller for batch markers).
        self.buf.extend_from_slice(&[family, 0]);
    }

    fn close_message(&mut self) {
        if let Some(start) = self.open.take() {
            let len = (self.buf.len() - start) as u32;
            self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
            self.buf.resize(align4(self.buf.len()), 0);
            self.seq += 1;
        }
    }

    /// Starts an `nf_tables` message (the previous one, if open, is closed).
    pub(super) fn message(&mut self, ty: u8, family: u8, flags: u16, what: impl Into<String>) {
        self.close_message();
        self.what.push((self.seq, what.into()));
        self.header((SUBSYS_NFTABLES << 8) | u16::from(ty), NLM_F_REQUEST | NLM_F_ACK | flags, family);
        self.buf.extend_from_slice(&0u16.to_be_bytes());
    }

    /// Bytes of the message written so far (messages carry at most 64 KiB of nested data).
    pub(super) fn message_len(&self) -> usize {
        self.open.map_or(0, |s| self.buf.len() - s)
    }

    /// Closes the last message and appends batch-end; returns the bytes and the descriptions.
    pub(super) fn finish(mut self) -> (Vec<u8>, Vec<(u32, String)>) {
        self.close_message();
        self.header(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0);
        self.buf.extend_from_slice(&SUBSYS_NFTABLES.to_be_bytes());
        self.close_message();
        (self.buf, self.what)
    }

    /// Bytes written so far: where the next attribute starts.
    pub(super) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Rewrites the value of the big-endian u32 attribute that starts at `at` (a value known
    /// only once later messages are written, such as a set's size).
    pub(super) fn patch_be32(&mut self, at: usize, v: u32) {
        self.buf[at + 4..at + 8].copy_from_slice(&v.to_be_bytes());
    }

    /// An attribute with raw bytes.
    pub(super) fn put(&mut self, ty: u16, value: &[u8]) {
        let len = (4 + value.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    /// A NUL-terminated string attribute.
    pub(super) fn str(&mut self, ty: u16, s: &str) {
        let len = (4 + s.len() + 1) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    /// A big-endian u32 attribute (most `nf_tables` numbers).
    pub(super) fn be32(&mut self, ty: u16, v: u32) {
        self.put(ty, &v.to_be_bytes());
    }

    /// A big-endian u64 attribute (timeouts).
    pub(super) fn be64(&mut self, ty: u16, v: u64) {
        self.put(ty, &v.to_be_bytes());
    }

    /// Opens a nested attribute.
    pub(super) fn nest(&mut self, ty: u16) -> Nest {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        Nest(start)
    }

    /// Closes a nested attribute.
    pub(super) fn end(&mut self, n: Nest) {
        let len = (self.buf.len() - n.0) as u16;
        self.buf[n.0..n.0 + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_markers_and_messages() {
        let mut b = Batch::new(7);
        b.message(msg::NEWTABLE, 2, NLM_F_CREATE, "add table");
        b.str(1, "tideway");
        b.be32(2, 0);
        let n = b.nest(4);
        b.be32(1, 3);
        b.end(n);
        let (bytes, what) = b.finish();
        assert_eq!(what, vec![(8, "add table".to_string())]);
        // begin: 20 bytes, type 16, res_id 10 (big endian).
        assert_eq!(&bytes[..4], &20u32.to_ne_bytes());
        assert_eq!(&bytes[4..6], &16u16.to_ne_bytes());
        assert_eq!(&bytes[8..12], &7u32.to_ne_bytes());
        assert_eq!(&bytes[16..20], &[0, 0, 0, 10]);
        // the table message: type (10 << 8) | 0, family 2, seq 8, then attributes.
        let m = &bytes[20..];
        let len = u32::from_ne_bytes(m[..4].try_into().unwrap()) as usize;
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 10 << 8);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 8);
        assert_eq!(&m[16..20], &[2, 0, 0, 0]);
        assert_eq!(&m[20..32], &[12, 0, 1, 0, b't', b'i', b'd', b'e', b'w', b'a', b'y', 0]);
        assert_eq!(&m[32..40], &[8, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(&m[40..52], &[12, 0, 4, 0x80, 8, 0, 1, 0, 0, 0, 0, 3]);
        assert_eq!(len, 52);
        // end marker: seq 9.
        let e = &m[len..];
        assert_eq!(u16::from_ne_bytes([e[4], e[5]]), 17);
        assert_eq!(u32::from_ne_bytes(e[8..12].try_into().unwrap()), 9);
        assert_eq!(e.len(), 20);
    }
}

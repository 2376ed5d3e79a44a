//! Conntrack over one ctnetlink socket: UDP flows listed with a dump per family (filtered to
//! UDP by the kernel where it can, by us otherwise) and stale ones deleted in batches of
//! messages, instead of a `conntrack` process per flow.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_sys::Socket;
use tideway_core::conntrack::Flow;
use tideway_core::net::{IpFamily, Protocol};

use crate::dataplane::backend::{DataplaneError, NetlinkError, Refusal};
use crate::netlink::{
    Attrs, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_ERROR, attrs, dump, errno_of, messages, netlink_socket,
};

const NETLINK_NETFILTER: isize = 12;
const NLM_F_ACK: u16 = 4;
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const IPCTNL_MSG_CT_GET_STATS: u16 = 5;
const CTA_STATS_GLOBAL_ENTRIES: u16 = 1;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_FLAG_PROTO_NUM: u32 = 1 << 3;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const IPPROTO_UDP: u8 = 17;
/// Delete messages per datagram (each is about 100 bytes).
const BATCH: usize = 256;

fn af(family: IpFamily) -> u8 {
    super::family_number(family)
}

/// One ctnetlink message: header, `nfgenmsg` for `family`, attributes.
fn message(kind: u16, flags: u16, seq: u32, family: IpFamily, attrs: &Attrs) -> Vec<u8> {
    let len = 16 + 4 + attrs.0.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | kind).to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[af(family), 0, 0, 0]);
    m.extend_from_slice(&attrs.0);
    m
}

/// The tuple of `f`'s original direction: the attributes under `CTA_TUPLE_ORIG` (or, for
/// the other direction, `CTA_TUPLE_REPLY`).
fn tuple(f: &Flow) -> Attrs {
    let ip = match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Attrs::default().put(CTA_IP_V4_SRC, &s.octets()).put(CTA_IP_V4_DST, &d.octets())
        }
        (s, d) => Attrs::default().put(CTA_IP_V6_SRC, &v6(s).octets()).put(CTA_IP_V6_DST, &v6(d).octets()),
    };
    let proto = Attrs::default()
        .put(CTA_PROTO_NUM, &[IPPROTO_UDP])
        .be16(CTA_PROTO_SRC_PORT, f.sport)
        .be16(CTA_PROTO_DST_PORT, f.dport);
    Attrs::default().nested(CTA_TUPLE_IP, ip).nested(CTA_TUPLE_PROTO, proto)
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(v) => v,
        IpAddr::V4(v) => v.to_ipv6_mapped(),
    }
}

/// (source, destination, source port, destination port, protocol) of a tuple attribute.
fn parse_tuple(buf: &[u8]) -> Option<(IpAddr, IpAddr, u16, u16, u8)> {
    let (mut src, mut dst, mut sport, mut dport, mut proto) = (None, None, None, None, None);
    for (kind, payload) in attrs(buf) {
        match kind {
            CTA_TUPLE_IP => {
                for (k, p) in attrs(payload) {
                    let v4 = || <[u8; 4]>::try_from(p).ok().map(|o| IpAddr::V4(Ipv4Addr::from(o)));
                    let v6 = || <[u8; 16]>::try_from(p).ok().map(|o| IpAddr::V6(Ipv6Addr::from(o)));
                    match k {
                        CTA_IP_V4_SRC => src = v4(),
                        CTA_IP_V4_DST => dst = v4(),
                        CTA_IP_V6_SRC => src = v6(),
                        CTA_IP_V6_DST => dst = v6(),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (k, p) in attrs(payload) {
                    let port = || <[u8; 2]>::try_from(p).ok().map(u16::from_be_bytes);
                    match k {
                        CTA_PROTO_NUM => proto = p.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = port(),
                        CTA_PROTO_DST_PORT => dport = port(),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((src?, dst?, sport?, dport?, proto?))
}

/// The UDP flow a conntrack message (after its `nfgenmsg`) describes.
fn parse_flow(payload: &[u8]) -> Option<Flow> {
    parse_entry(payload).and_then(|(proto, flow)| (proto == IPPROTO_UDP).then_some(flow))
}

/// The IP protocol number and the flow of a conntrack message (after its `nfgenmsg`).
fn parse_entry(payload: &[u8]) -> Option<(u8, Flow)> {
    let (mut orig, mut reply) = (None, None);
    for (kind, p) in attrs(payload.get(4..)?) {
        match kind {
            CTA_TUPLE_ORIG => orig = parse_tuple(p),
            CTA_TUPLE_REPLY => reply = parse_tuple(p),
            _ => {}
        }
    }
    let (src, dst, sport, dport, proto) = orig?;
    let (reply_src, _, reply_sport, _, _) = reply?;
    Some((proto, Flow { src, dst, sport, dport, reply_src, reply_sport }))
}

/// A ctnetlink socket.
pub struct Conntrack {
    socket: Socket,
    seq: u32,
}

impl Conntrack {
    /// Opens the socket.
    pub fn open() -> Result<Self, DataplaneError> {
        Ok(Conntrack { socket: netlink_socket(NETLINK_NETFILTER, 4 << 20)?, seq: 1 })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Every UDP flow of `family`: a dump the kernel filters to UDP (kernels before 5.8
    /// ignore the filter; the rest is dropped here).
    pub fn udp_flows(&mut self, family: IpFamily) -> Result<Vec<Flow>, DataplaneError> {
        let udp = Attrs::default().put(CTA_PROTO_NUM, &[IPPROTO_UDP]);
        let filter = Attrs::default()
            .nested(CTA_TUPLE_ORIG, Attrs::default().nested(CTA_TUPLE_PROTO, udp))
            .nested(CTA_FILTER, Attrs::default().u32(CTA_FILTER_ORIG_FLAGS, CTA_FILTER_FLAG_PROTO_NUM));
        let seq = self.next_seq();
        let m = message(IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, family, &filter);
        let mut flows = Vec::new();
        let what = format!("dumping {} conntrack entries", family.label());
        dump(&self.socket, &m, seq, &what, |_, payload| flows.extend(parse_flow(payload)))?;
        Ok(flows)
    }

    /// How many entries conntrack holds in this network namespace: one short request, where
    /// a dump walks the whole table the kernel shares between namespaces.
    pub fn count(&mut self) -> Result<u32, DataplaneError> {
        let seq = self.next_seq();
        let kind = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET_STATS;
        let m =
            message(IPCTNL_MSG_CT_GET_STATS, NLM_F_REQUEST | NLM_F_ACK, seq, IpFamily::V4, &Attrs::default());
        let mut count = None;
        dump(&self.socket, &m, seq, "reading the conntrack count", |k, payload| {
            let found = attrs(payload.get(4..).unwrap_or_default())
                .into_iter()
                .find(|(a, _)| *a == CTA_STATS_GLOBAL_ENTRIES);
            if k == kind
                && let Some((_, p)) = found
            {
                count = <[u8; 4]>::try_from(p).ok().map(u32::from_be_bytes);
            }
        })?;
        count.ok_or_else(|| NetlinkError::Protocol("no conntrack count in the kernel's answer".into()).into())
    }

    /// Every flow of `family` whose protocol is TCP, UDP or SCTP, in one dump (the kernel
    /// walks its whole conntrack table for each dump, whatever the filter).
    pub fn every_flow(&mut self, family: IpFamily) -> Result<Vec<(Protocol, Flow)>, DataplaneError> {
        let seq = self.next_seq();
        let m = message(IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, family, &Attrs::default());
        let mut flows = Vec::new();
        let what = format!("dumping {} conntrack entries", family.label());
        dump(&self.socket, &m, seq, &what, |_, payload| {
            flows.extend(parse_entry(payload).and_then(|(n, f)| Some((Protocol::of_number(n)?, f))));
        })?;
        Ok(flows)
    }

    /// Deletes `flows`, in batches; returns how many the kernel deleted (a flow that expired
    /// meanwhile is not an error).
    pub fn delete(&mut self, flows: &[Flow]) -> Result<usize, DataplaneError> {
        let mut deleted = 0;
        for chunk in flows.chunks(BATCH) {
            let mut datagram = Vec::new();
            let first = self.seq.wrapping_add(1);
            for f in chunk {
                let t = Attrs::default().nested(CTA_TUPLE_ORIG, tuple(f));
                let seq = self.next_seq();
                datagram.extend(message(
                    IPCTNL_MSG_CT_DELETE,
                    NLM_F_REQUEST | NLM_F_ACK,
                    seq,
                    IpFamily::of(&f.dst),
                    &t,
                ));
            }
            self.socket.send(&datagram, 0).map_err(NetlinkError::socket("deleting conntrack entries"))?;
            let mut acked = 0;
            while acked < chunk.len() {
                let (buf, _) =
                    self.socket.recv_from_full().map_err(NetlinkError::socket("reading conntrack acks"))?;
                for m in messages(&buf) {
                    if m.kind != NLMSG_ERROR || m.seq.wrapping_sub(first) as usize >= chunk.len() {
                        continue;
                    }
                    acked += 1;
                    match errno_of(m.payload) {
                        0 => deleted += 1,
                        2 => {} // ENOENT: it expired meanwhile.
                        errno => {
                            let what = "deleting a conntrack entry".to_string();
                            return Err(
                                NetlinkError::Refused(vec![Refusal { what, errno, message: None }]).into()
                            );
                        }
                    }
                }
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(src: &str, dst: &str, reply: &str) -> Flow {
        Flow {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            sport: 40000,
            dport: 53,
            reply_src: reply.parse().unwrap(),
            reply_sport: 5353,
        }
    }

    /// A conntrack message as the kernel sends it: both tuples of `f`.
    fn kernel_message(f: &Flow) -> Vec<u8> {
        let reply = Flow { src: f.reply_src, dst: f.src, sport: f.reply_sport, dport: f.sport, ..*f };
        let a = Attrs::default().nested(CTA_TUPLE_ORIG, tuple(f)).nested(CTA_TUPLE_REPLY, tuple(&reply));
        message(IPCTNL_MSG_CT_GET, 0, 7, IpFamily::of(&f.dst), &a)
    }

    #[test]
    fn flows_read_back_from_their_messages_in_both_families() {
        for f in
            [flow("10.244.1.9", "10.96.0.53", "10.244.2.5"), flow("fd00::9", "fd00:96::53", "fd00:244::5")]
        {
            let m = kernel_message(&f);
            let parsed: Vec<Flow> = messages(&m).into_iter().filter_map(|m| parse_flow(m.payload)).collect();
            assert_eq!(parsed, [f]);
        }
    }

    #[test]
    fn a_delete_names_the_original_tuple() {
        let f = flow("10.244.1.9", "10.96.0.53", "10.244.2.5");
        let t = Attrs::default().nested(CTA_TUPLE_ORIG, tuple(&f));
        let (kind, inner) = attrs(&t.0).next().unwrap();
        assert_eq!(kind, CTA_TUPLE_ORIG);
        assert_eq!(parse_tuple(inner), Some((f.src, f.dst, 40000, 53, IPPROTO_UDP)));
        let m = message(IPCTNL_MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, 9, IpFamily::V4, &t);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), (1 << 8) | 2, "ctnetlink subsystem, delete");
        assert_eq!(m[16], 2, "AF_INET");
    }
}

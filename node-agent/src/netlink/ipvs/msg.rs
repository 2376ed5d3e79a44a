//! Netlink and generic-netlink message encoding and decoding for the IPVS family: pure bytes,
//! unit-tested without a kernel.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::netlink::align4;
pub(crate) use crate::netlink::{Attrs, attrs};

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;

pub(crate) const GENL_ID_CTRL: u16 = 16;
pub(crate) const CTRL_CMD_GETFAMILY: u8 = 3;
pub(crate) const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub(crate) const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// IPVS genetlink version.
pub(crate) const IPVS_GENL_VERSION: u8 = 1;

/// IPVS commands (`enum` in linux/ip_vs.h).
#[allow(missing_docs)]
pub(crate) mod cmd {
    pub(crate) const NEW_SERVICE: u8 = 1;
    pub(crate) const SET_SERVICE: u8 = 2;
    pub(crate) const DEL_SERVICE: u8 = 3;
    pub(crate) const GET_SERVICE: u8 = 4;
    pub(crate) const NEW_DEST: u8 = 5;
    pub(crate) const SET_DEST: u8 = 6;
    pub(crate) const DEL_DEST: u8 = 7;
    pub(crate) const GET_DEST: u8 = 8;
    pub(crate) const SET_CONFIG: u8 = 12;
    pub(crate) const FLUSH: u8 = 17;
}

/// Top-level attributes.
pub(crate) const ATTR_SERVICE: u16 = 1;
pub(crate) const ATTR_DEST: u16 = 2;
pub(crate) const ATTR_TIMEOUT_TCP: u16 = 4;
pub(crate) const ATTR_TIMEOUT_TCP_FIN: u16 = 5;
pub(crate) const ATTR_TIMEOUT_UDP: u16 = 6;

mod svc {
    pub(super) const AF: u16 = 1;
    pub(super) const PROTOCOL: u16 = 2;
    pub(super) const ADDR: u16 = 3;
    pub(super) const PORT: u16 = 4;
    pub(super) const SCHED_NAME: u16 = 6;
    pub(super) const FLAGS: u16 = 7;
    pub(super) const TIMEOUT: u16 = 8;
    pub(super) const NETMASK: u16 = 9;
}

mod dest {
    pub(super) const ADDR: u16 = 1;
    pub(super) const PORT: u16 = 2;
    pub(super) const FWD_METHOD: u16 = 3;
    pub(super) const WEIGHT: u16 = 4;
    pub(super) const U_THRESH: u16 = 5;
    pub(super) const L_THRESH: u16 = 6;
    pub(super) const ACTIVE_CONNS: u16 = 7;
    pub(super) const INACT_CONNS: u16 = 8;
    pub(super) const ADDR_FAMILY: u16 = 11;
}

/// `IP_VS_SVC_F_PERSISTENT`.
pub(crate) const F_PERSISTENT: u32 = 0x1;
/// `IP_VS_SVC_F_SCHED1` (`mh-port` with the mh scheduler).
pub(crate) const F_SCHED1: u32 = 0x8;
/// `IP_VS_CONN_F_MASQ`: NAT forwarding.
const FWD_MASQ: u32 = 0;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

fn addr_bytes(ip: &IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => b[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => b.copy_from_slice(&v6.octets()),
    }
    b
}

fn af(ip: &IpAddr) -> u16 {
    if ip.is_ipv4() { AF_INET } else { AF_INET6 }
}

/// A service selector (address family, protocol, address, port).
pub(crate) fn service_key(ip: &IpAddr, protocol: u8, port: u16) -> Attrs {
    Attrs::default()
        .u16(svc::AF, af(ip))
        .u16(svc::PROTOCOL, protocol.into())
        .put(svc::ADDR, &addr_bytes(ip))
        .be16(svc::PORT, port)
}

/// A full service entry, for NEW_SERVICE / SET_SERVICE.
pub(crate) fn service_full(
    ip: &IpAddr,
    protocol: u8,
    port: u16,
    scheduler: &str,
    flags: u32,
    timeout: u32,
) -> Attrs {
    let mut f = flags.to_ne_bytes().to_vec();
    f.extend_from_slice(&u32::MAX.to_ne_bytes());
    let netmask: u32 = if ip.is_ipv4() { u32::MAX } else { 128 };
    service_key(ip, protocol, port)
        .string(svc::SCHED_NAME, scheduler)
        .put(svc::FLAGS, &f)
        .u32(svc::TIMEOUT, timeout)
        .u32(svc::NETMASK, netmask)
}

/// A full destination entry (NAT forwarding).
pub(crate) fn dest_full(ip: &IpAddr, port: u16, weight: u32) -> Attrs {
    Attrs::default()
        .put(dest::ADDR, &addr_bytes(ip))
        .be16(dest::PORT, port)
        .u32(dest::FWD_METHOD, FWD_MASQ)
        .u32(dest::WEIGHT, weight)
        .u32(dest::U_THRESH, 0)
        .u32(dest::L_THRESH, 0)
        .u16(dest::ADDR_FAMILY, af(ip))
}

/// A destination selector.
pub(crate) fn dest_key(ip: &IpAddr, port: u16) -> Attrs {
    Attrs::default().put(dest::ADDR, &addr_bytes(ip)).be16(dest::PORT, port).u16(dest::ADDR_FAMILY, af(ip))
}

/// A whole netlink message with a generic-netlink header.
pub(crate) fn message(family: u16, flags: u16, seq: u32, command: u8, version: u8, attrs: &Attrs) -> Vec<u8> {
    let len = 16 + 4 + attrs.0.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[command, version, 0, 0]);
    m.extend_from_slice(&attrs.0);
    m
}

/// One message of a received datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply<'a> {
    /// An ack (errno 0) or an error (negative errno).
    Error(i32),
    /// End of a dump.
    Done,
    /// A generic-netlink payload (after the 4-byte genl header): its attributes.
    Data(&'a [u8]),
}

/// Splits a datagram into messages.
pub(crate) fn replies(buf: &[u8]) -> Result<Vec<Reply<'_>>, String> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().map_err(|_| "short header")?) as usize;
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        if len < 16 || off + len > buf.len() {
            return Err(format!("bad message length {len}"));
        }
        let payload = &buf[off + 16..off + len];
        out.push(match ty {
            NLMSG_ERROR => {
                let errno =
                    payload.get(..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4]))).unwrap_or(0);
                Reply::Error(errno)
            }
            NLMSG_DONE => Reply::Done,
            _ => Reply::Data(payload.get(4..).unwrap_or(&[])),
        });
        off += align4(len);
    }
    Ok(out)
}

fn find(buf: &[u8], ty: u16) -> Option<&[u8]> {
    attrs(buf).find(|(t, _)| *t == ty).map(|(_, v)| v)
}

fn get_u16(buf: &[u8], ty: u16) -> Option<u16> {
    find(buf, ty).and_then(|v| v.get(..2)).map(|b| u16::from_ne_bytes([b[0], b[1]]))
}

fn get_u32(buf: &[u8], ty: u16) -> Option<u32> {
    find(buf, ty).and_then(|v| v.get(..4)).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn get_addr(buf: &[u8], ty: u16, family: u16) -> Option<IpAddr> {
    let v = find(buf, ty)?;
    if family == AF_INET {
        let b: [u8; 4] = v.get(..4)?.try_into().ok()?;
        Some(IpAddr::V4(Ipv4Addr::from(b)))
    } else {
        let b: [u8; 16] = v.get(..16)?.try_into().ok()?;
        Some(IpAddr::V6(Ipv6Addr::from(b)))
    }
}

/// A decoded virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceEntry {
    pub(crate) ip: IpAddr,
    pub(crate) protocol: u8,
    pub(crate) port: u16,
    pub(crate) scheduler: String,
    pub(crate) flags: u32,
    pub(crate) timeout: u32,
}

/// Decodes a GET_SERVICE reply payload.
pub(crate) fn decode_service(payload: &[u8]) -> Option<ServiceEntry> {
    let s = find(payload, ATTR_SERVICE)?;
    let family = get_u16(s, svc::AF)?;
    let scheduler =
        find(s, svc::SCHED_NAME).map(|v| String::from_utf8_lossy(v).trim_end_matches('\0').to_string())?;
    Some(ServiceEntry {
        ip: get_addr(s, svc::ADDR, family)?,
        protocol: get_u16(s, svc::PROTOCOL)? as u8,
        port: find(s, svc::PORT).and_then(|v| v.get(..2)).map(|b| u16::from_be_bytes([b[0], b[1]]))?,
        scheduler,
        flags: get_u32(s, svc::FLAGS).unwrap_or(0),
        timeout: get_u32(s, svc::TIMEOUT).unwrap_or(0),
    })
}

/// A decoded real server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DestEntry {
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) weight: u32,
    pub(crate) active: u32,
    pub(crate) inactive: u32,
}

/// Decodes a GET_DEST reply payload (`family` of the service, used when the kernel omits the
/// destination family).
pub(crate) fn decode_dest(payload: &[u8], family: u16) -> Option<DestEntry> {
    let d = find(payload, ATTR_DEST)?;
    let fam = get_u16(d, dest::ADDR_FAMILY).unwrap_or(family);
    Some(DestEntry {
        ip: get_addr(d, dest::ADDR, fam)?,
        port: find(d, dest::PORT).and_then(|v| v.get(..2)).map(|b| u16::from_be_bytes([b[0], b[1]]))?,
        weight: get_u32(d, dest::WEIGHT).unwrap_or(0),
        active: get_u32(d, dest::ACTIVE_CONNS).unwrap_or(0),
        inactive: get_u32(d, dest::INACT_CONNS).unwrap_or(0),
    })
}

/// The family id in a CTRL_CMD_GETFAMILY reply payload.
pub(crate) fn decode_family_id(payload: &[u8]) -> Option<u16> {
    get_u16(payload, CTRL_ATTR_FAMILY_ID)
}

/// The address family code of an address.
pub(crate) fn family_of(ip: &IpAddr) -> u16 {
    af(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_aligned_and_round_trip() {
        let a = Attrs::default().string(6, "rr").u32(8, 10800).be16(4, 80);
        // "rr\0" = 3 bytes -> 7 with header -> padded to 8.
        assert_eq!(a.0.len(), 8 + 8 + 8);
        let parsed: Vec<(u16, Vec<u8>)> = attrs(&a.0).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(parsed[0], (6, b"rr\0".to_vec()));
        assert_eq!(parsed[2], (4, vec![0, 80]));
    }

    fn reply(payload_attrs: Attrs) -> Vec<u8> {
        // A fake kernel reply: nlmsghdr + genlmsghdr + attributes.
        message(99, 0, 1, cmd::NEW_SERVICE, IPVS_GENL_VERSION, &payload_attrs)
    }

    #[test]
    fn services_and_destinations_decode() {
        let ip: IpAddr = "10.96.0.10".parse().unwrap();
        let m =
            reply(Attrs::default().nested(ATTR_SERVICE, service_full(&ip, 6, 80, "rr", F_PERSISTENT, 600)));
        let Reply::Data(payload) = replies(&m).unwrap()[0] else { panic!("data") };
        let s = decode_service(payload).unwrap();
        assert_eq!(
            (s.ip, s.protocol, s.port, s.scheduler.as_str(), s.flags, s.timeout),
            (ip, 6, 80, "rr", 1, 600)
        );

        let ep: IpAddr = "fd00::5".parse().unwrap();
        let d = reply(Attrs::default().nested(ATTR_DEST, dest_full(&ep, 8080, 1).u32(7, 3).u32(8, 2)));
        let Reply::Data(payload) = replies(&d).unwrap()[0] else { panic!("data") };
        let d = decode_dest(payload, AF_INET).unwrap();
        assert_eq!((d.ip, d.port, d.weight, d.active, d.inactive), (ep, 8080, 1, 3, 2));
    }

    #[test]
    fn errors_and_done_are_recognised() {
        let mut buf = Vec::new();
        for (ty, errno) in [(NLMSG_ERROR, -17i32), (NLMSG_DONE, 0)] {
            buf.extend_from_slice(&20u32.to_ne_bytes());
            buf.extend_from_slice(&ty.to_ne_bytes());
            buf.extend_from_slice(&[0; 10]);
            buf.extend_from_slice(&errno.to_ne_bytes());
        }
        assert_eq!(replies(&buf).unwrap(), vec![Reply::Error(-17), Reply::Done]);
        assert!(replies(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}

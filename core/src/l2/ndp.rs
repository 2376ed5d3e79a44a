//! IPv6 neighbour discovery (RFC 4861) for announced addresses: solicitations in,
//! advertisements out (answers to the asker, and unsolicited ones to all nodes with the
//! override flag on takeover, which update the neighbours' existing entries).

use std::net::Ipv6Addr;

use super::Mac;

const ETH_P_IPV6: u16 = 0x86dd;
const ICMPV6: u8 = 58;
const SOLICITATION: u8 = 135;
const ADVERTISEMENT: u8 = 136;
/// Every node on the link.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// A neighbour solicitation seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Solicitation {
    /// Who asks (the frame's source).
    pub sender_mac: Mac,
    /// Its address (`::` during duplicate address detection).
    pub sender_ip: Ipv6Addr,
    /// The address asked about.
    pub target: Ipv6Addr,
}

fn ip6_at(b: &[u8], i: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[i..i + 16]);
    Ipv6Addr::from(o)
}

/// The solicited-node multicast group of `ip` (`ff02::1:ffXX:XXXX`): solicitations for it are
/// sent there, so an announcer joins it.
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let o = ip.octets();
    Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(o[13]), u16::from_be_bytes([o[14], o[15]]))
}

/// The Ethernet address of multicast group `group` (`33:33` and its last four bytes).
pub fn multicast_mac(group: Ipv6Addr) -> Mac {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// A neighbour solicitation in `frame` (Ethernet, IPv6 without extension headers, ICMPv6
/// with hop limit 255 as RFC 4861 requires), if it is one.
pub fn parse_solicitation(frame: &[u8]) -> Option<Solicitation> {
    if frame.len() < 14 + 40 + 24 || u16::from_be_bytes([frame[12], frame[13]]) != ETH_P_IPV6 {
        return None;
    }
    let ip = &frame[14..];
    if ip[0] >> 4 != 6 || ip[6] != ICMPV6 || ip[7] != 255 {
        return None;
    }
    let icmp = &ip[40..];
    if icmp[0] != SOLICITATION || icmp[1] != 0 {
        return None;
    }
    let mut sender_mac = [0u8; 6];
    sender_mac.copy_from_slice(&frame[6..12]);
    Some(Solicitation { sender_mac, sender_ip: ip6_at(ip, 8), target: ip6_at(icmp, 8) })
}

/// The ICMPv6 checksum of `message` from `src` to `dst`.
fn checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(message.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(message);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A neighbour advertisement saying `target` is at `our_mac`: to the asker when `to` is given
/// (solicited), else to all nodes (unsolicited); the override flag is set either way.
pub fn advertisement(target: Ipv6Addr, our_mac: Mac, to: Option<(Mac, Ipv6Addr)>) -> Vec<u8> {
    let (dst_mac, dst_ip, solicited) = match to {
        // A solicitation from `::` (duplicate address detection) is answered to all nodes.
        Some((mac, ip)) if !ip.is_unspecified() => (mac, ip, true),
        _ => (multicast_mac(ALL_NODES), ALL_NODES, false),
    };
    let mut icmp = vec![ADVERTISEMENT, 0, 0, 0];
    icmp.extend_from_slice(&[if solicited { 0x60 } else { 0x20 }, 0, 0, 0]);
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[2, 1]); // target link-layer address, 8 bytes
    icmp.extend_from_slice(&our_mac);
    frame((our_mac, target), (dst_mac, dst_ip), icmp)
}

/// An Ethernet frame carrying the ICMPv6 message `icmp` (its checksum filled in) from `src`
/// to `dst`, with hop limit 255 as neighbour discovery requires.
fn frame(src: (Mac, Ipv6Addr), dst: (Mac, Ipv6Addr), mut icmp: Vec<u8>) -> Vec<u8> {
    let sum = checksum(src.1, dst.1, &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::with_capacity(14 + 40 + icmp.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&src.1.octets());
    f.extend_from_slice(&dst.1.octets());
    f.extend_from_slice(&icmp);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Mac = [2, 0, 0, 0, 0, 1];
    const PC: Mac = [2, 0, 0, 0, 0, 0x64];

    fn ip(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// A solicitation as a host sends it (to the target's solicited-node group).
    fn solicitation(from: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
        let group = solicited_node(target);
        let mut icmp = vec![SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&target.octets());
        icmp.extend_from_slice(&[1, 1]);
        icmp.extend_from_slice(&PC);
        frame((PC, from), (multicast_mac(group), group), icmp)
    }

    #[test]
    fn solicited_node_groups_and_their_macs() {
        let g = solicited_node(ip("fd00:18::c8"));
        assert_eq!(g, ip("ff02::1:ff00:c8"));
        assert_eq!(multicast_mac(g), [0x33, 0x33, 0xff, 0, 0, 0xc8]);
    }

    #[test]
    fn answers_a_solicitation_to_the_asker_with_a_valid_checksum() {
        let (pc, vip) = (ip("fd00:18::100"), ip("fd00:18::c8"));
        let ns = parse_solicitation(&solicitation(pc, vip)).expect("a solicitation");
        assert_eq!(ns, Solicitation { sender_mac: PC, sender_ip: pc, target: vip });
        let na = advertisement(ns.target, ME, Some((ns.sender_mac, ns.sender_ip)));
        assert_eq!(&na[0..6], &PC);
        assert_eq!((na[14 + 7], na[14 + 40]), (255, ADVERTISEMENT), "hop limit 255, type 136");
        assert_eq!(na[14 + 40 + 4], 0x60, "solicited and override");
        assert_eq!(ip6_at(&na, 14 + 8), vip, "sent from the announced address");
        assert_eq!(ip6_at(&na, 14 + 40 + 8), vip, "target");
        assert_eq!(&na[na.len() - 6..], &ME, "target link-layer address option");
        // A correct checksum sums (with itself) to zero.
        assert_eq!(checksum(vip, pc, &na[14 + 40..]), 0);
        assert_eq!(parse_solicitation(&na), None, "an advertisement is not a solicitation");
    }

    #[test]
    fn unsolicited_advertisements_go_to_all_nodes_with_override() {
        let vip = ip("fd00:18::c8");
        let na = advertisement(vip, ME, None);
        assert_eq!(&na[0..6], &multicast_mac(ALL_NODES));
        assert_eq!(ip6_at(&na, 14 + 24), ALL_NODES);
        assert_eq!(na[14 + 40 + 4], 0x20, "override, not solicited");
        assert_eq!(checksum(vip, ALL_NODES, &na[14 + 40..]), 0);
        let dad = advertisement(vip, ME, Some((PC, Ipv6Addr::UNSPECIFIED)));
        assert_eq!(ip6_at(&dad, 14 + 24), ALL_NODES, "duplicate address detection is answered to all");
        let mut hop = solicitation(ip("fd00:18::100"), vip);
        hop[14 + 7] = 64;
        assert_eq!(parse_solicitation(&hop), None, "not from the link");
    }
}

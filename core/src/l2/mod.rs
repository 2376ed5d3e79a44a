//! Layer-2 announcement, the decision half: which addresses this node announces, the ARP and
//! neighbour-discovery frames it answers with, and when it announces unasked. The agent only
//! moves frames.
//!
//! ```text
//!  L2Announcements naming this node --announced_on--> addresses to answer for, per interface
//!        (the pool's `l2.interfaces`; none listed: the node-network interface)
//!        --rp_filter::dropping_interfaces--> those whose kernel drops what follows (reported)
//!  IPv4: frame in --parse_arp--> request for one of them? --arp_reply--> frame out
//!        takeover / periodic --GarpSchedule--> gratuitous_arp (request and reply, broadcast)
//!  IPv6: frame in --ndp::parse_solicitation--> --ndp::advertisement(solicited)--> frame out
//!        takeover / periodic --GarpSchedule--> ndp::advertisement(unsolicited, to all nodes)
//! ```
//! MetalLB sends gratuitous ARP for 5 s after a takeover and then stays silent, so a switch
//! whose table ages out first black-holes traffic (metallb#2910); here announcements repeat
//! every [`GarpSchedule::PERIODIC`] as well.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::model::L2Announcement;

pub mod ndp;
pub mod rp_filter;

/// A MAC address.
pub type Mac = [u8; 6];

/// The broadcast MAC.
pub const BROADCAST: Mac = [0xff; 6];

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IP: u16 = 0x0800;
const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;

/// The addresses `node` must answer for (ARP for IPv4, neighbour discovery for IPv6).
pub fn announced_by<'a>(
    node: &str,
    announcements: impl IntoIterator<Item = &'a L2Announcement>,
) -> BTreeSet<IpAddr> {
    announcements
        .into_iter()
        .filter(|a| a.node.as_deref() == Some(node))
        .flat_map(|a| a.ips.iter().copied())
        .collect()
}

/// The addresses `node` must answer for on each interface: on the interfaces its pool lists
/// (`l2.interfaces`, MetalLB's L2Advertisement `interfaces`), else on `node_interface`, the
/// one holding the node's address. Requests arriving elsewhere go unanswered.
pub fn announced_on<'a>(
    node: &str,
    announcements: impl IntoIterator<Item = &'a L2Announcement>,
    node_interface: &str,
) -> BTreeMap<String, BTreeSet<IpAddr>> {
    let mut on: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
    for a in announcements.into_iter().filter(|a| a.node.as_deref() == Some(node)) {
        let default = [node_interface.to_string()];
        let interfaces = if a.interfaces.is_empty() { &default[..] } else { &a.interfaces[..] };
        for interface in interfaces {
            on.entry(interface.clone()).or_default().extend(a.ips.iter().copied());
        }
    }
    on
}

/// The interfaces `node` was asked to announce on (by name, in its pools' `l2.interfaces`) or
/// found missing `before`, that do not exist now (`exists` asks the node), sorted: reported in
/// its NodeProxyState so the operator chooses another node, and never announced on. Names
/// found missing stay watched until they appear, whether or not any address still asks for
/// them, so a node is left out before the next address of the pool is placed.
pub fn missing_interfaces<'a>(
    node: &str,
    announcements: impl IntoIterator<Item = &'a L2Announcement>,
    before: &[String],
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let listed = announcements
        .into_iter()
        .filter(|a| a.node.as_deref() == Some(node))
        .flat_map(|a| a.interfaces.iter().map(String::as_str));
    let names: BTreeSet<&str> = listed.chain(before.iter().map(String::as_str)).collect();
    names.into_iter().filter(|n| !exists(n)).map(str::to_string).collect()
}

/// An ARP request seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRequest {
    /// Who asks.
    pub sender_mac: Mac,
    /// Its address.
    pub sender_ip: Ipv4Addr,
    /// The address asked about.
    pub target_ip: Ipv4Addr,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn ip_at(b: &[u8], i: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3])
}

fn mac_at(b: &[u8], i: usize) -> Mac {
    let mut m = [0; 6];
    m.copy_from_slice(&b[i..i + 6]);
    m
}

/// An Ethernet/IPv4 ARP request in `frame` (with its Ethernet header), if it is one.
pub fn parse_arp(frame: &[u8]) -> Option<ArpRequest> {
    if frame.len() < 42 || u16_at(frame, 12) != ETH_P_ARP {
        return None;
    }
    let arp = &frame[14..];
    // Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses, a request.
    if u16_at(arp, 0) != 1
        || u16_at(arp, 2) != ETH_P_IP
        || arp[4] != 6
        || arp[5] != 4
        || u16_at(arp, 6) != ARP_REQUEST
    {
        return None;
    }
    Some(ArpRequest { sender_mac: mac_at(arp, 8), sender_ip: ip_at(arp, 14), target_ip: ip_at(arp, 24) })
}

fn arp_frame(dst: Mac, src: Mac, op: u16, sender: (Mac, Ipv4Addr), target: (Mac, Ipv4Addr)) -> [u8; 42] {
    let mut f = [0u8; 42];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ETH_P_ARP.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes());
    f[16..18].copy_from_slice(&ETH_P_IP.to_be_bytes());
    f[18] = 6;
    f[19] = 4;
    f[20..22].copy_from_slice(&op.to_be_bytes());
    f[22..28].copy_from_slice(&sender.0);
    f[28..32].copy_from_slice(&sender.1.octets());
    f[32..38].copy_from_slice(&target.0);
    f[38..42].copy_from_slice(&target.1.octets());
    f
}

/// The reply to `req`: `ip` is at `our_mac`, sent to the asker only.
pub fn arp_reply(req: &ArpRequest, our_mac: Mac) -> [u8; 42] {
    arp_frame(req.sender_mac, our_mac, ARP_REPLY, (our_mac, req.target_ip), (req.sender_mac, req.sender_ip))
}

/// Gratuitous ARP for `ip` at `our_mac`, broadcast: a request and a reply (hosts differ in
/// which one they take to update an existing neighbour entry; Linux takes either).
pub fn gratuitous_arp(ip: Ipv4Addr, our_mac: Mac) -> [[u8; 42]; 2] {
    [
        arp_frame(BROADCAST, our_mac, ARP_REQUEST, (our_mac, ip), ([0; 6], ip)),
        arp_frame(BROADCAST, our_mac, ARP_REPLY, (our_mac, ip), (BROADCAST, ip)),
    ]
}

/// When to send gratuitous ARP for one address: a burst after this node takes it over (one at
/// once, then every 1.1 s for 5 s, as MetalLB), then every [`GarpSchedule::PERIODIC`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GarpSchedule {
    next: Duration,
}

impl GarpSchedule {
    /// Interval of the burst after a takeover.
    pub const BURST_EVERY: Duration = Duration::from_millis(1100);
    /// Length of the burst.
    pub const BURST_FOR: Duration = Duration::from_secs(5);
    /// Interval afterwards.
    pub const PERIODIC: Duration = Duration::from_secs(30);

    /// A schedule for an address taken over at time zero: due at once.
    pub fn new() -> Self {
        GarpSchedule { next: Duration::ZERO }
    }

    /// True when a gratuitous ARP is due at `since_takeover`; advances the schedule.
    pub fn due(&mut self, since_takeover: Duration) -> bool {
        if since_takeover < self.next {
            return false;
        }
        let step = if since_takeover < Self::BURST_FOR { Self::BURST_EVERY } else { Self::PERIODIC };
        self.next = since_takeover + step;
        true
    }
}

impl Default for GarpSchedule {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServiceName;

    const ME: Mac = [2, 0, 0, 0, 0, 1];
    const PC: Mac = [2, 0, 0, 0, 0, 0x64];

    fn request(target: Ipv4Addr) -> [u8; 42] {
        arp_frame(BROADCAST, PC, ARP_REQUEST, (PC, Ipv4Addr::new(172, 18, 0, 100)), ([0; 6], target))
    }

    #[test]
    fn answers_requests_with_our_mac_to_the_asker() {
        let vip = Ipv4Addr::new(172, 18, 255, 200);
        let req = parse_arp(&request(vip)).expect("an ARP request");
        assert_eq!(
            req,
            ArpRequest { sender_mac: PC, sender_ip: Ipv4Addr::new(172, 18, 0, 100), target_ip: vip }
        );
        let reply = arp_reply(&req, ME);
        assert_eq!(&reply[0..6], &PC, "unicast to the asker");
        assert_eq!(parse_arp(&reply), None, "a reply is not a request");
        assert_eq!(u16_at(&reply, 20), ARP_REPLY);
        assert_eq!((mac_at(&reply, 22), ip_at(&reply, 28)), (ME, vip));
        assert_eq!((mac_at(&reply, 32), ip_at(&reply, 38)), (PC, Ipv4Addr::new(172, 18, 0, 100)));
        // Not ARP, too short, or IPv6 neighbour traffic: ignored.
        let mut ip = request(vip);
        ip[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        assert_eq!(parse_arp(&ip), None);
        assert_eq!(parse_arp(&request(vip)[..40]), None);
    }

    #[test]
    fn gratuitous_arp_says_ip_is_at_our_mac_to_everyone() {
        let vip = Ipv4Addr::new(172, 18, 255, 201);
        for f in gratuitous_arp(vip, ME) {
            assert_eq!(&f[0..6], &BROADCAST);
            assert_eq!((mac_at(&f, 22), ip_at(&f, 28), ip_at(&f, 38)), (ME, vip, vip));
        }
        assert_eq!(parse_arp(&gratuitous_arp(vip, ME)[0]).map(|r| r.target_ip), Some(vip));
    }

    #[test]
    fn garp_bursts_after_a_takeover_then_repeats() {
        let ms = Duration::from_millis;
        let mut s = GarpSchedule::new();
        let sent: Vec<u64> = (0..70_000).step_by(100).filter(|t| s.due(ms(*t))).collect();
        assert_eq!(sent, vec![0, 1100, 2200, 3300, 4400, 5500, 35_500, 65_500]);
    }

    #[test]
    fn a_node_announces_only_what_names_it() {
        let ann = |svc: &str, node: Option<&str>, ips: &[&str]| L2Announcement {
            service: ServiceName::new("ns", svc),
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            node: node.map(str::to_string),
            eligible: vec![],
            interfaces: vec![],
        };
        let all = [
            ann("a", Some("n1"), &["172.18.255.200", "fd00::200"]),
            ann("b", Some("n2"), &["172.18.255.201"]),
            ann("c", None, &["172.18.255.202"]),
        ];
        let ips = |a: &[&str]| a.iter().map(|i| i.parse::<IpAddr>().unwrap()).collect::<BTreeSet<_>>();
        assert_eq!(announced_by("n1", &all), ips(&["172.18.255.200", "fd00::200"]));
        assert!(announced_by("n3", &all).is_empty());
    }

    #[test]
    fn listed_interfaces_a_node_lacks_are_found_and_kept_until_they_appear() {
        let ann = |node: &str, interfaces: &[&str]| L2Announcement {
            service: ServiceName::new("default", "web"),
            ips: vec!["192.0.2.1".parse().unwrap()],
            node: Some(node.into()),
            eligible: vec![],
            interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
        };
        let all = [ann("n1", &["eth0", "vlan100"]), ann("n2", &["vlan200"]), ann("n1", &[])];
        let present = |n: &str| n == "eth0";
        assert_eq!(missing_interfaces("n1", &all, &[], present), ["vlan100"]);
        // Once the address has moved away, the name is still watched...
        assert_eq!(missing_interfaces("n1", &[], &["vlan100".into()], present), ["vlan100"]);
        // ...until it appears.
        assert_eq!(missing_interfaces("n1", &[], &["vlan100".into()], |_| true), Vec::<String>::new());
    }

    #[test]
    fn a_pools_interfaces_choose_where_a_node_answers() {
        let ann = |svc: &str, ip: &str, interfaces: &[&str]| L2Announcement {
            service: ServiceName::new("ns", svc),
            ips: vec![ip.parse().unwrap()],
            node: Some("n1".into()),
            eligible: vec![],
            interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
        };
        let all = [
            ann("a", "172.18.255.200", &[]),
            ann("b", "172.18.255.201", &["eth1"]),
            ann("c", "172.18.255.202", &["eth1", "bond0"]),
        ];
        let on = announced_on("n1", &all, "eth0");
        let ips = |a: &[&str]| a.iter().map(|i| i.parse::<IpAddr>().unwrap()).collect::<BTreeSet<_>>();
        let want: BTreeMap<String, BTreeSet<IpAddr>> = [
            ("bond0".to_string(), ips(&["172.18.255.202"])),
            ("eth0".to_string(), ips(&["172.18.255.200"])),
            ("eth1".to_string(), ips(&["172.18.255.201", "172.18.255.202"])),
        ]
        .into();
        assert_eq!(on, want);
        assert!(announced_on("n2", &all, "eth0").is_empty());
    }
}

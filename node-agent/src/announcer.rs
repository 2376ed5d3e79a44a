//! The layer-2 announcer, the I/O half of `tideway_core::l2`: raw `AF_PACKET` sockets bound
//! to one interface (the node-network one, holding the node's address, or one the pool's
//! `l2.interfaces` lists; the agent runs one announcer per interface) that answer ARP
//! requests (IPv4) and neighbour solicitations (IPv6) for the LoadBalancer IPs this node was
//! chosen to announce, and announce them unasked when it takes them over (and periodically):
//! gratuitous ARP, unsolicited neighbour advertisements. The addresses are never added to an
//! interface; for IPv6 the interface joins each address's solicited-node group so the
//! solicitations reach it. Needs `CAP_NET_RAW`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::socket::LinkAddr;
use socket2::{Domain, Protocol, Socket, Type};
use tideway_core::l2::{self, GarpSchedule, Mac, ndp};

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;

/// Why the announcer cannot run.
#[derive(Debug, thiserror::Error)]
pub enum AnnounceError {
    /// No interface holds the node's address.
    #[error("no interface holds the node address {0}")]
    NoInterface(IpAddr),
    /// The interface (listed by a pool) does not exist on this node, or has no link address.
    #[error("interface {0} not found on this node")]
    NoSuchInterface(String),
    /// A raw socket could not be opened or bound.
    #[error("raw socket on {interface}: {source} (the agent needs CAP_NET_RAW)")]
    Socket {
        /// The interface.
        interface: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The node-network interface: the one holding `node_ip`.
pub fn node_interface(node_ip: IpAddr) -> Result<String, AnnounceError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|_| AnnounceError::NoInterface(node_ip))?;
    let holds = |a: &nix::ifaddrs::InterfaceAddress| {
        let Some(s) = a.address.as_ref() else { return false };
        s.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())) == Some(node_ip)
            || s.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())) == Some(node_ip)
    };
    addrs.into_iter().find(|a| holds(a)).map(|a| a.interface_name).ok_or(AnnounceError::NoInterface(node_ip))
}

/// True when this node has an interface named `name`.
pub fn interface_exists(name: &str) -> bool {
    nix::net::if_::if_nametoindex(name).is_ok()
}

/// True when interface `name` holds an IPv4 address (or the node cannot be read: nothing is
/// reported then).
pub fn has_ipv4_address(name: &str) -> bool {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return true };
    addrs
        .into_iter()
        .any(|a| a.interface_name == name && a.address.is_some_and(|s| s.as_sockaddr_in().is_some()))
}

/// The `rp_filter` mode the kernel applies on interface `name` (0 when unreadable).
pub fn rp_filter(name: &str) -> u8 {
    let read = |conf: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{conf}/rp_filter"))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    tideway_core::l2::rp_filter::effective_rp_filter(read("all"), read(name))
}

/// The link address (index, MAC) of interface `name`.
fn link_of(name: &str) -> Result<LinkAddr, AnnounceError> {
    let missing = || AnnounceError::NoSuchInterface(name.to_string());
    nix::ifaddrs::getifaddrs()
        .map_err(|_| missing())?
        .filter(|a| a.interface_name == name)
        .find_map(|a| a.address.as_ref().and_then(|s| s.as_link_addr()).copied())
        .filter(|l| l.addr().is_some())
        .ok_or_else(missing)
}

/// A raw socket hearing `ethertype` frames on the interface of `link`.
fn open(interface: &str, link: &LinkAddr, ethertype: u16) -> Result<Socket, AnnounceError> {
    let err = |source| AnnounceError::Socket { interface: interface.to_string(), source };
    let sock = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(i32::from(ethertype.to_be()))))
        .map_err(err)?;
    // Bound with protocol 0: the socket keeps its own and hears only this interface.
    nix::sys::socket::bind(sock.as_raw_fd(), link).map_err(|e| err(e.into()))?;
    sock.set_read_timeout(Some(Duration::from_millis(100))).map_err(err)?;
    Ok(sock)
}

type Wanted = Arc<Mutex<BTreeSet<IpAddr>>>;

/// Answers for a set of addresses on one interface, a thread per address family.
pub struct Announcer {
    wanted: Wanted,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The interface announced on.
    pub interface: String,
}

/// One family's protocol: which addresses, how to answer, how to announce.
#[derive(Clone, Copy)]
enum Family {
    Arp,
    Ndp,
}

impl Family {
    fn owns(self, ip: &IpAddr) -> bool {
        matches!((self, ip), (Family::Arp, IpAddr::V4(_)) | (Family::Ndp, IpAddr::V6(_)))
    }

    /// The answer to `frame`, if it asks for one of `wanted`.
    fn answer(self, frame: &[u8], mac: Mac, wanted: &BTreeSet<IpAddr>) -> Option<Vec<u8>> {
        match self {
            Family::Arp => {
                let req = l2::parse_arp(frame)?;
                (wanted.contains(&IpAddr::V4(req.target_ip)) && req.sender_mac != mac)
                    .then(|| l2::arp_reply(&req, mac).to_vec())
            }
            Family::Ndp => {
                let ns = ndp::parse_solicitation(frame)?;
                (wanted.contains(&IpAddr::V6(ns.target)) && ns.sender_mac != mac)
                    .then(|| ndp::advertisement(ns.target, mac, Some((ns.sender_mac, ns.sender_ip))))
            }
        }
    }

    /// The frames announcing `ip` unasked.
    fn announce(self, ip: IpAddr, mac: Mac) -> Vec<Vec<u8>> {
        match ip {
            IpAddr::V4(v4) => l2::gratuitous_arp(v4, mac).iter().map(|f| f.to_vec()).collect(),
            IpAddr::V6(v6) => vec![ndp::advertisement(v6, mac, None)],
        }
    }
}

impl Announcer {
    /// Starts announcing nothing on the interface holding `node_ip`.
    pub fn start(node_ip: IpAddr) -> Result<Announcer, AnnounceError> {
        Announcer::start_on(&node_interface(node_ip)?)
    }

    /// Starts announcing nothing on `interface`.
    pub fn start_on(interface: &str) -> Result<Announcer, AnnounceError> {
        let interface = interface.to_string();
        let link = link_of(&interface)?;
        let mac = link.addr().ok_or_else(|| AnnounceError::NoSuchInterface(interface.clone()))?;
        let wanted: Wanted = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (family, ethertype) in [(Family::Arp, ETH_P_ARP), (Family::Ndp, ETH_P_IPV6)] {
            let sock = open(&interface, &link, ethertype)?;
            let groups = (matches!(family, Family::Ndp)).then(|| Groups::new(link.ifindex() as u32));
            let (w, s, name) = (wanted.clone(), stop.clone(), interface.clone());
            let thread = std::thread::Builder::new()
                .name("l2-announcer".into())
                .spawn(move || serve(family, sock, groups, mac, &w, &s, &name))
                .map_err(|source| AnnounceError::Socket { interface: interface.clone(), source })?;
            threads.push(thread);
        }
        tracing::info!(%interface, mac = %fmt_mac(&mac), "layer-2 announcer ready (ARP and neighbour discovery)");
        Ok(Announcer { wanted, stop, threads, interface })
    }

    /// The addresses to answer for from now on.
    pub fn set(&self, ips: BTreeSet<IpAddr>) {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        if *wanted != ips {
            tracing::info!(interface = %self.interface, announcing = ?ips, "announcements changed");
            *wanted = ips;
        }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn fmt_mac(m: &Mac) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The solicited-node groups joined on the interface (through a UDP socket: membership is per
/// socket, and makes the interface accept those multicast frames).
struct Groups {
    sock: Option<Socket>,
    ifindex: u32,
    joined: BTreeSet<Ipv6Addr>,
}

impl Groups {
    fn new(ifindex: u32) -> Groups {
        let sock = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).ok();
        Groups { sock, ifindex, joined: BTreeSet::new() }
    }

    fn sync(&mut self, wanted: &BTreeSet<IpAddr>, interface: &str) {
        let Some(sock) = &self.sock else { return };
        let groups: BTreeSet<Ipv6Addr> = wanted
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V6(v6) => Some(ndp::solicited_node(*v6)),
                IpAddr::V4(_) => None,
            })
            .collect();
        for g in groups.difference(&self.joined) {
            if let Err(e) = sock.join_multicast_v6(g, self.ifindex) {
                tracing::warn!(%interface, group = %g, error = %e, "cannot join the solicited-node group");
            }
        }
        for g in self.joined.difference(&groups) {
            let _ = sock.leave_multicast_v6(g, self.ifindex);
        }
        self.joined = groups;
    }
}

fn serve(
    family: Family,
    sock: Socket,
    mut groups: Option<Groups>,
    mac: Mac,
    wanted: &Mutex<BTreeSet<IpAddr>>,
    stop: &AtomicBool,
    interface: &str,
) {
    let mut schedules: BTreeMap<IpAddr, (Instant, GarpSchedule)> = BTreeMap::new();
    let mut buf = [0u8; 1600];
    while !stop.load(Ordering::Relaxed) {
        let now_wanted: BTreeSet<IpAddr> = wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|ip| family.owns(ip))
            .copied()
            .collect();
        if let Some(g) = groups.as_mut() {
            g.sync(&now_wanted, interface);
        }
        schedules.retain(|ip, _| now_wanted.contains(ip));
        for ip in &now_wanted {
            let (since, schedule) =
                schedules.entry(*ip).or_insert_with(|| (Instant::now(), GarpSchedule::new()));
            if schedule.due(since.elapsed()) {
                for frame in family.announce(*ip, mac) {
                    if let Err(e) = sock.send(&frame) {
                        tracing::warn!(%interface, %ip, error = %e, "announcement not sent");
                    }
                }
            }
        }
        let n = match (&sock).read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                continue;
            }
            Err(e) => {
                tracing::warn!(%interface, error = %e, "raw socket read failed");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if let Some(reply) = family.answer(&buf[..n], mac, &now_wanted)
            && let Err(e) = sock.send(&reply)
        {
            tracing::warn!(%interface, error = %e, "answer not sent");
        }
    }
}

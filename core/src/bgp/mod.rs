//! BGP advertisements, MetalLB's BGP mode made explicit: which node advertises which prefix to
//! which peer, with which attributes, and the FRR configuration that says it ([`frr`]).
//!
//! ```text
//!  BgpPeer (myASN, peerASN, address, timers, BFD profile, node selectors)
//!        | peers_of: the peers whose node selectors admit the node (none listed: every node)
//!        v
//!  sessions of the node
//!
//!  LoadBalancer Service addresses (pool, externalTrafficPolicy, endpoints per node)
//!        + BgpAdvertisement (pools, aggregation length, localPref, communities, peers, nodes)
//!        | advertises: the node rules of crate::announce (Ready, agent alive, not excluded,
//!        |             not leaving) and the advertisement's node selectors; Cluster -> if any
//!        |             endpoint serves, Local -> only with a serving endpoint of its own
//!        | prefix: the address under the aggregation length (Local: always the host route)
//!        v
//!  NodeBgp: per session, each prefix with its localPref and communities; conflicts named
//! ```
//!
//! Every eligible node advertises, so the router spreads flows over all of them (ECMP); a node
//! that may not serve withdraws. With `externalTrafficPolicy: Local` a node advertises only
//! while it has a serving endpoint of the Service, and always the host route (`/32`, `/128`):
//! an aggregate would draw traffic for the pool's other addresses to a node that may have no
//! endpoint for them; with host routes, the router's longest-prefix match sends a Local
//! address's traffic only to the nodes that serve it, even beside an aggregate.
//!
//! Several advertisements may give one prefix to one peer: their communities add up, and the
//! highest `localPref` wins, the disagreement named in [`NodeBgp::conflicts`]. `localPref` is
//! an iBGP attribute and is sent to iBGP peers only. The node speaks one ASN: peers asking for
//! another `myASN` are left out and named.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::announce::{self, NodeInfo, ServiceTraffic};
use crate::config::LabelSelector;
use crate::model::ServiceName;

mod addresses;
mod community;
pub mod frr;

pub use addresses::{decide_for, service_addresses};
pub use community::{BadCommunity, Community, CommunityAlias, CommunityRef};

/// MetalLB's default hold time, in seconds (`BGPPeer.holdTime`).
pub const DEFAULT_HOLD_TIME: u32 = 90;
/// The BGP port.
pub const DEFAULT_PORT: u16 = 179;

/// The longest password TCP MD5 takes (Linux's `TCP_MD5SIG_MAXKEYLEN`).
pub const MAX_PASSWORD: usize = 80;

/// Why FRR's configuration cannot carry `password` (it goes on a `neighbor ... password` line,
/// one word: a line break would add configuration, a space would cut it), never showing it.
pub fn password_problem(password: &str) -> Option<String> {
    if password.is_empty() {
        Some("is empty".into())
    } else if password.len() > MAX_PASSWORD {
        Some(format!("is {} bytes long; TCP MD5 takes at most {MAX_PASSWORD}", password.len()))
    } else if !password.bytes().all(|b| b.is_ascii_graphic()) {
        Some("must be printable ASCII without spaces (FRR's configuration cannot carry a space, a line break, a control or a non-ASCII character)".into())
    } else {
        None
    }
}

/// A BGP session a node may open (MetalLB's `BGPPeer`). Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BgpPeer {
    /// The object's name.
    pub name: String,
    /// The ASN the node speaks (`myASN`).
    pub my_asn: u32,
    /// The peer's ASN (`peerASN`).
    pub peer_asn: u32,
    /// `peerAddress`.
    pub address: IpAddr,
    /// `peerPort` (default 179).
    pub port: u16,
    /// `sourceAddress`: the node's address the session starts from (None: FRR's choice).
    pub source_address: Option<IpAddr>,
    /// `holdTime` in seconds (0: no keepalives, as BGP allows).
    pub hold_time: u32,
    /// `keepaliveTime` in seconds (None: a third of the hold time).
    pub keepalive_time: Option<u32>,
    /// `bfdProfile`: the [`BfdProfile`] guarding the session (None: no BFD).
    pub bfd_profile: Option<String>,
    /// `ebgpMultiHop`: the peer is more than one hop away.
    pub ebgp_multihop: bool,
    /// `password`, or the one read from `passwordSecret` (TCP MD5).
    pub password: Option<String>,
    /// `passwordSecret`: the `kubernetes.io/basic-auth` Secret (in Tideway's namespace) whose
    /// `password` key the agent reads into `password`.
    pub password_secret: Option<String>,
    /// `nodeSelectors`: the nodes that open this session (empty: every node).
    pub node_selectors: Vec<LabelSelector>,
}

impl std::fmt::Debug for BgpPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BgpPeer")
            .field("name", &self.name)
            .field("my_asn", &self.my_asn)
            .field("peer_asn", &self.peer_asn)
            .field("address", &self.address)
            .field("port", &self.port)
            .field("source_address", &self.source_address)
            .field("hold_time", &self.hold_time)
            .field("keepalive_time", &self.keepalive_time)
            .field("bfd_profile", &self.bfd_profile)
            .field("ebgp_multihop", &self.ebgp_multihop)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("password_secret", &self.password_secret)
            .field("node_selectors", &self.node_selectors)
            .finish()
    }
}

impl BgpPeer {
    /// A peer with MetalLB's defaults: port 179, hold time 90 s, every node.
    pub fn new(name: &str, my_asn: u32, peer_asn: u32, address: IpAddr) -> BgpPeer {
        BgpPeer {
            name: name.to_string(),
            my_asn,
            peer_asn,
            address,
            port: DEFAULT_PORT,
            source_address: None,
            hold_time: DEFAULT_HOLD_TIME,
            keepalive_time: None,
            bfd_profile: None,
            ebgp_multihop: false,
            password: None,
            password_secret: None,
            node_selectors: Vec::new(),
        }
    }

    /// True for an iBGP session (both ends in one AS).
    pub fn internal(&self) -> bool {
        self.my_asn == self.peer_asn
    }

    /// The keepalive interval: `keepaliveTime`, else a third of the hold time.
    pub fn keepalive(&self) -> u32 {
        self.keepalive_time.unwrap_or(self.hold_time / 3)
    }
}

/// How a pool's addresses are advertised (MetalLB's `BGPAdvertisement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpAdvertisement {
    /// The object's name.
    pub name: String,
    /// `ipAddressPools` (empty: every pool).
    pub pools: Vec<String>,
    /// `aggregationLength` (default 32).
    pub aggregation_length: u8,
    /// `aggregationLengthV6` (default 128).
    pub aggregation_length_v6: u8,
    /// `localPref` (iBGP peers only).
    pub local_pref: Option<u32>,
    /// `communities`: values (`65535:65282`, `large:1:2:3`) or names a `Community` defines.
    pub communities: Vec<CommunityRef>,
    /// `peers` (empty: every peer).
    pub peers: Vec<String>,
    /// `nodeSelectors`: the nodes that advertise (empty: every node).
    pub node_selectors: Vec<LabelSelector>,
}

impl BgpAdvertisement {
    /// Every pool's addresses as host routes to every peer, from every node (MetalLB's default).
    pub fn new(name: &str) -> BgpAdvertisement {
        BgpAdvertisement {
            name: name.to_string(),
            pools: Vec::new(),
            aggregation_length: 32,
            aggregation_length_v6: 128,
            local_pref: None,
            communities: Vec::new(),
            peers: Vec::new(),
            node_selectors: Vec::new(),
        }
    }

    fn covers_pool(&self, pool: &str) -> bool {
        self.pools.is_empty() || self.pools.iter().any(|p| p == pool)
    }

    fn covers_peer(&self, peer: &str) -> bool {
        self.peers.is_empty() || self.peers.iter().any(|p| p == peer)
    }

    /// The prefix `ip` is advertised as: under the aggregation length, or the host route for
    /// a `Local` Service.
    pub fn prefix(&self, ip: IpAddr, local: bool) -> IpNet {
        let len = match (local, ip) {
            (true, _) => crate::net::host_net(ip).prefix_len(),
            (false, IpAddr::V4(_)) => self.aggregation_length.min(32),
            (false, IpAddr::V6(_)) => self.aggregation_length_v6.min(128),
        };
        IpNet::new(ip, len).map_or_else(|_| crate::net::host_net(ip), |n| n.trunc())
    }
}

/// BFD timers for the sessions that name the profile (MetalLB's `BFDProfile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdProfile {
    /// The object's name.
    pub name: String,
    /// `receiveInterval`, ms (default 300).
    pub receive_interval: u32,
    /// `transmitInterval`, ms (default 300).
    pub transmit_interval: u32,
    /// `detectMultiplier` (default 3).
    pub detect_multiplier: u32,
    /// `echoMode`.
    pub echo_mode: bool,
    /// `echoInterval`, ms (default 50), used with `echo_mode`.
    pub echo_interval: u32,
    /// `passiveMode`: wait for the peer to start.
    pub passive_mode: bool,
    /// `minimumTtl` (default 254; multi-hop sessions).
    pub minimum_ttl: u8,
}

impl BfdProfile {
    /// A profile with MetalLB's (and FRR's) defaults.
    pub fn new(name: &str) -> BfdProfile {
        BfdProfile {
            name: name.to_string(),
            receive_interval: 300,
            transmit_interval: 300,
            detect_multiplier: 3,
            echo_mode: false,
            echo_interval: 50,
            passive_mode: false,
            minimum_ttl: 254,
        }
    }
}

/// One LoadBalancer address of a Service, as the advertisement decision sees it on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAddress {
    /// The Service.
    pub service: ServiceName,
    /// The address.
    pub ip: IpAddr,
    /// The pool it was allocated from.
    pub pool: String,
    /// Its external traffic needs.
    pub traffic: ServiceTraffic,
    /// The node, with the Service's endpoints there.
    pub node: NodeInfo,
}

/// The attributes a prefix is sent to one peer with.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attributes {
    /// LOCAL_PREF (iBGP peers only).
    pub local_pref: Option<u32>,
    /// Communities, standard and large.
    pub communities: BTreeSet<Community>,
}

/// One session of the node and what it advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The peer.
    pub peer: BgpPeer,
    /// Its BFD profile (None: no BFD).
    pub bfd: Option<BfdProfile>,
    /// Each advertised prefix with its attributes.
    pub routes: BTreeMap<IpNet, Attributes>,
}

/// Something in the objects that cannot be done as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum Conflict {
    /// A peer asks the node to speak another ASN than its other peers.
    #[error("peer {peer} asks for myASN {asked}, but this node speaks {speaks} (peer {first}): left out")]
    MyAsn {
        /// The peer left out.
        peer: String,
        /// Its `myASN`.
        asked: u32,
        /// The ASN the node speaks.
        speaks: u32,
        /// The peer that set it.
        first: String,
    },
    /// A peer names a BFD profile that does not exist: the session runs without BFD.
    #[error("peer {peer} names BFD profile {profile}, which does not exist: the session runs without BFD")]
    UnknownBfdProfile {
        /// The peer.
        peer: String,
        /// The profile it names.
        profile: String,
    },
    /// An advertisement names a community no `Community` defines: it is sent without it.
    #[error(
        "advertisement {advertisement} names community {name}, which no Community defines: sent without it"
    )]
    UnknownCommunity {
        /// The advertisement.
        advertisement: String,
        /// The name.
        name: String,
    },
    /// A peer's password has a character FRR's configuration cannot carry.
    #[error("peer {peer}: the password must be printable ASCII without spaces: the session is left out")]
    BadPassword {
        /// The peer left out.
        peer: String,
    },
    /// A peer's password is in a Secret the agent does not have (absent, not a
    /// `kubernetes.io/basic-auth` Secret with a `password`, or in a namespace it does not
    /// read): the session is left out rather than opened without its password.
    #[error(
        "peer {peer}: no password from Secret {secret} (absent, without a password key, or in a namespace this agent does not read): the session is left out"
    )]
    PasswordUnread {
        /// The peer left out.
        peer: String,
        /// The Secret named by `passwordSecret`.
        secret: String,
    },
    /// Two advertisements give one prefix to one peer with different `localPref`.
    #[error(
        "{prefix} to peer {peer}: localPref {kept} (advertisement {kept_by}) and {dropped} (advertisement {dropped_by}); the higher is sent"
    )]
    LocalPref {
        /// The prefix.
        prefix: IpNet,
        /// The peer.
        peer: String,
        /// The value sent.
        kept: u32,
        /// The advertisement it came from.
        kept_by: String,
        /// The value not sent.
        dropped: u32,
        /// The advertisement it came from.
        dropped_by: String,
    },
}

/// Everything the node's BGP speaker must do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeBgp {
    /// The node's name.
    pub node: String,
    /// The ASN it speaks (None: no session).
    pub asn: Option<u32>,
    /// Its router id (its first IPv4 address; None: FRR's choice).
    pub router_id: Option<IpAddr>,
    /// Its sessions, by peer name.
    pub sessions: Vec<Session>,
    /// What cannot be done as written.
    pub conflicts: Vec<Conflict>,
}

impl NodeBgp {
    /// Every prefix the node advertises to some peer.
    pub fn prefixes(&self) -> BTreeSet<IpNet> {
        self.sessions.iter().flat_map(|s| s.routes.keys().copied()).collect()
    }
}

/// The peers whose node selectors admit `node` (none listed: every node), sorted by name,
/// all speaking the ASN of the first; the others, those with a password FRR cannot carry and
/// those whose password is in a Secret not read, are named as conflicts.
fn peers_of(node: &NodeInfo, peers: &[BgpPeer]) -> (Vec<BgpPeer>, Vec<Conflict>) {
    let mut conflicts = Vec::new();
    let mut mine: Vec<BgpPeer> = peers
        .iter()
        .filter(|p| p.node_selectors.is_empty() || p.node_selectors.iter().any(|s| s.matches(&node.labels)))
        .filter(|p| match password_fault(p) {
            Some(c) => {
                conflicts.push(c);
                false
            }
            None => true,
        })
        .cloned()
        .collect();
    mine.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first) = mine.first().cloned() else { return (mine, conflicts) };
    mine.retain(|p| {
        let same = p.my_asn == first.my_asn;
        if !same {
            conflicts.push(Conflict::MyAsn {
                peer: p.name.clone(),
                asked: p.my_asn,
                speaks: first.my_asn,
                first: first.name.clone(),
            });
        }
        same
    });
    (mine, conflicts)
}

/// What keeps `peer`'s password from FRR: a character its configuration cannot carry, or a
/// Secret not read.
fn password_fault(peer: &BgpPeer) -> Option<Conflict> {
    match (&peer.password, &peer.password_secret) {
        (None, Some(secret)) => {
            Some(Conflict::PasswordUnread { peer: peer.name.clone(), secret: secret.clone() })
        }
        (Some(pw), _) if password_problem(pw).is_some() => {
            Some(Conflict::BadPassword { peer: peer.name.clone() })
        }
        _ => None,
    }
}

/// Whether the node advertises `addr` under `ad`: the node rules and the advertisement's node
/// selectors, then the traffic policy ([`announce::eligibility`]).
pub fn advertises(addr: &ServiceAddress, ad: &BgpAdvertisement) -> Result<(), announce::Ineligible> {
    announce::eligibility(&addr.traffic, &addr.node, &ad.node_selectors)
}

/// The objects the decision reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Objects<'a> {
    /// `BGPPeer`s.
    pub peers: &'a [BgpPeer],
    /// `BGPAdvertisement`s.
    pub advertisements: &'a [BgpAdvertisement],
    /// `BFDProfile`s.
    pub bfd_profiles: &'a [BfdProfile],
    /// The names every `Community` object defines.
    pub communities: &'a [CommunityAlias],
}

/// What `node` advertises to each of its peers: every address of `addresses` (the Services'
/// LoadBalancer addresses, each seen with this node's endpoints) whose pool an advertisement
/// covers, when the node may serve it.
pub fn decide(
    node: &NodeInfo,
    router_id: Option<IpAddr>,
    objects: Objects<'_>,
    addresses: &[ServiceAddress],
) -> NodeBgp {
    let (peers, mut conflicts) = peers_of(node, objects.peers);
    let mut sessions: Vec<Session> = peers
        .into_iter()
        .map(|peer| {
            let bfd = peer.bfd_profile.as_ref().and_then(|name| {
                let found = objects.bfd_profiles.iter().find(|p| &p.name == name).cloned();
                if found.is_none() {
                    conflicts
                        .push(Conflict::UnknownBfdProfile { peer: peer.name.clone(), profile: name.clone() });
                }
                found
            });
            Session { peer, bfd, routes: BTreeMap::new() }
        })
        .collect();
    let advertisements = objects.advertisements;
    let communities: Vec<Vec<Community>> =
        advertisements.iter().map(|ad| community::resolve(ad, objects.communities, &mut conflicts)).collect();
    // Per (session, prefix): the advertisement that set its localPref.
    let mut pref_by: BTreeMap<(usize, IpNet), String> = BTreeMap::new();
    for addr in addresses {
        let local = addr.traffic.policy == crate::model::TrafficPolicy::Local;
        for (ad, values) in
            advertisements.iter().zip(&communities).filter(|(ad, _)| ad.covers_pool(&addr.pool))
        {
            if advertises(addr, ad).is_err() {
                continue;
            }
            let prefix = ad.prefix(addr.ip, local);
            for (i, session) in sessions.iter_mut().enumerate() {
                if !ad.covers_peer(&session.peer.name) || !same_family(&session.peer, addr.ip) {
                    continue;
                }
                let attrs = session.routes.entry(prefix).or_default();
                attrs.communities.extend(values.iter().cloned());
                let Some(pref) = ad.local_pref.filter(|_| session.peer.internal()) else { continue };
                match attrs.local_pref {
                    None => {
                        attrs.local_pref = Some(pref);
                        pref_by.insert((i, prefix), ad.name.clone());
                    }
                    Some(kept) if kept != pref => {
                        let kept_by = pref_by.get(&(i, prefix)).cloned().unwrap_or_default();
                        let (hi, hi_by, lo, lo_by) = if pref > kept {
                            (pref, ad.name.clone(), kept, kept_by)
                        } else {
                            (kept, kept_by, pref, ad.name.clone())
                        };
                        attrs.local_pref = Some(hi);
                        pref_by.insert((i, prefix), hi_by.clone());
                        conflicts.push(Conflict::LocalPref {
                            prefix,
                            peer: session.peer.name.clone(),
                            kept: hi,
                            kept_by: hi_by,
                            dropped: lo,
                            dropped_by: lo_by,
                        });
                    }
                    Some(_) => {}
                }
            }
        }
    }
    conflicts.sort();
    conflicts.dedup();
    NodeBgp {
        node: node.name.clone(),
        asn: sessions.first().map(|s| s.peer.my_asn),
        router_id,
        sessions,
        conflicts,
    }
}

/// A session carries the routes of its peer address's family (FRR activates each neighbour in
/// its own address family only).
fn same_family(peer: &BgpPeer, ip: IpAddr) -> bool {
    peer.address.is_ipv4() == ip.is_ipv4()
}

#[cfg(test)]
mod tests;

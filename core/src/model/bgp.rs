//! The BGP objects as specified: `BGPPeer`, `BGPAdvertisement`, `BFDProfile` and the
//! communities (`Community` names and values, as MetalLB writes them). What a node advertises
//! from them is decided in [`crate::bgp`].

use std::net::IpAddr;

use ipnet::IpNet;

use crate::config::LabelSelector;

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

    pub(crate) fn covers_pool(&self, pool: &str) -> bool {
        self.pools.is_empty() || self.pools.iter().any(|p| p == pool)
    }

    pub(crate) fn covers_peer(&self, peer: &str) -> bool {
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

/// A BGP community value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Community {
    /// A standard community, `ASN:VALUE` (two 16-bit halves).
    Standard(u16, u16),
    /// A large community, `large:GLOBAL:LOCAL1:LOCAL2` (RFC 8092).
    Large(u32, u32, u32),
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Community::Standard(a, b) => write!(f, "{a}:{b}"),
            Community::Large(a, b, c) => write!(f, "{a}:{b}:{c}"),
        }
    }
}

impl std::str::FromStr for Community {
    type Err = BadCommunity;

    /// `1234:1`, or `large:1:2:3`, as MetalLB writes them.
    fn from_str(s: &str) -> Result<Community, BadCommunity> {
        let bad = || BadCommunity(s.to_string());
        if let Some(large) = s.strip_prefix("large:") {
            let parts: Vec<u32> =
                large.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
            return match parts[..] {
                [a, b, c] => Ok(Community::Large(a, b, c)),
                _ => Err(bad()),
            };
        }
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        Ok(Community::Standard(a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
    }
}

/// A community that is neither `A:B` with 16-bit halves nor `large:A:B:C` with 32-bit parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a community: ASN:VALUE (16 bits each) or large:GLOBAL:LOCAL1:LOCAL2 (32 bits each)")]
pub struct BadCommunity(pub String);

/// One entry of an advertisement's `communities`: a value, or the name of one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommunityRef {
    /// `65535:65282`, `large:1:2:3`.
    Value(Community),
    /// A name a `Community` object defines.
    Name(String),
}

impl std::str::FromStr for CommunityRef {
    type Err = BadCommunity;

    /// A value when it parses as one; a name when it has no `:` (a value written wrong, with
    /// a `:`, is refused rather than taken for a name).
    fn from_str(s: &str) -> Result<CommunityRef, BadCommunity> {
        match s.parse() {
            Ok(value) => Ok(CommunityRef::Value(value)),
            Err(_) if !s.contains(':') && !s.is_empty() => Ok(CommunityRef::Name(s.to_string())),
            Err(e) => Err(e),
        }
    }
}

impl From<Community> for CommunityRef {
    fn from(value: Community) -> Self {
        CommunityRef::Value(value)
    }
}

/// A name for a community value (one entry of a `Community` object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunityAlias {
    /// The name.
    pub name: String,
    /// Its value.
    pub value: Community,
}

//! What a node's BGP speaker must do ([`NodeBgp`]: sessions, each prefix with its attributes)
//! and what cannot be done as written ([`Conflict`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::announce::{NodeInfo, ServiceTraffic};
use crate::model::ServiceName;
use crate::model::bgp::{BfdProfile, BgpPeer, Community};

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

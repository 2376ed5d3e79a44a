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

mod addresses;
mod community;
mod decide;
pub mod frr;
mod node;

pub use crate::model::bgp::{
    BadCommunity, BfdProfile, BgpAdvertisement, BgpPeer, Community, CommunityAlias, CommunityRef,
    DEFAULT_HOLD_TIME, DEFAULT_PORT, MAX_PASSWORD, Objects, password_problem,
};
pub use addresses::{decide_for, service_addresses};
pub use decide::{advertises, decide};
pub use node::{Attributes, Conflict, NodeBgp, ServiceAddress, Session};

#[cfg(test)]
mod tests;

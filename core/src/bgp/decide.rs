//! The decision: which of the node's peers it speaks to and what it advertises to each.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::community;
use super::node::{Conflict, NodeBgp, ServiceAddress, Session};
use crate::announce::{self, NodeInfo};
use crate::model::bgp::{BgpAdvertisement, BgpPeer, Community, Objects, password_problem};

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

//! A node's [`NodeBgp`] as an FRR configuration (`frr.conf`, FRR 8.4 syntax), the way
//! MetalLB's FRR mode writes it: one `router bgp` with a neighbour per session, every prefix a
//! `network` statement (import check off: the address lives in the dataplane, not the RIB),
//! and per neighbour an outbound route-map that lets through exactly the prefixes it is given,
//! each group of prefixes with its localPref and communities; BFD profiles as FRR profiles.
//!
//! The text is a pure function of its input (sorted everywhere), so an unchanged decision
//! renders byte for byte the same and the agent's reload is a no-op.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ipnet::IpNet;

use super::{Attributes, BfdProfile, Community, NodeBgp, Session};

/// The whole `frr.conf` for the node.
pub fn render(bgp: &NodeBgp) -> String {
    let mut out = String::new();
    out.push_str("frr defaults traditional\n");
    let _ = writeln!(out, "hostname {}", word(&bgp.node));
    out.push_str("log stdout informational\n!\n");
    bfd(&mut out, bgp);
    for session in &bgp.sessions {
        route_map(&mut out, session);
    }
    if let Some(asn) = bgp.asn {
        router(&mut out, bgp, asn);
    }
    out
}

/// The route-map (and its prefix lists) of a session's outbound updates.
pub fn route_map_name(session: &Session) -> String {
    format!("tideway-{}-out", word(&session.peer.name))
}

fn bfd(out: &mut String, bgp: &NodeBgp) {
    let profiles: BTreeMap<&str, &BfdProfile> =
        bgp.sessions.iter().filter_map(|s| s.bfd.as_ref()).map(|p| (p.name.as_str(), p)).collect();
    if profiles.is_empty() {
        return;
    }
    out.push_str("bfd\n");
    for p in profiles.values() {
        let _ = writeln!(out, " profile {}", word(&p.name));
        let _ = writeln!(out, "  detect-multiplier {}", p.detect_multiplier);
        let _ = writeln!(out, "  receive-interval {}", p.receive_interval);
        let _ = writeln!(out, "  transmit-interval {}", p.transmit_interval);
        if p.echo_mode {
            out.push_str("  echo-mode\n");
            let _ = writeln!(out, "  echo receive-interval {}", p.echo_interval);
            let _ = writeln!(out, "  echo transmit-interval {}", p.echo_interval);
        }
        if p.passive_mode {
            out.push_str("  passive-mode\n");
        }
        let _ = writeln!(out, "  minimum-ttl {}", p.minimum_ttl);
        out.push_str(" exit\n !\n");
    }
    out.push_str("exit\n!\n");
}

/// The prefixes of a session grouped by (family, attributes), in a stable order.
fn groups(session: &Session) -> BTreeMap<(bool, &Attributes), Vec<IpNet>> {
    let mut groups: BTreeMap<(bool, &Attributes), Vec<IpNet>> = BTreeMap::new();
    for (prefix, attrs) in &session.routes {
        groups.entry((matches!(prefix, IpNet::V6(_)), attrs)).or_default().push(*prefix);
    }
    groups
}

fn route_map(out: &mut String, session: &Session) {
    let name = route_map_name(session);
    let groups = groups(session);
    for (k, ((v6, _), prefixes)) in groups.iter().enumerate() {
        let (family, list) = if *v6 { ("ipv6", "v6") } else { ("ip", "v4") };
        for (i, prefix) in prefixes.iter().enumerate() {
            let _ = writeln!(
                out,
                "{family} prefix-list {name}-{}-{list} seq {} permit {prefix}",
                k + 1,
                (i + 1) * 10
            );
        }
    }
    for (k, ((v6, attrs), _)) in groups.iter().enumerate() {
        let (family, list) = if *v6 { ("ipv6", "v6") } else { ("ip", "v4") };
        let _ = writeln!(out, "route-map {name} permit {}", (k + 1) * 10);
        let _ = writeln!(out, " match {family} address prefix-list {name}-{}-{list}", k + 1);
        if let Some(pref) = attrs.local_pref {
            let _ = writeln!(out, " set local-preference {pref}");
        }
        let (standard, large): (Vec<&Community>, Vec<&Community>) =
            attrs.communities.iter().partition(|c| matches!(c, Community::Standard(..)));
        if !standard.is_empty() {
            let _ = writeln!(out, " set community {} additive", joined(&standard));
        }
        if !large.is_empty() {
            let _ = writeln!(out, " set large-community {} additive", joined(&large));
        }
        out.push_str("exit\n");
    }
    // Whatever no entry lets through is not sent.
    let _ = writeln!(out, "route-map {name} deny 65535\nexit\n!");
}

fn joined(communities: &[&Community]) -> String {
    communities.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

fn router(out: &mut String, bgp: &NodeBgp, asn: u32) {
    let _ = writeln!(out, "router bgp {asn}");
    if let Some(id) = bgp.router_id.filter(|ip| ip.is_ipv4()) {
        let _ = writeln!(out, " bgp router-id {id}");
    }
    out.push_str(
        " no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n no bgp network import-check\n",
    );
    for s in &bgp.sessions {
        neighbour(out, s);
    }
    for v6 in [false, true] {
        address_family(out, bgp, v6);
    }
    out.push_str("exit\n!\n");
}

fn neighbour(out: &mut String, s: &Session) {
    let (p, addr) = (&s.peer, s.peer.address);
    let _ = writeln!(out, " neighbor {addr} remote-as {}", p.peer_asn);
    let _ = writeln!(out, " neighbor {addr} description {}", word(&p.name));
    if p.port != super::DEFAULT_PORT {
        let _ = writeln!(out, " neighbor {addr} port {}", p.port);
    }
    let _ = writeln!(out, " neighbor {addr} timers {} {}", p.keepalive(), p.hold_time);
    if let Some(password) = &p.password {
        let _ = writeln!(out, " neighbor {addr} password {password}");
    }
    if p.ebgp_multihop {
        let _ = writeln!(out, " neighbor {addr} ebgp-multihop");
    }
    if let Some(src) = p.source_address {
        let _ = writeln!(out, " neighbor {addr} update-source {src}");
    }
    if let Some(profile) = &s.bfd {
        // As FRR shows it in its running configuration, so that a reload finds nothing to undo
        // (undoing `bfd` would take the BFD session down, and with it the BGP session).
        let _ = writeln!(out, " neighbor {addr} bfd");
        let _ = writeln!(out, " neighbor {addr} bfd profile {}", word(&profile.name));
    }
}

fn address_family(out: &mut String, bgp: &NodeBgp, v6: bool) {
    let sessions: Vec<&Session> = bgp.sessions.iter().filter(|s| s.peer.address.is_ipv6() == v6).collect();
    if sessions.is_empty() {
        return;
    }
    let _ = writeln!(out, " !\n address-family {} unicast", if v6 { "ipv6" } else { "ipv4" });
    for prefix in bgp.prefixes().iter().filter(|p| matches!(p, IpNet::V6(_)) == v6) {
        let _ = writeln!(out, "  network {prefix}");
    }
    for s in sessions {
        let addr = s.peer.address;
        let _ = writeln!(out, "  neighbor {addr} activate");
        let _ = writeln!(out, "  neighbor {addr} route-map {} out", route_map_name(s));
    }
    out.push_str(" exit-address-family\n");
}

/// A name as one FRR word: characters other than letters, digits, `-`, `_` and `.` become `_`.
fn word(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// `text` (what FRR or `frr-reload.py` said about `config`) with every password of `config`
/// replaced by `***`.
pub fn mask_passwords(text: &str, config: &str) -> String {
    let mut passwords: Vec<&str> = config
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "password").and_then(|_| words.next())
        })
        .collect();
    // The longest first, so that one password inside another leaves nothing behind.
    passwords.sort_by_key(|p| std::cmp::Reverse(p.len()));
    passwords.into_iter().fold(text.to_string(), |t, p| t.replace(p, "***"))
}

//! The node-local DNS listener's rules, one shape in every backend. At raw priority, before
//! conntrack sees a packet:
//!
//! ```text
//! prerouting  daddr <cluster DNS ClusterIP> l4proto udp|tcp dport 53, a transparent socket
//!             takes it (the listener is up)  ->  mark |= 0x2000, notrack
//!             (policy routing delivers the marked packet to the node: the listener)
//!             daddr <link-local address> dport 53  ->  notrack
//! output      saddr <either> sport 53  ->  notrack   (the listener's replies)
//! ```
//!
//! It stops by itself: when no listener holds a transparent socket on the ClusterIP — the
//! agent restarting, upgraded, or killed with SIGKILL, its rules left in place — the socket
//! test fails, the query is neither marked nor exempt, and it reaches the cluster DNS Service
//! through the Service's own rules, as without the listener. Untracked packets skip every NAT
//! chain and every `ct state new` check, so the Service's DNAT and its no-endpoint reject never
//! see a query the listener takes. The link-local address answers with ICMP port unreachable
//! while the listener is down; a resolver that names it first and the ClusterIP second moves
//! on at once.

use std::net::IpAddr;

use crate::net::{IpNet, Protocol};
use crate::plan::NodeDnsPlan;
use crate::program::{Action, BaseHook, Chain, ChainKind, Hook, Match, Rule, Verdict};
use crate::render::chains::{RAW, TIDEWAY_NODE_DNS, TIDEWAY_NODE_DNS_OUTPUT};

/// The raw table's priority (-300): before conntrack (-200) sees a packet.
pub const RAW_PRIORITY: i32 = -300;

/// The DNS port.
pub const DNS_PORT: u16 = 53;
/// nftables: the prerouting chain (its rules, [`prerouting`]).
pub const NFT_PREROUTING: &str = "node-dns-prerouting";
/// nftables: the output chain (its rules, [`output`]).
pub const NFT_OUTPUT: &str = "node-dns-output";

const PROTOCOLS: [Protocol; 2] = [Protocol::Udp, Protocol::Tcp];

fn query_to(ip: IpAddr, proto: Protocol) -> Vec<Match> {
    vec![Match::Dst(IpNet::from(ip), false), Match::Proto(proto), Match::DstPort(DNS_PORT)]
}

fn with(mut matches: Vec<Match>, m: Match) -> Vec<Match> {
    matches.push(m);
    matches
}

/// The prerouting rules. `one_target`: a rule has one target (iptables), so marking and
/// exempting take a rule each.
pub fn prerouting(plan: &NodeDnsPlan, one_target: bool) -> Vec<Rule> {
    let mut rules = Vec::new();
    for &ip in &plan.diverted {
        for proto in PROTOCOLS {
            let query = query_to(ip, proto);
            let taken = with(query.clone(), Match::TransparentSocket);
            if one_target {
                rules.push(Rule::new(taken, Action::MarkOr(plan.mark)));
                rules.push(Rule::new(with(query, Match::Mark(plan.mark, false)), Action::Notrack));
            } else {
                rules.push(Rule {
                    matches: taken,
                    actions: vec![Action::MarkOr(plan.mark), Action::Notrack],
                    comment: None,
                });
            }
        }
    }
    for &ip in &plan.local {
        for proto in PROTOCOLS {
            rules.push(Rule::new(query_to(ip, proto), Action::Notrack));
        }
    }
    rules
}

/// The output rules: the listener's replies.
pub fn output(plan: &NodeDnsPlan) -> Vec<Rule> {
    let mut rules = Vec::new();
    for &ip in plan.diverted.iter().chain(&plan.local) {
        for proto in PROTOCOLS {
            let reply =
                vec![Match::Src(IpNet::from(ip), false), Match::Proto(proto), Match::SrcPort(DNS_PORT)];
            rules.push(Rule::new(reply, Action::Notrack));
        }
    }
    rules
}

/// iptables and IPVS modes: the raw table's chains, and the jumps to them from its built-in
/// PREROUTING and OUTPUT.
pub fn raw_chains(plan: &NodeDnsPlan) -> Vec<Chain> {
    let builtin = |name: &str, hook: Hook, target: &str| Chain {
        hook: Some(BaseHook { hook, kind: ChainKind::Filter, priority: RAW_PRIORITY }),
        builtin: true,
        ..Chain::new(RAW, name, vec![Rule::new(vec![], Action::Verdict(Verdict::Jump(target.into())))])
    };
    vec![
        builtin("PREROUTING", Hook::Prerouting, TIDEWAY_NODE_DNS),
        builtin("OUTPUT", Hook::Output, TIDEWAY_NODE_DNS_OUTPUT),
        Chain::new(RAW, TIDEWAY_NODE_DNS, prerouting(plan, true)),
        Chain::new(RAW, TIDEWAY_NODE_DNS_OUTPUT, output(plan)),
    ]
}

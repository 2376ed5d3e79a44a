//! The program IR: tables, chains, rules, sets/maps and IPVS virtual servers.
//!
//! One vocabulary for all three backends. The nftables lowering uses verdict maps and
//! concatenated keys; the iptables lowering uses kube-proxy's chains; the IPVS lowering uses
//! ipsets, a few rules and virtual servers. Printers turn it into text, the tracer interprets
//! it, and `diff` compares it.

use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::config::Scheduler;
use crate::net::{IpFamily, IpNet, Protocol};

/// A cheap-to-clone name (chains, sets, comments).
pub type Name = Arc<str>;

/// A netfilter hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Hook {
    /// prerouting
    Prerouting,
    /// input
    Input,
    /// forward
    Forward,
    /// output
    Output,
    /// postrouting
    Postrouting,
}

impl Hook {
    /// nft spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// The type of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ChainKind {
    /// filter
    Filter,
    /// nat
    Nat,
}

/// Base-chain registration: which hook, which type, which priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct BaseHook {
    /// Hook.
    pub hook: Hook,
    /// Chain type.
    pub kind: ChainKind,
    /// Priority (lower runs first; DNAT is -100, SNAT 100).
    pub priority: i32,
}

/// A packet field, used in set keys and map lookups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Field {
    /// Source address.
    SrcIp,
    /// Destination address.
    DstIp,
    /// Transport protocol.
    Proto,
    /// Destination port.
    DstPort,
    /// `numgen random mod N`: a random slot in `0..N`.
    Random(u32),
    /// `jhash ip saddr . th sport mod N seed S`: the flow's Maglev bucket in `0..N`, the same
    /// on every node ([`crate::maglev::flow_bucket`]); the source address alone when
    /// `address_only` (ClientIP affinity).
    Jhash {
        /// Buckets.
        modulus: u32,
        /// Seed.
        seed: u32,
        /// Hash the source address only.
        address_only: bool,
    },
}

/// A value in a set element key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Value {
    /// An address.
    Ip(IpAddr),
    /// A network (interval sets, `hash:net`).
    Net(IpNet),
    /// A protocol.
    Proto(Protocol),
    /// A port.
    Port(u16),
    /// An integer (random slot).
    Int(u32),
}

/// The type of one key component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum KeyType {
    /// An address of a family.
    Addr(IpFamily),
    /// A network of a family (interval).
    Net(IpFamily),
    /// A protocol.
    Proto,
    /// A port.
    Port,
    /// A random slot (`numgen`).
    Slot,
}

/// What a map yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DataType {
    /// A verdict (vmap).
    Verdict,
    /// An address and port (DNAT map).
    AddrPort(IpFamily),
}

/// A terminal or control-flow decision.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Verdict {
    /// Jump to a chain and come back.
    Jump(Name),
    /// Go to a chain without coming back.
    Goto(Name),
    /// Leave this chain.
    Return,
    /// Accept (end of this base chain; later base chains still run).
    Accept,
    /// Drop silently.
    Drop,
    /// Reject with an ICMP error / TCP reset.
    Reject,
}

/// Data of a map element.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ElemData {
    /// A verdict.
    Verdict(Verdict),
    /// An address and port.
    AddrPort(IpAddr, u16),
}

/// Key components of an element (inline up to four: no allocation for common keys).
pub type Key = smallvec::SmallVec<[Value; 4]>;

/// A set or map element.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Element {
    /// Key components, in the set's key order.
    pub key: Key,
    /// Map data (None for sets).
    pub data: Option<ElemData>,
}

/// Connection-tracking state tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CtState {
    /// `ct state new` / `--ctstate NEW`.
    New,
    /// `ct state invalid` / `--ctstate INVALID`.
    Invalid,
    /// `ct state related,established`.
    RelatedEstablished,
    /// `! --ctstate RELATED,ESTABLISHED,DNAT` (anti-martian rule).
    NotRelatedEstablishedDnat,
}

/// A rule condition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Match {
    /// Transport protocol.
    Proto(Protocol),
    /// Source inside (or, negated, outside) a network.
    Src(IpNet, bool),
    /// Destination inside (or outside) a network.
    Dst(IpNet, bool),
    /// Destination port.
    DstPort(u16),
    /// Source port.
    SrcPort(u16),
    /// A socket with `IP_TRANSPARENT` on this node takes the packet's destination (nft `socket
    /// transparent 1`, iptables `-m socket --transparent`): the node-local DNS listener is up.
    TransparentSocket,
    /// Arrived (or, negated, did not arrive) through the interface `name`, or through any
    /// interface whose name starts with it (`prefix`). Packets a node sends arrive through none.
    InInterface {
        /// Interface name, or its prefix.
        name: Name,
        /// `name` is a prefix (iptables `-i name+`, nftables `iifname "name*"`).
        prefix: bool,
        /// Negated.
        neg: bool,
    },
    /// Source is (or is not) a local address.
    SrcLocal(bool),
    /// Destination is (or is not) a local address.
    DstLocal(bool),
    /// `(mark & m) == m`, or `!=` when negated.
    Mark(u32, bool),
    /// Conntrack state.
    Ct(CtState),
    /// The connection was DNATed (`ct status dnat`).
    CtDnat,
    /// Key built from packet fields is (or is not) in a set.
    InSet {
        /// The set.
        set: Name,
        /// Fields, in key order.
        key: Vec<Field>,
        /// Negated.
        neg: bool,
    },
    /// Source seen in the named affinity list within `seconds` (iptables `recent --rcheck`).
    Recent {
        /// List name.
        name: Name,
        /// Age limit.
        seconds: u32,
    },
    /// Record the source in the named affinity list (iptables `recent --set`); always matches.
    RecentSet(Name),
    /// Matches with probability `1/n` (iptables `statistic --mode random`).
    Probability(u32),
    /// A comment (iptables `-m comment`, placed where kube-proxy puts it).
    Comment(Name),
}

/// A rule action.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    /// A verdict.
    Verdict(Verdict),
    /// DNAT to an address and port (terminal).
    Dnat(IpAddr, u16),
    /// DNAT to the data of the element found by `key` (terminal when found).
    DnatMap {
        /// The map.
        map: Name,
        /// Key fields.
        key: Vec<Field>,
    },
    /// Apply the verdict of the element found by `key`; continue when not found.
    VerdictMap {
        /// The map.
        map: Name,
        /// Key fields.
        key: Vec<Field>,
    },
    /// Pick one verdict uniformly at random (`numgen random mod N vmap {..}`).
    RandomVerdict(Vec<Verdict>),
    /// `mark |= m` (non-terminal).
    MarkOr(u32),
    /// `mark ^= m` (non-terminal).
    MarkXor(u32),
    /// Masquerade (terminal).
    Masquerade {
        /// `--random-fully` / `fully-random`.
        fully_random: bool,
    },
    /// Exempt the packet from connection tracking (nft `notrack`, iptables `-j CT --notrack`;
    /// non-terminal; in a chain that runs before conntrack, at raw priority). NAT never sees an
    /// untracked packet.
    Notrack,
    /// Add the packet's source to a dynamic set (nft `update @set { ip saddr }`; non-terminal).
    UpdateSet(Name),
    /// Nothing (a comment-only rule).
    Nothing,
}

/// A rule: all matches must hold, then actions run in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Rule {
    /// Conditions.
    pub matches: Vec<Match>,
    /// Actions.
    pub actions: Vec<Action>,
    /// nft comment (iptables comments are `Match::Comment`).
    pub comment: Option<Name>,
}

impl Rule {
    /// A rule with matches and a single action.
    pub fn new(matches: Vec<Match>, action: Action) -> Rule {
        Rule { matches, actions: vec![action], comment: None }
    }

    /// Sets the nft comment.
    pub fn with_comment(mut self, c: impl Into<Name>) -> Rule {
        self.comment = Some(c.into());
        self
    }
}

/// Identifies a chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ChainRef {
    /// Table (`nat`, `filter`, or the nft table name).
    pub table: &'static str,
    /// Chain name.
    pub name: Name,
}

/// A chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Chain {
    /// Table.
    pub table: &'static str,
    /// Name.
    pub name: Name,
    /// Hook registration (nft base chains and iptables built-in chains).
    pub hook: Option<BaseHook>,
    /// An iptables built-in chain (PREROUTING, ...): we only own the rules listed here.
    pub builtin: bool,
    /// Rules before any per-Service contribution.
    pub rules: Vec<Rule>,
    /// Rules after every per-Service contribution (e.g. the NodePort jump, which must be last).
    pub tail: Vec<Rule>,
    /// A shared chain's way in: the base's chain it is reached from and the rule there that
    /// leads to it. The rule comes and goes with the chain (the chain it sits in is rewritten
    /// then), and such rules follow the base chain's own rules in their chains' name order.
    pub entry: Option<(ChainRef, Rule)>,
}

impl Chain {
    /// A regular chain with rules.
    pub fn new(table: &'static str, name: impl Into<Name>, rules: Vec<Rule>) -> Chain {
        Chain { table, name: name.into(), hook: None, builtin: false, rules, tail: Vec::new(), entry: None }
    }

    /// This chain's reference.
    pub fn id(&self) -> ChainRef {
        ChainRef { table: self.table, name: self.name.clone() }
    }
}

/// Set flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct SetFlags {
    /// Elements are ranges/prefixes.
    pub interval: bool,
    /// Updated from the packet path with per-element timeouts.
    pub dynamic_timeout: Option<u32>,
    /// Declared without a size (the kernel's resizable hash): a set whose elements move in from
    /// other sets as the cluster changes (a frontend's endpoint count), so that no size chosen
    /// when it was created would hold for long.
    pub resizable: bool,
}

/// A set or map.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Set {
    /// Table.
    pub table: &'static str,
    /// Name.
    pub name: Name,
    /// Key component types.
    pub key: Vec<KeyType>,
    /// Map data type (None for sets).
    pub data: Option<DataType>,
    /// Flags.
    pub flags: SetFlags,
    /// The ipset type for iptables/IPVS (`hash:ip,port`, `bitmap:port`, ...).
    pub ipset_type: Option<&'static str>,
    /// Several fragments may contribute the same element: keep a reference count.
    pub shared: bool,
    /// Elements owned by the set's definer.
    pub elements: Vec<Element>,
    /// Comment.
    pub comment: Option<Name>,
}

/// Identifies a set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SetRef {
    /// Table.
    pub table: &'static str,
    /// Name.
    pub name: Name,
}

impl Set {
    /// This set's reference.
    pub fn id(&self) -> SetRef {
        SetRef { table: self.table, name: self.name.clone() }
    }
}

/// An IPVS real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RealServer {
    /// Address.
    pub ip: IpAddr,
    /// Port.
    pub port: u16,
    /// Weight (0 = drain: no new connections).
    pub weight: u32,
}

/// An IPVS virtual server (NAT forwarding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct VirtualServer {
    /// Address.
    pub ip: IpAddr,
    /// Protocol.
    pub protocol: Protocol,
    /// Port.
    pub port: u16,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Persistence timeout (ClientIP affinity).
    pub persistence: Option<u32>,
    /// Real servers, sorted.
    pub real_servers: Vec<RealServer>,
    /// The service port it implements.
    pub comment: Name,
}

/// Everything one unit (the base, or one service port) contributes to a program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fragment {
    /// Chains this fragment owns.
    pub chains: Vec<Chain>,
    /// Chains several fragments may need (identical content), reference counted by name.
    pub shared_chains: Vec<Chain>,
    /// Sets this fragment owns.
    pub sets: Vec<Set>,
    /// Sets several fragments may need (identical definition), reference counted by name;
    /// their elements come from the fragments, as for the base's sets.
    pub shared_sets: Vec<Set>,
    /// Rules added to chains owned by the base.
    pub rules: Vec<(ChainRef, Rule)>,
    /// Elements added to sets owned by the base.
    pub elements: Vec<(SetRef, Element)>,
    /// IPVS virtual servers.
    pub virtual_servers: Vec<VirtualServer>,
}

impl Fragment {
    /// The fragment with no spare capacity in its lists (a whole program holds one per
    /// service port, and growth by doubling leaves up to half of each list unused).
    pub fn shrunk(mut self) -> Fragment {
        self.chains.shrink_to_fit();
        self.shared_chains.shrink_to_fit();
        self.sets.shrink_to_fit();
        self.shared_sets.shrink_to_fit();
        self.rules.shrink_to_fit();
        self.elements.shrink_to_fit();
        self.virtual_servers.shrink_to_fit();
        self
    }

    /// Rules it contributes: its own and those of its chains (shared ones counted here too).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
            + self
                .chains
                .iter()
                .chain(&self.shared_chains)
                .map(|c| c.rules.len() + c.tail.len() + usize::from(c.entry.is_some()))
                .sum::<usize>()
    }
}

//! Which datagrams a member takes: sealed with the cluster's key ([`super::envelope`]), new,
//! and from a sender whose identity fits the Nodes: an agent speaks for a Node at one of that
//! Node's addresses. A member that does not know the Node named (an agent reading only its own
//! Node from the API server) takes it on its key; the member list counts only agents whose
//! identity fits a Node it knows. The datagram's source address is not checked: the host picks
//! it by route (towards a pod IP, often an overlay interface's address, not the Node's), and
//! it is spoofed as easily as any. The operator (at its pod IP, which no Node lists) is taken
//! on its key alone; it announces nothing and no quorum counts it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use foca::{Codec, PostcardCodec};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tideway_core::cluster::ClusterState;

use super::envelope::{self, Keys, Refused, Replay, Stamp};
use super::member::{Member, Role};

/// Why a datagram was not handed to the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The envelope: unsealed, forged, stale or replayed.
    #[error("{0}")]
    Envelope(#[from] Refused),
    /// No SWIM header inside.
    #[error("not a SWIM message")]
    Undecodable,
    /// An agent's identity naming a Node at an address that Node does not have.
    #[error("sender is no Node's agent")]
    Stranger,
}

impl Refusal {
    /// A short label (for counters and logs).
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Envelope(r) => r.label(),
            Refusal::Undecodable => "undecodable",
            Refusal::Stranger => "stranger",
        }
    }
}

/// Datagrams refused, by reason; shared with whoever reports them, and exported as
/// `tideway_gossip_refused_datagrams_total{reason}` once [registered](Refusals::register).
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<BTreeMap<&'static str, u64>>,
    exported: Family<ReasonLabel, Counter>,
}

/// `reason`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

impl Refusals {
    /// Counts one.
    pub fn add(&self, r: Refusal) {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()).entry(r.label()).or_default() += 1;
        self.exported.get_or_create(&ReasonLabel { reason: r.label().to_string() }).inc();
    }

    /// How many were refused for `label` ([`Refusal::label`]).
    pub fn get(&self, label: &str) -> u64 {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).get(label).copied().unwrap_or(0)
    }

    /// Every count.
    pub fn all(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Exports the counts in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tideway_gossip_refused_datagrams",
            "Liveness gossip datagrams refused, by reason (malformed, unknown_key, bad_tag, stale, replayed, undecodable, stranger)",
            self.exported.clone(),
        );
    }
}

/// Whether `m` is an agent of a Node that has `m`'s address (an operator always is not).
pub fn is_node_agent(m: &Member, state: &ClusterState) -> bool {
    m.role == Role::Agent && node_has(state, &m.node, m.addr.ip())
}

/// Whether `m` counts as its node's agent in a member list: an agent of a Node that has its
/// address, or of a Node `state` does not know (an agent reads only its own Node; the sealed
/// gossip vouches for the others). An agent in a known Node's name at another address does not.
pub fn counts_as_agent(m: &Member, state: &ClusterState) -> bool {
    m.role == Role::Agent && (state.node(&m.node).is_none() || node_has(state, &m.node, m.addr.ip()))
}

fn node_has(state: &ClusterState, node: &str, ip: IpAddr) -> bool {
    state.node(node).is_some_and(|n| n.ips.contains(&ip))
}

/// Milliseconds since 1970 on this clock.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A member's side of the envelope: its keys (none: plain SWIM, `--gossip-insecure`), its
/// sequence and what it has taken.
#[derive(Debug)]
pub struct Guard {
    keys: Option<Keys>,
    epoch: u64,
    counter: u64,
    replay: Replay,
}

impl Guard {
    /// With `keys`; the epoch is this start's time.
    pub fn new(keys: Option<Keys>) -> Guard {
        let epoch =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Guard { keys, epoch, counter: 0, replay: Replay::default() }
    }

    /// What goes on the wire for `message`.
    pub fn seal(&mut self, message: &[u8]) -> Vec<u8> {
        let Some(keys) = &self.keys else { return message.to_vec() };
        self.counter += 1;
        envelope::seal(keys, Stamp { epoch: self.epoch, counter: self.counter, sent_ms: now_ms() }, message)
    }

    /// The SWIM message in `datagram`, if it is to be taken.
    pub fn admit<'a>(&mut self, datagram: &'a [u8], state: &ClusterState) -> Result<&'a [u8], Refusal> {
        let now = now_ms();
        let (stamp, message) = match &self.keys {
            Some(keys) => {
                let (stamp, message) = envelope::open(keys, datagram, now)?;
                (Some(stamp), message)
            }
            None => (None, datagram),
        };
        let header = PostcardCodec.decode_header(message).map_err(|_| Refusal::Undecodable)?;
        let src: Member = header.src;
        if src.role == Role::Agent && state.node(&src.node).is_some() && !is_node_agent(&src, state) {
            return Err(Refusal::Stranger);
        }
        if let Some(stamp) = stamp {
            self.replay.check(src.addr, stamp, now)?;
        }
        Ok(message)
    }
}

/// Says at most once a `period` how many datagrams were refused since it last did.
#[derive(Debug)]
pub struct Complaints {
    period: Duration,
    last: Option<Instant>,
    said: BTreeMap<&'static str, u64>,
}

impl Complaints {
    /// At most once a `period`.
    pub fn new(period: Duration) -> Complaints {
        Complaints { period, last: None, said: BTreeMap::new() }
    }

    /// Logs what `refusals` counted since the last time, if it is time.
    pub fn maybe_log(&mut self, refusals: &Refusals, from: SocketAddr, why: Refusal) {
        if self.last.is_some_and(|t| t.elapsed() < self.period) {
            return;
        }
        self.last = Some(Instant::now());
        let now = refusals.all();
        let new: BTreeMap<&str, u64> = now
            .iter()
            .map(|(k, v)| (*k, v - self.said.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect();
        tracing::warn!(%from, reason = %why, refused = ?new, "gossip datagrams refused (wrong key, forged, replayed or from no Node)");
        self.said = now;
    }
}

//! The agents' failure detector at the edge: SWIM gossip over UDP (the `foca` crate), every
//! agent a member at its node's address and the operator a member that announces nothing. Each
//! member probes one other per period, so a node's detection traffic does not grow with the
//! cluster; the timings and what the member list means are `tideway_core::liveness`'s.
//!
//! Members find each other through the Nodes the source lists and the peers seen before (an
//! agent lists only its own Node): a member announces itself to a few such addresses it does
//! not know as alive each second (three at most), and the protocol spreads the rest. So a
//! member cut off from all its peers (a partition) rejoins within seconds of the heal.
//!
//! Every datagram travels sealed with the cluster's shared key ([`envelope`]: HMAC-SHA256, a
//! send time and a per-sender counter against replay), and a member takes an agent's message
//! only at an address of the Node it names ([`admit`]); what the member list says counts only
//! agents whose identity fits a Node, or names one the member's source does not know (an
//! agent reads only its own Node: the sealed gossip vouches for the others). Without a key
//! (`--gossip-insecure`) anyone who reaches the port can declare an agent down or a dead one
//! alive.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

use foca::{AccumulatingRuntime, Config, Foca, OwnedNotification, PeriodicParams, PostcardCodec, Timer};
use tideway_core::liveness::{GossipTimings, agent_liveness, down_for_good, hand_over_from};
use tideway_core::model::AgentLiveness;
use tideway_core::net::IpFamily;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::SharedCluster;

pub mod admit;
pub mod envelope;
mod member;
pub mod sim;

pub use admit::{Refusal, Refusals};
pub use envelope::{KeyError, Keys};
pub use member::{Member, Role};

/// The gossip port (memberlist's, as MetalLB's speakers use).
pub const PORT: u16 = 7946;

/// What the member list says of the agents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Nodes with an agent up (alive or suspected), this member's own included: agents of
    /// the Nodes the source knows, at their addresses, and of any Node it does not know.
    pub active: BTreeSet<String>,
    /// Nodes whose agent was declared down and not seen since.
    pub down: BTreeSet<String>,
}

fn config(t: &GossipTimings, nodes: usize) -> Config {
    let size = NonZeroU32::new(u32::try_from(nodes.max(1)).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN);
    let mut c = Config::new_lan(size);
    c.probe_period = t.probe_period;
    c.probe_rtt = t.probe_rtt;
    c.suspect_to_down_after = t.suspicion;
    c.periodic_gossip = Some(PeriodicParams {
        frequency: t.gossip_interval,
        num_members: std::num::NonZeroUsize::new(3).unwrap_or(std::num::NonZeroUsize::MIN),
    });
    c
}

/// One member of the gossip.
pub struct Gossip {
    foca: Foca<Member, PostcardCodec, rand::rngs::StdRng, foca::NoCustomBroadcast>,
    runtime: AccumulatingRuntime<Member>,
    timers: BTreeMap<(Instant, u64), Timer<Member>>,
    seq: u64,
    members: Members,
    rotation: usize,
    guard: admit::Guard,
    /// Every peer's address this member has seen up, and when last: announced to again while
    /// they are not alive (for [`PEERS_KEPT`]), so that a member cut off from all of them
    /// rejoins once the network heals although its source lists only its own Node.
    peers: BTreeMap<SocketAddr, Instant>,
}

/// How long a peer's address is announced to after it was last seen up.
const PEERS_KEPT: Duration = Duration::from_secs(300);

impl Gossip {
    /// `me`, with `timings`, for a cluster of about `nodes`.
    pub fn new(me: Member, timings: &GossipTimings, nodes: usize, keys: Option<Keys>) -> Gossip {
        let rng: rand::rngs::StdRng = rand::make_rng();
        let mut members = Members::default();
        if me.role == Role::Agent {
            members.active.insert(me.node.clone());
        }
        Gossip {
            foca: Foca::new(me, config(timings, nodes), rng, PostcardCodec),
            runtime: AccumulatingRuntime::new(),
            timers: BTreeMap::new(),
            seq: 0,
            members,
            rotation: 0,
            guard: admit::Guard::new(keys),
            peers: BTreeMap::new(),
        }
    }

    /// Hands `datagram` to the protocol if [`admit`] takes it.
    fn receive(&mut self, datagram: &[u8], cluster: &SharedCluster) -> Result<(), Refusal> {
        let message = self.guard.admit(datagram, &cluster.lock())?;
        if let Err(e) = self.foca.handle_data(message, &mut self.runtime) {
            tracing::debug!(error = %e, "gossip message ignored");
        }
        Ok(())
    }

    /// [`Gossip::receive`], a refusal counted and complained of.
    fn take(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        cluster: &SharedCluster,
        refusals: &Refusals,
        complaints: &mut admit::Complaints,
    ) {
        if let Err(why) = self.receive(datagram, cluster) {
            refusals.add(why);
            complaints.maybe_log(refusals, from, why);
        }
    }

    /// Sends what the protocol asked for, schedules its timers, folds in its news (of agents
    /// that count as such, [`admit::counts_as_agent`]).
    async fn drain(&mut self, socket: &UdpSocket, cluster: &SharedCluster) {
        while let Some((to, data)) = self.runtime.to_send() {
            let data = self.guard.seal(&data);
            if let Err(e) = socket.send_to(&data, to.addr).await {
                tracing::debug!(to = %to.addr, error = %e, "gossip not sent");
            }
        }
        let now = Instant::now();
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.seq += 1;
            self.timers.insert((now + after, self.seq), timer);
        }
        let state = cluster.lock();
        while let Some(n) = self.runtime.to_notify() {
            match n {
                OwnedNotification::MemberUp(m) if m.role == Role::Agent => {
                    tracing::info!(node = %m.node, addr = %m.addr, "agent up");
                }
                OwnedNotification::MemberDown(m) if admit::counts_as_agent(&m, &state) => {
                    tracing::warn!(node = %m.node, addr = %m.addr, "agent down");
                    self.members.down.insert(m.node.clone());
                }
                _ => {}
            }
        }
        let me = self.foca.identity().clone();
        for m in self.foca.iter_members() {
            self.peers.insert(m.id().addr, now);
        }
        self.peers.retain(|_, seen| now.duration_since(*seen) < PEERS_KEPT);
        let mut active: BTreeSet<String> = self
            .foca
            .iter_members()
            .map(|m| m.id())
            .filter(|m| admit::counts_as_agent(m, &state))
            .map(|m| m.node.clone())
            .collect();
        drop(state);
        if me.role == Role::Agent {
            active.insert(me.node.clone());
        }
        self.members.down.retain(|n| !active.contains(n));
        self.members.active = active;
    }

    /// Announces this member to up to three addresses not known as alive: the Nodes' and the
    /// peers' seen before.
    fn join(&mut self, cluster: &SharedCluster) {
        let known: BTreeSet<SocketAddr> = self.foca.iter_members().map(|m| m.id().addr).collect();
        let me = self.foca.identity().addr;
        let nodes: BTreeSet<SocketAddr> = cluster
            .lock()
            .nodes()
            .filter_map(|n| n.primary_ip(IpFamily::V4).or_else(|| n.primary_ip(IpFamily::V6)))
            .map(|ip| SocketAddr::new(ip, me.port()))
            .collect();
        let candidates: Vec<SocketAddr> = nodes
            .into_iter()
            .chain(self.peers.keys().copied())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|a| *a != me && !known.contains(a))
            .collect();
        for i in 0..candidates.len().min(3) {
            let to = candidates[(self.rotation + i) % candidates.len()];
            if let Err(e) = self.foca.announce(Member::somebody_at(to), &mut self.runtime) {
                tracing::debug!(%to, error = %e, "gossip announce");
            }
        }
        self.rotation = self.rotation.wrapping_add(3);
    }
}

/// Runs member `me` on `socket` until cancelled, finding peers among `cluster`'s Nodes and
/// publishing what it learns of the agents to `out`.
pub async fn run(
    me: Member,
    socket: UdpSocket,
    timings: GossipTimings,
    cluster: SharedCluster,
    out: watch::Sender<Members>,
    keys: Option<Keys>,
    refusals: std::sync::Arc<Refusals>,
) {
    let nodes = cluster.lock().nodes().count();
    tracing::info!(member = ?me, sealed = keys.is_some(), "gossip started");
    let mut g = Gossip::new(me, &timings, nodes, keys);
    let mut complaints = admit::Complaints::new(Duration::from_secs(60));
    let mut buf = vec![0u8; 65536];
    let mut join = tokio::time::interval(Duration::from_secs(1));
    join.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let next = g.timers.first_key_value().map(|((t, _), _)| *t);
        let sleep =
            tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)));
        tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, from)) => g.take(&buf[..n], from, &cluster, &refusals, &mut complaints),
                Err(e) => tracing::warn!(error = %e, "gossip receive"),
            },
            _ = sleep, if next.is_some() => {
                // What arrived meanwhile first: after a stall, a suspect's refutation waiting
                // here must count before the suspicion's timer declares it down.
                for _ in 0..WAITING {
                    let Ok((n, from)) = socket.try_recv_from(&mut buf) else { break };
                    g.take(&buf[..n], from, &cluster, &refusals, &mut complaints);
                }
                while let Some(entry) = g.timers.first_entry() {
                    if entry.key().0 > Instant::now() {
                        break;
                    }
                    let timer = entry.remove();
                    if let Err(e) = g.foca.handle_timer(timer, &mut g.runtime) {
                        tracing::debug!(error = %e, "gossip timer");
                    }
                }
            }
            _ = join.tick() => g.join(&cluster),
        }
        g.drain(&socket, &cluster).await;
        out.send_if_modified(|m| {
            if *m == g.members {
                false
            } else {
                *m = g.members.clone();
                true
            }
        });
    }
}

/// The most datagrams read before the expired timers run (a flood does not hold them off).
const WAITING: usize = 256;

/// A `--gossip-time-scale` that is not a number from 1 to 100.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0:?} is not a number from 1 to {max}", max = tideway_core::liveness::MAX_TIME_SCALE)]
pub struct BadTimeScale(pub String);

/// Parses `--gossip-time-scale` (1 to 100).
pub fn parse_time_scale(text: &str) -> Result<f64, BadTimeScale> {
    text.parse::<f64>()
        .ok()
        .filter(|f| (1.0..=tideway_core::liveness::MAX_TIME_SCALE).contains(f))
        .ok_or_else(|| BadTimeScale(text.to_string()))
}

/// Where and how a member joins the gossip.
#[derive(Debug, Clone)]
pub struct Join<'a> {
    /// The UDP address it listens on.
    pub bind: SocketAddr,
    /// The address the others reach it at (its port is `bind`'s).
    pub advertise: std::net::IpAddr,
    /// Its node (the operator: its identity).
    pub node: &'a str,
    /// Agent or operator.
    pub role: Role,
    /// The failure detector's timings ([`tideway_core::liveness::TIMINGS`], or scaled).
    pub timings: GossipTimings,
    /// The cluster's keys (the same on every member); `None` sends and takes plain SWIM,
    /// which anyone reaching the port can forge (`--gossip-insecure`).
    pub keys: Option<Keys>,
    /// Where refused datagrams are counted.
    pub refusals: std::sync::Arc<Refusals>,
}

/// Joins the gossip as `join` says; what it learns goes to the returned receiver. A port that
/// cannot be bound is an error: the caller decides whether to run without liveness.
///
/// The member runs on a thread of its own (a single-threaded runtime): whatever else the
/// process does (a large sync, kernel work, a burst of logging) never delays its answers past
/// the suspicion, where a stalled but living member would be declared down and its addresses
/// moved. Only the machine's own starvation can; `--gossip-time-scale` is for that. It stops
/// when the runtime that started it shuts down (a test's member dies with its runtime).
pub async fn start(join: Join<'_>, cluster: SharedCluster) -> std::io::Result<watch::Receiver<Members>> {
    let socket = std::net::UdpSocket::bind(join.bind)?;
    socket.set_nonblocking(true)?;
    let me = Member::new(SocketAddr::new(join.advertise, join.bind.port()), join.node, join.role);
    let (tx, rx) = watch::channel(Members::default());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (timings, keys, refusals) = (join.timings, join.keys, join.refusals);
    // It lives as long as the runtime that started it, as a task of that runtime would: a
    // task there holds `alive`, and the member stops when that task is dropped.
    let (alive, mut ended) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _alive = alive;
        std::future::pending::<()>().await
    });
    std::thread::Builder::new().name("gossip".into()).spawn(move || {
        runtime.block_on(async move {
            let socket = match UdpSocket::from_std(socket) {
                Ok(socket) => socket,
                Err(e) => return tracing::error!(error = %e, "gossip socket"),
            };
            tokio::select! {
                () = run(me, socket, timings, cluster, tx, keys, refusals) => {}
                _ = &mut ended => {}
            }
        })
    })?;
    Ok(rx)
}

/// The operator's side: every change of the member list becomes each Node's agent liveness in
/// `cluster` (which wakes the announcer choice). An agent whose NodeProxyState says it stopped
/// gracefully is `Restarting` for `hand_over` after (its addresses stay), to its end even if the
/// next agent's first report clears `stoppedAt` before its member joins; checked again every
/// [`RECHECK`] too, for the report that may arrive after the member list changed and for the
/// hand-over's end. An agent declared down counts as dead only once it has not rejoined for
/// `rejoin` ([`GossipTimings::rejoin`]): a living member wrongly declared down moves nothing.
pub async fn feed_liveness(
    cluster: SharedCluster,
    mut members: watch::Receiver<Members>,
    hand_over: Duration,
    rejoin: Duration,
) {
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Each node's hand-over granted so far, kept to its end (see `agent_liveness`), and since
    // when its member is down (an agent before 0.2.0 reports no stop: `hand_over_from`).
    let mut granted: BTreeMap<String, SystemTime> = Default::default();
    let mut down_since: BTreeMap<String, SystemTime> = Default::default();
    // The next time a node down but not for good yet ([`down_for_good`]) is looked at again.
    let mut settle: Option<tokio::time::Instant> = None;
    loop {
        let settled = async move {
            match settle {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = members.changed() => if changed.is_err() { return },
            _ = recheck.tick() => {}
            () = settled => {}
        }
        settle = None;
        let m = members.borrow_and_update().clone();
        let now = SystemTime::now();
        cluster.update(|s| {
            let nodes: Vec<String> = s.nodes().map(|n| n.name.clone()).collect();
            for n in nodes {
                let (active, down) = (m.active.contains(&n), m.down.contains(&n));
                if down && !active {
                    down_since.entry(n.clone()).or_insert(now);
                } else {
                    down_since.remove(&n);
                }
                let stopped_at = hand_over_from(s.node_state(&n), down_since.get(&n).copied(), hand_over);
                let (l, until) =
                    agent_liveness(active, down, stopped_at, granted.get(&n).copied(), now, hand_over);
                match until {
                    Some(u) => granted.insert(n.clone(), u),
                    None => granted.remove(&n),
                };
                let since = down_since.get(&n).copied();
                if l == AgentLiveness::Dead && !down_for_good(since, now, rejoin) {
                    let waited = since.and_then(|at| now.duration_since(at).ok()).unwrap_or_default();
                    let at = tokio::time::Instant::now() + rejoin.saturating_sub(waited);
                    settle = Some(settle.map_or(at, |s| s.min(at)));
                    continue;
                }
                if s.set_agent_liveness(&n, l) {
                    let until = until.map(|u| humantime_secs(u.duration_since(now).unwrap_or_default()));
                    tracing::info!(node = %n, liveness = ?l, hand_over_left = ?until, "agent liveness");
                }
            }
        });
    }
}

/// How often [`feed_liveness`] looks again without a member change.
pub const RECHECK: Duration = Duration::from_millis(500);

fn humantime_secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// How a member seals its gossip, as `--gossip-key-file` and `--gossip-insecure` say.
#[derive(Debug, Clone)]
pub enum Sealing {
    /// With the cluster's keys.
    Keyed(Keys),
    /// Plain SWIM, asked for explicitly.
    Insecure,
    /// Neither a key nor `--gossip-insecure`: the member does not join.
    Off,
}

/// A `--gossip-key-file` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// It cannot be read.
    #[error("reading gossip key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// What it holds is no key.
    #[error("gossip key file {path}: {source}")]
    Bad {
        /// The file.
        path: String,
        /// Why.
        source: KeyError,
    },
    /// Both a key and `--gossip-insecure`.
    #[error("--gossip-key-file and --gossip-insecure exclude each other")]
    Both,
}

/// The gossip key flags, the same in the agent and the operator (each words their help for
/// itself, with `mut_arg`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GossipKeyArgs {
    /// The cluster's gossip key: one secret a line (at least 32 characters), the first sealing
    /// what this member sends, a second (the previous key, during a rotation) still accepted.
    /// The same file on every member. Without it (and without `--gossip-insecure`) the agent
    /// does not join the gossip.
    #[arg(long, env = "TIDEWAY_GOSSIP_KEY_FILE")]
    pub gossip_key_file: Option<std::path::PathBuf>,
    /// Gossip without a key: anyone who reaches the port can then declare an agent down (its
    /// addresses move) or a dead one alive.
    #[arg(long)]
    pub gossip_insecure: bool,
}

impl GossipKeyArgs {
    /// How this member seals its gossip ([`sealing`]).
    pub fn sealing(&self) -> Result<Sealing, KeyFileError> {
        sealing(self.gossip_key_file.as_deref(), self.gossip_insecure)
    }
}

/// The sealing `key_file` and `insecure` ask for.
pub fn sealing(key_file: Option<&std::path::Path>, insecure: bool) -> Result<Sealing, KeyFileError> {
    match (key_file, insecure) {
        (Some(_), true) => Err(KeyFileError::Both),
        (None, true) => Ok(Sealing::Insecure),
        (None, false) => Ok(Sealing::Off),
        (Some(p), false) => {
            let path = p.display().to_string();
            let text = std::fs::read_to_string(p)
                .map_err(|source| KeyFileError::Read { path: path.clone(), source })?;
            Keys::parse(&text).map(Sealing::Keyed).map_err(|source| KeyFileError::Bad { path, source })
        }
    }
}

impl Sealing {
    /// The keys a [`Join`] takes, or `None` when the member is not to join (said in the log).
    pub fn keys(self) -> Option<Option<Keys>> {
        match self {
            Sealing::Keyed(k) => Some(Some(k)),
            Sealing::Insecure => {
                tracing::warn!(
                    "the liveness gossip is not sealed (--gossip-insecure): anyone who reaches its port can declare an agent down and move its addresses"
                );
                Some(None)
            }
            Sealing::Off => {
                tracing::error!(
                    "no --gossip-key-file: not joining the liveness gossip (addresses move on Node Ready alone); give the cluster's key, or --gossip-insecure"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent lists only its own Node: cut off from every peer, it announces itself to the
    /// peers it saw, so it rejoins when the network heals.
    #[test]
    fn a_member_announces_itself_to_the_peers_it_saw_besides_the_nodes() {
        let me = Member::new("127.0.0.2:7946".parse().unwrap(), "node-a", Role::Agent);
        let mut g = Gossip::new(me, &tideway_core::liveness::TIMINGS, 3, None);
        let cluster = SharedCluster::new();
        g.join(&cluster);
        assert_eq!(g.runtime.to_send(), None, "no Node, no peer: nobody to announce to");
        let peer: SocketAddr = "127.0.0.3:7946".parse().unwrap();
        g.peers.insert(peer, Instant::now());
        g.join(&cluster);
        let sent: Vec<SocketAddr> =
            std::iter::from_fn(|| g.runtime.to_send()).map(|(to, _)| to.addr).collect();
        assert_eq!(sent, [peer]);
    }
}

//! Agent liveness and self-fencing, apart from the protocol that carries them (SWIM gossip at
//! the edges): the timing budget of failure detection, what a member list says of each node's
//! agent, and when an agent must stop answering for its addresses.
//!
//! ```text
//!  agents + operator gossip (SWIM: probe, indirect probe, suspicion, dissemination)
//!    operator: members -> liveness_of -> ClusterState::set_agent_liveness -> announcers
//!    agent:    members + API reachable -> Fencing -> answer ARP/NDP or stay silent
//! ```

use std::time::Duration;

use crate::model::{AgentLiveness, NodeProxyState};

/// The failure detector's timings (SWIM with suspicion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GossipTimings {
    /// Each member probes one other member this often.
    pub probe_period: Duration,
    /// How long a direct probe waits for its answer before asking others to probe.
    pub probe_rtt: Duration,
    /// How long a suspected member has to refute the suspicion before it is declared down.
    pub suspicion: Duration,
    /// Members send what they learnt to a few others this often (besides piggybacking it on
    /// probes).
    pub gossip_interval: Duration,
    /// How long an agent declared down has to come back before its node's addresses move: a
    /// living member declared down (its refutation late on a starved machine, or a dying
    /// member's stale suspicion) hears it within a gossip round and rejoins under a renewed
    /// identity at once; a dead one never does.
    pub rejoin: Duration,
}

/// Tuned for an address that moves within 2 s of its agent's death: a probe in every period
/// reaches a member of a shuffled round, so some member probes the dead one within a period or
/// two; the probe (direct, then indirect through others) takes one period; suspicion then runs
/// its course and the news spreads with the next gossip. A member that stalls for less than the
/// suspicion (a loaded 2-core machine: well under 100 ms) refutes it and nothing moves.
pub const TIMINGS: GossipTimings = GossipTimings {
    probe_period: Duration::from_millis(150),
    probe_rtt: Duration::from_millis(75),
    suspicion: Duration::from_millis(600),
    gossip_interval: Duration::from_millis(100),
    rejoin: Duration::from_millis(250),
};

/// What the decision and the write path after detection may take (the operator decides, writes
/// the L2Announcement, the new announcer reads it and sends gratuitous ARP).
pub const AFTER_DETECTION: Duration = Duration::from_millis(500);

/// The largest factor [`GossipTimings::scaled`] takes.
pub const MAX_TIME_SCALE: f64 = 100.0;

impl GossipTimings {
    /// Every timing `factor` times longer (clamped to 1..=[`MAX_TIME_SCALE`]): for a slow
    /// environment (a VM without hardware acceleration, a starved CPU), where a member can stall
    /// for longer than the suspicion and be declared down while alive. Detection slows by the
    /// same factor.
    pub fn scaled(&self, factor: f64) -> GossipTimings {
        let f = if factor.is_finite() { factor.clamp(1.0, MAX_TIME_SCALE) } else { 1.0 };
        GossipTimings {
            probe_period: self.probe_period.mul_f64(f),
            probe_rtt: self.probe_rtt.mul_f64(f),
            suspicion: self.suspicion.mul_f64(f),
            gossip_interval: self.gossip_interval.mul_f64(f),
            rejoin: self.rejoin.mul_f64(f),
        }
    }

    /// The longest a dead member goes unnoticed by the member that learns last: probed within
    /// one period (plus scheduling), the probe failing after one more, the suspicion, the news
    /// spreading, and the time it has to rejoin.
    pub fn worst_detection(&self) -> Duration {
        self.probe_period * 2 + self.suspicion + self.gossip_interval * 2 + self.rejoin
    }
}

/// A node's agent as a member list sees it: `active` if a member of that node is up (alive
/// or suspected), `down` if one was declared down. An agent never heard of is `Unknown` (it
/// counts as alive: a cluster whose gossip is not yet formed or not deployed keeps working on
/// Node Ready alone).
pub fn liveness_of(active: bool, down: bool) -> AgentLiveness {
    match (active, down) {
        (true, _) => AgentLiveness::Alive,
        (false, true) => AgentLiveness::Dead,
        (false, false) => AgentLiveness::Unknown,
    }
}

/// Whether an agent the member list has said is down since `down_since` (and not back) is
/// dead for good: down for its [`GossipTimings::rejoin`] time without rejoining.
pub fn down_for_good(
    down_since: Option<std::time::SystemTime>,
    now: std::time::SystemTime,
    rejoin: Duration,
) -> bool {
    down_since.is_some_and(|at| now.duration_since(at).unwrap_or_default() >= rejoin)
}

/// How long an agent that stopped gracefully (it said so in its NodeProxyState's `stoppedAt`
/// as it left: a rollout, most likely) keeps its node's addresses while its member is down:
/// the DaemonSet's next Pod has this long to start and join. Its kernel rules stay programmed
/// meanwhile, so held connections and clients with the node's MAC cached are served; a crash
/// (no `stoppedAt`) still moves them within [`TIMINGS`]' detection. A successor seen running
/// gets one more ([`hand_over_from`]).
pub const HAND_OVER: Duration = Duration::from_secs(30);

/// The liveness a member list and the agent's last report say: a member declared down whose
/// agent reported a graceful stop less than `hand_over` before `now` is
/// [`AgentLiveness::Restarting`], with the time its hand-over ends (what the operator logs; it
/// re-checks on its own tick), else [`liveness_of`]. A hand-over once `granted` (its end, as
/// returned earlier) lasts to its end while the member is down even without the report: the
/// next agent's first report clears `stoppedAt`, which can happen before its member has joined
/// the gossip. A stop reported in the future (another clock ahead) counts from `now`.
pub fn agent_liveness(
    active: bool,
    down: bool,
    stopped_at: Option<std::time::SystemTime>,
    granted: Option<std::time::SystemTime>,
    now: std::time::SystemTime,
    hand_over: Duration,
) -> (AgentLiveness, Option<std::time::SystemTime>) {
    let plain = liveness_of(active, down);
    if plain != AgentLiveness::Dead {
        return (plain, None);
    }
    let until = stopped_at.map(|at| hand_over_end(at, now, hand_over)).into_iter().chain(granted).max();
    match until {
        Some(until) if now < until => (AgentLiveness::Restarting, Some(until)),
        _ => (plain, None),
    }
}

/// The graceful stop a node's hand-over counts from, as its agent's `report` says: its
/// `stoppedAt`. An agent of a release before 0.2.0 (a report that names no agent version but
/// has programmed a mode) never reports its stops: while one runs (an upgrade from 0.1.x
/// rolling), its member's going down counts as a graceful stop from when it was first seen
/// `down_since`. So a crash of such an agent keeps its addresses for the hand-over too; agents
/// of 0.2.0 on are told apart as before.
pub fn reported_stop(
    report: Option<&crate::model::NodeProxyState>,
    down_since: Option<std::time::SystemTime>,
) -> Option<std::time::SystemTime> {
    let report = report?;
    if report.agent_version.is_none() && report.mode.is_some() {
        return down_since;
    }
    report.stopped_at
}

/// When a node's hand-over counts from: its reported stop ([`reported_stop`]), or, once its
/// `report` shows the next agent running but not yet in the gossip (a sync that agent finished
/// after the stop), from that sync, but from no later than one hand-over after the stop. So a
/// successor that is visibly starting, on a machine slow enough that it could not join within
/// the hand-over, gets a hand-over of its own to join, and no stop keeps a node's addresses
/// longer than two hand-overs.
pub fn hand_over_from(
    report: Option<&crate::model::NodeProxyState>,
    down_since: Option<std::time::SystemTime>,
    hand_over: Duration,
) -> Option<std::time::SystemTime> {
    let stop = reported_stop(report, down_since)?;
    let successor = report.and_then(|r| r.last_sync).filter(|&synced| synced > stop);
    Some(successor.map_or(stop, |synced| synced.min(stop + hand_over)))
}

/// When the hand-over of a graceful stop reported at `stopped_at` ends (a stop reported in
/// the future counts from `now`).
pub fn hand_over_end(
    stopped_at: std::time::SystemTime,
    now: std::time::SystemTime,
    hand_over: Duration,
) -> std::time::SystemTime {
    stopped_at.min(now) + hand_over
}

/// The predecessor's graceful stop a starting agent keeps reporting until it has joined the
/// gossip ([`joined`]): its `predecessor` report's, as [`reported_stop`] reads it (an agent
/// before 0.2.0 stopped, as far as anyone knows, just `now`), only while that stop's hand-over
/// lasts.
pub fn inherited_stop(
    predecessor: Option<&crate::model::NodeProxyState>,
    now: std::time::SystemTime,
    hand_over: Duration,
) -> Option<std::time::SystemTime> {
    reported_stop(predecessor, Some(now)).filter(|&at| now < hand_over_end(at, now, hand_over))
}

/// Whether `node`'s agent has joined the gossip as far as its own member list says: another
/// node's agent is `active` beside it (that one has seen it, so the others soon will).
pub fn joined(active: &std::collections::BTreeSet<String>, node: &str) -> bool {
    active.iter().any(|n| n != node)
}

/// Whether an agent answers for its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// It answers.
    Answering,
    /// It reaches neither a strict majority of the nodes nor the API server: another node may
    /// have been given its addresses, so it stays silent until it is back.
    Fenced,
    /// Its view may be stale (the API server fell silent while doubted): it may announce what
    /// moved away meanwhile, so it stays silent until every watch has listed again.
    Stale,
}

/// What an agent knows of its reach when it decides whether to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// The nodes whose agents its gossip reaches, itself included.
    pub reached: usize,
    /// The nodes that count ([`Electorate`]).
    pub nodes: usize,
    /// Whether its source reaches the API server.
    pub api_reachable: bool,
    /// Whether its view may be stale after the API server's silence.
    pub view_stale: bool,
}

impl Reach {
    /// Whether it reaches a strict majority of the nodes.
    pub fn majority(&self) -> bool {
        self.reached * 2 > self.nodes
    }

    /// Whether to doubt the API server: in a minority, which may be a partition where the
    /// server's silence would go unnoticed for minutes (a watch's connection hangs), the
    /// source asks it at once and often.
    pub fn doubts_api(&self) -> bool {
        !self.majority()
    }
}

/// The self-fencing rule: an agent whose view may be stale is silent; one that reaches a
/// strict majority of the nodes (itself included) or the API server answers; one that reaches
/// neither is fenced. An API outage alone fences nobody, and neither does a dead peer in a
/// two-node cluster (the survivor reaches the API).
pub fn fencing(reach: Reach) -> Fencing {
    if reach.view_stale {
        Fencing::Stale
    } else if reach.api_reachable || reach.majority() {
        Fencing::Answering
    } else {
        Fencing::Fenced
    }
}

/// How long an agent that stopped answering still counts among the nodes an agent must reach
/// a strict majority of (while that agent is not fenced): a Node removed from the cluster
/// leaves the count this much later.
pub const FORGET: Duration = Duration::from_secs(300);

/// The nodes an agent counts for [`fencing`]'s majority: those its source knows (every Node in
/// a file-fed lab; in a cluster an agent reads only its own Node, as kube-proxy does) and
/// every agent its gossip has seen within [`FORGET`]. While fenced it forgets nobody: a
/// partition longer than that keeps the agent fenced until it heals.
#[derive(Debug, Clone, Default)]
pub struct Electorate {
    seen: std::collections::BTreeMap<String, std::time::Instant>,
}

impl Electorate {
    /// Takes in the agents `active` now (this one included) and returns how many nodes count,
    /// at least `known` (the source's Nodes).
    pub fn count<'a>(
        &mut self,
        active: impl IntoIterator<Item = &'a String>,
        known: usize,
        fenced: bool,
        now: std::time::Instant,
    ) -> usize {
        for node in active {
            self.seen.insert(node.clone(), now);
        }
        if !fenced {
            self.seen.retain(|_, at| now.saturating_duration_since(*at) < FORGET);
        }
        self.seen.len().max(known)
    }
}

/// The nodes whose agent has not yet reported clean-up `request` done, by name, at `now`. A
/// node whose agent stopped (`stoppedAt`) more than `hand_over` ago has no agent left to ask
/// and is not waited for; within it the DaemonSet's next agent may be starting (a rollout just
/// before the uninstall; a starting agent reports its predecessor's stop until it has joined),
/// and it sees the request as it starts.
pub fn cleanup_waiting_for<'a>(
    states: impl IntoIterator<Item = &'a NodeProxyState>,
    request: &str,
    now: std::time::SystemTime,
    hand_over: std::time::Duration,
) -> Vec<String> {
    let gone = |s: &NodeProxyState| s.stopped_at.is_some_and(|at| now >= hand_over_end(at, now, hand_over));
    states
        .into_iter()
        .filter(|s| !gone(s) && s.cleaned_up.as_deref() != Some(request))
        .map(|s| s.node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_seen_count_until_forgotten_and_a_fenced_agent_forgets_nobody() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t0 = std::time::Instant::now();
        let mut e = Electorate::default();
        assert_eq!(e.count(&names(&["a"]), 1, false, t0), 1, "only itself yet");
        assert_eq!(e.count(&names(&["a", "b", "c", "d"]), 1, false, t0), 4);
        // A partition: only itself reached, the others still count.
        let later = t0 + Duration::from_secs(2);
        let n = e.count(&names(&["a"]), 1, false, later);
        let reach = Reach { reached: 1, nodes: n, api_reachable: false, view_stale: false };
        assert_eq!((n, fencing(reach)), (4, Fencing::Fenced));
        // Fenced past FORGET: nobody forgotten, still fenced.
        let long = t0 + FORGET * 2;
        assert_eq!(e.count(&names(&["a"]), 1, true, long), 4);
        // Answering (the API reached) past FORGET: the gone ones leave the count.
        assert_eq!(e.count(&names(&["a", "b"]), 1, false, long), 2);
        assert_eq!(e.count(&names(&["a"]), 3, false, long), 3, "the source's Nodes at least");
    }

    #[test]
    fn a_starting_agent_inherits_a_stop_only_while_its_hand_over_lasts() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let h = Duration::from_secs(30);
        let stopped = |at: std::time::SystemTime| crate::model::NodeProxyState {
            agent_version: Some("0.2.0".into()),
            stopped_at: Some(at),
            ..Default::default()
        };
        assert_eq!(inherited_stop(None, now, h), None);
        let recent = now - Duration::from_secs(29);
        assert_eq!(inherited_stop(Some(&stopped(recent)), now, h), Some(recent));
        assert_eq!(inherited_stop(Some(&stopped(now - Duration::from_secs(30))), now, h), None, "ended");
        let ahead = now + Duration::from_secs(5);
        assert_eq!(
            inherited_stop(Some(&stopped(ahead)), now, h),
            Some(ahead),
            "a clock ahead counts from now"
        );
        let crashed = crate::model::NodeProxyState { stopped_at: None, ..stopped(now) };
        assert_eq!(inherited_stop(Some(&crashed), now, h), None, "a crash leaves no stop");
        let legacy = crate::model::NodeProxyState {
            mode: Some(crate::config::ProxyMode::Nftables),
            ..Default::default()
        };
        assert_eq!(inherited_stop(Some(&legacy), now, h), Some(now), "0.1.x: stopped just now");
        let me = |others: &[&str]| others.iter().map(|n| n.to_string()).collect();
        assert!(!joined(&me(&["node-a"]), "node-a") && joined(&me(&["node-a", "node-b"]), "node-a"));
    }

    #[test]
    fn an_agent_before_0_2_0_stops_gracefully_whenever_its_member_goes_down() {
        use crate::config::ProxyMode;
        use crate::model::NodeProxyState;
        let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let down = Some(at + Duration::from_secs(3));
        let legacy = NodeProxyState { mode: Some(ProxyMode::Nftables), ..Default::default() };
        assert_eq!(reported_stop(Some(&legacy), down), down, "0.1.x reports no stops");
        assert_eq!(reported_stop(Some(&legacy), None), None, "not down");
        let current = NodeProxyState { agent_version: Some("0.2.0".into()), ..legacy.clone() };
        assert_eq!(reported_stop(Some(&current), down), None, "a crash: moved at once");
        let stopped = NodeProxyState { stopped_at: Some(at), ..current };
        assert_eq!(reported_stop(Some(&stopped), down), Some(at));
        let unreported = NodeProxyState::default();
        assert_eq!(reported_stop(Some(&unreported), down), None, "no report yet: no stop");
        assert_eq!(reported_stop(None, down), None);
        // Counted from when it went down, not renewed on each look.
        let (l, until) = agent_liveness(false, true, down, None, at + Duration::from_secs(40), HAND_OVER);
        assert_eq!((l, until), (AgentLiveness::Dead, None), "its hand-over ended 30 s after it went down");
    }

    #[test]
    fn a_successor_seen_running_gets_a_hand_over_of_its_own_but_no_more() {
        use crate::model::NodeProxyState;
        let t = |s: u64| std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let h = HAND_OVER;
        let report = |stopped: Option<u64>, synced: Option<u64>| NodeProxyState {
            agent_version: Some("0.2.0".into()),
            stopped_at: stopped.map(t),
            last_sync: synced.map(t),
            ..Default::default()
        };
        let from = |r: NodeProxyState| hand_over_from(Some(&r), None, h);
        let table = [
            // stoppedAt, the report's last sync; the hand-over counts from
            (Some(100), Some(90), Some(100)), // the stopping agent's own last sync: the stop
            (Some(100), None, Some(100)),     // nothing synced since
            (Some(100), Some(112), Some(112)), // the successor synced, not joined: from its sync
            (Some(100), Some(150), Some(130)), // at most one hand-over after the stop
            (None, Some(112), None),          // joined (or crashed): no hand-over
        ];
        for (stopped, synced, want) in table {
            assert_eq!(from(report(stopped, synced)), want.map(t), "stopped {stopped:?}, synced {synced:?}");
        }
        // Still restarting 40 s after the stop when the successor synced at 112, not after 142.
        let at = from(report(Some(100), Some(112)));
        assert_eq!(agent_liveness(false, true, at, None, t(140), h).0, AgentLiveness::Restarting);
        assert_eq!(agent_liveness(false, true, at, None, t(142), h).0, AgentLiveness::Dead);
    }

    #[test]
    fn an_agent_is_down_for_good_once_it_did_not_rejoin_in_time() {
        let t = |ms: u64| std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let r = TIMINGS.rejoin;
        assert!(!down_for_good(None, t(10_000), r), "not down");
        assert!(!down_for_good(Some(t(1_000)), t(1_100), r), "may still rejoin");
        assert!(down_for_good(Some(t(1_000)), t(1_250), r));
        assert!(!down_for_good(Some(t(2_000)), t(1_000), r), "a clock step back waits");
    }

    #[test]
    fn detection_and_the_write_path_fit_in_two_seconds() {
        let worst = TIMINGS.worst_detection() + AFTER_DETECTION;
        assert!(worst <= Duration::from_secs(2), "{worst:?}");
        assert!(TIMINGS.probe_rtt < TIMINGS.probe_period);
        assert!(TIMINGS.suspicion >= TIMINGS.probe_period * 4, "room to refute a false suspicion");
        let slow = TIMINGS.scaled(10.0);
        assert_eq!(slow.worst_detection(), TIMINGS.worst_detection() * 10);
        assert_eq!(TIMINGS.scaled(0.1), TIMINGS, "never faster than tuned");
        assert_eq!(TIMINGS.scaled(f64::NAN), TIMINGS);
        assert_eq!(TIMINGS.scaled(1e9).suspicion, TIMINGS.suspicion * 100);
    }

    #[test]
    fn a_member_list_says_alive_dead_or_nothing() {
        use AgentLiveness::*;
        for (active, down, want) in
            [(true, false, Alive), (true, true, Alive), (false, true, Dead), (false, false, Unknown)]
        {
            assert_eq!(liveness_of(active, down), want, "active {active} down {down}");
        }
    }

    #[test]
    fn a_gracefully_stopped_agent_keeps_its_addresses_for_the_hand_over_only() {
        use std::time::UNIX_EPOCH;

        use AgentLiveness::*;
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(1_000 + s);
        let h = HAND_OVER;
        assert_eq!(agent_liveness(false, true, Some(t(0)), None, t(5), h), (Restarting, Some(t(30))));
        assert_eq!(
            agent_liveness(false, true, Some(t(0)), None, t(30), h),
            (Dead, None),
            "the hand-over is over"
        );
        assert_eq!(agent_liveness(false, true, None, None, t(5), h), (Dead, None), "a crash moves at once");
        assert_eq!(agent_liveness(true, false, Some(t(0)), None, t(5), h), (Alive, None), "back: alive");
        assert_eq!(agent_liveness(false, false, Some(t(0)), None, t(5), h), (Unknown, None));
        // The next agent reported (stoppedAt cleared) before its member joined: still handed over.
        assert_eq!(agent_liveness(false, true, None, Some(t(30)), t(6), h), (Restarting, Some(t(30))));
        assert_eq!(agent_liveness(false, true, None, Some(t(30)), t(30), h), (Dead, None), "and not longer");
        assert_eq!(
            agent_liveness(false, true, Some(t(500)), None, t(5), h),
            (Restarting, Some(t(35))),
            "a clock ahead"
        );
    }

    #[test]
    fn an_agent_fences_when_it_reaches_neither_a_majority_nor_the_api_or_its_view_is_stale() {
        use Fencing::*;
        let table = [
            // reached, nodes, API reachable, view stale; decided; API doubted
            (1, 1, false, false, Answering, false), // one node: itself is the majority
            (1, 2, true, false, Answering, true),   // two-node cluster, peer dead: the API answers
            (1, 2, false, false, Fenced, true),     // two-node cluster, cut off from both
            (2, 3, false, false, Answering, false), // majority side of a partition
            (1, 3, false, false, Fenced, true),     // minority side
            (1, 3, true, false, Answering, true),   // only the peers lost: the API decides
            (2, 4, false, false, Fenced, true),     // half is not a strict majority
            (3, 4, false, false, Answering, false),
            (4, 4, false, false, Answering, false), // API outage alone
            (0, 0, false, false, Fenced, true),     // knows no node: nothing to answer for safely
            (1, 3, true, true, Stale, true),        // healed, not yet listed again
            (3, 3, true, true, Stale, false),       // whatever it reaches
        ];
        for (reached, nodes, api_reachable, view_stale, want, doubted) in table {
            let reach = Reach { reached, nodes, api_reachable, view_stale };
            assert_eq!((fencing(reach), reach.doubts_api()), (want, doubted), "{reach:?}");
        }
    }

    #[test]
    fn an_uninstall_waits_for_every_running_agent_to_report_its_request_done() {
        let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let ago = |s: u64| Some(now - std::time::Duration::from_secs(s));
        let state = |node: &str, done: Option<&str>, stopped_at| NodeProxyState {
            node: node.into(),
            cleaned_up: done.map(Into::into),
            stopped_at,
            ..Default::default()
        };
        let states = [
            state("a", Some("9"), None),
            state("b", Some("8"), None),
            state("c", None, ago(30)),
            state("d", None, None),
            state("e", None, ago(5)),
        ];
        let hand_over = std::time::Duration::from_secs(30);
        assert_eq!(
            cleanup_waiting_for(&states, "9", now, hand_over),
            ["b", "d", "e"],
            "an earlier request does not count; an agent stopped for longer than the hand-over is \
             not waited for, one stopped within it may be followed by the next"
        );
    }
}

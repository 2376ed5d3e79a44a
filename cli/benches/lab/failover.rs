//! Layer-2 failover figures: the faults a cluster has, made with the lab's fault commands on
//! the node announcing svc1's address, each `TRIALS` times (default 20):
//!
//! * the announcing agent killed (`lab kill agent`; its Node stays Ready), then started again;
//! * the announcing node off the network (`lab node NODE down`; Ready for the grace period),
//!   then back;
//! * the announcing node partitioned (`lab partition`: only outside hosts reach it), then
//!   healed;
//! * the API server down for everyone (`lab api down`), then up: the address must stay.
//!
//! Per trial: the time from the fault command's start to the first successful `curl` of the
//! address from `mypc` through a node other than the old announcer (its neighbour entry
//! pointing elsewhere before and after; for the API outage, through any node), and the longest
//! run of ARP probes (one every 20 ms from a second outside host, `probe`) that two nodes
//! answered, over the fault, the repair and a short while after.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::arp_probe::{self, Prober};
use crate::{NAME, announcer, mac, ms, pct, status, tideway};

/// svc1's address in the demo.
const LB: Ipv4Addr = Ipv4Addr::new(172, 18, 255, 200);
/// The second outside host, which sends the ARP probes (so they do not touch `mypc`'s
/// neighbour table, whose entry the curls follow).
pub(crate) const PROBE_HOST: (&str, Ipv4Addr) = ("probe", Ipv4Addr::new(172, 18, 0, 101));
/// How long a trial waits for the address to be served again.
const PATIENCE: Duration = Duration::from_secs(15);

/// One kind of fault.
#[derive(Debug, Clone, Copy)]
enum Scenario {
    AgentKilled,
    NodeDown,
    Partition,
    ApiDown,
}

impl Scenario {
    fn describe(self) -> &'static str {
        match self {
            Scenario::AgentKilled => "announcing agent killed (Node stays Ready)",
            Scenario::NodeDown => "announcing node off the network (Node Ready for the grace period)",
            Scenario::Partition => "announcing node partitioned, then healed",
            Scenario::ApiDown => "API server down for every component, then up",
        }
    }

    fn fault(self, node: &str) -> Vec<&str> {
        match self {
            Scenario::AgentKilled => vec!["kill", "agent", node],
            Scenario::NodeDown => vec!["node", node, "down"],
            Scenario::Partition => vec!["partition", node],
            Scenario::ApiDown => vec!["api", "down"],
        }
    }

    fn repair(self, node: &str) -> Vec<&str> {
        match self {
            Scenario::AgentKilled => vec!["start", "agent", node],
            Scenario::NodeDown => vec!["node", node, "up"],
            Scenario::Partition => vec!["heal", node],
            Scenario::ApiDown => vec!["api", "up"],
        }
    }

    /// Whether the address must move to another node.
    fn moves(self) -> bool {
        !matches!(self, Scenario::ApiDown)
    }

    /// How long the fault stays after the address is served again: a partition lasts until
    /// the cut-off node has fenced itself (so both of its dual-answer windows are seen).
    fn hold(self) -> Duration {
        match self {
            Scenario::Partition => Duration::from_millis(1500),
            _ => Duration::from_millis(500),
        }
    }
}

fn lab(args: &[&str]) {
    let mut all = vec!["lab"];
    all.extend(args);
    all.extend(["--name", NAME]);
    tideway(&all);
}

/// Waits until every node's agent runs, is synced and on the network, and the API is up.
fn settled() {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let s = status();
        let nodes = s["nodes"].as_array().expect("nodes");
        let ok = nodes.iter().all(|n| n["agent"] == "running" && n["synced"] == true && n["network"] == "up");
        if ok && s["api"] == "up" && announcer("svc1").is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the lab did not settle after a repair: {}", status());
}

struct Trial {
    /// Fault to the first curl served (through another node when the address must move).
    served: Option<Duration>,
    /// Curls through the new node that failed before that one.
    failed_curls: usize,
    /// Fault to the first ARP probe another node answered (the address moved).
    answered_elsewhere: Option<Duration>,
    /// The longest run of probes two nodes answered: while the fault lasted, and from the
    /// repair on.
    dual: (Duration, Duration),
    /// Another node answered ARP for the address (than the announcer before the fault).
    moved: bool,
}

fn trial(scenario: Scenario, macs: &BTreeMap<String, String>) -> Trial {
    let old = announcer("svc1").expect("svc1 is announced");
    let old_mac = macs.iter().find(|(_, n)| **n == old).map(|(m, _)| m.clone()).expect("the announcer's MAC");
    let probe = Prober::start(&format!("tw-{NAME}-h-{}", PROBE_HOST.0), PROBE_HOST.1, LB);
    let started = Instant::now();
    lab(&scenario.fault(&old));
    let (served, failed_curls) = arp_probe::first_curl_through_another(
        &format!("tw-{NAME}-h-mypc"),
        LB,
        scenario.moves().then(|| old_mac.clone()),
        started,
        PATIENCE,
    )
    .join()
    .expect("curl thread");
    if served.is_none() {
        explain_unserved(scenario, &old);
    }
    std::thread::sleep(scenario.hold());
    let repaired = Instant::now();
    lab(&scenario.repair(&old));
    settled();
    // A while after the repair: a node that comes back must not answer for what moved.
    std::thread::sleep(Duration::from_millis(1000));
    let rounds = probe.stop();
    let moved = arp_probe::answered(&rounds).iter().any(|m| arp_probe::fmt_mac(m) != old_mac);
    let answered_elsewhere =
        arp_probe::first_answer_not_from(&rounds, &old_mac).map(|t| t.saturating_duration_since(started));
    let (during, after): (arp_probe::Rounds, arp_probe::Rounds) =
        rounds.into_iter().partition(|(sent, _)| *sent < repaired);
    let dual = (arp_probe::longest_dual_answer(&during), arp_probe::longest_dual_answer(&after));
    Trial { served, failed_curls, answered_elsewhere, dual, moved }
}

/// What the lab looked like when a trial was never served: each node's agent, network,
/// fence and announcements, and svc1's announcer.
fn explain_unserved(scenario: Scenario, old: &str) {
    let s = status();
    println!(
        "  not served ({}; fault on {old}); svc1 announced by {:?}",
        scenario.describe(),
        announcer("svc1")
    );
    for n in s["nodes"].as_array().into_iter().flatten() {
        let name = n["name"].as_str().unwrap_or_default();
        println!(
            "    {name}: agent {}, network {}, synced {}, announcing {}, fenced {:?}",
            n["agent"],
            n["network"],
            n["synced"],
            n["announcing"],
            super::steady::fenced(&s, name)
        );
    }
}

fn report(scenario: Scenario, trials: &[Trial], took: Duration) {
    let served: Vec<Duration> = trials.iter().filter_map(|t| t.served).collect();
    let missed = trials.len() - served.len();
    let longest = |d: Vec<Duration>| (pct(d.clone(), 1.0), d.iter().filter(|d| !d.is_zero()).count());
    let (during, with_during) = longest(trials.iter().map(|t| t.dual.0).collect());
    let (after, with_after) = longest(trials.iter().map(|t| t.dual.1).collect());
    let moved = trials.iter().filter(|t| t.moved).count();
    let to = if scenario.moves() { "through the new announcer" } else { "(any node)" };
    println!("failover: {} ({} trials, {:.0} s)", scenario.describe(), trials.len(), took.as_secs_f64());
    if served.is_empty() {
        println!("  fault to the first curl {to}: never within {} s", PATIENCE.as_secs());
    } else {
        println!(
            "  fault to the first curl {to}: median {}, max {}{}",
            ms(pct(served.clone(), 0.5)),
            ms(pct(served, 1.0)),
            if missed > 0 {
                format!(" ({missed} trials: not within {} s)", PATIENCE.as_secs())
            } else {
                String::new()
            }
        );
    }
    let runs: Vec<String> = trials.iter().map(|t| t.served.map_or("-".into(), ms)).collect();
    println!("  runs: {}", runs.join(", "));
    if scenario.moves() {
        let arp: Vec<Duration> = trials.iter().filter_map(|t| t.answered_elsewhere).collect();
        if !arp.is_empty() {
            println!(
                "  fault to another node answering ARP for the address: median {}, max {} ({} of {} trials)",
                ms(pct(arp.clone(), 0.5)),
                ms(pct(arp.clone(), 1.0)),
                arp.len(),
                trials.len()
            );
        }
        let arp_runs: Vec<String> =
            trials.iter().map(|t| t.answered_elsewhere.map_or("-".into(), ms)).collect();
        println!("  runs: {}", arp_runs.join(", "));
        let failed: Vec<String> = trials.iter().map(|t| t.failed_curls.to_string()).collect();
        println!("  curls through the new node that failed first (1 s limit each): {}", failed.join(", "));
    }
    println!(
        "  two nodes answering ARP for the address: longest {} during the fault (in {with_during} of {n} trials), {} after the repair (in {with_after})",
        ms(during),
        ms(after),
        n = trials.len()
    );
    println!("  another node answered for the address in {moved} of {} trials", trials.len());
}

/// Runs every scenario `trials` times on the running lab and prints the figures.
pub(crate) fn run(trials: usize) {
    let macs: BTreeMap<String, String> = status()["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["name"].as_str().expect("name").to_string())
        .map(|n| (mac(&n), n))
        .collect();
    settled();
    for scenario in [Scenario::AgentKilled, Scenario::NodeDown, Scenario::Partition, Scenario::ApiDown] {
        let started = Instant::now();
        let results: Vec<Trial> = (0..trials).map(|_| trial(scenario, &macs)).collect();
        report(scenario, &results, started.elapsed());
    }
}

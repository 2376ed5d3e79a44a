//! Layer-2 failover, MetalLB against Tideway in one kube lab (`PARTS=l2`; root): the lab of
//! `l2.yaml` runs kube-proxy and MetalLB (from their images and manifests) beside Tideway, each
//! announcing one Service's address from two nodes of its own. For each, `TRIALS` times
//! (default 20), on the node announcing the address (the MAC that answers ARP for it):
//!
//! * the announcer killed: Tideway's agent or MetalLB's speaker SIGKILLed (`lab kill`); the
//!   Node stays Ready and its kubelet restarts the container at once. The Pods are deleted
//!   before each such trial, so that the restart comes at once, not after kubelet's back-off;
//! * the node off the network (`lab node NODE down`, Ready for the grace period), then back.
//!
//! Per trial, from an ARP probe every 20 ms from an outside host (`probe`): the fault to the
//! first answer from another node, the longest run of probes nobody answered, and the longest
//! run two nodes answered; for the node off the network also the fault to the first curl from
//! `mypc` served through another node.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use tideway_tests::netns::eventually;

use crate::arp_probe::{self, Prober};

const BIN: &str = env!("CARGO_BIN_EXE_tideway");
const NAME: &str = "peerl2";
const LAB: &str = include_str!("l2.yaml");
/// MetalLB's pool and L2Advertisement, applied once MetalLB's webhook answers.
const METALLB: &str = include_str!("l2-metallb.yaml");
/// The outside host that probes, and its address.
const PROBE: (&str, std::net::Ipv4Addr) = ("probe", std::net::Ipv4Addr::new(172, 18, 0, 101));
/// How long a trial waits for the address to answer from another node.
const PATIENCE: Duration = Duration::from_secs(20);

/// Who announces, and how its announcer is killed and found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum System {
    Tideway,
    MetalLb,
}

impl System {
    fn service(self) -> &'static str {
        match self {
            System::Tideway => "by-tideway",
            System::MetalLb => "by-metallb",
        }
    }

    /// `lab kill`'s name for the announcer, and its Pods' namespace and labels.
    fn announcer(self) -> (&'static str, &'static str, &'static str) {
        match self {
            System::Tideway => ("agent", "tideway-system", "app.kubernetes.io/component=agent"),
            System::MetalLb => ("speaker", "metallb-system", "component=speaker"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Tideway => "tideway",
            System::MetalLb => "metallb",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    Killed,
    NodeDown,
}

impl Fault {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Fault::Killed => "announcer killed (Node Ready, kubelet restarts it)",
            Fault::NodeDown => "announcing node off the network",
        }
    }
}

/// One trial's figures.
pub(crate) struct Trial {
    /// Fault to the first ARP answer from another node (never within [`PATIENCE`]: `None`).
    pub(crate) elsewhere: Option<Duration>,
    /// The longest run of probes nobody answered.
    pub(crate) unanswered: Duration,
    /// The longest run of probes two nodes answered.
    pub(crate) dual: Duration,
    /// Fault to the first curl served through another node (node off the network only).
    pub(crate) served: Option<Duration>,
}

fn tideway(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("tideway");
    assert!(out.status.success(), "tideway {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lab(args: &[&str]) -> String {
    let mut all = vec!["lab"];
    all.extend(args);
    all.extend(["--name", NAME]);
    tideway(&all)
}

fn status() -> Value {
    serde_json::from_str(&lab(&["status", "--json"])).expect("lab status")
}

fn kubectl(args: &[&str]) -> Result<String, String> {
    let kubeconfig = status()["kubeconfig"].as_str().expect("a kube lab").to_string();
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output();
    let out = out.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() { Ok(text) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// The address `svc` was given.
fn address(svc: &str) -> Option<std::net::Ipv4Addr> {
    let ip = kubectl(&["get", "svc", svc, "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"]).ok()?;
    ip.trim().parse().ok()
}

/// Each node's MAC on the node network.
fn macs() -> Vec<(String, String)> {
    let nodes = status()["nodes"].as_array().cloned().unwrap_or_default();
    let names = nodes.iter().filter_map(|n| n["name"].as_str().map(str::to_string));
    names.map(|n| (mac_of(&format!("tw-{NAME}-n-{n}")), n)).collect()
}

/// The MAC of `eth0` in namespace `ns`.
fn mac_of(ns: &str) -> String {
    let out = Command::new("ip").args(["netns", "exec", ns, "cat", "/sys/class/net/eth0/address"]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

/// The nodes that answer ARP for `ip` over `over`.
fn answering(ip: std::net::Ipv4Addr, over: Duration) -> Vec<String> {
    let probe = Prober::start(&format!("tw-{NAME}-h-{}", PROBE.0), PROBE.1, ip);
    std::thread::sleep(over);
    let macs = macs();
    let answered = arp_probe::answered(&probe.stop());
    let node =
        |m: &[u8; 6]| macs.iter().find(|(mac, _)| *mac == arp_probe::fmt_mac(m)).map(|(_, n)| n.clone());
    answered.iter().map(|m| node(m).unwrap_or_else(|| arp_probe::fmt_mac(m))).collect()
}

/// Every Pod Ready, `svc`'s address answered by one node and served: the node.
fn settled(svc: &str) -> (std::net::Ipv4Addr, String) {
    let ready = ["wait", "--for=condition=Ready", "pods", "--all", "-A", "--timeout=10s"];
    eventually(Duration::from_secs(180), || kubectl(&ready)).expect("every Pod Ready");
    let ip = eventually(Duration::from_secs(120), || {
        let ip = address(svc).ok_or_else(|| format!("{svc} has no address"))?;
        let nodes = answering(ip, Duration::from_millis(1500));
        if nodes.len() == 1 && curl(ip) {
            Ok(ip)
        } else {
            Err(format!("{svc} ({ip}): answered by {nodes:?}"))
        }
    });
    let ip = ip.unwrap_or_else(|e| panic!("{svc} answered by one node and served: {e}"));
    let node = answering(ip, Duration::from_millis(500)).pop().expect("one node answers");
    (ip, node)
}

/// One curl of `ip` from `mypc` served.
fn curl(ip: std::net::Ipv4Addr) -> bool {
    let ip = ip.to_string();
    let mut curl = Command::new(BIN);
    curl.args(["lab", "exec", "--name", NAME, "mypc", "--", "curl", "-s", "--max-time", "1", &ip]);
    curl.output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Hostname:"))
}

/// Starts the lab (`archive`: Tideway's image).
pub(crate) fn up(archive: &str) {
    let _ = Command::new(BIN).args(["lab", "down", "--name", NAME]).output();
    let file = std::env::temp_dir().join(format!("tideway-peerl2-{}.yaml", std::process::id()));
    std::fs::write(&file, LAB).expect("the lab file");
    let file = file.display().to_string();
    let peers = ["--peers", "kube-proxy,metallb", "--image", archive];
    let mut args = vec!["lab", "up", "--detach", "--kube", "--name", NAME, "-f", &file];
    args.extend(peers);
    tideway(&args);
    let pool = std::env::temp_dir().join(format!("tideway-peerl2-metallb-{}.yaml", std::process::id()));
    std::fs::write(&pool, METALLB).expect("MetalLB's objects");
    let pool = pool.display().to_string();
    eventually(Duration::from_secs(120), || kubectl(&["apply", "-f", &pool]))
        .expect("MetalLB's pool applied");
}

pub(crate) fn down() {
    let _ = Command::new(BIN).args(["lab", "down", "--name", NAME]).output();
}

/// One trial of `fault` against `system`.
pub(crate) fn trial(system: System, fault: Fault) -> Trial {
    let (container, namespace, labels) = system.announcer();
    if fault == Fault::Killed {
        // Fresh Pods, whose first restart kubelet makes at once (a restarted one waits 10 s).
        kubectl(&["delete", "pods", "-n", namespace, "-l", labels, "--wait=true"])
            .expect("the announcers' Pods deleted");
    }
    let (ip, old) = settled(system.service());
    let old_mac = macs().into_iter().find(|(_, n)| *n == old).map(|(m, _)| m).expect("the announcer's MAC");
    let probe = Prober::start(&format!("tw-{NAME}-h-{}", PROBE.0), PROBE.1, ip);
    let started = Instant::now();
    let mypc = format!("tw-{NAME}-h-mypc");
    let curls = (fault == Fault::NodeDown)
        .then(|| arp_probe::first_curl_through_another(&mypc, ip, Some(old_mac.clone()), started, PATIENCE));
    match fault {
        Fault::Killed => lab(&["kill", container, &old]),
        Fault::NodeDown => lab(&["node", &old, "down"]),
    };
    // Until the address answers from another node, or patience runs out; then a while more.
    while started.elapsed() < PATIENCE && answering(ip, Duration::from_millis(300)).iter().all(|n| *n == old)
    {
    }
    std::thread::sleep(Duration::from_secs(2));
    let rounds = probe.stop();
    let served = curls.and_then(|c| c.join().expect("the curls").0);
    if fault == Fault::NodeDown {
        lab(&["node", &old, "up"]);
    }
    let elsewhere =
        arp_probe::first_answer_not_from(&rounds, &old_mac).map(|t| t.saturating_duration_since(started));
    Trial {
        elsewhere: elsewhere.filter(|d| *d <= PATIENCE),
        unanswered: arp_probe::longest_run(&rounds, <[[u8; 6]]>::is_empty),
        dual: arp_probe::longest_dual_answer(&rounds),
        served,
    }
}

/// Every fault `trials` times against each system, alternating; the table.
pub(crate) fn run(trials: usize) {
    up(&tideway_tests::image_archive().display().to_string());
    let mut all = Vec::new();
    for fault in [Fault::Killed, Fault::NodeDown] {
        let (mut metallb, mut tideway) = (Vec::new(), Vec::new());
        let started = Instant::now();
        for _ in 0..trials {
            metallb.push(trial(System::MetalLb, fault));
            tideway.push(trial(System::Tideway, fault));
        }
        println!("l2: {} ({trials} trials each, {:.0} s)", fault.describe(), started.elapsed().as_secs_f64());
        for (system, runs) in [(System::MetalLb, &metallb), (System::Tideway, &tideway)] {
            println!("  {} runs: {}", system.name(), runs.iter().map(shown).collect::<Vec<_>>().join("; "));
        }
        all.push((fault, metallb, tideway));
    }
    down();
    print_table(&all);
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn shown(t: &Trial) -> String {
    let or_never = |d: Option<Duration>| d.map_or("never".into(), ms);
    let served = t.served.map(|s| format!(", served {}", ms(s))).unwrap_or_default();
    format!(
        "elsewhere {}, unanswered {}, dual {}{served}",
        or_never(t.elsewhere),
        ms(t.unanswered),
        ms(t.dual)
    )
}

/// Median and max of `v` ("never" when empty), and how many of `of` trials it holds.
fn spread(mut v: Vec<Duration>, of: usize) -> (String, Option<Duration>) {
    v.sort();
    let Some(max) = v.last().copied() else { return ("never".into(), None) };
    let median = v[v.len() / 2];
    let missing = if v.len() < of { format!(" ({} of {of})", v.len()) } else { String::new() };
    (format!("{} / {}{missing}", ms(median), ms(max)), Some(median))
}

type Figure = fn(&Trial) -> Option<Duration>;

fn print_table(all: &[(Fault, Vec<Trial>, Vec<Trial>)]) {
    let figures: [(&str, Figure); 4] = [
        ("fault to an answer from another node (median / max)", |t| t.elsewhere),
        ("longest run nobody answered ARP (median / max)", |t| Some(t.unanswered)),
        ("longest run two nodes answered ARP (median / max)", |t| Some(t.dual)),
        ("fault to a curl served through another node (median / max)", |t| t.served),
    ];
    println!("\n| layer 2 | metallb | tideway | ratio (above 1: Tideway better) |\n|---|---|---|---|");
    for (fault, metallb, tideway) in all {
        for (what, figure) in figures {
            if *fault == Fault::Killed && what.contains("curl") {
                continue;
            }
            let (m, m_median) = spread(metallb.iter().filter_map(figure).collect(), metallb.len());
            let (t, t_median) = spread(tideway.iter().filter_map(figure).collect(), tideway.len());
            let ratio = match (m_median, t_median) {
                (Some(m), Some(t)) if !t.is_zero() => format!("{:.1}", m.as_secs_f64() / t.as_secs_f64()),
                _ => "–".into(),
            };
            println!("| {}: {what} | {m} | {t} | {ratio} |", fault.describe());
        }
    }
}

//! BGP figures on `examples/bgp.yaml` (its own lab, `bench-bgp`): three workers whose agents
//! drive their FRR, peering with router `tor` (BFD at 100 ms × 3), one whoami pod per worker.
//!
//! * **BFD withdrawal**, `TRIALS` times (default 20), rotating over the workers: a node's link
//!   to the node network taken down (its port on the LAN bridge, as `lab node NODE down` does)
//!   to the router's kernel route for the `Cluster` Service's address no longer naming it;
//!   then the link back up and the route whole again before the next trial.
//! * **ETP Local withdrawal**, `TRIALS` times: the last pod of the `Local` Service on worker3
//!   deleted (`lab delete`) to the router's route no longer naming worker3; then the pod back.
//! * **Spread**: 1,000 connections from `far` (behind the router) to the `Local` Service's
//!   address, counted by the pod that answered (one per node: the node the router chose).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{BIN, ms, pct, tideway};

const LAB: &str = "bench-bgp";
const FILE: &str = include_str!("../../../examples/bgp.yaml");
const NODES: [(&str, &str); 3] =
    [("myk8s-worker", "172.18.0.4"), ("myk8s-worker2", "172.18.0.5"), ("myk8s-worker3", "172.18.0.3")];
const POD3: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: webpod3, labels: {app: webpod}}\nspec:\n  nodeName: myk8s-worker3\n  containers: [{name: container, image: traefik/whoami, ports: [{containerPort: 80}]}]\n";
/// How long one trial may take before the run gives up.
const PATIENCE: Duration = Duration::from_secs(30);

/// The router's next hops for `ip`, sorted.
fn next_hops(ip: &str) -> Vec<String> {
    tideway_lab::frr::bgp_routes(&format!("tw-{LAB}-r-tor")).remove(ip).unwrap_or_default()
}

/// Polls the router (every 2 ms) until `done(next hops)`; how long since `since`.
fn until(ip: &str, since: Instant, done: impl Fn(&[String]) -> bool) -> Duration {
    loop {
        if done(&next_hops(ip)) {
            return since.elapsed();
        }
        assert!(since.elapsed() < PATIENCE, "the router's route to {ip} stayed {:?}", next_hops(ip));
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn whole(hops: &[String]) -> bool {
    NODES.iter().all(|(_, ip)| hops.iter().any(|h| h == ip))
}

fn without(node_ip: &str) -> impl Fn(&[String]) -> bool + '_ {
    move |hops| !hops.is_empty() && !hops.iter().any(|h| h == node_ip)
}

/// The address of Service `svc`.
fn lb_ip(svc: &str) -> String {
    let status: serde_json::Value =
        serde_json::from_str(&tideway(&["lab", "status", "--json", "--name", LAB])).expect("status");
    let svcs = status["services"].as_array().cloned().unwrap_or_default();
    let found =
        svcs.iter().find(|s| s["name"] == svc).and_then(|s| s["externalIPs"][0].as_str().map(String::from));
    found.unwrap_or_else(|| panic!("{svc} has no address: {status}"))
}

fn link(node: &str, up: bool) {
    let port = tideway_lab::topology::lan_port('n', node);
    let state = if up { "up" } else { "down" };
    let ok = Command::new("ip").args(["-n", &format!("tw-{LAB}-lan"), "link", "set", &port, state]).status();
    assert!(ok.is_ok_and(|s| s.success()), "ip link set {port} {state}");
}

fn change(how: &str, text: &str) {
    let path = std::env::temp_dir().join(format!("tideway-bench-bgp-{}.yaml", std::process::id()));
    std::fs::write(&path, text).expect("write");
    tideway(&["lab", how, "--name", LAB, "-f", &path.display().to_string()]);
}

fn summary(what: &str, v: &[Duration], bound: Duration) {
    let within = v.iter().filter(|d| **d <= bound).count();
    println!(
        "{what}: median {}, p90 {}, max {} ({within}/{} within {}; trials: {})",
        ms(pct(v.to_vec(), 0.5)),
        ms(pct(v.to_vec(), 0.9)),
        ms(pct(v.to_vec(), 1.0)),
        v.len(),
        ms(bound),
        v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
    );
}

/// Brings the lab up, prints the three figures, takes it down.
pub(crate) fn run(trials: usize) {
    let _ = Command::new(BIN).args(["lab", "down", "--name", LAB]).output();
    let path = std::env::temp_dir().join(format!("tideway-bench-bgp-lab-{}.yaml", std::process::id()));
    std::fs::write(&path, FILE).expect("write");
    tideway(&["lab", "up", "--detach", "--name", LAB, "-f", &path.display().to_string()]);
    let (web, local) = (lb_ip("web"), lb_ip("web-local"));
    until(&web, Instant::now(), whole);
    until(&local, Instant::now(), whole);
    let mut bfd = Vec::new();
    for i in 0..trials {
        let (node, ip) = NODES[i % NODES.len()];
        let since = Instant::now();
        link(node, false);
        bfd.push(until(&web, since, without(ip)));
        link(node, true);
        until(&web, Instant::now(), whole);
        until(&local, Instant::now(), whole);
        // BFD comes up after BGP: let the session settle before the next cut.
        std::thread::sleep(Duration::from_secs(2));
    }
    summary(
        "BGP: a node's link down to the router's route dropping it (BFD 100 ms x 3)",
        &bfd,
        Duration::from_secs(1),
    );
    let mut local_moves = Vec::new();
    for _ in 0..trials {
        let since = Instant::now();
        change("delete", POD3);
        local_moves.push(until(&local, since, without(NODES[2].1)));
        change("apply", POD3);
        until(&local, Instant::now(), whole);
        std::thread::sleep(Duration::from_millis(500));
    }
    summary(
        "BGP: the last local endpoint deleted to the node's withdrawal (ETP Local)",
        &local_moves,
        Duration::from_secs(1),
    );
    spread(&local, 1000);
    tideway(&["lab", "down", "--name", LAB]);
}

/// `n` connections from `far` to `ip`, counted by the pod (one per node) that answered.
fn spread(ip: &str, n: usize) {
    let script = format!(
        "for i in $(seq {n}); do curl -s --max-time 2 -H 'Connection: close' http://{ip}/ | grep -m1 Hostname; done"
    );
    let started = Instant::now();
    let out =
        Command::new("ip").args(["netns", "exec", &format!("tw-{LAB}-h-far"), "sh", "-c", &script]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let mut by_pod: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        *by_pod.entry(line.trim_start_matches("Hostname: ").to_string()).or_default() += 1;
    }
    let answered: usize = by_pod.values().sum();
    let (lo, hi) = (by_pod.values().min().copied().unwrap_or(0), by_pod.values().max().copied().unwrap_or(0));
    println!(
        "BGP: {n} connections from behind the router over 3 advertising nodes (ETP Local, layer-4 hash): {answered} answered in {:.1} s, per node {by_pod:?}, fewest {lo} / most {hi} (even: {})",
        started.elapsed().as_secs_f64(),
        n / 3
    );
}

//! `tideway lab` figures (root; `make bench-lab`):
//!
//! * `lab up` of the built-in demo to the first successful curl of a LoadBalancer IP from the
//!   outside client;
//! * layer-2 failover under the faults a cluster has (agent killed, node down, partition and
//!   heal, API down), `TRIALS` times each (default 20): the fault to the first curl through the
//!   new announcer, and the longest time two nodes answered ARP for the address (`failover`);
//! * the fault-free run: the demo left alone for `STEADY_SECONDS` (default 600) with every CPU
//!   kept busy (`LOAD` threads), counting false failovers (`steady`);
//! * network programming latency: a Service added with `lab apply` to its ClusterIP accepting
//!   connections on every node (p50 and p99 over `SERVICES` Services, default 100, applied one
//!   at a time, 250 ms apart so the agents' `minSyncPeriod` does not throttle them);
//! * BGP through the lab's router (`bgp`, its own lab of `examples/bgp.yaml`): BFD and ETP
//!   Local withdrawal, `TRIALS` times each, and the spread of 1,000 connections over 3 nodes.
//!
//! `cargo bench -p tideway --bench lab` (`MODE=nftables|iptables`, default nftables; a name
//! after `--` runs one part: `up`, `steady`, `failover`, `programming`, `bgp`).

#![allow(clippy::print_stdout)]

#[path = "lab/arp_probe.rs"]
mod arp_probe;
#[path = "lab/bgp.rs"]
mod bgp;
#[path = "lab/failover.rs"]
mod failover;
#[path = "lab/steady.rs"]
mod steady;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tideway");
const DEMO: &str = include_str!("../../examples/demo.yaml");
const NAME: &str = "bench";

fn tideway(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).stdin(Stdio::null()).output().expect("tideway");
    assert!(out.status.success(), "tideway {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn in_ns(ns: &str, cmd: &[&str]) -> String {
    let out = Command::new("ip").args(["netns", "exec", ns]).args(cmd).output().expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status() -> serde_json::Value {
    serde_json::from_str(&tideway(&["lab", "status", "--json", "--name", NAME])).expect("status")
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The demo in `mode`, with the failover prober's outside host and `extra` objects.
fn lab_file(mode: &str, extra: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("tideway-bench-lab-{}.yaml", std::process::id()));
    let (probe, ip) = failover::PROBE_HOST;
    let host = format!(
        "---\napiVersion: lab.tideway.io/v1alpha1\nkind: LabHost\nmetadata: {{name: {probe}}}\nspec: {{ip: {ip}}}\n"
    );
    let demo = DEMO.replace("mode: iptables", &format!("mode: {mode}"));
    std::fs::write(&path, format!("{demo}{host}{extra}")).unwrap();
    path
}

/// `lab up` to the first curl that gets an answer.
fn up_to_first_curl(mode: &str) -> Duration {
    let file = lab_file(mode, "");
    let started = Instant::now();
    let child = Command::new(BIN)
        .args(["lab", "up", "--detach", "--name", NAME, "-f", &file.display().to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("lab up");
    let mypc = format!("tw-{NAME}-h-mypc");
    let answered = loop {
        if started.elapsed() > Duration::from_secs(120) {
            break None;
        }
        if std::path::Path::new(&format!("/run/netns/{mypc}")).exists()
            && in_ns(&mypc, &["curl", "-s", "--max-time", "0.5", "172.18.255.200"]).contains("Hostname:")
        {
            break Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.wait_with_output();
    answered.expect("an answer within 2 minutes")
}

/// The node announcing Service `svc`'s address, if any.
fn announcer(svc: &str) -> Option<String> {
    let s = status();
    s["services"].as_array()?.iter().find(|x| x["name"] == svc)?["announcer"].as_str().map(str::to_string)
}

fn mac(node: &str) -> String {
    in_ns(&format!("tw-{NAME}-n-{node}"), &["cat", "/sys/class/net/eth0/address"]).trim().to_string()
}

/// Waits, from inside namespace `ns`, until a TCP connection to `addr` opens; returns when.
/// Attempts are short: before the rules exist the SYN is dropped, and a long wait would blur
/// the figure.
fn reachable_in(ns: String, addr: SocketAddr, since: Instant) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let fd = std::fs::File::open(format!("/run/netns/{ns}")).expect("namespace");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        loop {
            assert!(since.elapsed() < Duration::from_secs(30), "{addr} never reachable in {ns}");
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(5)).is_ok() {
                return since.elapsed();
            }
        }
    })
}

/// Services added one at a time: apply to reachable on every node.
fn programming_latency(mode: &str, n: usize) -> Vec<Duration> {
    let nodes: Vec<String> = status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    let mut extra = String::new();
    let mut out = Vec::new();
    for i in 0..n {
        extra.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: prog{i}}}\nspec:\n  clusterIP: 10.200.1.{}\n  selector: {{app: webpod}}\n  ports: [{{port: 80}}]\n",
            100 + i
        ));
        let file = lab_file(mode, &extra);
        let addr: SocketAddr = format!("10.200.1.{}:80", 100 + i).parse().unwrap();
        let started = Instant::now();
        let waiters: Vec<_> =
            nodes.iter().map(|n| reachable_in(format!("tw-{NAME}-n-{n}"), addr, started)).collect();
        tideway(&["lab", "apply", "--name", NAME, "-f", &file.display().to_string()]);
        out.push(waiters.into_iter().map(|w| w.join().expect("waiter")).max().unwrap_or_default());
        // Apart by more than the demo's minSyncPeriod (100 ms): each change on an idle lab,
        // not one throttled behind the previous.
        std::thread::sleep(Duration::from_millis(250));
    }
    out
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the lab benchmarks need root (network namespaces)");
        return;
    }
    let mode = std::env::var("MODE").unwrap_or_else(|_| "nftables".into());
    let services = std::env::var("SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let trials = std::env::var("TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let _ = Command::new(BIN).args(["lab", "down", "--name", NAME]).output();
    if run("up") {
        let mut ups = Vec::new();
        for _ in 0..3 {
            ups.push(up_to_first_curl(&mode));
            tideway(&["lab", "down", "--name", NAME]);
        }
        println!(
            "lab up ({mode}) to the first successful curl: median {} (runs: {})",
            ms(pct(ups.clone(), 0.5)),
            ups.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
        );
    }
    if run("bgp") {
        bgp::run(trials);
    }
    if !run("steady") && !run("failover") && !run("programming") {
        return;
    }
    up_to_first_curl(&mode);
    if run("steady") {
        let seconds = std::env::var("STEADY_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = std::env::var("LOAD").ok().and_then(|s| s.parse().ok()).unwrap_or(cpus);
        steady::run(seconds, threads);
    }
    if run("failover") {
        failover::run(trials);
    }
    if run("programming") {
        let lat = programming_latency(&mode, services);
        println!(
            "network programming ({mode}), Service applied to reachable on all {} nodes, {services} Services: p50 {}, p99 {}, max {}",
            status()["nodes"].as_array().unwrap().len(),
            ms(pct(lat.clone(), 0.5)),
            ms(pct(lat.clone(), 0.99)),
            ms(pct(lat, 1.0))
        );
    }
    tideway(&["lab", "down", "--name", NAME]);
}

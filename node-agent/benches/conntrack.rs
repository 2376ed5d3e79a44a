//! Clearing stale UDP conntrack entries: one ctnetlink socket (a dump, then batched deletes)
//! against the `conntrack` tool run once per flow, as the agent did before. Root; everything
//! happens in a network namespace of its own.
//!
//! `cargo bench -p tideway-node-agent --bench conntrack` (`FLOWS=10000`, `TOOL_FLOWS=1000`:
//! the tool is timed on fewer flows, its per-flow cost scaled to `FLOWS`).

#![allow(clippy::print_stdout)]

use std::time::Instant;

use tideway_core::net::IpFamily;
use tideway_node_agent::netlink::conntrack::Conntrack;
use tideway_tests::netns::Netns;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `n` UDP entries to 10.96.0.53:53 from 10.0.x.y:20000+, replies from a gone endpoint.
fn insert(ns: &Netns, n: usize) {
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do a=$((i / 250)); b=$((i % 250 + 1)); \
         conntrack -I -p udp -s 10.0.$a.$b -d 10.96.0.53 --sport 20000 --dport 53 -r 10.244.9.9 -q 10.0.$a.$b \
         --reply-port-src 5353 --reply-port-dst 20000 -t 600 >/dev/null 2>&1; i=$((i + 1)); done"
    );
    ns.sh(&script);
}

fn main() {
    if !tideway_tests::netns::is_root() {
        eprintln!("the conntrack benchmark needs root (a network namespace)");
        std::process::exit(2);
    }
    let (flows, tool_flows) = (env("FLOWS", 10_000), env("TOOL_FLOWS", 1_000));
    let ns = Netns::create("ctbench");
    eprintln!("inserting {flows} entries...");
    insert(&ns, flows);
    let (listed, dump, deleted, delete) = ns.run(move || {
        let mut ct = Conntrack::open().expect("ctnetlink");
        let t = Instant::now();
        let all = ct.udp_flows(IpFamily::V4).expect("dump");
        let dump = t.elapsed();
        let t = Instant::now();
        let deleted = ct.delete(&all).expect("delete");
        (all.len(), dump, deleted, t.elapsed())
    });
    println!(
        "netlink: listed {listed} UDP flows in {:.1} ms, deleted {deleted} in {:.1} ms ({:.1} us per flow)",
        dump.as_secs_f64() * 1e3,
        delete.as_secs_f64() * 1e3,
        delete.as_secs_f64() * 1e6 / deleted.max(1) as f64
    );
    eprintln!("inserting {flows} entries again...");
    insert(&ns, flows);
    let script = format!(
        "i=0; while [ $i -lt {tool_flows} ]; do a=$((i / 250)); b=$((i % 250 + 1)); \
         conntrack -D -p udp -f ipv4 -s 10.0.$a.$b -d 10.96.0.53 --sport 20000 --dport 53 >/dev/null 2>&1; \
         i=$((i + 1)); done"
    );
    let t = Instant::now();
    ns.sh(&script);
    let tool = t.elapsed();
    let per_flow = tool.as_secs_f64() / tool_flows as f64;
    println!(
        "tool:    deleted {tool_flows} flows one process each in {:.2} s ({:.1} ms per flow; {flows} flows: about {:.0} s)",
        tool.as_secs_f64(),
        per_flow * 1e3,
        per_flow * flows as f64
    );
    println!(
        "netlink vs tool, {flows} flows: {:.3} s vs about {:.0} s",
        (dump + delete).as_secs_f64(),
        per_flow * flows as f64
    );
}

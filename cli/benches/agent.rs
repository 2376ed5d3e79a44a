//! Node-agent benchmarks on the real kernel (needs root; everything runs in network namespaces
//! created for the purpose):
//!
//! * full sync of 10,000 Services x 10 endpoints: the agent (plan + render + apply) against a
//!   bare `nft -f` / `iptables-restore` of the same rendered text;
//! * one endpoint change at that scale, from the cluster event to the kernel;
//! * new TCP connections per second through a ClusterIP with 10 and with 10,000 Services;
//! * forwarding during a full sync: the longest wait of a TCP stream and a UDP ping through a
//!   ClusterIP while the agent resyncs, and while a restarted agent rewrites a deleted table
//!   ([`gap`]);
//! * the `tideway agent` process's memory and time to first sync with 10,000 Services x 10
//!   endpoints read from a file, and listed by a stand-in Kubernetes API server;
//! * nftables full sync of the same Services all random and with every tenth one Maglev: the
//!   agent's time and the kernel memory the rules take.
//!
//! `cargo bench -p tideway --bench agent` (`SERVICES=N` to change the scale, `MODES=nftables`
//! to measure one mode, e.g. at 100,000 Services where iptables takes minutes; a name after
//! `--` runs one part: `full`, `change`, `gap`, `rate`, `memory`, `maglev`).

#![allow(clippy::print_stdout)]

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::net::Protocol;
use tideway_core::plan::compile;
use tideway_core::render;
use tideway_core::testing::{
    mk_node, mk_node_context, mk_service, mk_slice, synthetic_cluster, synthetic_slice,
};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus};
use tideway_node_agent::dataplane::IPTABLES_BACKEND_ENV;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tideway_tests::netns::{Netns, is_root};

#[path = "agent/floors.rs"]
mod floors;
#[path = "agent/gap.rs"]
mod gap;
#[path = "agent/process.rs"]
mod process;
#[path = "agent/spans.rs"]
mod spans;

const ENDPOINTS: usize = 10;
const NODE: &str = "node-a";

fn services() -> usize {
    std::env::var("SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000)
}

/// The modes of `MODES` (comma-separated; default nftables and iptables).
fn modes() -> Vec<ProxyMode> {
    let text = std::env::var("MODES").unwrap_or_else(|_| "nftables,iptables".into());
    text.split(',').map(|m| m.trim().parse().unwrap_or_else(|e| panic!("MODES: {e}"))).collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The `q` quantile (nearest rank) of `v`.
fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `n` synthetic Services plus this node, as the agent's tracker holds them.
fn cluster(n: usize) -> ClusterState {
    let mut c = synthetic_cluster(n, ENDPOINTS);
    c.apply(mk_node(NODE, "192.168.0.10", "zone-a"));
    c.take_changes();
    c
}

/// An agent over `state`, in `mode`, plus a tokio runtime to drive it.
fn agent(state: ClusterState, mode: ProxyMode) -> (tokio::runtime::Runtime, Agent, SharedCluster) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let shared = SharedCluster::new();
    shared.update(|c| *c = state);
    let opts = AgentOptions { mode: Some(mode), ..AgentOptions::for_node(NODE) };
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let health = Arc::new(ProxyHealth::new(Duration::from_secs(30)));
    let agent = Agent::new(opts, shared.clone(), status, metrics, health);
    (rt, agent, shared)
}

/// The text a full sync hands the kernel tool, per family (empty families left out).
fn rendered(mode: ProxyMode, state: &ClusterState) -> Vec<(IpFamily, String)> {
    let ruleset = compile(state, &mk_node_context());
    IpFamily::ALL
        .into_iter()
        .map(|f| {
            let p = render::Renderer::new(mode, &ruleset).lower(f);
            let text = match mode {
                ProxyMode::Nftables => render::nftables::text::program(&p),
                _ => render::iptables::text::program(&p, &[]),
            };
            (f, text)
        })
        .collect()
}

fn bare_apply(mode: ProxyMode, texts: &[(IpFamily, String)]) {
    match mode {
        ProxyMode::Nftables => {
            let all: String = texts.iter().map(|(_, t)| t.as_str()).collect();
            pipe("nft", &["-f", "-"], &all);
        }
        _ => {
            let variant = iptables_variant();
            for (f, t) in texts {
                let tool = if *f == IpFamily::V4 { "iptables" } else { "ip6tables" };
                pipe(&format!("{tool}-{variant}-restore"), &["--noflush", "--wait"], t);
            }
        }
    }
}

/// The iptables backend both the agent and the bare apply use (`TIDEWAY_IPTABLES_BACKEND`;
/// `make bench` picks legacy, as iptables-nft-restore needs hours at 10,000 Services).
fn iptables_variant() -> String {
    std::env::var(IPTABLES_BACKEND_ENV).unwrap_or_else(|_| "nft".into())
}

fn pipe(tool: &str, args: &[&str], input: &str) {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tool");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{tool} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Full sync: agent vs bare tool, three samples each on a fresh namespace, then the same on a
/// namespace that already holds the rules (the periodic resync). For nftables, the agent's
/// commit (the kernel taking the batch) is printed apart from the rest of its sync.
fn full_sync(mode: ProxyMode, n: usize, spans: &spans::Spans) {
    let state = cluster(n);
    let texts = rendered(mode, &state);
    let bytes: usize = texts.iter().map(|(_, t)| t.len()).sum();
    let (mut first, mut resync, mut bare_first, mut bare_again) = (vec![], vec![], vec![], vec![]);
    let (mut parts_first, mut parts_resync) = (vec![], vec![]);
    for i in 0..3 {
        let ns = Netns::create(&format!("twbench-full-{i}"));
        let s = state.clone();
        let c = spans.clone();
        let (a, b, ca, cb) = ns.run(move || {
            let (rt, mut agent, _) = agent(s, mode);
            c.take();
            let t = Instant::now();
            rt.block_on(agent.sync(true)).expect("first sync");
            let (a, ca) = (t.elapsed(), c.take());
            let t = Instant::now();
            rt.block_on(agent.sync(true)).expect("resync");
            (a, t.elapsed(), ca, c.take())
        });
        first.push(a);
        resync.push(b);
        parts_first.push(ca);
        parts_resync.push(cb);
        let ns = Netns::create(&format!("twbench-bare-{i}"));
        let texts = texts.clone();
        let (a, b) = ns.run(move || {
            let t = Instant::now();
            bare_apply(mode, &texts);
            let a = t.elapsed();
            let t = Instant::now();
            bare_apply(mode, &texts);
            (a, t.elapsed())
        });
        bare_first.push(a);
        bare_again.push(b);
    }
    let backend = if mode == ProxyMode::Iptables {
        format!(" (iptables-{})", iptables_variant())
    } else {
        String::new()
    };
    println!(
        "full sync, {mode}{backend}, {n} services x {ENDPOINTS} endpoints ({} KiB of rules):",
        bytes / 1024
    );
    let rows = [
        ("empty kernel:  ", first, parts_first, bare_first),
        ("rules in place:", resync, parts_resync, bare_again),
    ];
    for (label, agent, parts, bare) in rows {
        let part = |f: fn(&spans::Parts) -> Duration| median(parts.iter().map(f).collect());
        let (commit, plan, apply) = (part(|p| p.commit), part(|p| p.plan), part(|p| p.apply));
        let (agent, bare) = (median(agent), median(bare));
        let split = if mode == ProxyMode::Nftables {
            format!(
                " (commit {}, the rest {}: plan {}, lower and encode {}, other {}; sync / commit {:.2})",
                ms(commit),
                ms(agent.saturating_sub(commit)),
                ms(plan),
                ms(apply.saturating_sub(commit)),
                ms(agent.saturating_sub(plan + apply)),
                agent.as_secs_f64() / commit.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!(
            "  {label}  agent {:>10}{split}  bare apply {:>10}  ratio {:.2}",
            ms(agent),
            ms(bare),
            agent.as_secs_f64() / bare.as_secs_f64()
        );
    }
}

/// The kernel's unreclaimable slab memory (`SUnreclaim` of /proc/meminfo), in bytes: where
/// nftables objects live. Host-wide, so read with nothing else programming rules.
fn slab_unreclaimable() -> i64 {
    let info = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let kib = info.lines().find_map(|l| l.strip_prefix("SUnreclaim:")).expect("SUnreclaim");
    kib.trim().trim_end_matches("kB").trim().parse::<i64>().expect("SUnreclaim kB") * 1024
}

/// The slab once it stopped shrinking (four readings 500 ms apart within 512 KiB, at most
/// 30 s): a deleted namespace's rules are freed after it is gone, by a kernel worker.
fn slab_settled() -> i64 {
    let mut last = slab_unreclaimable();
    let mut stable = 0;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_millis(500));
        let now = slab_unreclaimable();
        stable = if (last - now).abs() < 512 * 1024 { stable + 1 } else { 0 };
        last = now;
        if stable == 3 {
            break;
        }
    }
    last
}

/// Full sync in nftables mode of `n` Services all random, then with every tenth one Maglev
/// (ProxyConfig's default table size): the agent's time on an empty kernel and the kernel
/// memory its rules take (the unreclaimable slab the namespace's deletion frees), three
/// samples each on a fresh namespace.
fn maglev_sync(n: usize) {
    println!("full sync, nftables, {n} services x {ENDPOINTS} endpoints, all random against 10 % Maglev:");
    for (label, every) in [("all random", 0), ("10 % Maglev", 10)] {
        let mut state = cluster(n);
        let names: Vec<_> = state.services().map(|s| s.name.clone()).step_by(every.max(1)).collect();
        for name in names.iter().filter(|_| every > 0) {
            let mut svc = state.service(name).expect("service").clone();
            svc.load_balancing = Some("maglev".into());
            state.apply(svc);
        }
        state.take_changes();
        let program = render::Renderer::new(ProxyMode::Nftables, &compile(&state, &mk_node_context()))
            .lower(IpFamily::V4);
        let elements: usize = program.fragments().map(|f| f.elements.len()).sum();
        let (mut times, mut memory) = (vec![], vec![]);
        for i in 0..3 {
            // What the namespace holds is what its deletion frees.
            let ns = Netns::create(&format!("twbench-maglev-{i}"));
            let s = state.clone();
            let (took, after) = ns.run(move || {
                let (rt, mut agent, _) = agent(s, ProxyMode::Nftables);
                let t = Instant::now();
                rt.block_on(agent.sync(true)).expect("first sync");
                (t.elapsed(), slab_unreclaimable())
            });
            times.push(took);
            drop(ns);
            memory.push(after - slab_settled());
        }
        memory.sort();
        let mib = memory[1] as f64 / (1024.0 * 1024.0);
        println!(
            "  {label:<12} agent {:>10} (samples {}), {elements} map elements, kernel memory {mib:.0} MiB ({:.0} B per map element, rules and chains included)",
            ms(median(times.clone())),
            times.iter().map(|t| ms(*t)).collect::<Vec<_>>().join(", "),
            memory[1] as f64 / elements as f64,
        );
    }
}

/// Endpoint changes measured by `one_change`.
const CHANGES: usize = 100;

/// One endpoint of one Service swapped back and forth: event into the tracker -> kernel.
fn one_change(mode: ProxyMode, n: usize) {
    let ns = Netns::create("twbench-change");
    let state = cluster(n);
    let (samples, floor) = ns.run(move || {
        let (rt, mut agent, shared) = agent(state, mode);
        rt.block_on(agent.sync(true)).expect("first sync");
        let mut samples = Vec::new();
        for i in 0..CHANGES {
            let t = Instant::now();
            shared.update(|c| c.apply(synthetic_slice(n / 2, ENDPOINTS, (i % 2 == 0).then_some(3))));
            rt.block_on(agent.sync(false)).expect("sync");
            samples.push(t.elapsed());
        }
        (samples, (mode == ProxyMode::Iptables).then(floors::IptablesFloors::measure))
    });
    let max = samples.iter().max().copied().unwrap_or_default();
    let median_change = median(samples.clone());
    println!(
        "one endpoint change, {mode}, {n} services: median {}, p99 {}, max {} ({CHANGES} changes)",
        ms(median_change),
        ms(quantile(samples, 0.99)),
        ms(max)
    );
    if let Some(f) = floor {
        let ratio = |floor: Duration| median_change.as_secs_f64() / floor.as_secs_f64();
        println!(
            "  bare iptables-{}-restore on the same nat table: empty transaction (read only) {}, smallest change (read, rebuild, write) {}, one Service's chain rewritten as it is {}; one change / smallest change {:.2}, / chain rewrite {:.2}",
            iptables_variant(),
            ms(f.empty),
            ms(f.smallest),
            ms(f.chain),
            ratio(f.smallest),
            ratio(f.chain)
        );
    }
}

/// A node namespace and a pod namespace (10.244.1.2) behind it on a veth, the service range
/// routed towards the pod.
///
/// ClusterIPs are routed through a neighbour that answers (the pod), as a real node's default
/// gateway does: while no rules translate them (a deleted table), packets to a ClusterIP then
/// go out and are dropped further on, where an on-link route would leave them waiting for an
/// address nobody resolves and block their sender's socket for the 3 s ARP takes to give up.
fn pod_behind_node(tag: &str) -> (Netns, Netns) {
    let node = Netns::create(&format!("twbench-{tag}-node"));
    let pod = Netns::create(&format!("twbench-{tag}-pod"));
    node.sh(&format!(
        "ip link add veth-pod type veth peer name eth0 netns {} && ip link set veth-pod up && \
         ip addr add 10.244.1.1/32 dev veth-pod && ip route add 10.244.1.2/32 dev veth-pod && \
         ip route add 10.96.0.0/12 via 10.244.1.2 dev veth-pod && sysctl -qw net.ipv4.ip_forward=1",
        pod.name
    ));
    pod.sh("ip addr add 10.244.1.2/32 dev eth0 && ip link set eth0 up && ip route add 10.244.1.1 dev eth0 && ip route add default via 10.244.1.1");
    (node, pod)
}

/// New connections per second from the node to a ClusterIP whose endpoint is a pod, with
/// `n - 1` other Services programmed (the measured one sorts last). Each connection waits for
/// one byte from the pod, so only completed connections count.
fn connection_rate(mode: ProxyMode, n: usize) -> f64 {
    let (node, pod) = pod_behind_node("rate");
    let listener = pod.run(|| TcpListener::bind("0.0.0.0:8080").expect("bind"));
    // Each connection gets one byte, and the client waits for it: the loop is clocked by
    // completed connections, so the listener's accept queue never overflows.
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let _ = s.write_all(b"x");
        }
    });
    let mut state = cluster(n.saturating_sub(1));
    state.apply(
        mk_service("zz-bench", "target").cluster_ip("10.97.255.1").port("http", Protocol::Tcp, 80).build(),
    );
    state.apply(
        mk_slice("zz-bench", "target").port("http", Protocol::Tcp, 8080).ready("10.244.1.2", NODE).build(),
    );
    state.take_changes();
    let direct: SocketAddr = "10.244.1.2:8080".parse().expect("addr");
    node.run(move || TcpStream::connect_timeout(&direct, Duration::from_secs(1)))
        .unwrap_or_else(|e| panic!("the pod is not reachable from the node: {e}"));
    let rate = node.run(move || -> Result<f64, String> {
        let (rt, mut agent, _) = agent(state, mode);
        rt.block_on(agent.sync(true)).expect("sync");
        let dst: SocketAddr = "10.97.255.1:80".parse().expect("addr");
        // Five one-second rounds (at most 30,000 connections each); the median round counts.
        let mut rounds = Vec::new();
        for _ in 0..5 {
            let (start, mut count) = (Instant::now(), 0u32);
            while start.elapsed() < Duration::from_secs(1) && count < 30_000 {
                let s = TcpStream::connect_timeout(&dst, Duration::from_secs(1))
                    .and_then(|mut s| {
                        s.set_read_timeout(Some(Duration::from_secs(1)))?;
                        s.read_exact(&mut [0u8])?;
                        Ok(s)
                    })
                    .map_err(|e| format!("connection {count} failed: {e}"))?;
                socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).ok();
                count += 1;
            }
            rounds.push(f64::from(count) / start.elapsed().as_secs_f64());
        }
        rounds.sort_by(f64::total_cmp);
        Ok(rounds[rounds.len() / 2])
    });
    rate.unwrap_or_else(|e| {
        let dump = node.try_sh(
            "ip route; conntrack -C; nft list ruleset | grep -e 10.97.255.1; iptables-save | grep -e 10.97.255.1",
        );
        panic!("{e} (10.97.255.1:80 through {mode}):\n{}", String::from_utf8_lossy(&dump.stdout))
    })
}

/// The synthetic cluster as Kubernetes YAML.
fn manifest(n: usize) -> String {
    let mut y = String::with_capacity(n * 1200);
    y.push_str(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\nstatus: {{addresses: [{{type: InternalIP, address: 192.168.0.10}}]}}\n"
    ));
    for i in 0..n {
        let (ns, name) = (format!("ns-{}", i / 100), format!("svc-{}", i % 100));
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             spec: {{clusterIP: 10.{}.{}.{}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n",
            96 + i / 62500,
            i / 250 % 250,
            i % 250 + 1
        ));
        y.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n"
        ));
        for j in 0..ENDPOINTS {
            let k = i * ENDPOINTS + j;
            let node = if j % 2 == 0 { "node-a" } else { "node-b" };
            y.push_str(&format!(
                "- {{addresses: [10.{}.{}.{}], nodeName: {node}, conditions: {{ready: true}}}}\n",
                128 + k / 62500,
                k / 250 % 250,
                k % 250 + 1
            ));
        }
    }
    y
}

fn main() {
    if !is_root() {
        eprintln!("the agent benchmarks need root (network namespaces, nft, iptables)");
        return;
    }
    let n = services();
    let spans = spans::Spans::install();
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    for mode in modes() {
        if run("full") {
            full_sync(mode, n, &spans);
        }
        if run("change") {
            one_change(mode, n);
        }
        if run("gap") {
            gap::forwarding_gap(mode, n);
        }
        if run("rate") {
            let small = connection_rate(mode, 10);
            let large = connection_rate(mode, n);
            println!(
                "new connections through a ClusterIP, {mode}: {small:.0}/s with 10 services, {large:.0}/s with {n} (ratio {:.2})",
                large / small
            );
        }
    }
    if run("memory") {
        process::memory(n);
    }
    if run("maglev") {
        maglev_sync(n);
    }
}

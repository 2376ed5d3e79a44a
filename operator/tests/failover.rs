//! Failover when only an agent dies: the operator against the test API server, Nodes that
//! stay Ready and never change. The agents' failure detector reaches the operator as
//! `ClusterState::set_agent_liveness` on the state the operator decides from; one test feeds
//! it there (the operator boundary), the other runs the gossip itself (the operator's member
//! and the agents'), and both watch the L2Announcement move in the API.

use std::time::Duration;

mod common;

use serde_json::{Value, json};
use tideway_core::liveness::TIMINGS;
use tideway_core::model::AgentLiveness;
use tideway_sources::SharedCluster;
use tideway_sources::gossip::{Join, Role as GossipRole, feed_liveness, start};
use tideway_sources::kube::{KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::{Account, FakeApi};

fn objects() -> Vec<Value> {
    objects_at(["172.18.0.2", "172.18.0.3"])
}

/// node-a and node-b at `ips`, a pool, and Service `web` with its endpoint on node-a.
fn objects_at(ips: [&str; 2]) -> Vec<Value> {
    let node = |name: &str, ip: &str| {
        json!({"kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    vec![
        node("node-a", ips[0]),
        node("node-b", ips[1]),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "default", "generation": 1},
            "spec": {"addresses": ["172.18.255.200-172.18.255.250"]}}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "demo",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.10.1.5"], "nodeName": "node-a", "conditions": {"ready": true}}]}),
    ]
}

fn announcer(api: &FakeApi) -> Option<String> {
    api.get("L2Announcement", Some("demo"), "web")?["spec"]["node"].as_str().map(str::to_string)
}

/// The operator against `api` as its ServiceAccount: source, reconcile loop and writer, leading.
async fn operator(api: &FakeApi, tag: &str) -> SharedCluster {
    let dir = std::env::temp_dir().join(format!("tideway-op-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = client(Some(&api.kubeconfig(&dir, Account::Operator))).await.expect("client");
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    common::spawn_reconcile(cluster.clone(), c);
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_agent_moves_the_address_while_its_node_stays_ready() {
    let api = FakeApi::start().await;
    api.preload(objects());
    let cluster = operator(&api, "failover").await;
    let first = eventually("the first announcer", || announcer(&api)).await;
    let nodes_before: Vec<Value> = ["node-a", "node-b"].map(|n| api.get("Node", None, n).unwrap()).to_vec();

    // Both agents alive: nothing moves. Then the announcing agent dies; its Node stays Ready.
    cluster.update(|s| {
        s.set_agent_liveness("node-a", AgentLiveness::Alive);
        s.set_agent_liveness("node-b", AgentLiveness::Alive);
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(announcer(&api).as_deref(), Some(first.as_str()));
    let died = tokio::time::Instant::now();
    cluster.update(|s| s.set_agent_liveness(&first, AgentLiveness::Dead));
    let second = eventually("the address moves", || announcer(&api).filter(|n| *n != first)).await;
    assert!(died.elapsed() < Duration::from_secs(2), "moved in {:?}", died.elapsed());
    let ann = api.get("L2Announcement", Some("demo"), "web").unwrap();
    assert_eq!(ann["spec"]["eligibleNodes"], json!([second]));
    eventually("the Event saying why", || {
        let events = api.list("Event");
        events
            .iter()
            .find(|e| e["reason"] == "AnnouncerChanged" && e["related"]["name"] == json!(second))
            .filter(|e| e["note"].as_str().is_some_and(|m| m.contains("agent is down")))
            .map(|_| ())
    })
    .await;
    let nodes_after: Vec<Value> = ["node-a", "node-b"].map(|n| api.get("Node", None, n).unwrap()).to_vec();
    assert_eq!(nodes_before, nodes_after, "the Nodes never changed");

    // The agent comes back: the address stays where it went.
    cluster.update(|s| s.set_agent_liveness(&first, AgentLiveness::Alive));
    eventually("eligible again", || {
        let ann = api.get("L2Announcement", Some("demo"), "web")?;
        (ann["spec"]["eligibleNodes"].as_array()?.len() == 2).then_some(())
    })
    .await;
    assert_eq!(announcer(&api), Some(second));
}

/// The cluster's gossip key.
fn keys() -> Option<tideway_sources::gossip::Keys> {
    Some(tideway_sources::gossip::Keys::parse("the-failover-test-key-0123456789abcdef").unwrap())
}

/// An agent's gossip member, on a runtime of its own so that stopping the runtime kills it as
/// a process death would (its socket closes, it answers nothing).
struct AgentMember(Option<tokio::runtime::Runtime>);

impl AgentMember {
    /// The member of `node`'s agent at `ip:port`, finding the others among `cluster`'s Nodes.
    fn start(node: &str, ip: &str, port: u16, cluster: &SharedCluster) -> AgentMember {
        let (node, cluster) = (node.to_string(), cluster.clone());
        let bind: std::net::SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let rt = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let join = Join {
                bind,
                advertise: bind.ip(),
                node: &node,
                role: GossipRole::Agent,
                timings: TIMINGS,
                keys: keys(),
                refusals: Default::default(),
            };
            rt.block_on(start(join, cluster)).expect("the agent's member binds");
            rt
        })
        .join()
        .expect("the member starts");
        AgentMember(Some(rt))
    }
}

impl Drop for AgentMember {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The operator's member of the gossip and one agent member per node, at the Node addresses
/// `ips` (loopback addresses here), the liveness fed to `cluster` with `hand_over`; returns
/// the agents' members once both are alive in the operator's view.
async fn gossip(
    cluster: &SharedCluster,
    ips: [&str; 2],
    hand_over: Duration,
) -> std::collections::BTreeMap<&'static str, AgentMember> {
    // One port for every member (each finds the others at a Node address and its own port).
    let mut joined = None;
    for i in 0..50u16 {
        let port = 20_000 + (std::process::id() % 20_000) as u16 + i * 7;
        if !ips.iter().all(|ip| std::net::UdpSocket::bind(format!("{ip}:{port}")).is_ok()) {
            continue;
        }
        let me = Join {
            bind: format!("127.0.0.1:{port}").parse().unwrap(),
            advertise: "127.0.0.1".parse().unwrap(),
            node: "op-0",
            role: GossipRole::Operator,
            timings: TIMINGS,
            keys: keys(),
            refusals: Default::default(),
        };
        if let Ok(members) = start(me, cluster.clone()).await {
            joined = Some((port, members));
            break;
        }
    }
    let (port, members) = joined.expect("a free UDP port on the loopback addresses");
    tokio::spawn(feed_liveness(cluster.clone(), members, hand_over, TIMINGS.rejoin));
    let agents = [("node-a", ips[0]), ("node-b", ips[1])]
        .into_iter()
        .map(|(node, ip)| (node, AgentMember::start(node, ip, port, cluster)))
        .collect();
    eventually("both agents alive in the operator's view", || {
        let s = cluster.lock();
        ["node-a", "node-b"].iter().all(|n| s.agent_liveness(n) == AgentLiveness::Alive).then_some(())
    })
    .await;
    agents
}

/// The same failover through the failure detector itself: the operator joins the gossip, each
/// node's agent runs its member at the Node's address (loopback addresses here), the Nodes
/// never change. Stopping the announcing agent's member moves the address; nothing moves while
/// both live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gossip_finds_a_dead_agent_and_the_address_moves() {
    let ips = ["127.0.0.2", "127.0.0.3"];
    let api = FakeApi::start().await;
    api.preload(objects_at(ips));
    let cluster = operator(&api, "gossip").await;
    let first = eventually("the first announcer", || announcer(&api)).await;
    let mut agents = gossip(&cluster, ips, tideway_core::liveness::HAND_OVER).await;
    tokio::time::sleep(TIMINGS.worst_detection()).await;
    assert_eq!(announcer(&api).as_deref(), Some(first.as_str()), "nothing moves while both live");
    let died = tokio::time::Instant::now();
    drop(agents.remove(first.as_str()).expect("the announcer's member"));
    let second = eventually("the address moves", || announcer(&api).filter(|n| *n != first)).await;
    // How fast is the benchmark's to say (`make bench-lab`); this says that it moves.
    eprintln!("the gossip moved the address {:?} after the agent's member stopped", died.elapsed());
    assert_eq!(cluster.lock().agent_liveness(&first), AgentLiveness::Dead);
    assert_ne!(second, first);
}

/// Agents of 0.1.x (reports with a mode and no `agentVersion`) never say they stopped: while
/// they run (an upgrade from 0.1.x rolling), the one whose member goes down keeps its address
/// for the hand-over, counted from when it went down, and loses it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_0_1_x_that_goes_away_keeps_its_address_for_the_hand_over() {
    let ips = ["127.0.0.4", "127.0.0.5"];
    let api = FakeApi::start().await;
    let mut objects = objects_at(ips);
    for node in ["node-a", "node-b"] {
        objects.push(json!({"kind": "NodeProxyState", "metadata": {"name": node},
            "spec": {"nodeName": node}, "status": {"mode": "nftables", "ready": true}}));
    }
    api.preload(objects);
    let cluster = operator(&api, "legacy").await;
    let first = eventually("the first announcer", || announcer(&api)).await;
    eventually("the reports read", || (cluster.lock().node_states().count() == 2).then_some(())).await;
    let hand_over = Duration::from_secs(4);
    let mut agents = gossip(&cluster, ips, hand_over).await;
    let died = tokio::time::Instant::now();
    drop(agents.remove(first.as_str()).expect("the announcer's member"));
    eventually("its member seen down: restarting", || {
        (cluster.lock().agent_liveness(&first) == AgentLiveness::Restarting).then_some(())
    })
    .await;
    assert_eq!(announcer(&api).as_deref(), Some(first.as_str()), "kept during the hand-over");
    let second = eventually("the address moves after it", || announcer(&api).filter(|n| *n != first)).await;
    assert!(died.elapsed() >= hand_over, "moved after {:?}, within the hand-over", died.elapsed());
    assert_eq!(cluster.lock().agent_liveness(&first), AgentLiveness::Dead);
    assert_ne!(second, first);
}

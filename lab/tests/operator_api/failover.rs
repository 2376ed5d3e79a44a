//! Failover when only an agent dies, its Node Ready and unchanged (as kubelet keeps it). The
//! agents' failure detector reaches the operator as `ClusterState::set_agent_liveness`: one
//! phase feeds it there (the operator's boundary), the others run the gossip itself (the
//! operator's member and each agent's, at its Node's address: loopback addresses here), and
//! each watches the L2Announcement move on the server.

use std::collections::BTreeMap;

use tideway_core::liveness::TIMINGS;
use tideway_core::model::AgentLiveness;
use tideway_sources::gossip::{Join, Keys, Role as GossipRole, feed_liveness, start};

use super::*;

/// Pool `failover`, Service `demo/NAME` with its endpoint on node-a, node-a and node-b at
/// `ips`; the operator leading; the first announcer.
async fn service_at(
    cluster: &mut Cluster,
    tasks: &mut Tasks,
    name: &str,
    ips: [&str; 2],
) -> (SharedCluster, String) {
    for (node, ip) in [("node-a", ips[0]), ("node-b", ips[1])] {
        let addresses = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
        merge(&cluster.admin, &format!("/api/v1/nodes/{node}/status"), addresses).await;
    }
    let objects = [
        pool("failover", &["172.18.253.200-172.18.253.250"], true),
        load_balancer("demo", name, json!({}), json!({})),
        slice("demo", name, "10.10.1.5"),
    ];
    cluster.applier.apply_all(objects.to_vec()).await.unwrap();
    let (view, _) = run_operator(tasks, &cluster.operator, None).await;
    let first = eventually("the first announcer", || announcer(&cluster.admin, name)).await;
    (view, first)
}

/// Removes what [`service_at`] made (the operator stopped first).
async fn remove(cluster: &mut Cluster, name: &str) {
    for object in [slice("demo", name, "10.10.1.5"), load_balancer("demo", name, json!({}), json!({}))] {
        cluster.applier.delete(&object).await.unwrap();
    }
    cluster.applier.delete(&pool("failover", &[], true)).await.unwrap();
}

async fn announcer(admin: &kube::Client, name: &str) -> Option<String> {
    let ann = get(admin, &announcement_path("demo", name)).await?;
    ann["spec"]["node"].as_str().map(str::to_string)
}

/// The announcer once it is not `first`.
async fn moved_from(admin: &kube::Client, name: &str, first: &str) -> Option<String> {
    announcer(admin, name).await.filter(|n| n != first)
}

/// What kubelet keeps of each Node while only an agent dies.
async fn nodes(admin: &kube::Client) -> Vec<Value> {
    let mut out = Vec::new();
    for node in ["node-a", "node-b"] {
        out.push(tideway_lab::kube::rest::kubelet_view(admin, node).await.expect("the Node"));
    }
    out
}

/// Liveness fed to the operator's state: the address moves within 2 s of the announcing
/// agent's death, an Event says why, the Nodes never change; back alive, the address stays.
pub(super) async fn fed(cluster: &mut Cluster) {
    let mut tasks = Tasks::default();
    let (view, first) = service_at(cluster, &mut tasks, "fed", ["172.18.0.2", "172.18.0.3"]).await;
    let admin = cluster.admin.clone();
    let nodes_before = nodes(&admin).await;
    view.update(|s| {
        s.set_agent_liveness("node-a", AgentLiveness::Alive);
        s.set_agent_liveness("node-b", AgentLiveness::Alive);
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        announcer(&admin, "fed").await.as_deref(),
        Some(first.as_str()),
        "nothing moves while both live"
    );
    let died = Instant::now();
    view.update(|s| s.set_agent_liveness(&first, AgentLiveness::Dead));
    let second = eventually("the address moves", || moved_from(&admin, "fed", &first)).await;
    assert!(died.elapsed() < Duration::from_secs(2), "moved in {:?}", died.elapsed());
    let ann = get(&admin, &announcement_path("demo", "fed")).await.unwrap();
    assert_eq!(ann["spec"]["eligibleNodes"], json!([second]));
    eventually("the Event saying why", || async {
        events(&admin, "demo", "AnnouncerChanged").await.into_iter().find(|e| {
            e["regarding"]["name"] == "fed"
                && e["related"]["name"] == json!(second)
                && e["note"].as_str().is_some_and(|m| m.contains("agent is down"))
        })
    })
    .await;
    assert_eq!(nodes_before, nodes(&admin).await, "the Nodes never changed");

    // The agent comes back: the address stays where it went.
    view.update(|s| s.set_agent_liveness(&first, AgentLiveness::Alive));
    eventually("eligible again", || async {
        let ann = get(&admin, &announcement_path("demo", "fed")).await?;
        (ann["spec"]["eligibleNodes"].as_array()?.len() == 2).then_some(())
    })
    .await;
    assert_eq!(announcer(&admin, "fed").await, Some(second));
    drop(tasks);
    remove(cluster, "fed").await;
}

/// The cluster's gossip key.
fn keys() -> Option<Keys> {
    Some(Keys::parse("the-failover-test-key-0123456789abcdef").unwrap())
}

/// An agent's gossip member, on a runtime of its own so that stopping the runtime kills it as
/// a process death would (its socket closes, it answers nothing).
struct AgentMember(Option<tokio::runtime::Runtime>);

impl AgentMember {
    /// The member of `node`'s agent at `ip:port`, finding the others among `view`'s Nodes.
    fn start(node: &str, ip: &str, port: u16, view: &SharedCluster) -> AgentMember {
        let (node, view) = (node.to_string(), view.clone());
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
            rt.block_on(start(join, view)).expect("the agent's member binds");
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

/// The operator's member of the gossip (its liveness fed to `view` with `hand_over`) and one
/// agent member per node at `ips`; returns the agents' members once both are alive in the
/// operator's view.
async fn members(
    tasks: &mut Tasks,
    view: &SharedCluster,
    ips: [&str; 2],
    hand_over: Duration,
) -> BTreeMap<&'static str, AgentMember> {
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
        if let Ok(members) = start(me, view.clone()).await {
            joined = Some((port, members));
            break;
        }
    }
    let (port, members) = joined.expect("a free UDP port on the loopback addresses");
    tasks.spawn(feed_liveness(view.clone(), members, hand_over, TIMINGS.rejoin));
    let agents = [("node-a", ips[0]), ("node-b", ips[1])]
        .into_iter()
        .map(|(node, ip)| (node, AgentMember::start(node, ip, port, view)))
        .collect();
    tideway_tests::eventually("both agents alive in the operator's view", || {
        let s = view.lock();
        ["node-a", "node-b"].iter().all(|n| s.agent_liveness(n) == AgentLiveness::Alive).then_some(())
    })
    .await;
    agents
}

/// Through the failure detector itself: stopping the announcing agent's member moves the
/// address; nothing moves while both live.
pub(super) async fn gossip(cluster: &mut Cluster) {
    let ips = ["127.0.0.2", "127.0.0.3"];
    let mut tasks = Tasks::default();
    let (view, first) = service_at(cluster, &mut tasks, "gossip", ips).await;
    let admin = cluster.admin.clone();
    let mut agents = members(&mut tasks, &view, ips, tideway_core::liveness::HAND_OVER).await;
    tokio::time::sleep(TIMINGS.worst_detection()).await;
    assert_eq!(
        announcer(&admin, "gossip").await.as_deref(),
        Some(first.as_str()),
        "nothing moves while both live"
    );
    let died = Instant::now();
    drop(agents.remove(first.as_str()).expect("the announcer's member"));
    let second = eventually("the address moves", || moved_from(&admin, "gossip", &first)).await;
    // How fast is the benchmark's to say (`make bench-lab`); this says that it moves.
    eprintln!("the gossip moved the address {:?} after the agent's member stopped", died.elapsed());
    assert_eq!(view.lock().agent_liveness(&first), AgentLiveness::Dead);
    assert_ne!(second, first);
    drop(agents);
    drop(tasks);
    remove(cluster, "gossip").await;
}

/// Agents of 0.1.x (reports with a mode and no `agentVersion`) never say they stopped: while
/// they run (an upgrade from 0.1.x rolling), the one whose member goes down keeps its address
/// for the hand-over, counted from when it went down, and loses it after.
pub(super) async fn legacy(cluster: &mut Cluster) {
    let admin = cluster.admin.clone();
    for node in ["node-a", "node-b"] {
        report(cluster, node, json!({"mode": "nftables", "ready": true})).await;
    }
    let ips = ["127.0.0.4", "127.0.0.5"];
    let mut tasks = Tasks::default();
    let (view, first) = service_at(cluster, &mut tasks, "legacy", ips).await;
    tideway_tests::eventually("the reports read", || (view.lock().node_states().count() == 2).then_some(()))
        .await;
    let hand_over = Duration::from_secs(4);
    let mut agents = members(&mut tasks, &view, ips, hand_over).await;
    let died = Instant::now();
    drop(agents.remove(first.as_str()).expect("the announcer's member"));
    tideway_tests::eventually("its member seen down: restarting", || {
        (view.lock().agent_liveness(&first) == AgentLiveness::Restarting).then_some(())
    })
    .await;
    assert_eq!(
        announcer(&admin, "legacy").await.as_deref(),
        Some(first.as_str()),
        "kept during the hand-over"
    );
    let second = eventually("the address moves after it", || moved_from(&admin, "legacy", &first)).await;
    assert!(died.elapsed() >= hand_over, "moved after {:?}, within the hand-over", died.elapsed());
    assert_eq!(view.lock().agent_liveness(&first), AgentLiveness::Dead);
    assert_ne!(second, first);
    drop(agents);
    drop(tasks);
    remove(cluster, "legacy").await;
    for node in ["node-a", "node-b"] {
        cluster.applier.delete(&node_state(node)).await.unwrap();
    }
}

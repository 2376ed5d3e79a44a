//! Agents driving real FRR: two agents' BGP speakers decide from one cluster
//! state and hand their configurations to the FRR of their node namespaces through
//! `frr-reload.py`; the router's kernel routes follow the cluster. A `Cluster` Service's address
//! goes over both nodes, a `Local` one over the node with its endpoint, and when the endpoint
//! moves to the other node, so does the route.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{ip, mk_service, mk_slice};
use tideway_node_agent::agent::AgentStatus;
use tideway_node_agent::bgp_speaker::{BgpSpeaker, record_sessions};
use tideway_node_agent::frr::{FrrReload, PeerState, Routing};
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tideway_tests::frr::{BgpBed, ROUTER, bgp_snapshot};
use tideway_tests::netns::{eventually, require_root};

const CLUSTER_VIP: &str = "203.0.113.10";
const LOCAL_VIP: &str = "203.0.113.20";
const NODE_A: &str = "172.30.0.11";
const NODE_B: &str = "172.30.0.12";

fn api_slice(node: &str) -> tideway_core::model::EndpointSlice {
    mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.9.5", node).build()
}

fn cluster() -> SharedCluster {
    let snapshot = bgp_snapshot(
        &[("node-a", NODE_A), ("node-b", NODE_B)],
        vec![
            mk_service("demo", "web")
                .cluster_ip("10.96.0.10")
                .port("http", Tcp, 80)
                .lb_ip(CLUSTER_VIP)
                .build(),
            mk_service("demo", "api")
                .cluster_ip("10.96.0.20")
                .port("http", Tcp, 80)
                .lb_ip(LOCAL_VIP)
                .etp_local()
                .build(),
        ],
        vec![
            mk_slice("demo", "web").port("http", Tcp, 8080).ready("10.244.2.5", "node-b").build(),
            api_slice("node-a"),
        ],
    );
    let cluster = SharedCluster::new();
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

/// The BGP speaker of `node`, its FRR the one in that node's namespace.
fn speaker(cluster: &SharedCluster, node: &str, frr: FrrReload) -> (BgpSpeaker, Arc<RwLock<AgentStatus>>) {
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let fence = Arc::new(AtomicBool::new(false));
    let speaker = BgpSpeaker::new(node, cluster.clone(), status.clone(), metrics, fence, Arc::new(frr));
    (speaker, status)
}

#[tokio::test]
async fn agents_program_real_frr_and_the_routers_routes_follow_the_endpoints() {
    require_root("FRR in network namespaces");
    // The nodes' FRR starts with nothing of BGP: the agents give it everything.
    let empty = "frr defaults traditional\n!\n".to_string();
    let bed = BgpBed::start(
        &format!("ag{}", std::process::id() % 100_000),
        &[(NODE_A, empty.clone()), (NODE_B, empty)],
    );
    let reload = |i: usize| FrrReload {
        pathspace: Some(bed.nodes[i].ns.name.clone()),
        ..FrrReload::new(&bed.nodes[i].dir.join("tideway"))
    };
    let cluster = cluster();
    let (mut a, a_status) = speaker(&cluster, "node-a", reload(0));
    let (mut b, _) = speaker(&cluster, "node-b", reload(1));
    a.speak();
    b.speak();
    let error = a_status.read().unwrap().bgp.as_ref().and_then(|s| s.last_error.clone());
    assert!(error.is_none(), "FRR took node-a's configuration: {error:?}\n{}", bed.logs());

    let router = &bed.router;
    let both = vec![NODE_A.to_string(), NODE_B.to_string()];
    eventually(Duration::from_secs(30), || {
        let (cluster, local) = (router.next_hops(CLUSTER_VIP), router.next_hops(LOCAL_VIP));
        if cluster == both && local == [NODE_A] { Ok(()) } else { Err(format!("{cluster:?} {local:?}")) }
    })
    .unwrap_or_else(|e| panic!("the router's routes: {e}\n{}", bed.logs()));

    // The Local Service's endpoint moves to node-b: node-a withdraws, node-b advertises.
    cluster.update(|s| s.apply(api_slice("node-b")));
    a.speak();
    b.speak();
    eventually(Duration::from_secs(10), || {
        let local = router.next_hops(LOCAL_VIP);
        if local == [NODE_B] { Ok(()) } else { Err(format!("{local:?}")) }
    })
    .unwrap_or_else(|e| panic!("the Local address after its endpoint moved: {e}\n{}", bed.logs()));
    assert_eq!(router.next_hops(CLUSTER_VIP), both, "the Cluster address stays on both");
    eventually(Duration::from_secs(10), || if router.bfd_up() == 2 { Ok(()) } else { Err("BFD".into()) })
        .unwrap_or_else(|e| panic!("{e}: both sessions guarded by BFD\n{}", bed.logs()));

    // What the agents read back from their FRR: the session established, BFD up.
    let read = reload(0).sessions().unwrap_or_else(|e| panic!("vtysh: {e}"));
    let want = PeerState { established: true, bfd: Some("up".into()) };
    assert_eq!(read.get(&ip(ROUTER)), Some(&want), "{read:?}");
    let metrics = Metrics::new(&mut Registry::default());
    record_sessions(&a_status, &metrics, &reload(0).sessions().expect("vtysh"));
    let session = a_status.read().unwrap().bgp.clone().expect("BGP status").sessions[0].clone();
    assert!(session.established && session.bfd.as_deref() == Some("up"), "{session:?}");
}

//! What the agent traces, through an in-memory OpenTelemetry pipeline (no root: an in-memory
//! kernel): each sync is a `sync` span with its mode, kind and size, whose children are the
//! `plan`, `render` and `apply` steps; a failed sync carries its error.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_node, mk_service, mk_slice};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus};
use tideway_node_agent::dataplane::memory::SharedKernel;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tideway_telemetry::testing::{Capture, CapturedSpan};

fn agent(cluster: &SharedCluster, node: &str) -> Agent {
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let health = Arc::new(ProxyHealth::new(Duration::from_secs(30)));
    let kernel = SharedKernel::default();
    Agent::new(AgentOptions::for_node(node), cluster.clone(), status, metrics, health)
        .with_dataplanes(Box::new(move |s| kernel.dataplane(s)))
}

fn cluster() -> SharedCluster {
    let cluster = SharedCluster::new();
    cluster.update(|s| {
        s.reset(Snapshot {
            nodes: vec![mk_node("node-a", "192.168.0.10", "zone-a")],
            services: vec![mk_service("demo", "web").cluster_ip("10.96.0.1").port("http", Tcp, 80).build()],
            endpoint_slices: vec![
                mk_slice("demo", "web").port("http", Tcp, 8080).ready("10.244.1.5", "node-a").build(),
            ],
            ..Default::default()
        })
    });
    cluster.mark_synced();
    cluster
}

fn named<'a>(spans: &'a [CapturedSpan], name: &str) -> Vec<&'a CapturedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test]
async fn each_sync_is_a_span_with_its_steps() {
    let capture = Capture::new();
    let _guard = capture.install();
    let cluster = cluster();
    let mut agent = agent(&cluster, "node-a");
    agent.sync(false).await.expect("first sync");
    // One more Service: an incremental sync.
    cluster
        .update(|s| s.apply(mk_service("demo", "api").cluster_ip("10.96.0.2").port("http", Tcp, 80).build()));
    agent.sync(false).await.expect("second sync");

    let spans = capture.spans();
    let syncs = named(&spans, "sync");
    assert_eq!(syncs.len(), 2, "{spans:#?}");
    let (first, second) = (&syncs[0].attributes, &syncs[1].attributes);
    assert_eq!(first["node"], "node-a");
    assert_eq!(first["mode"], "nftables");
    assert_eq!((first["full"].as_str(), second["full"].as_str()), ("true", "false"), "{syncs:#?}");
    assert_eq!(second["changed_services"], "1");
    assert_eq!(second["service_ports"], "2");
    assert!(first["rules"].parse::<u64>().unwrap() > 0, "{first:?}");
    for step in ["plan", "render", "apply"] {
        let steps = named(&spans, step);
        assert_eq!(steps.len(), 2, "one {step} per sync: {spans:#?}");
        assert!(steps.iter().all(|s| s.parent.as_deref() == Some("sync")), "{step} is a child of sync");
    }
    let applies = named(&spans, "apply");
    assert_eq!(applies[0].attributes["backend"], "nftables");
    assert_eq!(named(&spans, "render")[1].attributes["fragments"], "1", "only the new Service is rendered");
}

#[tokio::test]
async fn a_failed_sync_carries_its_error() {
    let capture = Capture::new();
    let _guard = capture.install();
    let mut agent = agent(&cluster(), "node-gone");
    assert!(agent.sync(false).await.is_err());
    let spans = capture.spans();
    let sync = named(&spans, "sync");
    assert!(sync[0].attributes["error"].contains("node-gone"), "{sync:#?}");
}

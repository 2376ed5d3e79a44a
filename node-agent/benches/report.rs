//! NodeProxyState write load: `NODES` simulated agents' report loops (the real
//! [`tideway_node_agent::report::run`] and [`KubeNodeStateSink`], no watches, no kernel) against
//! the test API server, fed synthetic changes:
//!
//! * steady endpoint churn, `CHURN` EndpointSlice updates a second (default 100), each one
//!   changing every node's endpoint and rule counts and its last sync;
//! * every `SERVICE_EVERY` seconds (default 5) one Service's spec changes, so every node
//!   programs a new generation of it and reports a higher programmed `resourceVersion` (a
//!   change the DNS gate and the operator read).
//!
//! Each node has `SERVICES` Services programmed (default 500): the report's size no longer
//! depends on it (one version stands for them all), its service-port and rule counts do. After a warm-up of 15 s it counts,
//! for `SECONDS` (default 60), the status writes per node per 10 s and their bytes: the request
//! body, and the object the API server stores (what etcd writes each time).
//!
//! `cargo bench -p tideway-node-agent --bench report`

#![allow(clippy::print_stdout)]

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::json;
use tideway_node_agent::agent::AgentStatus;
use tideway_node_agent::report::{self, ReportSettings};
use tideway_sources::kube::{KubeNodeStateSink, client};
use tideway_tests::fake_api::{Account, FakeApi};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn status(node: &str, services: u64) -> AgentStatus {
    AgentStatus {
        node: node.to_string(),
        synced: true,
        proxy_config: Some(("default".into(), 1)),
        service_ports: services as usize,
        endpoints: services as usize * 3,
        rules: services as usize * 5,
        programmed_version: Some(1_000),
        ..Default::default()
    }
}

fn main() {
    let nodes = env("NODES", 1_000);
    let services = env("SERVICES", 500);
    let churn = env("CHURN", 100).max(1);
    let service_every = env("SERVICE_EVERY", 5).max(1);
    let seconds = env("SECONDS", 60).max(10);
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let api = FakeApi::start().await;
        api.preload((0..nodes).map(|n| {
            json!({"kind": "Node", "metadata": {"name": format!("node-{n}")},
                "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})
        }));
        let dir = std::env::temp_dir().join(format!("tideway-report-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kube = client(Some(&api.kubeconfig(&dir, Account::Agent))).await.expect("client");
        let statuses: Vec<Arc<RwLock<AgentStatus>>> =
            (0..nodes).map(|n| Arc::new(RwLock::new(status(&format!("node-{n}"), services)))).collect();
        for s in &statuses {
            let sink = Arc::new(KubeNodeStateSink::new(kube.clone()));
            tokio::spawn(report::run(s.clone(), sink, ReportSettings::default(), std::future::pending()));
        }

        let started = Instant::now();
        let warm_up = Duration::from_secs(15);
        let end = warm_up + Duration::from_secs(seconds);
        let mut tick = tokio::time::interval(Duration::from_secs(1) / churn as u32);
        let (mut updates, mut version) = (0u64, 1_000u64);
        let mut next_service = Duration::from_secs(service_every);
        while started.elapsed() < end {
            tick.tick().await;
            updates += 1;
            let now = started.elapsed();
            let spec_change = now >= next_service;
            if spec_change {
                next_service += Duration::from_secs(service_every);
                version += 1;
            }
            for s in &statuses {
                let mut s = s.write().unwrap_or_else(|e| e.into_inner());
                s.endpoints = s.service_ports * 3 + (updates % 7) as usize;
                s.rules = s.service_ports * 5 + (updates % 7) as usize;
                s.last_sync = Some(now.as_secs_f64());
                if spec_change {
                    s.programmed_version = Some(version);
                }
            }
        }

        let from = started + warm_up;
        let writes: Vec<_> = api
            .requests_to("/apis/tideway.io/v1alpha1/nodeproxystates/")
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.at >= from)
            .collect();
        let bodies: Vec<usize> =
            writes.iter().map(|r| serde_json::to_vec(&r.body).map_or(0, |b| b.len())).collect();
        let stored = api.get("NodeProxyState", None, "node-0").expect("node-0's report");
        let stored = serde_json::to_vec(&stored).map_or(0, |b| b.len());
        let per_node = writes.len() as f64 / nodes as f64 / (seconds as f64 / 10.0);
        let mean = bodies.iter().sum::<usize>() as f64 / bodies.len().max(1) as f64;
        let max = bodies.iter().copied().max().unwrap_or(0);
        println!(
            "{nodes} nodes, {services} Services programmed each, {churn} EndpointSlice updates/s, \
             a Service spec change every {service_every} s, measured over {seconds} s after a 15 s warm-up:"
        );
        println!("  status writes: {} in all, {per_node:.2} per node per 10 s", writes.len());
        println!("  request body per write: mean {mean:.0} B, max {max} B");
        println!("  stored object (written to etcd on each write): {stored} B");
        println!(
            "  into the API server: {:.2} MB/s of request bodies",
            bodies.iter().sum::<usize>() as f64 / seconds as f64 / 1e6
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

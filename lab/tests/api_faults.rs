//! Whether the node agent's source and status writer reach the API server, as self-fencing
//! reads it (`SharedCluster::api_reachable`), against the real API server (root; needs
//! `make kube`) under real faults: the API server killed (connections refused until the
//! control plane restarts it, as kubelet restarts a static pod, and the watches come back to
//! the restarted server); etcd stopped under a running
//! API server (its writes end in 504 timeouts); and an RBAC denial, which is an answer from a
//! working server. (`sources/tests/api_reach.rs` keeps what the real server
//! does not do on cue: a 503 to every request, watches closed at once, while its process runs.)

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, PostParams};
use serde_json::json;
use tideway_core::model::{NodeProxyState, ServiceName};
use tideway_lab::kube::ControlPlane;
use tideway_lab::kube::standalone::Standalone;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeNodeStateSink, KubeSource, Role, failing_fast_client};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::NodeStateSink;

fn report() -> NodeProxyState {
    NodeProxyState { node: "node-a".into(), ready: true, ..Default::default() }
}

/// Polls `f` every 200 ms for at most `within`, supervising the control plane meanwhile.
async fn until(cp: &mut ControlPlane, what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        cp.supervise();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reads_a_killed_api_server_as_unreachable_and_a_denial_as_an_answer() {
    let mut standalone = Standalone::start("flt", |_| {}).await.expect("a control plane (root; make kube)");
    let dir = standalone.dir.clone();
    standalone.apply_crds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let node_conf = standalone
        .kubeconfig_for("system:node:node-a", &["system:nodes"], &standalone.cp.host_url())
        .unwrap();
    let cp = &mut standalone.cp;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}))
    .unwrap();
    Api::<Node>::all(admin.clone()).create(&PostParams::default(), &node).await.unwrap();

    // The agent's client (no retries, a 5 s connect timeout), as the cluster's admin.
    let kubeconfig = dir.join("admin.conf");
    cp.write_host_kubeconfig(&kubeconfig).unwrap();
    let cluster = SharedCluster::new();
    let role = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let client = failing_fast_client(Some(&kubeconfig)).await.unwrap();
    let task =
        tokio::spawn(KubeSource::new(client.clone(), role, SourceMetrics::default()).run(cluster.clone()));
    let sink = KubeNodeStateSink::new(client).reporting_to(cluster.clone());
    until(cp, "synced", Duration::from_secs(30), || cluster.is_synced()).await;
    sink.publish(&report()).await.expect("first report");
    assert!(cluster.api_reachable());

    // The API server dies: watches cut, relists and writes refused. Unreachable, and the last
    // good state keeps serving.
    let pid = cp.pid("kube-apiserver").expect("the API server runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    sink.publish(&report()).await.expect_err("nobody answers");
    until(cp, "unreachable", Duration::from_secs(20), || !cluster.api_reachable()).await;
    assert!(cluster.lock().node("node-a").is_some(), "the last good state keeps serving");
    // Restarted after kubelet's first backoff (10 s): reachable at the next good list or write.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cp.pid("kube-apiserver").is_none_or(|p| p == pid) {
        assert!(Instant::now() < deadline, "the API server was not restarted");
        cp.supervise();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while sink.publish(&report()).await.is_err() {
        assert!(Instant::now() < deadline, "no write went through after the restart");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    until(cp, "reachable again", Duration::from_secs(30), || cluster.api_reachable()).await;
    // The watches came back to the restarted server: a Service created now reaches the view.
    // A watch that failed while the server was down retries on kube's backoff (0.8 s doubling
    // to 30 s, jittered, as client-go's reflectors back off), so its next try may come a whole
    // step after the server is back.
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    let svc = serde_json::from_value(json!({"metadata": {"name": "after-restart"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let name = ServiceName::new("default", "after-restart");
    until(cp, "the watch after the restart", Duration::from_secs(75), || {
        cluster.lock().service(&name).is_some()
    })
    .await;

    // A user whom RBAC does not let write NodeProxyStates: 403, an answer, so reachable.
    let denied = KubeNodeStateSink::new(failing_fast_client(Some(&node_conf)).await.unwrap())
        .reporting_to(cluster.clone());
    let refused = denied.publish(&report()).await.expect_err("a node may not write NodeProxyStates");
    assert!(refused.to_string().contains("forbidden") || refused.to_string().contains("403"), "{refused}");
    assert!(cluster.api_reachable(), "a 403 is an answer");
    task.abort();
}

/// etcd frozen (SIGSTOP: the process stays, as a hung disk or a lost quorum leaves it) under a
/// running API server: a write waits out the server's request timeout and ends in a 504, read
/// as unreachable, while the last good view keeps serving; a source starting meanwhile (an
/// agent restarted during the outage) still gets its first view, from the API server's watch
/// cache (its list asks for any version). etcd resumed: the next write goes through and reads
/// as reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_etcd_fails_writes_with_504_read_as_unreachable_and_first_views_come_from_the_cache() {
    let mut standalone = Standalone::start("etcd", |config| {
        // The handler's timeout (default 60 s): how long a request waits for a frozen etcd.
        config.apiserver_flags = vec!["--request-timeout=4s".into()];
    })
    .await
    .expect("a control plane (root; make kube)");
    let dir = standalone.dir.clone();
    standalone.apply_crds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let cp = &mut standalone.cp;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}))
    .unwrap();
    Api::<Node>::all(admin).create(&PostParams::default(), &node).await.unwrap();
    let kubeconfig = dir.join("admin.conf");
    cp.write_host_kubeconfig(&kubeconfig).unwrap();
    let role = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let running = SharedCluster::new();
    let client = failing_fast_client(Some(&kubeconfig)).await.unwrap();
    let task = tokio::spawn(
        KubeSource::new(client.clone(), role.clone(), SourceMetrics::default()).run(running.clone()),
    );
    let sink = KubeNodeStateSink::new(client.clone()).reporting_to(running.clone());
    until(cp, "synced", Duration::from_secs(30), || running.is_synced()).await;
    sink.publish(&report()).await.expect("first report");
    assert!(running.api_reachable());

    let etcd = nix::unistd::Pid::from_raw(cp.pid("etcd").expect("etcd runs") as i32);
    nix::sys::signal::kill(etcd, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let started = Instant::now();
    let failed = sink.publish(&report()).await.expect_err("etcd answers nothing");
    let text = failed.to_string();
    eprintln!("a write with etcd stopped failed after {:?}: {text}", started.elapsed());
    assert!(text.contains("504"), "the server's timeout: {text}");
    assert!(!running.api_reachable(), "a write ending in a 5xx: unreachable");
    assert!(running.lock().node("node-a").is_some(), "the last good view keeps serving");
    // A source starting now: the watch cache serves it without etcd.
    let fresh = SharedCluster::new();
    let fresh_task = tokio::spawn(KubeSource::new(client, role, SourceMetrics::default()).run(fresh.clone()));
    until(cp, "the new source's view from the watch cache", Duration::from_secs(30), || fresh.is_synced())
        .await;
    assert!(fresh.lock().node("node-a").is_some(), "the cache's view: {:?}", fresh.lock().nodes().count());

    nix::sys::signal::kill(etcd, nix::sys::signal::Signal::SIGCONT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sink.publish(&report()).await.is_err() {
        assert!(Instant::now() < deadline, "no write went through once etcd resumed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(running.api_reachable(), "the next good write: reachable");
    task.abort();
    fresh_task.abort();
}

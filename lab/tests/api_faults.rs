//! Whether the node agent's source and status writer reach the API server, as self-fencing
//! reads it (`SharedCluster::api_reachable`), against the real API server (root; needs
//! `make kube`) under real faults: the API server killed (connections refused until the
//! control plane restarts it, as kubelet restarts a static pod), and an RBAC denial, which is
//! an answer from a working server. (`sources/tests/api_reach.rs` keeps what the real server
//! does not do on cue: a 503 to every request while its process runs.)

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tideway_core::model::NodeProxyState;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::pki::{self, rewrite_server};
use tideway_lab::kube::{ControlPlane, ControlPlaneConfig, standalone_namespace};
use tideway_lab::netns;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeNodeStateSink, KubeSource, Role, failing_fast_client};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::NodeStateSink;

const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 250, 6, 2);

/// Removes the namespace and directory the test made, also when it fails.
struct Cleanup {
    ns: String,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        netns::remove(&self.ns);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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
    let id = std::process::id();
    let ns = format!("tw-flt{id}-n-cp");
    let dir = std::env::temp_dir().join(format!("tideway-api-faults-{id}"));
    let _cleanup = Cleanup { ns: ns.clone(), dir: dir.clone() };
    std::fs::create_dir_all(&dir).unwrap();
    netns::run(&standalone_namespace(&ns, ADDRESS)).expect("a namespace (root)");
    let config = ControlPlaneConfig::new(dir.join("cp"), Some(ns.clone()), ADDRESS).expect("make kube");
    let mut cp = ControlPlane::start(config).await.expect("the control plane");
    let admin = cp.client(&cp.admin_kubeconfig()).await.unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-test");
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds");
    for entry in std::fs::read_dir(crds).unwrap() {
        let crd: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        applier.apply(&crd).await.unwrap();
    }
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
    until(&mut cp, "synced", Duration::from_secs(30), || cluster.is_synced()).await;
    sink.publish(&report()).await.expect("first report");
    assert!(cluster.api_reachable());

    // The API server dies: watches cut, relists and writes refused. Unreachable, and the last
    // good state keeps serving.
    let pid = cp.pid("kube-apiserver").expect("the API server runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    sink.publish(&report()).await.expect_err("nobody answers");
    until(&mut cp, "unreachable", Duration::from_secs(20), || !cluster.api_reachable()).await;
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
    until(&mut cp, "reachable again", Duration::from_secs(30), || cluster.api_reachable()).await;

    // A user whom RBAC does not let write NodeProxyStates: 403, an answer, so reachable.
    let kubeadm = pki::kubeadm(&tideway_lab::kube::binary().unwrap());
    let argv = pki::node_kubeconfig_argv(&kubeadm, &cp.layout().kubeadm_config(), "node-a");
    let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let node_conf = dir.join("node-a.conf");
    std::fs::write(&node_conf, rewrite_server(&String::from_utf8_lossy(&out.stdout), &cp.host_url()))
        .unwrap();
    let denied = KubeNodeStateSink::new(failing_fast_client(Some(&node_conf)).await.unwrap())
        .reporting_to(cluster.clone());
    let refused = denied.publish(&report()).await.expect_err("a node may not write NodeProxyStates");
    assert!(refused.to_string().contains("forbidden") || refused.to_string().contains("403"), "{refused}");
    assert!(cluster.api_reachable(), "a 403 is an answer");
    task.abort();
}

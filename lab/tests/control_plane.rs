//! The lab's control plane (root; needs `make kube`): one control plane for the whole binary,
//! started in a namespace of its own with no lab topology, and checked as `kubeadm init`
//! would leave a cluster: the pinned release, etcd behind the API server, the serving
//! certificate's names, the leader Leases, `kube-public/cluster-info` readable anonymously,
//! the `kubernetes` Service's endpoint, PodSecurity `baseline`, and the audit log.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use tideway_lab::kube::standalone::Standalone;

fn get(client: &kube::Client, path: &str) -> impl std::future::Future<Output = Result<String, kube::Error>> {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let client = client.clone();
    async move { client.request_text(req).await }
}

/// Polls `f` every 200 ms until it gives `Some`, for at most `within`.
async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_comes_up_as_kubeadm_leaves_a_cluster() {
    let standalone = Standalone::start("kcp", |config| {
        config.service_cidr = "10.96.0.0/16".into();
        config.nodes = vec!["node-a".into(), "node-b".into()];
    })
    .await
    .expect("a control plane (root; make kube)");
    let (cp, dir) = (&standalone.cp, standalone.dir.join("cp"));
    eprintln!("control plane ready after {:.1} s", cp.ready_after.as_secs_f64());
    assert_eq!(cp.version, "v1.37.2");

    let admin = cp.client(&cp.admin_kubeconfig()).await.unwrap();
    let version = get(&admin, "/version").await.unwrap();
    assert!(version.contains("\"gitVersion\": \"v1.37.2\""), "{version}");
    let livez = get(&admin, "/livez?verbose").await.unwrap();
    assert!(livez.contains("[+]etcd ok"), "{livez}");

    // The serving certificate names every way in.
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(dir.join("pki/apiserver.crt"))
        .output()
        .unwrap();
    let sans = String::from_utf8_lossy(&text.stdout);
    for name in [
        "IP Address:127.0.0.1",
        "IP Address:10.250.0.2",
        "IP Address:10.96.0.1",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
        "DNS:localhost",
    ] {
        assert!(sans.contains(name), "{name} missing: {sans}");
    }

    // kube-public/cluster-info, read with no credentials at all, names the endpoint and the CA.
    let mut anonymous = kube::Config::new(cp.host_url().parse().unwrap());
    anonymous.accept_invalid_certs = true;
    let anonymous = kube::Client::try_from(anonymous).unwrap();
    let info = Api::<ConfigMap>::namespaced(anonymous, "kube-public").get("cluster-info").await.unwrap();
    let kubeconfig = &info.data.unwrap()["kubeconfig"];
    assert!(kubeconfig.contains("server: https://10.250.0.2:6443"), "{kubeconfig}");
    assert!(kubeconfig.contains("certificate-authority-data:"), "{kubeconfig}");

    // The `kubernetes` Service's endpoint is the advertised address (the default reconciler).
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let slice = slices.get("kubernetes").await.unwrap();
    assert_eq!(slice.endpoints[0].addresses, vec!["10.250.0.2".to_string()]);

    // The controller-manager and the scheduler hold their leader Leases.
    let leases = Api::<Lease>::namespaced(admin.clone(), "kube-system");
    let held = eventually(Duration::from_secs(60), "leader leases", || {
        let leases = leases.clone();
        async move {
            let names: Vec<String> = leases
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|l| l.spec?.holder_identity.map(|_| l.metadata.name.unwrap_or_default()))
                .collect();
            let both = names.iter().any(|n| n == "kube-controller-manager")
                && names.iter().any(|n| n == "kube-scheduler");
            both.then_some(names)
        }
    })
    .await;
    eprintln!("leases held: {held:?}");

    // PodSecurity enforces baseline by default: a privileged pod is refused in `default`.
    let pods = Api::<Pod>::namespaced(admin.clone(), "default");
    let privileged: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "c", "image": "traefik/whoami", "securityContext": {"privileged": true}}]},
    }))
    .unwrap();
    let refused = eventually(Duration::from_secs(30), "PodSecurity's answer", || {
        let (pods, p) = (pods.clone(), privileged.clone());
        async move {
            match pods.create(&PostParams::default(), &p).await {
                Err(kube::Error::Api(e)) if e.message.contains("serviceaccount") => None,
                Err(kube::Error::Api(e)) => Some(e.message),
                Ok(_) => Some("admitted".into()),
                Err(_) => None,
            }
        }
    })
    .await;
    assert!(refused.contains("violates PodSecurity \"baseline:latest\""), "{refused}");

    // The node's identity is the Node authorizer's: it may read its own Node, not list Secrets.
    let node = cp.client(&cp.node_kubeconfig("node-a")).await.unwrap();
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::all(node.clone());
    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("a node listed every Secret: {other:?}"),
    }

    // Each node writes its own Node's status and no other's (NodeRestriction): node-a's
    // credentials are refused on node-b's status.
    let nodes_a = Api::<Node>::all(node);
    let nodes_b = Api::<Node>::all(cp.client(&cp.node_kubeconfig("node-b")).await.unwrap());
    for (api, name) in [(&nodes_a, "node-a"), (&nodes_b, "node-b")] {
        let n: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &n)
            .await
            .unwrap_or_else(|e| panic!("{name} registers itself: {e}"));
    }
    let heartbeat = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "posted", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let patch = kube::api::Patch::Strategic(&heartbeat);
    let params = kube::api::PatchParams::default();
    nodes_a.patch_status("node-a", &params, &patch).await.expect("node-a writes its own status");
    match nodes_a.patch_status("node-b", &params, &patch).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "{e:?}");
            assert!(e.message.contains("node-b"), "{e:?}");
        }
        other => panic!("node-a wrote node-b's status: {other:?}"),
    }

    // Every request above is in the audit log, with who made it.
    let audit = std::fs::read_to_string(cp.layout().audit_log()).unwrap();
    assert!(audit.contains("\"username\":\"system:node:node-a\""), "the node's request is audited");
    assert!(audit.contains("\"level\":\"Metadata\""));
    for (name, kib) in cp.rss() {
        eprintln!("{name}: {} MiB resident", kib / 1024);
    }
}

//! The Kubernetes source, its NodeProxyState sink and its cached reviews against the real API
//! server (root; needs `make kube`), each as the chart's ServiceAccount with a token the server
//! mints and the RBAC the chart renders. One control plane (Service CIDR 10.96.0.0/16), the
//! phases in turn:
//! * an agent's source selects as kube-proxy does (label selectors on Services and
//!   EndpointSlices, its own Node by field selector, its L2Announcements by label), streams
//!   its first views, stores the model (no annotations, no managed fields), follows the
//!   ServiceCIDRs, and syncs only once every kind is listed: not while RBAC withholds
//!   EndpointSlices; a ProxyConfig naming the proxy restarts the watches with its selector;
//! * an agent told not to watch ServiceCIDRs, with the RBAC the chart then grants, syncs
//!   without asking for them;
//! * the agent's NodeProxyState is server-side applied (object, then status), owned by its
//!   Node, later only its status; deleted, the next report is a 404 and the one after creates it;
//! * a report sent as the DNS server's account is the server's 403, naming who was refused;
//! * 2,000 calls with a bad token and 2,000 with a good one cost the server a handful of
//!   TokenReviews and SubjectAccessReviews;
//! * an agent speaking BGP, with the chart's grants for BGP and MetalLB, reads Tideway's BGP
//!   kinds and MetalLB's (its own CRDs; one `BGPPeer` kind in each group, each its own watch),
//!   the peers' password Secrets by field selector in their namespace only, and follows
//!   deletions.
//!
//! Requests are read from the server's audit log. What the real server does not do on cue
//! stays on the imitation (`sources/tests/kube_source.rs`): a change with no watch event, a
//! 410 or a watch timeout on cue, an invalid object, a server that cannot stream lists
//! answering 410 after a list.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::{Value, json};
use tideway_core::model::{NodeProxyState, ServiceName};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeNodeStateSink, KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::{NodeStateSink, WriteError};
use tideway_tests::until;

const AGENT: &str = "system:serviceaccount:tideway-system:tideway-agent";

struct Cluster {
    standalone: Standalone,
    admin: kube::Client,
    applier: Applier,
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_source_on_the_real_api_server() {
    let standalone = Standalone::start("src", |config| {
        config.service_cidr = "10.96.0.0/16".into();
        config.grace = Duration::from_secs(3600);
    })
    .await
    .expect("a control plane (root; make kube)");
    standalone.apply_crds(&chart().join("crds")).await.unwrap();
    standalone.apply_chart_rbac(&chart(), &[]).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let applier = Applier::new(admin.clone(), "tideway-test");
    let mut cluster = Cluster { standalone, admin, applier };
    agent_selects(&mut cluster).await;
    node_state_applied(&mut cluster).await;
    report_refused(&cluster).await;
    review_flood(&mut cluster).await;
    without_service_cidrs(&mut cluster).await;
    bgp(&mut cluster).await;
    tideway_tests::audit::record_usage(&cluster.standalone.cp.layout().audit_log());
}

/// `%XX` escapes of a request URI decoded.
fn decoded(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex =
            bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The requests `user` made since `since`, as "verb decoded-requestURI", each once.
fn audited(cluster: &Cluster, user: &str, since: SystemTime) -> Vec<String> {
    let text = std::fs::read_to_string(cluster.standalone.cp.layout().audit_log()).unwrap_or_default();
    let mut seen = BTreeSet::new();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user && seen.insert(e["auditID"].to_string()))
        .filter_map(|e| {
            let at: MicroTime = serde_json::from_value(e["requestReceivedTimestamp"].clone()).ok()?;
            let request = format!("{} {}", e["verb"].as_str()?, decoded(e["requestURI"].as_str()?));
            (SystemTime::from(at.0) >= since).then_some(request)
        })
        .collect()
}

fn service(name: &str, ip: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns1", "labels": labels,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
        "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn node(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// The Services of `ns1` in `view`.
fn names(view: &SharedCluster) -> BTreeSet<String> {
    view.lock().services().map(|s| s.name.to_string()).filter(|n| n.starts_with("ns1/")).collect()
}

async fn agent_client(cluster: &Cluster) -> kube::Client {
    let kubeconfig = cluster.standalone.token_kubeconfig("tideway-system", "tideway-agent").await.unwrap();
    client(Some(&kubeconfig)).await.expect("the agent's client")
}

async fn agent_selects(cluster: &mut Cluster) {
    let since = SystemTime::now();
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}}),
        node("node-a", "192.168.0.10"),
        node("node-b", "192.168.0.11"),
        service("web", "10.96.0.10", json!({})),
        service("other-proxy", "10.96.0.11", json!({"service.kubernetes.io/service-proxy-name": "tideway"})),
        service("headless-labelled", "10.96.0.12", json!({"service.kubernetes.io/headless": ""})),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "ns1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-a"}]}),
    ];
    cluster.applier.apply_all(objects).await.unwrap();
    let role = cluster.standalone.withdraw("tideway-agent", "endpointslices").await.unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let view = SharedCluster::new();
    let agent = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let task = tokio::spawn(KubeSource::new(agent_client(cluster).await, agent, metrics).run(view.clone()));

    // RBAC withholds EndpointSlices: the other kinds arrive, but the state is not synced.
    until("the 403 is counted", || {
        tideway_tests::metrics::sum(&registry, "reason=\"forbidden\",code=\"403\"") >= 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!view.is_synced(), "not synced before every kind is listed");
    cluster.applier.apply(&role).await.unwrap();
    tokio::time::timeout(Duration::from_secs(15), view.wait_synced()).await.expect("synced after the grant");

    // The API server did the filtering (selectors on the watch); the agent watches its own Node.
    assert_eq!(names(&view), BTreeSet::from(["ns1/web".to_string()]));
    let nodes: Vec<String> = view.lock().nodes().map(|n| n.name.clone()).collect();
    assert_eq!(nodes, ["node-a"]);
    let requests = audited(cluster, AGENT, since);
    let to = |path: &str| -> Vec<&String> { requests.iter().filter(|r| r.contains(path)).collect() };
    let selector = "labelSelector=!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
    for r in to("/api/v1/services").into_iter().chain(to("/apis/discovery.k8s.io/v1/endpointslices")) {
        assert!(r.contains(selector), "{r}");
    }
    assert!(to("/api/v1/nodes").iter().all(|r| r.contains("fieldSelector=metadata.name=node-a")));
    let announcements = to("/apis/tideway.io/v1alpha1/l2announcements");
    assert!(
        !announcements.is_empty()
            && announcements.iter().all(|r| r.contains("labelSelector=tideway.io/node=node-a"))
    );
    // Streamed first views from the watch cache: no list at all.
    assert!(requests.iter().all(|r| !r.starts_with("list ")), "{requests:#?}");
    assert!(to("/api/v1/services").iter().any(|r| r.contains("sendInitialEvents=true")), "{requests:#?}");

    // The cluster's Service CIDRs, kept current by their watch.
    let cidrs = || view.lock().service_cidrs().iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(cidrs(), ["10.96.0.0/16"]);
    let extra = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "extra"}, "spec": {"cidrs": ["10.97.0.0/24"]}});
    cluster.applier.apply(&extra).await.unwrap();
    until("the second ServiceCIDR", || cidrs().len() == 2).await;
    assert_eq!(cidrs(), ["10.96.0.0/16", "10.97.0.0/24"]);
    // What is stored is the model, converted at once: no annotations, no managed fields.
    let web = view.lock().service(&ServiceName::new("ns1", "web")).cloned().unwrap();
    let stored = format!("{web:?}");
    assert!(!stored.contains("kubectl") && !stored.contains("tideway-test"), "{stored}");
    // And only the labels a proxy reads (the Service name is a field of the slice already): none
    // of web's, nor of the `kubernetes` Service's slice its managers label.
    let slice_labels: Vec<_> = view.lock().endpoint_slices().map(|s| s.labels.len()).collect();
    assert_eq!(slice_labels, [0, 0]);

    // The node's ProxyConfig names this proxy: the watches restart with the named selector and
    // the Service labelled for it arrives (the headless one stays out).
    let since = SystemTime::now();
    let config = json!({"apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig", "metadata": {"name": "default"},
        "spec": {"mode": "nftables", "serviceProxyName": "tideway"}});
    cluster.applier.apply(&config).await.unwrap();
    until("the named proxy's Service", || names(&view).contains("ns1/other-proxy")).await;
    assert!(!names(&view).contains("ns1/headless-labelled"));
    let labels = view.lock().service(&ServiceName::new("ns1", "other-proxy")).unwrap().labels.clone();
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["service.kubernetes.io/service-proxy-name"]);
    let requests = audited(cluster, AGENT, since);
    let last = requests.iter().rfind(|r| r.contains("/api/v1/services")).expect("a new watch");
    assert!(
        last.contains("labelSelector=!service.kubernetes.io/headless&")
            || last.ends_with("labelSelector=!service.kubernetes.io/headless"),
        "{last}"
    );
    assert!(!last.contains("service-proxy-name"), "{last}");
    task.abort();
    cluster.applier.delete(&config).await.unwrap();
    cluster.applier.delete(&extra).await.unwrap();
}

fn report() -> NodeProxyState {
    NodeProxyState { node: "node-a".into(), ready: true, service_ports: 3, ..Default::default() }
}

async fn node_state_applied(cluster: &mut Cluster) {
    let since = SystemTime::now();
    let sink = KubeNodeStateSink::new(agent_client(cluster).await);
    sink.publish(&report()).await.expect("first report");
    let patches = || -> Vec<String> {
        audited(cluster, AGENT, since).into_iter().filter(|r| r.starts_with("patch ")).collect()
    };
    let first = patches();
    assert_eq!(first.len(), 2, "the object, then its status: {first:?}");
    for p in &first {
        assert!(p.contains("fieldManager=tideway-agent") && p.contains("force=true"), "{p}");
    }
    assert!(first[0].starts_with("patch /apis/tideway.io/v1alpha1/nodeproxystates/node-a?"), "{}", first[0]);
    assert!(
        first[1].starts_with("patch /apis/tideway.io/v1alpha1/nodeproxystates/node-a/status?"),
        "{}",
        first[1]
    );
    let path = "/apis/tideway.io/v1alpha1/nodeproxystates/node-a";
    let admin = cluster.admin.clone();
    let get = |path: String| {
        let admin = admin.clone();
        async move { tideway_lab::kube::rest::get(&admin, &path).await.expect("a GET answered") }
    };
    let stored = get(path.into()).await.expect("stored");
    let node = get("/api/v1/nodes/node-a".into()).await.expect("the Node");
    assert_eq!(stored["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"]);
    assert_eq!(stored["spec"]["nodeName"], "node-a");
    assert_eq!(stored["status"]["servicePorts"], 3);
    assert_eq!(stored["status"]["ready"], true);
    let operations: BTreeSet<(String, String)> = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["manager"].as_str().unwrap().to_string(), m["operation"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(operations, BTreeSet::from([("tideway-agent".to_string(), "Apply".to_string())]));

    // Later reports write the status only; a deleted object is created again.
    sink.publish(&NodeProxyState { service_ports: 4, ..report() }).await.expect("second");
    assert_eq!(patches().len(), 3);
    let state = json!({"apiVersion": "tideway.io/v1alpha1", "kind": "NodeProxyState", "metadata": {"name": "node-a"}});
    cluster.applier.delete(&state).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(path.into()).await.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = sink.publish(&report()).await;
    assert!(matches!(gone, Err(WriteError::Refused { code: 404, .. })), "{gone:?}");
    sink.publish(&report()).await.expect("recreated");
    assert!(get(path.into()).await.is_some());
}

/// The chart grants NodeProxyState writes to the agent only.
async fn report_refused(cluster: &Cluster) {
    let kubeconfig = cluster.standalone.token_kubeconfig("kube-system", "tideway-dns").await.unwrap();
    let sink = KubeNodeStateSink::new(client(Some(&kubeconfig)).await.unwrap());
    let err = sink.publish(&NodeProxyState { node: "node-b".into(), ..report() }).await.expect_err("denied");
    assert!(matches!(&err, WriteError::Refused { code: 403, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("403") && text.contains("forbidden"), "{text}");
    assert!(text.contains("system:serviceaccount:kube-system:tideway-dns"), "{text}");
}

/// 2,000 calls with one bad token, each naming another object, and 2,000 with a good one: the
/// server sees a TokenReview or two per token, not one per call.
async fn review_flood(cluster: &mut Cluster) {
    use tideway_serve::auth::{Access, Authorizer, Denied};
    use tideway_sources::kube::{CachedReview, KubeReview};
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tw"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice", "namespace": "tw"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "alice-reads-states"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-proxy-mode-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "tw"}]}),
    ];
    cluster.applier.apply_all(objects).await.unwrap();
    let alice = cluster.standalone.token("tw", "alice").await.unwrap();
    let since = SystemTime::now();
    let cached = CachedReview::new(KubeReview::new(agent_client(cluster).await));
    let get = |name: String| Access {
        verb: "get",
        group: "tideway.io",
        resource: "nodeproxystates",
        namespace: None,
        name: Some(name),
    };
    let bad = (0..2000).map(|i| {
        let access = get(format!("node-{i}"));
        let cached = &cached;
        async move { cached.authorize("stolen", &access).await }
    });
    let answers = futures::future::join_all(bad).await;
    assert!(answers.iter().all(|a| matches!(a, Err(Denied::BadToken(_)))), "{:?}", answers.first());
    let node_a = get("node-a".into());
    let good = (0..2000).map(|_| cached.authorize(&alice, &node_a));
    let answers = futures::future::join_all(good).await;
    assert!(answers.iter().all(Result::is_ok), "{:?}", answers.first());
    let requests = audited(cluster, AGENT, since);
    let count = |path: &str| requests.iter().filter(|r| r.starts_with(&format!("create {path}"))).count();
    let token_reviews = count("/apis/authentication.k8s.io/v1/tokenreviews");
    let access_reviews = count("/apis/authorization.k8s.io/v1/subjectaccessreviews");
    assert!((1..=4).contains(&token_reviews), "{token_reviews} TokenReviews for 4,000 calls");
    assert!((1..=2).contains(&access_reviews), "{access_reviews} SubjectAccessReviews for 2,000 calls");
}

/// An API server before Kubernetes 1.33 serves no ServiceCIDRs: an agent told not to watch
/// them, with the RBAC the chart grants it then (`agent.serviceCIDRs=false`), syncs without
/// asking (one that watches them would wait for their list).
async fn without_service_cidrs(cluster: &mut Cluster) {
    let values = [("agent.serviceCIDRs".to_string(), "false".to_string())];
    cluster.standalone.apply_chart_rbac(&chart(), &values).await.unwrap();
    let since = SystemTime::now();
    let view = SharedCluster::new();
    let agent = Role::Agent { node: "node-a".into(), service_cidrs: false };
    let source = KubeSource::new(agent_client(cluster).await, agent, SourceMetrics::default());
    let task = tokio::spawn(source.run(view.clone()));
    tokio::time::timeout(Duration::from_secs(15), view.wait_synced()).await.expect("synced");
    assert!(names(&view).contains("ns1/web"));
    let asked = audited(cluster, AGENT, since);
    assert!(asked.iter().all(|r| !r.contains("/apis/networking.k8s.io")), "{asked:#?}");
    task.abort();
}

/// As the chart's agent with `bgp.enabled` and `metallb.compat`: what it grants is what the
/// agent needs.
async fn bgp(cluster: &mut Cluster) {
    for crd in tideway_tests::metallb::crds(&cluster.standalone.dir.join("go")) {
        cluster.applier.apply(&crd).await.unwrap_or_else(|e| panic!("{}: {e}", crd["metadata"]["name"]));
    }
    let namespace = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    // The namespaces of the chart's Roles for BGP come first, as `helm install` needs them.
    cluster
        .applier
        .apply_all(vec![namespace("metallb-system"), namespace("tideway-bgp-secrets")])
        .await
        .unwrap();
    let values =
        [("bgp.enabled", "true"), ("metallb.compat", "true")].map(|(k, v)| (k.to_string(), v.to_string()));
    cluster.standalone.apply_chart_rbac(&chart(), &values).await.unwrap();
    let since = SystemTime::now();
    let peer = |api_version: &str, ns: Option<&str>, name: &str, asn: u32| {
        json!({"apiVersion": api_version, "kind": "BGPPeer", "metadata": {"name": name, "namespace": ns},
            "spec": {"myASN": asn, "peerASN": 64513, "peerAddress": "172.30.0.1"}})
    };
    let secret = |ns: &str, name: &str, kind: &str, data: Value| json!({"apiVersion": "v1", "kind": "Secret", "type": kind, "metadata": {"name": name, "namespace": ns}, "data": data});
    let objects = vec![
        peer("tideway.io/v1alpha1", None, "router", 64512),
        peer("metallb.io/v1beta2", Some("metallb-system"), "router", 64600),
        peer("metallb.io/v1beta2", Some("metallb-system"), "spare", 64512),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "Community",
            "metadata": {"name": "c", "namespace": "metallb-system"},
            "spec": {"communities": [{"name": "vpn-only", "value": "1234:1"}]}}),
        // A peer's password Secret (base64 of "s3cret") in the chart's namespace for them, a
        // Secret of another type there, not even listed, and the release's TLS key, which the
        // agent may not read.
        secret(
            "tideway-bgp-secrets",
            "bgp-auth",
            "kubernetes.io/basic-auth",
            json!({"password": "czNjcmV0"}),
        ),
        secret("tideway-bgp-secrets", "stray", "kubernetes.io/tls", json!({"tls.crt": "", "tls.key": ""})),
        secret("tideway-system", "tideway-tls", "kubernetes.io/tls", json!({"tls.crt": "", "tls.key": ""})),
    ];
    cluster.applier.apply_all(objects.clone()).await.unwrap();
    let view = SharedCluster::new();
    let agent = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let source = KubeSource::new(agent_client(cluster).await, agent, SourceMetrics::default())
        .with_bgp(true)
        .with_bgp_secrets(Some("tideway-bgp-secrets".into()))
        .with_metallb(Some("metallb-system".into()));
    let task = tokio::spawn(source.run(view.clone()));
    tokio::time::timeout(Duration::from_secs(15), view.wait_synced()).await.expect("synced");
    let peers = |v: &SharedCluster| -> Vec<(String, u32)> {
        v.lock().bgp().peers.iter().map(|p| (p.name.clone(), p.my_asn)).collect()
    };
    assert_eq!(peers(&view), [("router".to_string(), 64512), ("spare".to_string(), 64512)]);
    assert_eq!(view.lock().bgp().conflicts.len(), 1);
    assert_eq!(view.lock().bgp().communities.len(), 1);
    assert_eq!(view.lock().bgp_secret("bgp-auth").map(|s| s.password.clone()).as_deref(), Some("s3cret"));
    assert!(view.invalid_objects().is_empty(), "the TLS Secret is not read: {:?}", view.errors());
    let requests = audited(cluster, AGENT, since);
    let secrets: Vec<&String> = requests.iter().filter(|r| r.contains("/secrets")).collect();
    assert!(!secrets.is_empty());
    for r in &secrets {
        assert!(r.contains("/api/v1/namespaces/tideway-bgp-secrets/secrets?"), "{r}");
        assert!(r.contains("fieldSelector=type=kubernetes.io/basic-auth"), "{r}");
    }
    assert!(
        requests.iter().any(|r| r.contains("/apis/metallb.io/v1beta2/namespaces/metallb-system/bgppeers"))
    );

    cluster.applier.delete(&objects[0]).await.unwrap();
    until("MetalLB's router is used once Tideway's is gone", || {
        peers(&view) == [("router".to_string(), 64600), ("spare".to_string(), 64512)]
    })
    .await;
    cluster.applier.delete(&objects[2]).await.unwrap();
    until("spare is gone", || peers(&view).len() == 1).await;
    assert!(view.lock().bgp().conflicts.is_empty());
    task.abort();
}

//! The Kubernetes source through the real `kube::Client` against a stand-in API server: lists,
//! watches, 410 Gone and relists, label and field selectors, the synced signal, RBAC denials,
//! and the agent's NodeProxyState written with server-side apply.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use tideway_core::model::{NodeProxyState, ServiceName};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeNodeStateSink, KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::{NodeStateSink, WriteError};
use tideway_tests::fake_api::FakeApi;

fn service(ns: &str, name: &str, ip: &str, labels: Value) -> Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": ns, "labels": labels,
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
        "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
        "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(ns: &str, name: &str, svc: &str, ip: &str) -> Value {
    json!({"kind": "EndpointSlice", "metadata": {"name": name, "namespace": ns,
        "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node-a"}]})
}

fn node(name: &str, ip: &str) -> Value {
    json!({"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
}

fn namespace(name: &str) -> Value {
    json!({"kind": "Namespace", "metadata": {"name": name}})
}

async fn kube_client(api: &FakeApi, dir: &tempdir::Dir) -> kube::Client {
    client(Some(&api.kubeconfig(&dir.0))).await.expect("client from kubeconfig")
}

mod tempdir {
    /// A directory removed on drop.
    pub(crate) struct Dir(pub(crate) std::path::PathBuf);
    impl Dir {
        pub(crate) fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("tideway-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&p).expect("temp dir");
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Polls `f` until it holds, for at most 10 s.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn names(cluster: &SharedCluster) -> BTreeSet<String> {
    cluster.lock().services().map(|s| s.name.to_string()).collect()
}

fn counter(registry: &prometheus_client::registry::Registry, needle: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
    text.lines()
        .filter(|l| l.contains(needle) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_source_lists_watches_and_relists_after_410_gone_without_flushing() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("dns-source");
    api.preload([
        service("ns1", "web", "10.96.0.10", json!({})),
        service("ns1", "db", "10.96.0.11", json!({})),
        slice("ns1", "web-1", "web", "10.244.1.5"),
        namespace("ns1"),
    ]);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let cluster = SharedCluster::new();
    let source = KubeSource::new(
        kube_client(&api, &dir).await,
        Role::Dns { pods: false, node_states: false },
        metrics,
    );
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    assert_eq!(names(&cluster), BTreeSet::from(["ns1/db".to_string(), "ns1/web".to_string()]));
    assert!(cluster.lock().namespace("ns1").is_some());
    assert_eq!(cluster.lock().endpoint_slices().count(), 1);
    assert!(api.requests_to("/api/v1/pods").is_empty(), "pods are watched only for --pods verified");
    cluster.lock().take_changes();

    // A watch event arrives as a change of that Service only.
    api.upsert(service("ns1", "api", "10.96.0.12", json!({})));
    eventually("the added Service", || names(&cluster).contains("ns1/api")).await;
    let changed = cluster.lock().take_changes().services;
    assert_eq!(changed, BTreeSet::from([ServiceName::new("ns1", "api")]));

    // 410 Gone: the watcher relists. Meanwhile one Service went away and one changed; the
    // relist replaces the kind with only those differences and the rest never disappears.
    let lists_before =
        api.requests_to("/api/v1/services").iter().filter(|r| !r.query.contains_key("watch")).count();
    api.expire_watches("Service");
    // Changed and deleted while no watch was open: no event, only the relist can tell.
    api.preload([service("ns1", "web", "10.96.0.20", json!({}))]);
    api.remove_silently("Service", Some("ns1"), "db");
    eventually("the relist after 410 Gone", || {
        api.requests_to("/api/v1/services").iter().filter(|r| !r.query.contains_key("watch")).count()
            > lists_before
    })
    .await;
    eventually("the relisted state", || !names(&cluster).contains("ns1/db")).await;
    assert!(names(&cluster).contains("ns1/api") && names(&cluster).contains("ns1/web"));
    let changed = cluster.lock().take_changes().services;
    assert_eq!(changed, BTreeSet::from([ServiceName::new("ns1", "db"), ServiceName::new("ns1", "web")]));
    let web_ip = cluster.lock().service(&ServiceName::new("ns1", "web")).unwrap().cluster_ips[0];
    assert_eq!(web_ip.to_string(), "10.96.0.20");
    assert!(counter(&registry, "tideway_source_relists_total{kind=\"Service\"}") >= 1.0);
    assert!(counter(&registry, "reason=\"gone\"") >= 1.0, "the 410 is counted");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_source_selects_like_kube_proxy_and_syncs_only_after_every_kind() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("agent-source");
    api.preload([
        node("node-a", "192.168.0.10"),
        node("node-b", "192.168.0.11"),
        service("ns1", "web", "10.96.0.10", json!({})),
        service(
            "ns1",
            "other-proxy",
            "10.96.0.11",
            json!({"service.kubernetes.io/service-proxy-name": "tideway"}),
        ),
        service("ns1", "headless-labelled", "10.96.0.12", json!({"service.kubernetes.io/headless": ""})),
        slice("ns1", "web-1", "web", "10.244.1.5"),
    ]);
    api.forbid("EndpointSlice", true);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let cluster = SharedCluster::new();
    let role = Role::Agent { node: "node-a".into() };
    let task =
        tokio::spawn(KubeSource::new(kube_client(&api, &dir).await, role, metrics).run(cluster.clone()));

    // RBAC denies EndpointSlices: the other kinds arrive, but the state is not synced.
    eventually("the 403 is counted", || counter(&registry, "reason=\"forbidden\",code=\"403\"") >= 1.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!cluster.is_synced(), "not synced before every kind is listed");
    api.forbid("EndpointSlice", false);
    tokio::time::timeout(Duration::from_secs(15), cluster.wait_synced())
        .await
        .expect("synced after the grant");

    // The API server did the filtering (selectors on the watch), and the agent watches its
    // own Node only.
    assert_eq!(names(&cluster), BTreeSet::from(["ns1/web".to_string()]));
    let nodes: Vec<String> = cluster.lock().nodes().map(|n| n.name.clone()).collect();
    assert_eq!(nodes, vec!["node-a".to_string()]);
    let selector = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
    for r in api.requests_to("/api/v1/services").iter().chain(&api.requests_to("/apis/discovery.k8s.io")) {
        assert_eq!(r.query.get("labelSelector").map(String::as_str), Some(selector), "{r:?}");
    }
    for r in api.requests_to("/api/v1/nodes") {
        assert_eq!(r.query.get("fieldSelector").map(String::as_str), Some("metadata.name=node-a"));
    }
    for r in api.requests_to("/apis/tideway.io/v1alpha1/l2announcements") {
        assert_eq!(r.query.get("labelSelector").map(String::as_str), Some("tideway.io/node=node-a"));
    }
    // What is stored is the model, converted at once: no annotations, no managed fields.
    let web = cluster.lock().service(&ServiceName::new("ns1", "web")).cloned().unwrap();
    assert_eq!(format!("{web:?}").matches("kubectl").count(), 0);
    // And only the labels a proxy reads (the Service name is a field of the slice already).
    let slice_labels: Vec<_> = cluster.lock().endpoint_slices().map(|s| s.labels.len()).collect();
    assert_eq!(slice_labels, vec![0]);

    // The node's ProxyConfig names this proxy: the watches restart with the named selector
    // and the Service labelled for it arrives (the headless one stays out).
    api.upsert(json!({"kind": "ProxyConfig", "metadata": {"name": "default", "generation": 1},
        "spec": {"mode": "nftables", "serviceProxyName": "tideway"}}));
    eventually("the named proxy's Service", || names(&cluster).contains("ns1/other-proxy")).await;
    assert!(!names(&cluster).contains("ns1/headless-labelled"));
    let labels = cluster.lock().service(&ServiceName::new("ns1", "other-proxy")).unwrap().labels.clone();
    assert_eq!(labels.keys().collect::<Vec<_>>(), vec!["service.kubernetes.io/service-proxy-name"]);
    let last = api.requests_to("/api/v1/services").last().cloned().unwrap();
    assert_eq!(last.query.get("labelSelector").map(String::as_str), Some("!service.kubernetes.io/headless"));
    task.abort();
    // An agent lists from the watch cache, never with a quorum read.
    let lists: Vec<_> =
        api.requests().into_iter().filter(|r| r.method == "GET" && !r.query.contains_key("watch")).collect();
    assert!(!lists.is_empty());
    assert!(
        lists.iter().all(|r| r.query.get("resourceVersion").map(String::as_str) == Some("0")),
        "{lists:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_updates_keep_the_last_valid_version_and_are_reported() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("invalid");
    api.preload([service("ns1", "web", "10.96.0.10", json!({})), namespace("ns1")]);
    let cluster = SharedCluster::new();
    let source = KubeSource::new(
        kube_client(&api, &dir).await,
        Role::Dns { pods: false, node_states: false },
        SourceMetrics::default(),
    );
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    let mut bad = service("ns1", "web", "10.96.0.10", json!({}));
    bad["spec"]["ports"][0]["protocol"] = json!("ICMP");
    api.upsert(bad);
    eventually("the invalid object is listed", || !cluster.invalid_objects().is_empty()).await;
    let errors = cluster.errors();
    assert!(errors[0].contains("Service ns1/web") && errors[0].contains("ICMP"), "{errors:?}");
    assert!(names(&cluster).contains("ns1/web"), "the last valid version stays");
    api.upsert(service("ns1", "web", "10.96.0.30", json!({})));
    eventually("fixed", || cluster.invalid_objects().is_empty()).await;
    task.abort();
}

fn report() -> NodeProxyState {
    NodeProxyState { node: "node-a".into(), ready: true, service_ports: 3, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_proxy_state_is_server_side_applied_and_owned_by_its_node() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("nps");
    api.upsert(node("node-a", "192.168.0.10"));
    let sink = KubeNodeStateSink::new(kube_client(&api, &dir).await);
    sink.publish(&report()).await.expect("first report");
    let patches: Vec<_> = api.requests().into_iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(patches.len(), 2, "the object, then its status");
    for p in &patches {
        assert_eq!(p.content_type.as_deref(), Some("application/apply-patch+yaml"));
        assert_eq!(p.query.get("fieldManager").map(String::as_str), Some("tideway-agent"));
        assert_eq!(p.query.get("force").map(String::as_str), Some("true"));
    }
    assert_eq!(patches[0].path, "/apis/tideway.io/v1alpha1/nodeproxystates/node-a");
    assert_eq!(patches[0].body["metadata"]["ownerReferences"][0]["uid"], "uid--node-a");
    assert_eq!(patches[0].body["spec"]["nodeName"], "node-a");
    assert_eq!(patches[1].path, "/apis/tideway.io/v1alpha1/nodeproxystates/node-a/status");
    assert_eq!(patches[1].body["status"]["servicePorts"], 3);
    assert_eq!(patches[1].body["kind"], "NodeProxyState");
    let stored = api.get("NodeProxyState", None, "node-a").expect("stored");
    assert_eq!(stored["status"]["ready"], true);

    // Later reports write the status only; a deleted object is created again.
    sink.publish(&NodeProxyState { service_ports: 4, ..report() }).await.expect("second");
    assert_eq!(api.requests().iter().filter(|r| r.method == "PATCH").count(), 3);
    api.delete("NodeProxyState", None, "node-a");
    assert!(matches!(sink.publish(&report()).await, Err(WriteError::Refused { code: 404, .. })));
    sink.publish(&report()).await.expect("recreated");
    assert!(api.get("NodeProxyState", None, "node-a").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_denied_report_is_a_clear_error() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("nps-403");
    api.forbid("NodeProxyState", true);
    let sink = KubeNodeStateSink::new(kube_client(&api, &dir).await);
    let err = sink.publish(&report()).await.expect_err("denied");
    assert!(matches!(&err, WriteError::Refused { code: 403, .. }), "{err:?}");
    assert!(err.to_string().contains("403") && err.to_string().contains("forbidden"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_with_an_audience_take_only_tokens_minted_for_it() {
    use tideway_api::auth::{Access, Authorizer, Denied};
    use tideway_sources::kube::KubeReview;
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("audience");
    api.add_token("api-token", "alice", &[]);
    api.add_token_for("tideway-token", "alice", &[], &["tideway"]);
    api.grant("alice", "get", "tideway.io", "nodeproxystates");
    let client = kube_client(&api, &dir).await;
    let access =
        Access { verb: "get", group: "tideway.io", resource: "nodeproxystates", namespace: None, name: None };
    let scoped = KubeReview::new(client.clone()).with_audiences(vec!["tideway".into()]);
    assert_eq!(scoped.authorize("tideway-token", &access).await.map(|c| c.user), Ok("alice".into()));
    let leaked = scoped.authorize("api-token", &access).await;
    assert!(matches!(leaked, Err(Denied::BadToken(_))), "an API-server token is refused: {leaked:?}");
    let reviews = api.requests_to("/apis/authentication.k8s.io/v1/tokenreviews");
    assert_eq!(reviews.last().expect("a review").body["spec"]["audiences"], json!(["tideway"]));
    let any = KubeReview::new(client);
    assert!(any.authorize("api-token", &access).await.is_ok(), "without an audience: the API server's");
    assert!(any.authorize("tideway-token", &access).await.is_err(), "a Tideway token is no API credential");
}

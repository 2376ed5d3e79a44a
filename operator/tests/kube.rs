//! The operator through the real `kube::Client` against a stand-in API server: what it writes
//! (Service status, L2Announcements, CRD status, Events) and how (server-side apply, retries
//! after a 409), leader election over a Lease (acquire, renew, release, take-over), and REST
//! changes of a ProxyConfig checked with TokenReview and SubjectAccessReview.

use std::sync::{Arc, RwLock};
use std::time::Duration;

mod common;

use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::{Account, FakeApi};
use tokio::sync::watch;

async fn kube_client(api: &FakeApi, tag: &str) -> kube::Client {
    let dir = std::env::temp_dir().join(format!("tideway-op-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    client(Some(&api.kubeconfig(&dir, Account::Operator))).await.expect("client")
}

fn cluster_objects() -> Vec<Value> {
    let node = |name: &str, ip: &str| {
        json!({"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    vec![
        node("node-a", "172.18.0.2"),
        node("node-b", "172.18.0.3"),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "default", "generation": 1},
            "spec": {"addresses": ["172.18.255.200-172.18.255.250"]}}),
        json!({"kind": "ProxyConfig", "metadata": {"name": "default", "generation": 1}, "spec": {"mode": "nftables"}}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "demo",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.10.1.5"], "nodeName": "node-a", "conditions": {"ready": true}}]}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_assigns_announces_and_reports_through_the_api() {
    let api = FakeApi::start().await;
    api.preload(cluster_objects());
    // The first status write of the Service meets a conflict; the write is retried.
    api.fail_next("PATCH", "/api/v1/namespaces/demo/services/web/status", 409);
    let c = kube_client(&api, "writes").await;
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let (_leader_tx, leader) = watch::channel(Lead::Always);
    let writer = Arc::new(KubeWriter::new(c, Some("op-0".into())));
    let run = tideway_operator::reconcile::run(
        cluster,
        writer,
        leader,
        LoopOptions::default(),
        metrics,
        status.clone(),
        std::future::pending(),
    );
    tokio::spawn(run);

    let svc = eventually("the Service's address", || {
        let s = api.get("Service", Some("demo"), "web")?;
        s["status"]["loadBalancer"]["ingress"][0]["ip"].is_string().then_some(s)
    })
    .await;
    assert_eq!(svc["status"]["loadBalancer"]["ingress"][0], json!({"ip": "172.18.255.200", "ipMode": "VIP"}));
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/namespaces/demo/services/web/status")
        .collect();
    assert_eq!(patches.len(), 2, "the 409 was retried once");
    assert_eq!(patches[1].content_type.as_deref(), Some("application/apply-patch+yaml"));
    assert_eq!(patches[1].query.get("fieldManager").map(String::as_str), Some("tideway-operator"));

    let ann = eventually("the announcement", || api.get("L2Announcement", Some("demo"), "web")).await;
    assert_eq!(ann["metadata"]["labels"]["tideway.io/node"], ann["spec"]["node"]);
    assert_eq!(ann["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert_eq!(ann["spec"]["eligibleNodes"], json!(["node-a", "node-b"]));

    let pool = eventually("the pool's status", || {
        let p = api.get("LoadBalancerPool", None, "default")?;
        (p["status"]["assignedIPv4"] == 1).then_some(p)
    })
    .await;
    assert_eq!(pool["status"]["availableIPv4"], 50);
    assert_eq!(pool["status"]["conditions"][0]["type"], "Valid");
    let pc = eventually("the ProxyConfig's status", || api.get("ProxyConfig", None, "default")).await;
    assert_eq!(pc["status"]["nodesSelected"], 2);
    assert_eq!(pc["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(pc["status"]["conditions"][0]["status"], "False");
    let events = eventually("an IPAllocated Event", || {
        let e = api.list("Event");
        e.iter().any(|e| e["reason"] == "IPAllocated").then_some(e)
    })
    .await;
    let allocated = events.iter().find(|e| e["reason"] == "IPAllocated").unwrap();
    assert_eq!(allocated["regarding"]["name"], "web");
    assert_eq!(allocated["reportingController"], "tideway-operator");

    // The node reports its rules: the rollout reaches Ready.
    for node in ["node-a", "node-b"] {
        api.upsert(json!({"kind": "NodeProxyState", "metadata": {"name": node}, "spec": {"nodeName": node},
            "status": {"mode": "nftables", "proxyConfig": "default", "proxyConfigGeneration": 1, "ready": true}}));
    }
    eventually("the rollout", || {
        let pc = api.get("ProxyConfig", None, "default")?;
        (pc["status"]["nodesProgrammed"] == 2 && pc["status"]["conditions"][0]["status"] == "True")
            .then_some(())
    })
    .await;

    // The Service is deleted: its announcement goes and the address is free again.
    api.delete("Service", Some("demo"), "web");
    eventually("the withdrawal", || api.get("L2Announcement", Some("demo"), "web").is_none().then_some(()))
        .await;
    eventually("the pool's count", || {
        let p = api.get("LoadBalancerPool", None, "default")?;
        (p["status"]["assignedIPv4"] == 0).then_some(())
    })
    .await;
    assert!(status.read().unwrap().leader && status.read().unwrap().writes > 4);
}

fn timings() -> LeaseTimings {
    LeaseTimings {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    }
}

fn leads(lead: &watch::Receiver<Lead>) -> bool {
    lead.borrow().leads_at(tokio::time::Instant::now())
}

fn holder(api: &FakeApi) -> Option<String> {
    api.get("Lease", Some("tideway-system"), "tideway-operator")?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_standby_takes_over() {
    let api = FakeApi::start().await;
    let c = kube_client(&api, "lease").await;
    let campaign = |who: &str| {
        let (tx, rx) = watch::channel(Lead::Follow);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let lease = KubeLease::new(c.clone(), "tideway-system", "tideway-operator");
        let task =
            tokio::spawn(tideway_operator::election::run(lease, Elector::new(who), timings(), tx, async {
                let _ = stopped.await;
            }));
        (rx, stop, task)
    };
    let (a_leads, stop_a, task_a) = campaign("op-a");
    eventually("op-a leads", || leads(&a_leads).then_some(())).await;
    let (b_leads, _stop_b, task_b) = campaign("op-b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leads(&a_leads) && !leads(&b_leads), "a live Lease keeps its holder; op-a renews it");
    assert_eq!(holder(&api).as_deref(), Some("op-a"));
    let renewals = api.requests().iter().filter(|r| r.method == "PUT").count();
    assert!(renewals >= 10, "renewed every retry period: {renewals}");

    // op-a shuts down: it releases the Lease and op-b takes it at once.
    let _ = stop_a.send(());
    task_a.await.unwrap();
    assert!(!leads(&a_leads));
    let released = std::time::Instant::now();
    eventually("op-b leads", || leads(&b_leads).then_some(())).await;
    assert!(released.elapsed() < Duration::from_secs(1), "no wait for expiry after a release");
    assert_eq!(holder(&api).as_deref(), Some("op-b"));
    let lease = api.get("Lease", Some("tideway-system"), "tideway-operator").unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "one change of holder");

    // op-b dies without releasing: op-c waits for the Lease to expire on its own clock.
    task_b.abort();
    let died = std::time::Instant::now();
    let (c_leads, _stop_c, _task_c) = campaign("op-c");
    eventually("op-c leads", || leads(&c_leads).then_some(())).await;
    let took = died.elapsed();
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(5), "took over after {took:?}");
    assert_eq!(holder(&api).as_deref(), Some("op-c"));
}

/// PATCH of a ProxyConfig over the operator's REST API, in a cluster: the token is checked
/// with a TokenReview, the verb with a SubjectAccessReview, and the change reaches the API
/// server as a JSON merge patch of the resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_changes_are_reviewed_and_merge_patched() {
    use axum::body::Body;
    use axum::http::Request;
    use tideway_api::auth::Authorizer;
    use tideway_operator::api::ApiState;
    use tideway_sources::kube::KubeReview;
    use tower::ServiceExt;

    let api = FakeApi::start().await;
    api.preload(cluster_objects());
    api.add_token("alice-token", "alice", &["ops"]);
    api.grant("alice", "patch", "tideway.io", "proxyconfigs");
    api.add_token("bob-token", "bob", &[]);
    let c = kube_client(&api, "rest").await;
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    eventually("the ProxyConfig in the view", || cluster.lock().proxy_configs().next().map(|_| ())).await;
    let state = ApiState {
        cluster: cluster.clone(),
        writer: Arc::new(KubeWriter::new(c.clone(), None)),
        auth: Arc::new(KubeReview::new(c.clone())) as Arc<dyn Authorizer>,
        open_reads: true,
    };
    let router = tideway_operator::api::router(state);
    let patch = |token: &str| {
        Request::builder()
            .method("PATCH")
            .uri("/api/v1/proxyconfigs/default")
            .header("content-type", "application/merge-patch+json")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(r#"{"spec": {"mode": "iptables"}}"#))
            .unwrap()
    };
    let code = |r: axum::response::Response| r.status().as_u16();
    assert_eq!(code(router.clone().oneshot(patch("nobody")).await.unwrap()), 401, "unknown token");
    assert_eq!(code(router.clone().oneshot(patch("bob-token")).await.unwrap()), 403, "bob may not patch");
    assert_eq!(api.get("ProxyConfig", None, "default").unwrap()["spec"]["mode"], "nftables", "unchanged");
    assert_eq!(code(router.clone().oneshot(patch("alice-token")).await.unwrap()), 202);
    let pc = api.get("ProxyConfig", None, "default").unwrap();
    assert_eq!(
        (pc["spec"]["mode"].as_str(), pc["metadata"]["generation"].as_i64()),
        (Some("iptables"), Some(2))
    );

    let reviews = api.requests_to("/apis/authorization.k8s.io/v1/subjectaccessreviews");
    let sar = &reviews.last().expect("a SubjectAccessReview").body["spec"];
    assert_eq!(sar["user"], "alice");
    assert_eq!(sar["groups"], json!(["ops"]));
    assert_eq!(
        sar["resourceAttributes"],
        json!({"group": "tideway.io", "resource": "proxyconfigs", "verb": "patch", "name": "default"})
    );
    let patches = api.requests_to("/apis/tideway.io/v1alpha1/proxyconfigs/default");
    let sent = patches.iter().find(|r| r.method == "PATCH").expect("the merge patch");
    assert_eq!(sent.content_type.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(sent.query.get("fieldManager").map(String::as_str), Some("tideway-api"));
    assert_eq!(sent.body, json!({"spec": {"mode": "iptables"}}));
    // The operator's view follows the watch: the next GET shows the new generation.
    eventually("the new generation in the view", || {
        cluster.lock().proxy_configs().find(|c| c.generation == 2).map(|_| ())
    })
    .await;
}

/// A write RBAC refuses (here the Events grant withdrawn) is the API server's 403: the operator
/// keeps running and writing the rest, and its status names the refusal and who was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_write_is_reported_and_the_rest_goes_on() {
    let api = FakeApi::start().await;
    api.preload(cluster_objects());
    api.forbid("Event", true);
    let c = kube_client(&api, "forbidden").await;
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    let status = common::spawn_reconcile(cluster, c);
    eventually("the Service's address", || {
        let s = api.get("Service", Some("demo"), "web")?;
        s["status"]["loadBalancer"]["ingress"][0]["ip"].as_str().map(str::to_string)
    })
    .await;
    eventually("the announcement", || api.get("L2Announcement", Some("demo"), "web")).await;
    let err = eventually("the refusal in the status", || {
        let s = status.read().unwrap();
        s.last_error.clone().filter(|e| e.contains("403") && s.write_errors >= 1)
    })
    .await;
    assert!(err.contains("forbidden"), "{err}");
    assert!(err.contains("system:serviceaccount:tideway-system:tideway-operator"), "{err}");
    assert!(api.list("Event").is_empty());
}

/// The same Event again (a fallback that keeps happening) is folded into the first one's series
/// as the API server's recorders do it: one Event, patched, with a count, not a second object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_a_patch_of_the_first() {
    use tideway_core::operator::{Action, Event, ObjectRef};
    use tideway_sources::status::ClusterWriter;
    let api = FakeApi::start().await;
    let writer = KubeWriter::new(kube_client(&api, "series").await, Some("op-0".into()));
    let event = Action::Event(Event {
        object: ObjectRef { kind: "Service", namespace: Some("demo".into()), name: "web".into() },
        warning: true,
        reason: "LoadBalancingUnavailable",
        message: "node-a runs iptables, which has no maglev; it balances at random".into(),
        related: None,
    });
    writer.write(&event).await.expect("the first Event");
    writer.write(&event).await.expect("the repeat");
    let events = api.list("Event");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["series"]["count"], 2, "{:?}", events[0]);
    let sent: Vec<_> =
        api.requests().into_iter().filter(|r| r.path.contains("/events")).map(|r| r.method).collect();
    assert_eq!(sent, ["POST", "PATCH"]);
}

//! A cluster moving from MetalLB, through the real `kube::Client` against a stand-in API
//! server: the operator started with `--metallb-compat` reads MetalLB's own `IPAddressPool`s
//! and `L2Advertisement`s of `metallb-system` (served as the API server serves them:
//! `fixtures/metallb-objects.json`, MetalLB's documented examples), every Service keeps the
//! address MetalLB gave or pinned, the advertisements decide who may announce, a name clash
//! with a `LoadBalancerPool` is an Event on both objects, and nothing of MetalLB's is written.

mod common;

use serde_json::{Value, json};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::{Account, FakeApi};

fn metallb_objects() -> Vec<Value> {
    let list: Value = serde_json::from_str(include_str!("fixtures/metallb-objects.json")).expect("fixture");
    list["items"].as_array().expect("items").clone()
}

fn service(
    ns: &str,
    name: &str,
    ip: &str,
    annotations: Value,
    labels: Value,
    status_ip: Option<&str>,
) -> Value {
    let ingress: Vec<Value> = status_ip.into_iter().map(|ip| json!({"ip": ip, "ipMode": "VIP"})).collect();
    json!({"kind": "Service",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations, "labels": labels},
        "spec": {"type": "LoadBalancer", "clusterIP": ip, "clusterIPs": [ip],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": name}},
        "status": {"loadBalancer": {"ingress": ingress}}})
}

/// One ready endpoint on node-a.
fn slice(ns: &str, svc: &str, ip: &str) -> Value {
    json!({"kind": "EndpointSlice", "metadata": {"name": format!("{svc}-1"), "namespace": ns,
            "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "nodeName": "node-a", "conditions": {"ready": true}}]})
}

fn cluster_objects() -> Vec<Value> {
    let node = |name: &str, ip: &str| {
        json!({"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let none = json!({});
    vec![
        node("node-a", "192.168.10.2"),
        node("node-b", "192.168.10.3"),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "Namespace", "metadata": {"name": "shop"}}),
        // Tideway's own pool with the name of a MetalLB pool: it is the one used.
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "staging", "generation": 1},
            "spec": {"addresses": ["192.168.31.0/24"], "autoAssign": false}}),
        service(
            "demo",
            "nginx",
            "10.96.0.10",
            json!({"metallb.universe.tf/loadBalancerIPs": "192.168.10.100"}),
            none.clone(),
            None,
        ),
        service("demo", "kept", "10.96.0.11", none.clone(), none.clone(), Some("192.168.9.3")),
        service("demo", "auto", "10.96.0.12", none.clone(), none.clone(), None),
        service(
            "shop",
            "checkout",
            "10.96.0.13",
            json!({"metallb.io/address-pool": "expensive"}),
            json!({"app": "checkout"}),
            None,
        ),
        slice("demo", "nginx", "10.10.1.5"),
        slice("shop", "checkout", "10.10.1.6"),
    ]
}

async fn kube_client(api: &FakeApi) -> kube::Client {
    let dir = std::env::temp_dir().join(format!("tideway-op-metallb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    client(Some(&api.kubeconfig(&dir, Account::Operator))).await.expect("client")
}

fn ingress(api: &FakeApi, ns: &str, name: &str) -> Option<String> {
    let s = api.get("Service", Some(ns), name)?;
    s["status"]["loadBalancer"]["ingress"][0]["ip"].as_str().map(str::to_string)
}

fn eligible(api: &FakeApi, ns: &str, name: &str) -> Option<Value> {
    Some(api.get("L2Announcement", Some(ns), name)?["spec"]["eligibleNodes"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallbs_own_objects_keep_every_address_and_decide_the_announcers() {
    let api = FakeApi::start().await;
    // Authorized as the chart with `metallb.compat` grants the operator.
    api.chart_values("ha-monitoring");
    api.preload(metallb_objects());
    api.preload(cluster_objects());
    let c = kube_client(&api).await;
    let cluster = SharedCluster::new();
    let source = KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default())
        .with_metallb(Some("metallb-system".into()));
    tokio::spawn(source.run(cluster.clone()));
    common::spawn_reconcile(cluster, c);

    // Pinned in MetalLB's annotation, assigned by MetalLB earlier, and a pool named: kept.
    for (ns, name, want) in [
        ("demo", "nginx", "192.168.10.100"),
        ("demo", "kept", "192.168.9.3"),
        ("shop", "checkout", "203.0.113.64"),
    ] {
        let got = eventually(&format!("{ns}/{name}'s address"), || ingress(&api, ns, name)).await;
        assert_eq!(got, want, "{ns}/{name}");
    }
    // A new Service gets an address of the one auto-assigned IPAddressPool read: not the
    // shadowed `staging`, nor a pool of another namespace.
    let auto = eventually("demo/auto's address", || ingress(&api, "demo", "auto")).await;
    let ip: std::net::Ipv4Addr = auto.parse().expect("IPv4");
    assert!(
        ip.octets()[..3] == [192, 168, 10] || ip.octets()[..3] == [192, 168, 9],
        "{auto} is not first-pool's"
    );

    // The advertisements decide who may announce: `example` admits node-a only for first-pool,
    // `gold` (by label, no node selector) every node for `expensive`.
    let nginx = eventually("nginx's announcement", || eligible(&api, "demo", "nginx")).await;
    assert_eq!(nginx, json!(["node-a"]));
    let checkout = eventually("checkout's announcement", || eligible(&api, "shop", "checkout")).await;
    assert_eq!(checkout, json!(["node-a", "node-b"]));

    // The clash of `staging` is a Warning on both objects, naming both.
    let events = eventually("the PoolConflict Events", || {
        let e: Vec<Value> = api.list("Event").into_iter().filter(|e| e["reason"] == "PoolConflict").collect();
        (e.len() == 2).then_some(e)
    })
    .await;
    let on = |kind: &str| events.iter().find(|e| e["regarding"]["kind"] == kind).expect(kind).clone();
    let metallb = on("IPAddressPool");
    assert_eq!(metallb["regarding"]["apiVersion"], "metallb.io/v1beta1");
    assert_eq!(metallb["regarding"]["namespace"], "metallb-system");
    assert_eq!(metallb["type"], "Warning");
    assert_eq!(on("LoadBalancerPool")["regarding"]["name"], "staging");
    let note = metallb["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("IPAddressPool metallb-system/staging") && note.contains("LoadBalancerPool staging"),
        "{note}"
    );

    // An advertisement changed live moves who may announce.
    let mut example = api.get("L2Advertisement", Some("metallb-system"), "example").expect("example");
    example["spec"]["nodeSelectors"][0]["matchLabels"]["kubernetes.io/hostname"] = json!("node-b");
    api.upsert(example);
    eventually("nginx announced from node-b only", || {
        (eligible(&api, "demo", "nginx")? == json!(["node-b"])).then_some(())
    })
    .await;

    // MetalLB's objects are read in their namespace only, and never written; only the
    // LoadBalancerPool gets a status.
    let metallb_requests = api.requests_to("/apis/metallb.io/");
    assert!(!metallb_requests.is_empty());
    for r in &metallb_requests {
        assert_eq!(r.method, "GET", "{} {}", r.method, r.path);
        assert!(r.path.starts_with("/apis/metallb.io/v1beta1/namespaces/metallb-system/"), "{}", r.path);
    }
    let pool_status: Vec<String> =
        api.requests_to("/apis/tideway.io/v1alpha1/loadbalancerpools/").into_iter().map(|r| r.path).collect();
    assert!(pool_status.iter().all(|p| p.ends_with("/staging/status")), "{pool_status:?}");
}

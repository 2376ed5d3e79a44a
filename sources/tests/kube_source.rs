//! The Kubernetes source through the real `kube::Client` against the imitation API server, for
//! what the real one does not do on cue: a change or removal with no watch event and a 410
//! answered at once (the relist reports only the differences), a server that cannot stream
//! lists answering 410 after a list, an invalid object (the real server refuses it), watches
//! that time out every 200 ms with a bookmark first. Also the operator's reading of MetalLB's
//! `ServiceL2Status`es, and of a server that does not serve them (MetalLB before v0.14) until
//! it does. Selectors, BGP kinds of both groups, streamed views, ServiceCIDRs, the synced
//! signal, RBAC denials, the NodeProxyState's server-side apply and the reviews' cost run
//! against the real API server in `lab/tests/source_api.rs`; compaction and a server without
//! WatchList in `lab/tests/watches.rs`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use tideway_core::model::ServiceName;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::fake_api::{Account, FakeApi};
use tideway_tests::until;

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

fn namespace(name: &str) -> Value {
    json!({"kind": "Namespace", "metadata": {"name": name}})
}

async fn kube_client(api: &FakeApi, dir: &tempdir::Dir, account: Account) -> kube::Client {
    client(Some(&api.kubeconfig(&dir.0, account))).await.expect("client from kubeconfig")
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

fn names(cluster: &SharedCluster) -> BTreeSet<String> {
    cluster.lock().services().map(|s| s.name.to_string()).collect()
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
        kube_client(&api, &dir, Account::Dns).await,
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
    until("the added Service", || names(&cluster).contains("ns1/api")).await;
    let changed = cluster.lock().take_changes().services;
    assert_eq!(changed, BTreeSet::from([ServiceName::new("ns1", "api")]));

    // 410 Gone: the watcher relists. Meanwhile one Service went away and one changed; the
    // relist replaces the kind with only those differences and the rest never disappears.
    let lists_before = first_views(&api, "/api/v1/services");
    // Changed and deleted with no watch event (as while no watch was open): only the relist
    // can tell. Both happen before the 410, so every relist sees them.
    api.preload([service("ns1", "web", "10.96.0.20", json!({}))]);
    api.remove_silently("Service", Some("ns1"), "db");
    api.expire_watches("Service");
    until("the relist after 410 Gone", || first_views(&api, "/api/v1/services") > lists_before).await;
    until("the relisted state", || !names(&cluster).contains("ns1/db")).await;
    assert!(names(&cluster).contains("ns1/api") && names(&cluster).contains("ns1/web"));
    let changed = cluster.lock().take_changes().services;
    assert_eq!(changed, BTreeSet::from([ServiceName::new("ns1", "db"), ServiceName::new("ns1", "web")]));
    let web_ip = cluster.lock().service(&ServiceName::new("ns1", "web")).unwrap().cluster_ips[0];
    assert_eq!(web_ip.to_string(), "10.96.0.20");
    // The relist is counted right after its state is stored, on the source's own task.
    until("the relist counted", || {
        tideway_tests::metrics::sum(&registry, "tideway_source_relists_total{kind=\"Service\"}") >= 1.0
    })
    .await;
    assert!(tideway_tests::metrics::sum(&registry, "reason=\"gone\"") >= 1.0, "the 410 is counted");
    task.abort();
}

/// An API server without streamed lists (the `WatchList` feature is off by default before
/// Kubernetes 1.32) refuses the watch that asks for one: the source lists the latest in pages
/// instead (a list from the watch cache would come whole), syncs, and lists again after a 410
/// without asking to stream again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_stream_lists_is_listed_instead() {
    let api = FakeApi::start().await;
    api.stream_lists(false);
    // As the chart grants a DNS server that asks which Services a node programmed.
    api.chart_values("custom-dns");
    let dir = tempdir::Dir::new("no-watch-list");
    api.preload([
        namespace("ns1"),
        service("ns1", "web", "10.96.0.10", json!({})),
        slice("ns1", "web-1", "web", "10.244.1.5"),
        namespace("ns2"),
    ]);
    // More Services than a page holds.
    let address = |i: usize| format!("10.96.{}.{}", 1 + i / 250, 1 + i % 250);
    api.preload((0..1_000).map(|i| service("ns2", &format!("s{i}"), &address(i), json!({}))));
    let cluster = SharedCluster::new();
    // Every kind a DNS server may read: Pods and NodeProxyStates too.
    let role = Role::Dns { pods: true, node_states: true };
    let source = KubeSource::new(kube_client(&api, &dir, Account::Dns).await, role, SourceMetrics::default());
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    let listed = names(&cluster);
    assert!(listed.len() == 1_001 && listed.contains("ns1/web"), "{} Services", listed.len());
    assert_eq!(cluster.lock().endpoint_slices().count(), 1);
    let streamed = |r: &tideway_tests::fake_api::Recorded| r.query.contains_key("sendInitialEvents");
    let kinds = [
        "/api/v1/services",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/api/v1/namespaces",
        "/api/v1/pods",
    ];
    for path in kinds.into_iter().chain(["/apis/tideway.io/v1alpha1/nodeproxystates"]) {
        let views: Vec<_> = api.requests_to(path).into_iter().filter(|r| r.is_first_view()).collect();
        assert!(views.len() >= 2 && streamed(&views[0]), "asked to stream first: {views:?}");
        let list = &views[views.len() - 1];
        assert!(!list.query.contains_key("watch"), "then listed: {views:?}");
        assert!(!list.query.contains_key("resourceVersion"), "the latest, not the watch cache's: {views:?}");
        assert_eq!(list.query.get("limit").map(String::as_str), Some("500"), "in pages: {views:?}");
    }
    // 1,001 Services in three pages, each after the first continuing the one before.
    let pages: Vec<_> =
        api.requests_to("/api/v1/services").into_iter().filter(|r| !r.query.contains_key("watch")).collect();
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(
        !pages[0].query.contains_key("continue")
            && pages[1..].iter().all(|p| p.query.contains_key("continue"))
    );
    let asked = |api: &FakeApi| api.requests_to("/api/v1/services").iter().filter(|r| streamed(r)).count();
    let (lists, streams) = (first_views(&api, "/api/v1/services"), asked(&api));

    // 410 Gone: the relist is a list, never another request to stream.
    api.preload([service("ns1", "web", "10.96.0.20", json!({}))]);
    api.expire_watches("Service");
    until("the relist after 410 Gone", || first_views(&api, "/api/v1/services") > lists).await;
    let web = ServiceName::new("ns1", "web");
    until("the relisted Service", || {
        cluster.lock().service(&web).is_some_and(|s| s.cluster_ips[0].to_string() == "10.96.0.20")
    })
    .await;
    assert_eq!(asked(&api), streams, "the watch remembers the server cannot stream lists");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_updates_keep_the_last_valid_version_and_are_reported() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("invalid");
    api.preload([service("ns1", "web", "10.96.0.10", json!({})), namespace("ns1")]);
    let cluster = SharedCluster::new();
    let source = KubeSource::new(
        kube_client(&api, &dir, Account::Dns).await,
        Role::Dns { pods: false, node_states: false },
        SourceMetrics::default(),
    );
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    let mut bad = service("ns1", "web", "10.96.0.10", json!({}));
    bad["spec"]["ports"][0]["protocol"] = json!("ICMP");
    api.upsert(bad);
    until("the invalid object is listed", || !cluster.invalid_objects().is_empty()).await;
    let errors = cluster.errors();
    assert!(errors[0].contains("Service ns1/web") && errors[0].contains("ICMP"), "{errors:?}");
    assert!(names(&cluster).contains("ns1/web"), "the last valid version stays");
    api.upsert(service("ns1", "web", "10.96.0.30", json!({})));
    until("fixed", || cluster.invalid_objects().is_empty()).await;
    task.abort();
}

/// How often the source asked `path` for the whole state (a list, or a streamed one).
fn first_views(api: &FakeApi, path: &str) -> usize {
    api.requests_to(path).iter().filter(|r| r.is_first_view()).count()
}

/// Watches end, as the API server ends them after their timeout (with a bookmark first) or as a
/// dropped connection cuts them: the source resumes from the last version it saw, without a
/// relist, and no change made meanwhile is missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_time_out_or_drop_resume_from_their_version_and_miss_nothing() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("resume");
    api.cap_watches(Some(Duration::from_millis(200)));
    api.preload([namespace("ns1"), service("ns1", "web", "10.96.0.10", json!({}))]);
    let cluster = SharedCluster::new();
    let role = Role::Dns { pods: false, node_states: false };
    let source = KubeSource::new(kube_client(&api, &dir, Account::Dns).await, role, SourceMetrics::default());
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    cluster.lock().take_changes();
    let lists_before = first_views(&api, "/api/v1/services");
    let watches_before = api.requests_to("/api/v1/services").len() - lists_before;

    // Churn for about two seconds: watches time out every 200 ms, and every tenth change the
    // connection is cut as well.
    for i in 0..80 {
        api.upsert(service("ns1", &format!("s{i}"), "10.96.0.11", json!({})));
        if i % 10 == 9 {
            api.drop_watches("Service");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    until("every change seen", || names(&cluster).len() == 81).await;
    let changed = cluster.lock().take_changes().services;
    assert_eq!(changed.len(), 80, "each new Service reported: {changed:?}");
    let requests = api.requests_to("/api/v1/services");
    let watches: Vec<_> = requests.iter().filter(|r| r.query.contains_key("watch")).collect();
    assert!(
        watches.len() >= watches_before + 8,
        "the watches ended and were opened again: {}",
        watches.len()
    );
    assert_eq!(first_views(&api, "/api/v1/services"), lists_before, "resumed, never listed again");
    // Each watch resumes where the one before got to: the versions never go back.
    let versions: Vec<u64> =
        watches.iter().filter_map(|r| r.query.get("resourceVersion")?.parse().ok()).collect();
    assert!(versions.windows(2).all(|w| w[0] <= w[1]), "{versions:?}");
    assert!(watches.iter().all(|r| r.query.get("allowWatchBookmarks").map(String::as_str) == Some("true")));
    task.abort();
}

/// MetalLB's objects in its namespace, as an operator with `--metallb-compat` reads them: a
/// pool, an advertisement, and (MetalLB v0.14+) a speaker's `ServiceL2Status`.
fn metallb_objects() -> Vec<Value> {
    vec![
        namespace("metallb-system"),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": "first-pool", "namespace": "metallb-system"},
            "spec": {"addresses": ["192.168.10.0/24"]}}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": {"name": "example", "namespace": "metallb-system"}}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
            "metadata": {"name": "l2-c54z5", "namespace": "metallb-system"},
            "status": {"node": "myk8s-worker3", "serviceName": "svc3", "serviceNamespace": "default",
                "interfaces": [{"name": "eth0"}]}}),
    ]
}

/// The operator's source with MetalLB's objects read from `metallb-system`, as the chart
/// grants it with `metallb.compat`; synced.
async fn metallb_operator(api: &FakeApi, dir: &tempdir::Dir) -> (SharedCluster, tokio::task::JoinHandle<()>) {
    api.chart_values("ha-monitoring");
    let cluster = SharedCluster::new();
    let c = kube_client(api, dir, Account::Operator).await;
    let source = KubeSource::new(c, Role::Operator, SourceMetrics::default())
        .with_metallb(Some("metallb-system".into()));
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
    (cluster, task)
}

/// An operator reading MetalLB's objects learns which node announces each Service from
/// MetalLB's `ServiceL2Status`es, and forgets one MetalLB deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallbs_announcers_are_read_from_its_service_l2_statuses() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("l2-statuses");
    api.preload(metallb_objects());
    let (cluster, task) = metallb_operator(&api, &dir).await;
    let svc3 = ServiceName::new("default", "svc3");
    assert_eq!(cluster.lock().metallb_announcer(&svc3), Some("myk8s-worker3"));
    assert!(cluster.lock().pool("first-pool").is_some());
    api.delete("ServiceL2Status", Some("metallb-system"), "l2-c54z5");
    until("the deleted status forgotten", || cluster.lock().metallb_announcer(&svc3).is_none()).await;
    task.abort();
}

/// MetalLB before v0.14 has no `ServiceL2Status` CRD: the kind the operator also watches is
/// not served (404), counts as listed and empty, and the operator's source syncs all the same,
/// MetalLB's pools read. Once served (MetalLB upgraded), its objects are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_metallbs_service_l2_status_crd_the_operator_syncs() {
    let api = FakeApi::start().await;
    let dir = tempdir::Dir::new("no-l2-statuses");
    let mut objects = metallb_objects();
    let status = objects.pop().expect("the status");
    api.preload(objects);
    api.unserve("ServiceL2Status");
    let (cluster, task) = metallb_operator(&api, &dir).await;
    assert!(cluster.lock().pool("first-pool").is_some(), "MetalLB's pools are read");
    assert_eq!(cluster.lock().service_l2_statuses().count(), 0);
    let path = "/apis/metallb.io/v1beta1/namespaces/metallb-system/servicel2statuses";
    assert!(!api.requests_to(path).is_empty(), "asked, and answered 404");
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());

    api.serve("ServiceL2Status");
    api.upsert(status);
    let svc3 = ServiceName::new("default", "svc3");
    until("the status read once served", || cluster.lock().metallb_announcer(&svc3).is_some()).await;
    task.abort();
}

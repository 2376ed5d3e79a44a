//! The Kubernetes source's watches against the real API server (root; needs `make kube`), with
//! a fault-injecting proxy between the source and the server for what the server does not do
//! on cue (a cut connection, a network that hangs):
//! * streamed first views (`sendInitialEvents`), also of Services with their watch cache off
//!   (`--watch-cache-sizes=services#0`, so that nothing but etcd's history serves their
//!   watches), as the audit log records them;
//! * a watch away while the server compacted its history comes back to 410 Gone, relists, and
//!   reports exactly what changed meanwhile, nothing lost, nothing twice;
//! * bookmarks: an agent's watch of Services (label-selected) whose server ends it every 5 s
//!   resumes from the bookmark's version, past Services its selector never showed it, and
//!   never lists again;
//! * a server without the WatchList feature: lists the latest in pages, then watches from the
//!   list's version; the DNS server's source and a BGP-speaking agent's, as the chart's
//!   ServiceAccounts, list every kind they read and sync.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tideway_core::model::ServiceName;
use tideway_lab::kube::ControlPlane;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::pki::rewrite_server;
use tideway_lab::kube::standalone::Standalone;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::fault_proxy::FaultProxy;

/// How often the API server compacts etcd's history (its default is 5 minutes).
const COMPACTION: Duration = Duration::from_secs(1);

fn service(name: &str, port: i32) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns1"},
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]}}))
    .unwrap()
}

/// Namespace `ns1` with Services `s0`..`s{count-1}`; its Services' API.
async fn ns1_with_services(admin: &kube::Client, count: usize) -> Api<Service> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns1 = serde_json::from_value(json!({"metadata": {"name": "ns1"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns1).await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), "ns1");
    for i in 0..count {
        services.create(&PostParams::default(), &service(&format!("s{i}"), 80)).await.unwrap();
    }
    services
}

/// The Services of `ns1` (`default/kubernetes` aside).
fn names(cluster: &SharedCluster) -> BTreeSet<String> {
    cluster.lock().services().map(|s| s.name.to_string()).filter(|n| n.starts_with("ns1/")).collect()
}

/// The verbs and request URIs the audit log records for `resource` (a watch when it starts).
fn audited(cp: &ControlPlane, resource: &str) -> Vec<String> {
    let text = std::fs::read_to_string(cp.layout().audit_log()).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseStarted" || e["stage"] == "ResponseComplete")
        .filter(|e| e["objectRef"]["resource"] == resource)
        .filter_map(|e| {
            Some(format!(
                "{} {} {}",
                e["verb"].as_str()?,
                e["responseStatus"]["code"],
                e["requestURI"].as_str()?
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_on_the_real_api_server_stream_relist_after_compaction_and_miss_nothing() {
    let standalone = Standalone::start("wat", |config| {
        config.service_cidr = "10.96.0.0/16".into();
        config.apiserver_flags = vec![
            "--watch-cache-sizes=services#0".into(),
            format!("--etcd-compaction-interval={}s", COMPACTION.as_secs()),
        ];
    })
    .await
    .expect("a control plane (root; make kube)");
    let dir = standalone.dir.clone();
    let cp = &standalone.cp;
    let admin = standalone.admin().await.unwrap();
    let services = ns1_with_services(&admin, 5).await;

    // The DNS source, through the proxy.
    let proxy = FaultProxy::start(cp.host_endpoint()).await;
    let kubeconfig = dir.join("through-proxy.conf");
    let text = std::fs::read_to_string(cp.admin_kubeconfig()).unwrap();
    std::fs::write(&kubeconfig, rewrite_server(&text, &format!("https://{}", proxy.addr))).unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let cluster = SharedCluster::new();
    let role = Role::Dns { pods: false, node_states: false };
    let source = KubeSource::new(client(Some(&kubeconfig)).await.unwrap(), role, metrics);
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(30), cluster.wait_synced()).await.expect("synced");
    assert_eq!(names(&cluster).len(), 5);
    cluster.lock().take_changes();

    // First views: streamed (`sendInitialEvents`), also for Services, whose watch cache is off:
    // a 1.37 server streams from etcd then. (kube-runtime's watches ask timeoutSeconds=290.)
    for resource in ["endpointslices", "services"] {
        let asked = audited(cp, resource);
        let streamed = |r: &String| r.starts_with("watch 200") && r.contains("sendInitialEvents=true");
        assert!(
            asked.iter().any(|r| streamed(r) && r.contains("timeoutSeconds=290")),
            "{resource}: {asked:#?}"
        );
    }

    // The source's connection is cut and its reconnects hang; meanwhile twenty changes, and
    // the server compacts its history past the version the source saw.
    proxy.hold(true);
    proxy.cut();
    for i in 5..22 {
        services.create(&PostParams::default(), &service(&format!("s{i}"), 80)).await.unwrap();
    }
    let port =
        |p: i32| Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": p, "protocol": "TCP"}]}}));
    services.patch("s1", &PatchParams::default(), &port(8081)).await.unwrap();
    services.patch("s2", &PatchParams::default(), &port(8082)).await.unwrap();
    services.delete("s0", &DeleteParams::default()).await.unwrap();
    // More writes (elsewhere) over three compaction periods: the compactor moves past them all.
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), "ns1");
    for i in 0..3 {
        let cm = serde_json::from_value(json!({"metadata": {"name": format!("tick{i}")}})).unwrap();
        config_maps.create(&PostParams::default(), &cm).await.unwrap();
        tokio::time::sleep(COMPACTION * 2).await;
    }
    let gone_before = tideway_tests::metrics::sum(&registry, "reason=\"gone\"");
    proxy.hold(false);

    let want: BTreeSet<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| format!("ns1/{}", s.metadata.name.as_deref().unwrap()))
        .collect();
    tideway_tests::until("the view caught up", || names(&cluster) == want).await;
    tideway_tests::until("the 410 counted", || {
        tideway_tests::metrics::sum(&registry, "reason=\"gone\"") > gone_before
    })
    .await;
    // The relist is counted once its list is handed over, a moment after the view shows it.
    tideway_tests::until("the Service relist counted", || {
        tideway_tests::metrics::sum(&registry, "tideway_source_relists_total{kind=\"Service\"}") >= 1.0
    })
    .await;
    let changed: BTreeSet<String> =
        cluster.lock().take_changes().services.iter().map(|s| s.to_string()).collect();
    let mut expected: BTreeSet<String> = (5..22).map(|i| format!("ns1/s{i}")).collect();
    expected.extend(["ns1/s0", "ns1/s1", "ns1/s2"].map(String::from));
    assert_eq!(changed, expected, "what changed meanwhile, and only that");
    let s1 = cluster.lock().service(&ServiceName::new("ns1", "s1")).unwrap().ports[0].port;
    assert_eq!(s1, 8081);
    task.abort();
}

/// An API server without the WatchList feature (`--feature-gates=WatchList=false`) refuses a
/// watch that asks to stream its first list (422); every kind's watch then lists the latest in
/// pages and watches from there, and the source serves the same view and changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_list_the_source_lists_then_watches() {
    let standalone = Standalone::start("wlf", |config| {
        config.service_cidr = "10.96.0.0/16".into();
        config.apiserver_flags = vec!["--feature-gates=WatchList=false".into()];
    })
    .await
    .expect("a control plane (root; make kube)");
    let cp = &standalone.cp;
    let admin = standalone.admin().await.unwrap();
    let services = ns1_with_services(&admin, 3).await;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let cluster = SharedCluster::new();
    let role = Role::Dns { pods: false, node_states: false };
    let kubeconfig = standalone.dir.join("host.conf");
    cp.write_host_kubeconfig(&kubeconfig).unwrap();
    let source = KubeSource::new(client(Some(&kubeconfig)).await.unwrap(), role, metrics);
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(30), cluster.wait_synced()).await.expect("synced");
    assert_eq!(names(&cluster).len(), 3);

    let asked = audited(cp, "services");
    let refused = |r: &String| r.starts_with("watch 422") && r.contains("sendInitialEvents=true");
    assert!(asked.iter().any(refused), "the streamed list refused: {asked:#?}");
    // A list of the latest in pages: no resourceVersion (the watch cache's would come whole).
    let paged =
        |r: &&String| r.starts_with("list 200") && r.contains("limit=500") && !r.contains("resourceVersion");
    assert!(asked.iter().any(|r| paged(&r)), "then a list of the latest in pages: {asked:#?}");

    cluster.lock().take_changes();
    services.create(&PostParams::default(), &service("s3", 80)).await.unwrap();
    services.delete("s0", &DeleteParams::default()).await.unwrap();
    let want: BTreeSet<String> = ["ns1/s1", "ns1/s2", "ns1/s3"].map(String::from).into();
    tideway_tests::until("the watch saw the changes", || names(&cluster) == want).await;
    let plain_watch = |r: &String| {
        r.starts_with("watch 200") && !r.contains("sendInitialEvents") && r.contains("resourceVersion=")
    };
    assert!(audited(cp, "services").iter().any(plain_watch), "a watch from the list's version");
    task.abort();
    every_kind_listed_as_the_charts_accounts(&standalone).await;
    tideway_tests::audit::record_usage(&standalone.cp.layout().audit_log());
}

/// The DNS server's source (pods and reports read) and a BGP-speaking agent's with MetalLB's
/// kinds, as the chart's ServiceAccounts with what the chart grants them then, sync from a
/// server that cannot stream: each kind listed with their own credentials.
async fn every_kind_listed_as_the_charts_accounts(standalone: &Standalone) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    standalone.apply_crds(&root.join("helm/tideway/crds")).await.unwrap();
    let mut applier = Applier::new(standalone.admin().await.unwrap(), "tideway-test");
    for crd in tideway_tests::metallb::crds(&standalone.dir.join("go")) {
        applier.apply(&crd).await.unwrap();
    }
    let namespace = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    applier.apply_all(vec![namespace("metallb-system"), namespace("tideway-bgp-secrets")]).await.unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}});
    applier.apply(&node).await.unwrap();
    let values = [("bgp.enabled", "true"), ("metallb.compat", "true"), ("dns.requireProgrammed", "true")];
    let values = values.map(|(k, v)| (k.to_string(), v.to_string()));
    standalone.apply_chart_rbac(&root.join("helm/tideway"), &values).await.unwrap();
    let since = std::time::SystemTime::now();
    for (namespace, account, source) in [
        ("kube-system", "tideway-dns", Role::Dns { pods: true, node_states: true }),
        ("tideway-system", "tideway-agent", Role::Agent { node: "node-a".into(), service_cidrs: true }),
    ] {
        let kubeconfig = standalone.token_kubeconfig(namespace, account).await.unwrap();
        let source =
            KubeSource::new(client(Some(&kubeconfig)).await.unwrap(), source, SourceMetrics::default())
                .with_bgp(account == "tideway-agent")
                .with_bgp_secrets((account == "tideway-agent").then(|| "tideway-bgp-secrets".into()))
                .with_metallb((account == "tideway-agent").then(|| "metallb-system".into()));
        let cluster = SharedCluster::new();
        let task = tokio::spawn(source.run(cluster.clone()));
        tokio::time::timeout(Duration::from_secs(30), cluster.wait_synced())
            .await
            .unwrap_or_else(|_| panic!("{account} synced"));
        task.abort();
    }
    let text = std::fs::read_to_string(standalone.cp.layout().audit_log()).unwrap_or_default();
    let lists: BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["verb"] == "list" && e["responseStatus"]["code"] == 200)
        .filter(|e| {
            let at: Option<MicroTime> = serde_json::from_value(e["requestReceivedTimestamp"].clone()).ok();
            at.is_some_and(|at| std::time::SystemTime::from(at.0) >= since)
        })
        .filter_map(|e| {
            let user = e["user"]["username"].as_str()?.rsplit(':').next()?.to_string();
            Some((user, e["objectRef"]["resource"].as_str()?.to_string()))
        })
        .collect();
    for (account, resource) in [
        ("tideway-dns", "pods"),
        ("tideway-dns", "nodeproxystates"),
        ("tideway-agent", "bgppeers"),
        ("tideway-agent", "communities"),
        ("tideway-agent", "secrets"),
        ("tideway-agent", "servicecidrs"),
    ] {
        assert!(
            lists.contains(&(account.to_string(), resource.to_string())),
            "{account} listed {resource}: {lists:?}"
        );
    }
}

/// The `resourceVersion` a request URI asks from (0 when it names none).
fn asked_version(uri: &str) -> u64 {
    uri.split(['?', '&'])
        .find_map(|p| p.strip_prefix("resourceVersion="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The server ends the agent's watches every 5 s, sending a bookmark of its latest version 2 s
/// before. Services its selector leaves out (another proxy's) move that version on: the next
/// watch of Services starts from the bookmark, past them, with no list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_carry_a_watch_past_what_its_selector_leaves_out() {
    let standalone = Standalone::start("bkm", |config| config.service_cidr = "10.96.0.0/16".into())
        .await
        .expect("a control plane (root; make kube)");
    let cp = &standalone.cp;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    standalone.apply_crds(&root.join("helm/tideway/crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let services = ns1_with_services(&admin, 2).await;
    let cluster = SharedCluster::new();
    let kubeconfig = standalone.dir.join("host.conf");
    cp.write_host_kubeconfig(&kubeconfig).unwrap();
    let role = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let source = KubeSource::new(client(Some(&kubeconfig)).await.unwrap(), role, SourceMetrics::default())
        .with_watch_timeout(Duration::from_secs(5));
    let task = tokio::spawn(source.run(cluster.clone()));
    tokio::time::timeout(Duration::from_secs(30), cluster.wait_synced()).await.expect("synced");
    assert_eq!(names(&cluster).len(), 2);

    // Another proxy's Services: the agent's selector leaves them out.
    let mut last = 0;
    for i in 0..5 {
        let mut other = service(&format!("other{i}"), 80);
        other.metadata.labels =
            Some([("service.kubernetes.io/service-proxy-name".to_string(), "other".to_string())].into());
        let made = services.create(&PostParams::default(), &other).await.unwrap();
        last = made.metadata.resource_version.and_then(|v| v.parse().ok()).unwrap();
    }
    // The agent's watches of Services, once each (as they started).
    let watches = || -> Vec<String> {
        let text = std::fs::read_to_string(cp.layout().audit_log()).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["verb"] == "watch" && e["stage"] == "ResponseStarted")
            .filter(|e| e["objectRef"]["resource"] == "services")
            .filter_map(|e| e["requestURI"].as_str().map(str::to_string))
            .filter(|uri| uri.contains("service-proxy-name"))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let resumed = loop {
        if let Some(w) = watches().into_iter().find(|w| asked_version(w) >= last) {
            break w;
        }
        assert!(std::time::Instant::now() < deadline, "no watch resumed past {last}: {:#?}", watches());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(!resumed.contains("sendInitialEvents"), "resumed, not streamed again: {resumed}");
    let first_views = watches().iter().filter(|w| w.contains("sendInitialEvents=true")).count();
    assert_eq!(first_views, 1, "one first view, then resumptions: {:#?}", watches());
    let agents = audited(cp, "services");
    assert!(
        agents.iter().filter(|r| r.contains("service-proxy-name")).all(|r| !r.starts_with("list ")),
        "never listed"
    );
    assert_eq!(names(&cluster).len(), 2, "another proxy's Services stay out");
    // And the resumed watch still sees what is this proxy's.
    services.create(&PostParams::default(), &service("late", 80)).await.unwrap();
    tideway_tests::until("the late Service", || names(&cluster).contains("ns1/late")).await;
    task.abort();
}

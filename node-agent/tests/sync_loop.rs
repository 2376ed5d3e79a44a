//! The sync loop without root and in milliseconds: the real agent over an in-memory kernel
//! (`dataplane::memory`) and node (`effects::MemoryEffects`: conntrack, health checks), its
//! time from tokio's paused clock. Each test reads the calls the
//! dataplanes received and what the kernel holds.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::conntrack::Flow;
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::program::KernelState;
use tideway_core::testing::{ip, mk_node, mk_service, mk_slice};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus};
use tideway_node_agent::dataplane::memory::{Call, SharedKernel};
use tideway_node_agent::effects::MemoryEffects;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;

use Call::{Apply, Cleanup, Verify};
use ProxyMode::{Iptables, Nftables};

fn config(mode: ProxyMode, min_sync: Duration) -> ProxyConfig {
    let settings = ProxySettings {
        mode,
        min_sync_period: min_sync,
        sync_period: Duration::from_secs(30),
        ..Default::default()
    };
    ProxyConfig::every_node("default", 1, settings)
}

fn web(n: u16) -> tideway_core::model::Service {
    mk_service("demo", &format!("web{n}")).cluster_ip(&format!("10.96.0.{n}")).port("http", Tcp, 80).build()
}

/// A synced cluster: node-a, one Service with two endpoints, a ProxyConfig in `mode`.
fn cluster(mode: ProxyMode, min_sync: Duration) -> SharedCluster {
    let cluster = SharedCluster::new();
    let snapshot = Snapshot {
        nodes: vec![mk_node("node-a", "192.168.0.10", "zone-a")],
        services: vec![web(1)],
        endpoint_slices: vec![
            mk_slice("demo", "web1")
                .port("http", Tcp, 8080)
                .ready("10.244.1.5", "node-a")
                .ready("10.244.2.5", "node-b")
                .build(),
        ],
        proxy_configs: vec![config(mode, min_sync)],
        ..Default::default()
    };
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

struct Rig {
    agent: Agent,
    kernel: SharedKernel,
    cluster: SharedCluster,
    status: Arc<RwLock<AgentStatus>>,
    registry: Registry,
    health: Arc<ProxyHealth>,
    metrics: Arc<Metrics>,
}

impl Rig {
    fn new(cluster: SharedCluster, kernel: SharedKernel) -> Rig {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let status = Arc::new(RwLock::new(AgentStatus::default()));
        let health = Arc::new(ProxyHealth::new(Duration::from_secs(30)));
        let opts = AgentOptions::for_node("node-a");
        let k = kernel.clone();
        let agent = Agent::new(opts, cluster.clone(), status.clone(), metrics.clone(), health.clone())
            .with_dataplanes(Box::new(move |s: &ProxySettings| k.dataplane(s)))
            .with_effects(Box::new(MemoryEffects::default()));
        Rig { agent, kernel, cluster, status, registry, health, metrics }
    }

    fn status(&self) -> AgentStatus {
        self.status.read().unwrap().clone()
    }

    fn metric(&self, name: &str) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string()
    }

    /// The kernel holds exactly what a full sync of the current cluster would program.
    async fn assert_kernel_is_desired(&self, mode: ProxyMode) {
        let other = SharedKernel::default();
        let mut fresh = Rig::new(self.cluster_copy(), other.clone());
        fresh.agent.sync(true).await.expect("reference sync");
        let want = other.lock().state[&mode].clone().map(|k: KernelState| k.canonical());
        let have = self.kernel.lock().state[&mode].clone().map(|k: KernelState| k.canonical());
        assert!(want == have, "{}", have[0].describe_difference(&want[0]));
    }

    fn cluster_copy(&self) -> SharedCluster {
        let copy = SharedCluster::new();
        let state = self.cluster.lock();
        let snapshot = Snapshot {
            nodes: state.nodes().cloned().collect(),
            services: state.services().cloned().collect(),
            endpoint_slices: state.endpoint_slices().cloned().collect(),
            proxy_configs: state.proxy_configs().cloned().collect(),
            ..Default::default()
        };
        drop(state);
        copy.update(|s| s.reset(snapshot));
        copy.mark_synced();
        copy
    }
}

/// A rig's agent running its loop, 10 ms in.
struct Running {
    status: Arc<RwLock<AgentStatus>>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(rig: Rig) -> Running {
        let status = rig.status.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(rig.agent.run(async move {
            let _ = stopped.await;
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
        Running { status, stop, task }
    }
}

/// A rig in `mode` after its first sync, the calls so far forgotten.
async fn synced(mode: ProxyMode) -> (Rig, SharedKernel) {
    let kernel = SharedKernel::default();
    let mut rig = Rig::new(cluster(mode, Duration::ZERO), kernel.clone());
    rig.agent.sync(false).await.expect("first sync");
    kernel.take_calls();
    (rig, kernel)
}

#[tokio::test]
async fn the_first_sync_is_full_and_cleans_what_other_modes_left() {
    let kernel = SharedKernel::default();
    // An earlier run left iptables rules; nftables is the mode now.
    kernel.lock().state.insert(Iptables, Default::default());
    let mut rig = Rig::new(cluster(Nftables, Duration::ZERO), kernel.clone());
    rig.agent.sync(false).await.expect("sync");
    let calls = kernel.take_calls();
    assert_eq!(calls[0], Apply { mode: Nftables, full: true });
    assert!(calls.contains(&Cleanup(Iptables)), "{calls:?}");
    assert!(!calls.contains(&Cleanup(Nftables)), "the current mode is never flushed: {calls:?}");
    assert!(!kernel.lock().state.contains_key(&Iptables));
    let s = rig.status();
    assert!(s.synced && s.full_syncs == 1 && s.service_ports == 1 && s.last_error.is_none(), "{s:?}");
    rig.assert_kernel_is_desired(Nftables).await;
}

#[tokio::test]
async fn a_service_change_is_partial_and_a_node_change_is_full() {
    let (mut rig, kernel) = synced(Nftables).await;
    rig.cluster.update(|s| s.apply(web(2)));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(kernel.take_calls(), [Apply { mode: Nftables, full: false }]);
    rig.assert_kernel_is_desired(Nftables).await;
    // A node label change can change every rule (topology): full.
    let mut node = mk_node("node-a", "192.168.0.10", "zone-b");
    node.labels.insert("extra".into(), "1".into());
    rig.cluster.update(|s| s.apply(node));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(kernel.take_calls(), [Apply { mode: Nftables, full: true }]);
    rig.assert_kernel_is_desired(Nftables).await;
}

#[tokio::test]
async fn a_failed_apply_keeps_the_last_rules_reports_and_the_next_success_clears_it() {
    let (mut rig, kernel) = synced(Iptables).await;
    let before = kernel.lock().state[&Iptables].clone();
    kernel.lock().fail_apply = Some("injected failure".into());
    rig.cluster.update(|s| s.apply(web(2)));
    let err = rig.agent.sync(false).await.unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(kernel.lock().state[&Iptables], before, "the previous ruleset stays");
    let s = rig.status();
    assert_eq!(
        (s.failures, s.last_error.as_deref().map(|e| e.contains("injected failure"))),
        (1, Some(true))
    );
    let failures = rig.metric("kubeproxy_sync_proxy_rules_iptables_restore_failures_total");
    assert!(failures.ends_with(" 1"), "{failures:?}");
    kernel.lock().fail_apply = None;
    kernel.take_calls();
    rig.agent.sync(false).await.unwrap();
    assert_eq!(kernel.take_calls(), [Apply { mode: Iptables, full: true }], "the retry is full");
    assert!(rig.status().last_error.is_none());
    rig.assert_kernel_is_desired(Iptables).await;
}

/// `web(n)` as the API server last wrote it, at `version`.
fn web_at(n: u16, version: u64) -> tideway_core::model::Service {
    let mut svc = web(n);
    svc.resource_version = Some(version);
    svc
}

#[tokio::test]
async fn the_programmed_version_moves_with_successful_syncs_only() {
    let (mut rig, kernel) = synced(Iptables).await;
    assert_eq!(rig.status().programmed_version, None, "no Service had a version");
    rig.cluster.update(|s| s.apply(web_at(1, 10)) && s.apply(web_at(2, 12)));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(rig.status().programmed_version, Some(12));
    // A failed sync programs nothing: the version stays.
    kernel.lock().fail_apply = Some("injected failure".into());
    rig.cluster.update(|s| s.apply(web_at(3, 15)));
    rig.agent.sync(false).await.unwrap_err();
    assert_eq!(rig.status().programmed_version, Some(12));
    assert_eq!(tideway_node_agent::report::node_state(&rig.status()).programmed_version, Some(12));
    kernel.lock().fail_apply = None;
    rig.agent.sync(false).await.unwrap();
    assert_eq!(rig.status().programmed_version, Some(15));
    // A deletion leaves the version where it was.
    rig.cluster.update(|s| s.delete::<tideway_core::model::Service>("demo", &web(2).name.name));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(rig.status().programmed_version, Some(15));
}

#[tokio::test]
async fn a_mode_switch_programs_and_verifies_the_new_mode_before_removing_the_old() {
    let (mut rig, kernel) = synced(Nftables).await;
    rig.cluster.update(|s| s.apply(config(Iptables, Duration::ZERO)));
    rig.agent.sync(false).await.unwrap();
    let calls = kernel.take_calls();
    let at = |c: Call| calls.iter().position(|x| *x == c).unwrap_or_else(|| panic!("no {c:?} in {calls:?}"));
    assert!(at(Apply { mode: Iptables, full: true }) < at(Verify(Iptables)), "{calls:?}");
    assert!(at(Verify(Iptables)) < at(Cleanup(Nftables)), "{calls:?}");
    assert_eq!(kernel.lock().state.keys().copied().collect::<Vec<_>>(), [Iptables]);
    assert_eq!(rig.status().mode_switches, 1);
    rig.assert_kernel_is_desired(Iptables).await;
}

#[tokio::test]
async fn drift_is_found_and_repaired_with_a_full_sync() {
    let (mut rig, kernel) = synced(Nftables).await;
    assert!(!rig.agent.check_drift(true).await.unwrap(), "no drift right after a sync");
    // Someone flushes the table.
    kernel.lock().state.insert(Nftables, Default::default());
    kernel.take_calls();
    assert!(rig.agent.check_drift(true).await.unwrap());
    assert_eq!(kernel.take_calls(), [Verify(Nftables), Apply { mode: Nftables, full: true }]);
    let s = rig.status();
    assert_eq!(s.drift_repairs, 1);
    assert!(s.last_drift.iter().any(|d| d.starts_with("nftables IPv4")), "{s:?}");
    rig.assert_kernel_is_desired(Nftables).await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_changes_waits_for_min_sync_period_and_failures_retry_with_backoff() {
    let kernel = SharedKernel::default();
    let cluster = cluster(Iptables, Duration::from_secs(1));
    let Running { status, stop, task } = Running::start(Rig::new(cluster.clone(), kernel.clone())).await;
    let applies = |calls: &[Call]| calls.iter().filter(|c| matches!(c, Apply { .. })).count();
    assert_eq!(applies(&kernel.take_calls()), 1, "the first sync at once");
    // Ten changes within 100 ms: one more sync, a second after the first.
    for n in 2..12 {
        cluster.update(|s| s.apply(web(n)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(applies(&kernel.take_calls()), 0, "nothing before minSyncPeriod");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(kernel.take_calls(), [Apply { mode: Iptables, full: false }], "one sync for the burst");
    // A failing tool: retried after 0.5 s, 1 s, 2 s (each at least minSyncPeriod apart).
    kernel.lock().fail_apply = Some("injected failure".into());
    cluster.update(|s| s.apply(web(20)));
    let mut attempts = Vec::new();
    let start = tokio::time::Instant::now();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n = applies(&kernel.take_calls());
        attempts.extend(std::iter::repeat_n(start.elapsed().as_millis() / 100, n));
    }
    assert!(attempts.len() >= 3, "{attempts:?}");
    let gaps: Vec<u128> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "backoff grows: attempts at {attempts:?} (0.1 s)");
    kernel.lock().fail_apply = None;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = status.read().unwrap().clone();
    assert!(s.last_error.is_none() && s.service_ports == 12, "recovered with the change: {s:?}");
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn a_restart_over_programmed_rules_replaces_them_in_one_step() {
    let kernel = SharedKernel::default();
    let mut first = Rig::new(cluster(Nftables, Duration::ZERO), kernel.clone());
    first.agent.sync(false).await.unwrap();
    kernel.take_calls();
    // A new agent (after a restart) over the same kernel and a changed cluster.
    let cluster = cluster(Nftables, Duration::ZERO);
    cluster.update(|s| s.apply(web(2)));
    let mut second = Rig::new(cluster, kernel.clone());
    second.agent.sync(false).await.unwrap();
    let calls = kernel.take_calls();
    assert_eq!(calls[0], Apply { mode: Nftables, full: true }, "no flush first: {calls:?}");
    assert!(!calls.contains(&Cleanup(Nftables)), "{calls:?}");
    second.assert_kernel_is_desired(Nftables).await;
}

/// An EndpointSlice change with a trigger time is measured from that time to the sync that
/// programmed it (a failed sync keeps it pending); the pending gauges return to zero.
#[tokio::test]
async fn network_programming_latency_runs_from_the_slice_change_to_the_kernel() {
    let (mut rig, kernel) = synced(Nftables).await;
    let mut slice = mk_slice("demo", "web1").port("http", Tcp, 8080).ready("10.244.1.77", "node-a").build();
    slice.trigger_time = Some(std::time::SystemTime::now());
    rig.cluster.update(|s| s.apply(slice));
    // A change from before the agent started would not be measured; this one is after.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    kernel.lock().fail_apply = Some("injected failure".into());
    rig.agent.sync(false).await.unwrap_err();
    assert!(rig.metric("kubeproxy_network_programming_duration_seconds_count").ends_with(" 0"));
    assert!(rig.metric("kubeproxy_sync_proxy_rules_endpoint_changes_pending").ends_with(" 1"));
    kernel.lock().fail_apply = None;
    rig.agent.sync(false).await.unwrap();
    let count = rig.metric("kubeproxy_network_programming_duration_seconds_count");
    assert!(count.ends_with(" 1"), "{count}");
    // 1.2 s and a little: in the 2 s bucket, not the 1 s one.
    let le1 = rig.metric("kubeproxy_network_programming_duration_seconds_bucket{le=\"1.0\"}");
    let le2 = rig.metric("kubeproxy_network_programming_duration_seconds_bucket{le=\"2.0\"}");
    assert!(le1.ends_with(" 0") && le2.ends_with(" 1"), "{le1} / {le2}");
    // Tideway's finer buckets: past 1 s, within 2 s, and nothing in the buckets below.
    let fine =
        |le: &str| rig.metric(&format!("tideway_network_programming_duration_seconds_bucket{{le=\"{le}\"}}"));
    assert!(fine("0.5").ends_with(" 0") && fine("1.0").ends_with(" 0"), "{} / {}", fine("0.5"), fine("1.0"));
    assert!(fine("2.0").ends_with(" 1"), "{}", fine("2.0"));
    assert!(rig.metric("kubeproxy_sync_proxy_rules_endpoint_changes_pending").ends_with(" 0"));
    assert!(rig.metric("kubeproxy_sync_proxy_rules_service_changes_pending").ends_with(" 0"));
}

/// The ProxyConfigs of `api/tests/refused.yaml`, one bad value each, renamed `name`.
fn refused_configs(name: &str) -> Vec<tideway_api::crd::ProxyConfig> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(include_str!("../../api/tests/refused.yaml")).expect("refused.yaml");
    let configs: Vec<_> = docs
        .into_iter()
        .filter(|d| d["kind"] == "ProxyConfig")
        .map(|mut d| {
            d["metadata"]["name"] = name.into();
            d["metadata"]["generation"] = 2.into();
            serde_json::from_value(d).expect("decodes")
        })
        .collect();
    assert!(configs.len() >= 20, "{} configs", configs.len());
    configs
}

#[tokio::test]
async fn an_invalid_proxy_config_keeps_the_last_valid_one_and_is_reported() {
    use kube::runtime::watcher::Event;
    use tideway_sources::kube::{KindAdapter, Outcome};
    let (mut rig, kernel) = synced(Iptables).await;
    let mut adapter = KindAdapter::<tideway_api::crd::ProxyConfig>::new(rig.cluster.clone());
    for (n, bad) in refused_configs("default").into_iter().enumerate() {
        let bad_name = bad.metadata.annotations.as_ref().map(|a| a["test.tideway.io/field"].clone());
        assert_eq!(adapter.handle(Event::Apply(bad)), Outcome::Invalid, "{bad_name:?}");
        // The Services keep working under the last valid config: a new one is programmed.
        let n = u16::try_from(n).unwrap() + 2;
        rig.cluster.update(|s| s.apply(web(n)));
        rig.agent.sync(false).await.expect("syncs with the last valid config");
        assert_eq!(kernel.take_calls(), [Apply { mode: Iptables, full: false }], "{bad_name:?}");
        rig.assert_kernel_is_desired(Iptables).await;
        let invalid = rig.status().invalid_objects;
        let field = bad_name.unwrap_or_default();
        assert!(invalid.len() == 1 && invalid[0].contains(&field), "{field}: {invalid:?}");
        // The node's NodeProxyState says so too, naming the field, beside the config it runs.
        let report = tideway_node_agent::report::node_state(&rig.status());
        let status = tideway_api::crd::node_proxy_state_status(&report);
        assert_eq!(status.invalid_objects, invalid, "{field}");
        assert!(status.ready && status.proxy_config.is_some(), "{field}: {status:?}");
    }
}

#[tokio::test]
async fn a_first_start_with_only_an_invalid_proxy_config_runs_the_defaults() {
    use kube::runtime::watcher::Event;
    use tideway_sources::kube::KindAdapter;
    let cluster = cluster(Iptables, Duration::ZERO);
    cluster.update(|s| s.delete::<ProxyConfig>("", "default"));
    let mut adapter = KindAdapter::<tideway_api::crd::ProxyConfig>::new(cluster.clone());
    adapter.handle(Event::Init);
    let bad = refused_configs("default").remove(0);
    adapter.handle(Event::InitApply(bad));
    adapter.handle(Event::InitDone);
    let kernel = SharedKernel::default();
    let mut rig = Rig::new(cluster, kernel.clone());
    rig.agent.sync(false).await.expect("syncs with the defaults");
    assert_eq!(kernel.lock().state.keys().copied().collect::<Vec<_>>(), [Nftables], "the default mode");
    let invalid = rig.status().invalid_objects;
    assert!(invalid.len() == 1 && invalid[0].contains("spec.syncPeriod"), "{invalid:?}");
}

/// `/healthz` through the agent's router: the status code and `nodeEligible`.
async fn healthz(rig: &Rig) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let router = tideway_node_agent::http::health_router(
        rig.health.clone(),
        rig.metrics.clone(),
        rig.status.clone(),
        rig.cluster.clone(),
    );
    let req = axum::http::Request::get("/healthz").body(axum::body::Body::empty()).unwrap();
    let resp = router.oneshot(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (code, body["nodeEligible"].clone())
}

#[tokio::test]
async fn the_autoscalers_removal_taint_fails_healthz() {
    let (mut rig, _) = synced(Nftables).await;
    assert_eq!(healthz(&rig).await, (200, true.into()));
    let node = |tainted: bool| {
        let mut node = mk_node("node-a", "192.168.0.10", "zone-a");
        if tainted {
            node.taints.push(tideway_core::model::Taint {
                key: "ToBeDeletedByClusterAutoscaler".into(),
                value: "1700000000".into(),
                effect: "NoSchedule".into(),
            });
        }
        node
    };
    rig.cluster.update(|s| s.apply(node(true)));
    rig.agent.sync(false).await.expect("sync");
    assert_eq!(healthz(&rig).await, (503, false.into()), "tainted for removal");
    rig.cluster.update(|s| s.apply(node(false)));
    rig.agent.sync(false).await.expect("sync");
    assert_eq!(healthz(&rig).await, (200, true.into()), "the taint removed");
}

/// `/readyz` of the agent's health port: its status code and body.
async fn readyz(rig: &Rig) -> (u16, String) {
    use tower::ServiceExt;
    let router = tideway_node_agent::http::health_router(
        rig.health.clone(),
        rig.metrics.clone(),
        rig.status.clone(),
        rig.cluster.clone(),
    );
    let req = axum::http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap();
    let res = router.oneshot(req).await.unwrap();
    let code = res.status().as_u16();
    let body = axum::body::to_bytes(res.into_body(), 1 << 16).await.unwrap();
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn an_agent_without_its_node_says_so_in_its_status_and_readyz() {
    let cluster = cluster(Nftables, Duration::ZERO);
    cluster.update(|s| s.delete::<tideway_core::model::Node>("", "node-a"));
    let kernel = SharedKernel::default();
    let mut rig = Rig::new(cluster, kernel.clone());
    assert!(rig.agent.sync(false).await.is_err());
    let waiting = rig.status().waiting_for;
    assert!(waiting.len() == 1 && waiting[0].contains("Node \"node-a\""), "{waiting:?}");
    let (code, body) = readyz(&rig).await;
    assert_eq!(code, 503);
    assert!(body.contains("waiting for Node \"node-a\""), "{body}");
    rig.cluster.update(|s| s.apply(mk_node("node-a", "192.168.0.10", "zone-a")));
    rig.agent.sync(false).await.expect("syncs once the Node is there");
    assert_eq!(rig.status().waiting_for, Vec::<String>::new());
    assert_eq!(readyz(&rig).await, (200, "ok\n".into()));
    // A source task that panicked and was started again: not ready until it recovered.
    rig.cluster.set_fault("Service", "the Service watch panicked (boom) and lists again".into());
    let (code, body) = readyz(&rig).await;
    assert_eq!(code, 503);
    assert!(body.contains("the Service watch panicked (boom)"), "{body}");
    rig.cluster.clear_fault("Service");
    assert_eq!(readyz(&rig).await, (200, "ok\n".into()));
}

#[tokio::test(start_paused = true)]
async fn an_agent_waiting_for_its_first_lists_names_them() {
    let cluster = SharedCluster::new();
    cluster.set_unlisted(vec!["Node".into(), "Service".into()]);
    let kernel = SharedKernel::default();
    let rig = Rig::new(cluster.clone(), kernel.clone());
    let status = rig.status.clone();
    let (code, body) = readyz(&rig).await;
    assert_eq!(code, 503, "{body}");
    let task = tokio::spawn(rig.agent.run(std::future::pending()));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let waiting = status.read().unwrap().waiting_for.clone();
    assert_eq!(waiting, ["the first list of Node", "the first list of Service"]);
    let snapshot =
        Snapshot { nodes: vec![mk_node("node-a", "192.168.0.10", "zone-a")], ..Default::default() };
    cluster.update(|s| s.reset(snapshot));
    cluster.set_unlisted(vec![]);
    cluster.mark_synced();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = status.read().unwrap().clone();
    assert!(s.synced && s.waiting_for.is_empty(), "{s:?}");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn an_uninstalls_cleanup_empties_the_kernel_and_nothing_is_programmed_after_it() {
    let kernel = SharedKernel::default();
    let cluster = cluster(Nftables, Duration::ZERO);
    let Running { status, stop, task } = Running::start(Rig::new(cluster.clone(), kernel.clone())).await;
    assert!(kernel.lock().state.contains_key(&Nftables), "programmed first");
    // The uninstall's own config: it selects no node and asks every one.
    let mut ask = ProxyConfig::every_node("tideway-cleanup", 1, ProxySettings::default());
    ask.node_selector.match_labels.insert("tideway.io/cleanup".into(), "42".into());
    ask.cleanup = Some("42".into());
    cluster.update(|s| s.apply(ask));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(kernel.lock().state.is_empty(), "{:?}", kernel.lock().state.keys());
    let s = status.read().unwrap().clone();
    assert_eq!((s.cleaned_up.as_deref(), s.rules, s.last_error), (Some("42"), 0, None));
    kernel.take_calls();
    cluster.update(|s| s.apply(web(2)));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(kernel.take_calls(), [], "nothing programmed or checked after the clean-up");
    let _ = stop.send(());
    task.await.unwrap();
}

/// The cluster's DNS-like UDP Service (`kube-system/dns`, 10.96.0.10:53 → :5353) with one
/// endpoint on this node and one on another, and a Local LoadBalancer Service whose health
/// check port is 32000.
fn with_udp(cluster: &SharedCluster) {
    let dns = mk_service("kube-system", "dns").cluster_ip("10.96.0.10").port("dns", Udp, 53).build();
    let slice = mk_slice("kube-system", "dns")
        .port("dns", Udp, 5353)
        .ready("10.244.1.7", "node-a")
        .ready("10.244.2.7", "node-b")
        .build();
    let lb = mk_service("demo", "lb")
        .cluster_ip("10.96.0.20")
        .port("http", Tcp, 80)
        .node_port(30080)
        .load_balancer()
        .lb_ip("192.0.2.20")
        .etp_local()
        .health_check_node_port(32000)
        .build();
    let lb_slice = mk_slice("demo", "lb").port("http", Tcp, 8080).ready("10.244.1.8", "node-a").build();
    cluster.update(|s| s.apply(dns) && s.apply(slice) && s.apply(lb) && s.apply(lb_slice));
}

/// A client's UDP flow to the DNS Service, answered by `endpoint`.
fn dns_flow(sport: u16, endpoint: &str) -> Flow {
    Flow {
        src: ip("10.244.3.3"),
        dst: ip("10.96.0.10"),
        sport,
        dport: 53,
        reply_src: ip(endpoint),
        reply_sport: 5353,
    }
}

/// With a UDP Service, every sync that may change its endpoints removes the conntrack entries
/// of the endpoints gone — and only those — through core's decision, and the health check of
/// a Local Service is served with its local endpoint count.
#[tokio::test]
async fn udp_flows_of_endpoints_gone_are_cleaned_and_health_checks_follow_local_endpoints() {
    let kernel = SharedKernel::default();
    let cluster = cluster(Nftables, Duration::ZERO);
    with_udp(&cluster);
    let effects = MemoryEffects::default();
    let (to_a, to_b, to_gone) =
        (dns_flow(40001, "10.244.1.7"), dns_flow(40002, "10.244.2.7"), dns_flow(40003, "10.244.9.9"));
    effects.lock().udp_flows = vec![to_a, to_b, to_gone];
    let mut rig = Rig::new(cluster, kernel.clone());
    rig.agent = rig.agent.with_effects(Box::new(effects.clone()));

    rig.agent.sync(false).await.expect("first sync");
    {
        let node = effects.lock();
        assert_eq!(
            node.deleted,
            [to_gone],
            "the full sync cleans the flow of an endpoint the Service does not have"
        );
        assert_eq!(node.udp_flows, [to_a, to_b]);
        assert_eq!(
            node.health_checks.get(&32000),
            Some(&(tideway_core::model::ServiceName::new("demo", "lb"), 1))
        );
    }
    assert!(rig.metric("kubeproxy_conntrack_reconciler_deleted_entries").ends_with(" 1"));
    assert_eq!(rig.status().health_check_ports, [32000]);

    // The endpoint on node-a goes: its flow is cleaned, node-b's stays.
    let slice = mk_slice("kube-system", "dns").port("dns", Udp, 5353).ready("10.244.2.7", "node-b").build();
    rig.cluster.update(|s| s.apply(slice));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(kernel.take_calls().last(), Some(&Apply { mode: Nftables, full: false }));
    assert_eq!(effects.lock().deleted, [to_gone, to_a]);
    assert_eq!(effects.lock().udp_flows, [to_b]);
    assert!(rig.metric("kubeproxy_conntrack_reconciler_deleted_entries").ends_with(" 2"));

    // The Local Service loses its local endpoint: the check answers with none.
    let lb_slice = mk_slice("demo", "lb").port("http", Tcp, 8080).ready("10.244.2.8", "node-b").build();
    rig.cluster.update(|s| s.apply(lb_slice));
    rig.agent.sync(false).await.unwrap();
    assert_eq!(effects.lock().health_checks.get(&32000).map(|c| c.1), Some(0));
    assert_eq!(effects.lock().deleted.len(), 2, "nothing else was stale");
    rig.assert_kernel_is_desired(Nftables).await;
}

//! The real API server for the CLI's tests (root; needs `make kube`): a control plane of the
//! test's own with the battery's Service CIDR, the chart's CRDs and RBAC, the battery's objects,
//! and relays that let processes in the test's network namespaces reach it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tideway_lab::kube::ControlPlaneConfig;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::rest;
use tideway_lab::kube::standalone::Standalone;
use tideway_tests::fault_proxy::FaultProxy;
use tideway_tests::netns::Netns;

use super::manifest;

/// The control plane, the admin's client and applier.
pub(crate) struct Api {
    pub(crate) standalone: Standalone,
    pub(crate) admin: kube::Client,
    pub(crate) applier: Applier,
}

impl Api {
    /// A control plane for test `tag` whose Service CIDR is the battery's 10.96.0.0/16 and whose
    /// Nodes stay as written (no kubelet heartbeats here), with the chart's CRDs and its RBAC
    /// rendered with `values`.
    pub(crate) async fn start(tag: &str, values: &[(String, String)]) -> Api {
        Api::start_configured(tag, values, |config| config.service_cidr = "10.96.0.0/16".into()).await
    }

    /// [`Api::start`] with the control plane's configuration changed by `configure` (a
    /// benchmark's Service CIDR, API server flags, an etcd snapshot to start from).
    pub(crate) async fn start_configured(
        tag: &str,
        values: &[(String, String)],
        configure: impl FnOnce(&mut ControlPlaneConfig),
    ) -> Api {
        let standalone = Standalone::start(tag, |config| {
            config.grace = Duration::from_secs(3600);
            configure(config);
        })
        .await
        .expect("a control plane (root; make kube)");
        standalone.apply_crds(&chart().join("crds")).await.unwrap();
        standalone.apply_chart_rbac(&chart(), values).await.unwrap();
        let admin = standalone.admin().await.unwrap();
        let applier = Applier::new(admin.clone(), "tideway-test");
        Api { standalone, admin, applier }
    }

    /// A kubeconfig for ServiceAccount `namespace/account` (a token the server mints) that
    /// reaches the server at `https://127.0.0.1:PORT`, where [`relays`] listen.
    pub(crate) async fn kubeconfig_via(&self, namespace: &str, account: &str, port: u16) -> PathBuf {
        let path = self.standalone.token_kubeconfig(namespace, account).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let relayed = text.replace(&self.standalone.cp.host_url(), &format!("https://127.0.0.1:{port}"));
        std::fs::write(&path, relayed).unwrap();
        path
    }

    /// Records what the components did here for `make check-rbac` (before the control plane
    /// and its audit log go).
    pub(crate) fn record_usage(&self) {
        tideway_tests::audit::record_usage(&self.standalone.cp.layout().audit_log());
    }
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway")
}

/// A relay to `target` on 127.0.0.1 of each of `namespaces`, all on one port (loopbacks are
/// per namespace): the port, and the relays (they run while kept).
pub(crate) fn relays(namespaces: &[&Netns], target: SocketAddr) -> (u16, Vec<Arc<FaultProxy>>) {
    for _ in 0..20 {
        let first =
            namespaces[0].run(|| std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port"));
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for ns in &namespaces[1..] {
            match ns.run(move || std::net::TcpListener::bind(("127.0.0.1", port))) {
                Ok(l) => listeners.push(l),
                Err(_) => break,
            }
        }
        if listeners.len() == namespaces.len() {
            return (port, listeners.into_iter().map(|l| FaultProxy::start_on(l, target)).collect());
        }
    }
    panic!("no loopback port free in every namespace");
}

/// The battery's objects (`support::manifest`), namespace `demo` first, every Node Ready.
pub(crate) fn battery(extra: &str) -> Vec<Value> {
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}})];
    let text = manifest("nftables", extra);
    for doc in text.split("\n---").filter(|d| !d.trim().is_empty()) {
        let mut object: Value = serde_saphyr::from_str(doc).expect("manifest document");
        if object["kind"] == "Node" {
            object["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        }
        // The server made its own ServiceCIDR from its flags: the same range.
        if object["kind"] != "ServiceCIDR" {
            objects.push(object);
        }
    }
    objects
}

/// GET `path` as `client`: the object, or None when it is not there.
pub(crate) async fn get(client: &kube::Client, path: &str) -> Option<Value> {
    rest::get(client, path).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// A JSON merge patch of `path` as `client`.
pub(crate) async fn merge(client: &kube::Client, path: &str, patch: Value) {
    rest::merge(client, path, &patch).await.unwrap_or_else(|e| panic!("PATCH {path}: {e}"));
}

/// Writes the status of every Service in `objects` that has one (a LoadBalancer's addresses):
/// an apply leaves status out, since the server keeps it in a subresource of its own.
pub(crate) async fn write_statuses(client: &kube::Client, objects: &[Value]) {
    for o in objects.iter().filter(|o| o["kind"] == "Service" && o["status"].is_object()) {
        let (namespace, name) = (&o["metadata"]["namespace"], &o["metadata"]["name"]);
        let path = format!(
            "/api/v1/namespaces/{}/services/{}/status",
            namespace.as_str().unwrap(),
            name.as_str().unwrap()
        );
        merge(client, &path, json!({"status": o["status"]})).await;
    }
}

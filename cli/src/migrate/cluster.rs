//! `tideway migrate --from-cluster`: the same inputs read from a running cluster instead of
//! files, where kubeadm and MetalLB's manifests keep them:
//!
//! * kube-proxy: ConfigMap `kube-system/kube-proxy` (its `config.conf`);
//! * CoreDNS: ConfigMap `kube-system/coredns` (its `Corefile`);
//! * MetalLB: every namespace's `metallb.io/v1beta1` `IPAddressPool`s and `L2Advertisement`s.
//!
//! What is absent (no kube-proxy on a cluster already without it, MetalLB's CRDs not
//! installed) is left out and named; the texts go through the same conversions as files.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

use super::error::MigrateError;

/// Where kubeadm keeps kube-proxy's and CoreDNS's configuration.
const KUBE_SYSTEM: &str = "kube-system";

/// MetalLB's kinds Tideway reads.
const METALLB_KINDS: [&str; 2] = ["IPAddressPool", "L2Advertisement"];

/// The inputs found in the cluster, as the texts the file options would hold.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// kube-proxy's ConfigMap, as JSON.
    pub(crate) kube_proxy: Option<String>,
    /// CoreDNS's Corefile.
    pub(crate) corefile: Option<String>,
    /// MetalLB's objects as a JSON `List` (None: none, or MetalLB's CRDs not installed).
    pub(crate) metallb: Option<String>,
    /// What was looked for and not found, one line each.
    pub(crate) absent: Vec<String>,
}

fn cluster_error(what: &str, e: kube::Error) -> MigrateError {
    MigrateError::Input(what.to_string(), format!("reading it from the cluster: {e}"))
}

fn unreadable(what: &str, e: &serde_json::Error) -> MigrateError {
    MigrateError::Input(what.to_string(), format!("as read from the cluster, it does not serialise: {e}"))
}

/// A ConfigMap of kube-system, None when it does not exist.
async fn config_map(client: &kube::Client, name: &str) -> Result<Option<ConfigMap>, MigrateError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), KUBE_SYSTEM);
    api.get_opt(name).await.map_err(|e| cluster_error(&format!("ConfigMap {KUBE_SYSTEM}/{name}"), e))
}

/// Every object of MetalLB's `kind` in any namespace; empty when the kind is not served.
async fn metallb_objects(client: &kube::Client, kind: &str) -> Result<Vec<Value>, MigrateError> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("metallb.io", "v1beta1", kind));
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(cluster_error(&format!("MetalLB {kind}s"), e)),
    };
    // List items come without their kind; the conversion reads it.
    let with_kind = |o: DynamicObject| {
        let mut v = serde_json::to_value(o).map_err(|e| unreadable(&format!("a MetalLB {kind}"), &e))?;
        v["apiVersion"] = json!(resource.api_version);
        v["kind"] = json!(kind);
        Ok(v)
    };
    list.items.into_iter().map(with_kind).collect()
}

/// Reads every input from the cluster `client` talks to.
pub(crate) async fn read(client: kube::Client) -> Result<Found, MigrateError> {
    let mut found = Found::default();
    match config_map(&client, "kube-proxy").await? {
        Some(cm) => {
            let what = format!("ConfigMap {KUBE_SYSTEM}/kube-proxy");
            found.kube_proxy = Some(serde_json::to_string(&cm).map_err(|e| unreadable(&what, &e))?);
        }
        None => found.absent.push(format!("ConfigMap {KUBE_SYSTEM}/kube-proxy (no kube-proxy)")),
    }
    match config_map(&client, "coredns").await? {
        Some(cm) => match cm.data.and_then(|mut d| d.remove("Corefile")) {
            Some(corefile) => found.corefile = Some(corefile),
            None => found.absent.push(format!("the Corefile in ConfigMap {KUBE_SYSTEM}/coredns")),
        },
        None => found.absent.push(format!("ConfigMap {KUBE_SYSTEM}/coredns (no CoreDNS)")),
    }
    let mut items = Vec::new();
    for kind in METALLB_KINDS {
        items.extend(metallb_objects(&client, kind).await?);
    }
    if items.is_empty() {
        found
            .absent
            .push("MetalLB's IPAddressPools and L2Advertisements (none, or MetalLB not installed)".into());
    } else {
        found.metallb = Some(json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string());
    }
    Ok(found)
}

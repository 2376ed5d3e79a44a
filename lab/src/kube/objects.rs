//! What of a lab file goes to the API server in kube mode (pure).
//!
//! Everything but the lab's own kinds (`LabHost`, `LabRouter`: the lab builds them, no API
//! server knows them) and the Nodes (each node's kubelet registers its own, with the labels,
//! addresses and pod CIDR the file gives it). A namespace that a Pod or Service uses and the
//! file does not declare is added, as the file-fed lab makes every namespace used; a Pod's
//! `status` is left out (it is the kubelet's to write).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::spec::{LabSpec, namespace};

/// The namespaces every cluster has.
const BUILT_IN: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

fn value<T: serde::Serialize>(api_version: &str, kind: &str, obj: &T) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        // Set by the server; an apply must not carry them.
        for f in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"] {
            meta.remove(f);
        }
    }
    v
}

/// The objects of `spec` the lab applies to the API server, in file order by kind.
pub fn api_objects(spec: &LabSpec) -> Vec<Value> {
    let mut out = Vec::new();
    let declared: BTreeSet<String> = spec.namespaces.iter().filter_map(|n| n.metadata.name.clone()).collect();
    let used: BTreeSet<String> = spec
        .pods
        .iter()
        .map(|p| namespace(&p.metadata))
        .chain(spec.services.iter().map(|s| namespace(&s.metadata)))
        .filter(|ns| !declared.contains(ns) && !BUILT_IN.contains(&ns.as_str()))
        .collect();
    out.extend(spec.namespaces.iter().map(|n| value("v1", "Namespace", n)));
    out.extend(
        used.iter().map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
    );
    for p in &spec.pods {
        let mut v = value("v1", "Pod", p);
        v.as_object_mut().map(|o| o.remove("status"));
        v["metadata"]["namespace"] = json!(namespace(&p.metadata));
        out.push(v);
    }
    for s in &spec.services {
        let mut v = value("v1", "Service", s);
        v.as_object_mut().map(|o| o.remove("status"));
        v["metadata"]["namespace"] = json!(namespace(&s.metadata));
        out.push(v);
    }
    out.extend(spec.proxy_configs.iter().map(|c| value("tideway.io/v1alpha1", "ProxyConfig", c)));
    out.extend(spec.pools.iter().map(|p| value("tideway.io/v1alpha1", "LoadBalancerPool", p)));
    out.extend(spec.bgp.iter().cloned());
    out
}

/// The kinds (apiVersion, kind) a lab file can put in the API server: what `lab replace`
/// prunes among.
pub fn applied_kinds() -> BTreeSet<(String, String)> {
    [
        ("v1", "Namespace"),
        ("v1", "Pod"),
        ("v1", "Service"),
        ("tideway.io/v1alpha1", "ProxyConfig"),
        ("tideway.io/v1alpha1", "LoadBalancerPool"),
        ("tideway.io/v1alpha1", "BGPPeer"),
        ("tideway.io/v1alpha1", "BGPAdvertisement"),
        ("tideway.io/v1alpha1", "BFDProfile"),
        ("tideway.io/v1alpha1", "Community"),
    ]
    .iter()
    .map(|(a, k)| (a.to_string(), k.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_sends_its_cluster_objects_and_keeps_the_labs_own() {
        let spec = LabSpec::parse("demo.yaml", include_str!("../../../examples/demo.yaml")).unwrap();
        let objs = api_objects(&spec);
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert!(!kinds.contains(&"Node") && !kinds.contains(&"LabHost"), "{kinds:?}");
        assert_eq!(kinds.iter().filter(|k| **k == "Pod").count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == "Service").count(), 3);
        let pod = objs.iter().find(|o| o["kind"] == "Pod").unwrap();
        assert_eq!(pod["metadata"]["namespace"], "default");
        assert_eq!(pod["apiVersion"], "v1");
        assert!(pod.get("status").is_none());
        for o in &objs {
            assert!(applied_kinds().contains(&(
                o["apiVersion"].as_str().unwrap().to_string(),
                o["kind"].as_str().unwrap().to_string()
            )));
        }
    }

    #[test]
    fn a_namespace_used_and_not_declared_is_added() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: shop}\nspec: {ports: [{port: 80}]}\n";
        let spec = LabSpec::parse("f.yaml", text).unwrap();
        let objs = api_objects(&spec);
        assert_eq!(objs[0], json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    }
}

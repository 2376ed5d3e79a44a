//! A change to a ProxyConfig asked for over REST: a JSON merge patch of the object, of which
//! only `spec` may change. The patched spec is checked as the operator checks a spec it
//! watches (every field converts, unknown fields are refused), so a change that reaches the
//! API server or the lab is one the nodes can run.

use serde_json::Value;
use tideway_core::config::ProxyConfig as CoreConfig;

use super::proxy_config::{ProxyConfig, ProxyConfigSpec, proxy_config, spec_of};
use crate::error::{ConvertError, Ctx};
use crate::merge_patch::{merge_patch, unknown_fields};

/// A checked change: the patch as given (what a merge patch to the API server sends) and the
/// whole spec it makes.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecChange {
    /// The object-level merge patch, `{"spec": {...}}`.
    pub patch: Value,
    /// The spec after the patch, as the nodes will run it.
    pub spec: ProxyConfigSpec,
}

/// Applies the merge patch `patch` (an object with only `spec`) to `current`; the patched
/// spec, or the field that is wrong.
pub fn patch_proxy_config(current: &CoreConfig, patch: &Value) -> Result<SpecChange, ConvertError> {
    let cx = Ctx::new("ProxyConfig", None, &current.name);
    let Value::Object(fields) = patch else {
        return Err(cx.err(
            ".",
            "a merge patch of the object is a JSON object, e.g. {\"spec\": {\"mode\": \"iptables\"}}",
        ));
    };
    if let Some(other) = fields.keys().find(|k| *k != "spec") {
        return Err(cx.err(other.as_str(), "only spec can be changed over this API"));
    }
    // No `spec` (an empty patch) changes nothing.
    let spec_patch = fields.get("spec").cloned().unwrap_or_else(|| Value::Object(Default::default()));
    if !spec_patch.is_object() {
        return Err(cx.err("spec", "must be an object"));
    }
    let before = serde_json::to_value(spec_of(current)).map_err(|e| cx.err("spec", e.to_string()))?;
    let merged = merge_patch(&before, &spec_patch);
    let spec: ProxyConfigSpec = serde_path_to_error::deserialize(&merged).map_err(|e| {
        let message = e.inner().to_string();
        cx.err(format!("spec.{}", e.path()), message)
    })?;
    let known = serde_json::to_value(&spec).map_err(|e| cx.err("spec", e.to_string()))?;
    if let Some(field) = unknown_fields(&merged, &known).into_iter().next() {
        return Err(cx.err(format!("spec.{field}"), "unknown field"));
    }
    let mut obj = ProxyConfig::new(&current.name, spec.clone());
    obj.metadata.generation = Some(current.generation);
    proxy_config(&obj)?;
    Ok(SpecChange { patch: patch.clone(), spec })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tideway_core::config::ProxyMode;

    use super::*;

    fn current() -> CoreConfig {
        let obj: ProxyConfig = serde_json::from_value(json!({
            "apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig",
            "metadata": {"name": "default", "generation": 3},
            "spec": {"mode": "nftables", "clusterCIDRs": ["10.10.0.0/16"], "nodeSelector": {"matchLabels": {"pool": "a"}}},
        }))
        .unwrap();
        proxy_config(&obj).unwrap()
    }

    fn refused(patch: Value) -> (String, String) {
        let e = patch_proxy_config(&current(), &patch).unwrap_err();
        (e.field, e.message)
    }

    #[test]
    fn a_mode_change_keeps_everything_else() {
        let change = patch_proxy_config(&current(), &json!({"spec": {"mode": "iptables"}})).unwrap();
        assert_eq!(change.spec.mode.as_deref(), Some("iptables"));
        assert_eq!(change.spec.cluster_cidrs, vec!["10.10.0.0/16"]);
        assert!(change.spec.node_selector.is_some());
        assert_eq!(change.patch, json!({"spec": {"mode": "iptables"}}));
        let mut obj = ProxyConfig::new("default", change.spec);
        obj.metadata.generation = Some(4);
        assert_eq!(proxy_config(&obj).unwrap().settings.mode, ProxyMode::Iptables);
    }

    #[test]
    fn an_empty_patch_changes_nothing() {
        let change = patch_proxy_config(&current(), &json!({})).unwrap();
        assert_eq!(change.spec, spec_of(&current()));
    }

    #[test]
    fn null_removes_a_field_back_to_its_default() {
        let change =
            patch_proxy_config(&current(), &json!({"spec": {"nodeSelector": null, "mode": null}})).unwrap();
        assert_eq!(change.spec.node_selector, None);
        assert_eq!(change.spec.mode, None, "the default mode, nftables, applies");
    }

    #[test]
    fn bad_changes_name_their_field() {
        let cases = [
            (json!({"spec": {"mode": "ipvz"}}), "spec.mode", "unknown proxy mode"),
            (json!({"spec": {"mode": 3}}), "spec.mode", "invalid type"),
            (json!({"spec": {"mdoe": "iptables"}}), "spec.mdoe", "unknown field"),
            (json!({"spec": {"ipvs": {"scheduler": "fastest"}}}), "spec.ipvs.scheduler", ""),
            (json!({"spec": {"masqueradeBit": 40}}), "spec.masqueradeBit", "out of range"),
            (json!({"spec": {"syncPeriod": "soon"}}), "spec.syncPeriod", ""),
            (json!({"spec": {"syncPeriod": "9999999999999999999999h"}}), "spec.syncPeriod", "too long"),
            (json!({"spec": {"syncPeriod": "0s"}}), "spec.syncPeriod", "greater than 0"),
            (json!({"spec": {"syncPeriod": "25h"}}), "spec.syncPeriod", "longer than 24h"),
            (json!({"spec": {"minSyncPeriod": "1m"}}), "spec.minSyncPeriod", "longer than spec.syncPeriod"),
            (json!({"spec": {"clusterCIDRs": ["10.10.0.0/33"]}}), "spec.clusterCIDRs[0]", ""),
            (json!({"metadata": {"name": "other"}}), "metadata", "only spec"),
            (json!({"spec": "iptables"}), "spec", "must be an object"),
            (json!({"spec": null}), "spec", "must be an object"),
            (json!(["spec"]), ".", "JSON object"),
        ];
        for (patch, field, message) in cases {
            let (f, m) = refused(patch.clone());
            assert_eq!(f, field, "{patch}: {m}");
            assert!(m.contains(message), "{patch}: {m}");
        }
    }
}

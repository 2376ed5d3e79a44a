//! Schema overrides: fields that are plain strings in Rust (so an old or hand-edited object
//! still decodes and is reported by the converter) but enums in the CRD (so the API server
//! rejects a typo at write time).

use schemars::{Schema, SchemaGenerator, json_schema};

fn string_enum(values: &[&str]) -> Schema {
    json_schema!({ "type": "string", "enum": values, "nullable": true })
}

pub(crate) fn proxy_mode(_: &mut SchemaGenerator) -> Schema {
    string_enum(&["nftables", "iptables", "ipvs"])
}

pub(crate) fn detect_local_mode(_: &mut SchemaGenerator) -> Schema {
    string_enum(&["ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"])
}

pub(crate) fn ipvs_scheduler(_: &mut SchemaGenerator) -> Schema {
    string_enum(&IPVS_SCHEDULERS)
}

const IPVS_SCHEDULERS: [&str; 11] =
    ["rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"];

/// `random`, `maglev` or an IPVS scheduler ([`tideway_core::config::LoadBalancing`]).
pub(crate) fn load_balancing(_: &mut SchemaGenerator) -> Schema {
    let mut all = vec!["random", "maglev"];
    all.extend(IPVS_SCHEDULERS);
    string_enum(&all)
}

/// RFC 3339 timestamps (`metav1.Time`).
pub(crate) fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time", "nullable": true })
}

/// The constraints of [`crate::validation`] written into a CRD's `openAPIV3Schema`: each entry
/// names a property by its path (`spec.ipvs.tcpTimeout`; `[]` for a list's items) and the
/// keywords it gets. `x-kubernetes-validations` lists are appended to.
pub(crate) struct Constraint {
    pub(crate) path: &'static str,
    pub(crate) keywords: serde_json::Value,
}

/// Adds `constraints` to `crd`'s schema.
///
/// # Panics
/// When a path names no property: the table and the types disagree, which the tests catch.
pub(crate) fn constrain(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    constraints: &[Constraint],
) {
    let version = crd.spec.versions.first_mut().expect("one version");
    let schema = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.take()).expect("a schema");
    let mut value = serde_json::to_value(schema).expect("a schema serializes");
    for c in constraints {
        let node = property(&mut value, c.path).unwrap_or_else(|| panic!("no property {}", c.path));
        let serde_json::Value::Object(keywords) = &c.keywords else {
            panic!("keywords of {} are an object", c.path)
        };
        for (k, v) in keywords {
            match (node.get_mut(k), v) {
                (Some(serde_json::Value::Array(list)), serde_json::Value::Array(more)) => {
                    list.extend(more.clone())
                }
                _ => {
                    node.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let schema = serde_json::from_value(value).expect("the constrained schema deserializes");
    version.schema.as_mut().expect("a schema").open_api_v3_schema = Some(schema);
}

/// The schema object at `path` below `root`.
fn property<'a>(
    root: &'a mut serde_json::Value,
    path: &str,
) -> Option<&'a mut serde_json::Map<String, serde_json::Value>> {
    let mut node = root;
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        node = node.get_mut("properties")?.get_mut(name)?;
        if items {
            node = node.get_mut("items")?;
        }
    }
    node.as_object_mut()
}

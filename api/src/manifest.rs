//! Multi-document Kubernetes YAML (Services, EndpointSlices, Nodes, Pods, Namespaces, the
//! `tideway.io` kinds and MetalLB's `IPAddressPool`, `L2Advertisement`, `ServiceL2Status` and
//! BGP kinds, and any kind [`register`]ed) into a [`Snapshot`]. Objects that fail to decode or
//! convert are reported with file, document, object and field, and skipped; everything else is
//! kept.

use std::fmt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tideway_core::cluster::{Snapshot, StateKind};

use crate::crd;
use crate::error::ConvertError;
use crate::to_model::ToModel;

/// A problem with one document (or the whole file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// File name as given.
    pub file: String,
    /// 1-based document number (0 for the whole file).
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    /// What went wrong.
    pub message: String,
    /// The object at fault, when it could be identified.
    pub object: Option<Box<ObjectRef>>,
}

/// Identifies an object in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace` (None for cluster-scoped kinds or when absent).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

fn object_ref(value: &Value) -> Option<ObjectRef> {
    Some(ObjectRef {
        api_version: value.get("apiVersion")?.as_str()?.to_string(),
        kind: value.get("kind")?.as_str()?.to_string(),
        namespace: value.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string),
        name: value.pointer("/metadata/name")?.as_str()?.to_string(),
    })
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.document == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: document {} (line {}): {}", self.file, self.document, self.line, self.message)
        }
    }
}

/// What a manifest file holds.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// The objects that converted cleanly.
    pub snapshot: Snapshot,
    /// Objects skipped because they are invalid.
    pub errors: Vec<LoadError>,
    /// Kinds present in the file that Tideway does not read (`apps/v1 Deployment web`, ...).
    pub ignored: Vec<String>,
}

/// Reads and parses a manifest file.
pub fn load_file(path: &Path) -> Result<Manifest, LoadError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| LoadError {
        file: file.clone(),
        document: 0,
        line: 0,
        message: format!("cannot read: {e}"),
        object: None,
    })?;
    Ok(load_str(&file, &text))
}

/// Splits YAML text into documents at `---` lines, keeping each one's starting line: slices
/// of the text, not copies (a cluster file can run to a hundred megabytes, and copies made
/// up front would be freed among the objects built from them, scattering those).
fn documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let (mut start, mut first_line, mut at) = (0, 1, 0);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.strip_suffix('\n').map_or(line, |l| l.strip_suffix('\r').unwrap_or(l));
        if bare == "---" || bare.starts_with("--- ") {
            docs.push((first_line, &text[start..at]));
            start = at + line.len();
            first_line = i + 2;
        }
        at += line.len();
    }
    docs.push((first_line, &text[start..]));
    docs
}

/// Parses manifest text; `file` names it in errors.
pub fn load_str(file: &str, text: &str) -> Manifest {
    let mut out = Manifest::default();
    for (n, (line, doc)) in documents(text).into_iter().enumerate() {
        let err = |message: String, object: Option<Box<ObjectRef>>| LoadError {
            file: file.to_string(),
            document: n + 1,
            line,
            message,
            object,
        };
        if doc.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            continue;
        }
        // A document in JSON (what the lab writes; YAML's flow subset) takes the fast parser.
        let parsed = if doc.trim_start().starts_with('{') {
            serde_json::from_str(doc).map_err(|e| e.to_string())
        } else {
            serde_saphyr::from_str(doc).map_err(|e| e.to_string())
        };
        let value: Value = match parsed {
            Ok(v) => v,
            Err(e) => {
                out.errors.push(err(format!("invalid YAML: {e}"), None));
                continue;
            }
        };
        let object = object_ref(&value).map(Box::new);
        if let Err(e) = add_object(&mut out, value) {
            out.errors.push(err(e.to_string(), object));
        }
    }
    out
}

/// Why one object of a manifest was skipped.
#[derive(Debug, thiserror::Error)]
enum ObjectError {
    #[error("object has no kind")]
    NoKind,
    /// Not the shape of its kind (`Service ns/name: spec.ports[0].port: invalid type ...`).
    #[error("{kind} {object}: {path}: {message}")]
    Decode { kind: String, object: String, path: String, message: String },
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The items of a `List` that were skipped.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Items(Vec<ObjectError>),
}

fn decode<T: DeserializeOwned>(kind: &str, value: Value) -> Result<T, ObjectError> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    let ns = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(|n| format!("{n}/"))
        .unwrap_or_default();
    serde_path_to_error::deserialize(value).map_err(|e| ObjectError::Decode {
        kind: kind.to_string(),
        object: format!("{ns}{name}"),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn converted<T>(r: Result<T, ConvertError>) -> Result<T, ObjectError> {
    Ok(r?)
}

/// Decodes and converts an object of `T` (of `kind`) into its list in `snapshot`; an object
/// the model ignores is left out.
fn add<T: ToModel>(snapshot: &mut Snapshot, kind: &str, value: Value) -> Result<(), ObjectError> {
    if let Some(model) = converted(decode::<T>(kind, value)?.convert())? {
        T::Model::listed(snapshot).push(model);
    }
    Ok(())
}

fn add_object(out: &mut Manifest, value: Value) -> Result<(), ObjectError> {
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if kind.is_empty() {
        return Err(ObjectError::NoKind);
    }
    let s = &mut out.snapshot;
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "List") => {
            let items = value.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
            let mut errors = Vec::new();
            for item in items {
                if let Err(e) = add_object(out, item) {
                    errors.push(e);
                }
            }
            return if errors.is_empty() { Ok(()) } else { Err(ObjectError::Items(errors)) };
        }
        ("v1", "Service") => add::<Service>(s, &kind, value)?,
        ("discovery.k8s.io/v1", "EndpointSlice") => add::<EndpointSlice>(s, &kind, value)?,
        ("v1", "Node") => add::<Node>(s, &kind, value)?,
        ("v1", "Pod") => add::<Pod>(s, &kind, value)?,
        ("v1", "Namespace") => add::<Namespace>(s, &kind, value)?,
        ("networking.k8s.io/v1", "ServiceCIDR") => add::<ServiceCIDR>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "ProxyConfig") => add::<crd::ProxyConfig>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "NodeProxyState") => add::<crd::NodeProxyState>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "LoadBalancerPool") => add::<crd::LoadBalancerPool>(s, &kind, value)?,
        ("metallb.io/v1beta1", "IPAddressPool") => add::<crd::IPAddressPool>(s, &kind, value)?,
        ("metallb.io/v1beta1", "L2Advertisement") => add::<crd::L2Advertisement>(s, &kind, value)?,
        ("metallb.io/v1beta1", "ServiceL2Status") => add::<crd::ServiceL2Status>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "BGPPeer") => add::<crd::BGPPeer>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "BGPAdvertisement") => add::<crd::BGPAdvertisement>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "BFDProfile") => add::<crd::BFDProfile>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "Community") => add::<crd::Community>(s, &kind, value)?,
        ("metallb.io/v1beta2", "BGPPeer") => add::<crd::MetalLbBgpPeer>(s, &kind, value)?,
        ("metallb.io/v1beta1", "BGPAdvertisement") => add::<crd::MetalLbBgpAdvertisement>(s, &kind, value)?,
        ("metallb.io/v1beta1", "BFDProfile") => add::<crd::MetalLbBfdProfile>(s, &kind, value)?,
        ("metallb.io/v1beta1", "Community") => add::<crd::MetalLbCommunity>(s, &kind, value)?,
        ("tideway.io/v1alpha1", "L2Announcement") => add::<crd::L2Announcement>(s, &kind, value)?,
        (api_version, kind) => match registered(api_version, kind) {
            Some(add) => add(s, kind, value)?,
            None => {
                let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
                out.ignored.push(format!("{api_version} {kind} {name}"));
            }
        },
    }
    Ok(())
}

/// How an object of a registered kind lands in a snapshot ([`add`] of its type).
type Add = fn(&mut Snapshot, &str, Value) -> Result<(), ObjectError>;

/// The kinds read beyond the table above: (apiVersion, kind, how an object lands).
static REGISTERED: std::sync::RwLock<Vec<(String, String, Add)>> = std::sync::RwLock::new(Vec::new());

/// Reads the objects of `T` in every manifest from now on, as the table's own kinds: a kind
/// defined outside this crate (a test's), its model kept by type in the cluster state
/// (`tideway_core::extra_kind!`). Registering a kind twice is registering it once.
pub fn register<T: ToModel + kube::Resource<DynamicType = ()>>() {
    let (api_version, kind) = (T::api_version(&()).into_owned(), T::kind(&()).into_owned());
    let mut kinds = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if !kinds.iter().any(|(v, k, _)| *v == api_version && *k == kind) {
        kinds.push((api_version, kind, add::<T>));
    }
}

fn registered(api_version: &str, kind: &str) -> Option<Add> {
    let kinds = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    kinds.iter().find(|(v, k, _)| v == api_version && k == kind).map(|(_, _, add)| *add)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns1}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: ns1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.5]
  nodeName: node-a
  conditions: {ready: true}
- addresses: [10.244.2.5]
  conditions: {ready: false, serving: true, terminating: true}
"#;

    #[test]
    fn loads_services_and_slices() {
        let m = load_str("c.yaml", GOOD);
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        assert_eq!(m.snapshot.services.len(), 1);
        let slice = &m.snapshot.endpoint_slices[0];
        assert_eq!(slice.service, "web");
        assert!(slice.endpoints[0].ready && !slice.endpoints[1].ready && slice.endpoints[1].serving);
    }

    #[test]
    fn invalid_objects_are_named_and_skipped() {
        let text = format!(
            "{GOOD}---\napiVersion: v1\nkind: Service\nmetadata: {{name: bad, namespace: ns1}}\nspec:\n  clusterIP: 10.96.0.300\n  ports: [{{port: 80}}]\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: range, namespace: ns1}}\nspec:\n  ports: [{{port: 70000}}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\n"
        );
        let m = load_str("c.yaml", &text);
        assert_eq!(m.snapshot.services.len(), 1, "the valid Service is kept");
        let errs: Vec<String> = m.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].contains("document 3")
                && errs[0].contains("Service ns1/bad")
                && errs[0].contains("spec.clusterIP"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains("Service ns1/range: spec.ports[0].port: 70000 is out of range"),
            "{}",
            errs[1]
        );
        assert_eq!(m.ignored, vec!["apps/v1 Deployment web".to_string()]);
    }

    #[test]
    fn type_errors_carry_the_field_path() {
        let m = load_str(
            "c.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: eighty}]\n",
        );
        let e = m.errors[0].to_string();
        assert!(e.contains("Service x: spec.ports[0].port"), "{e}");
    }

    #[test]
    fn unknown_proxy_mode_is_rejected_with_its_field() {
        let m = load_str(
            "c.yaml",
            "apiVersion: tideway.io/v1alpha1\nkind: ProxyConfig\nmetadata: {name: p}\nspec: {mode: userspace}\n",
        );
        assert!(
            m.errors[0].to_string().contains("ProxyConfig p: spec.mode: unknown proxy mode \"userspace\""),
            "{}",
            m.errors[0]
        );
    }

    #[test]
    fn documents_are_slices_of_the_text_with_their_first_lines() {
        let text = "a: 1\n---\nb: 2\r\n--- # second\r\nc: 3\n---\n";
        let docs = documents(text);
        assert_eq!(docs, [(1, "a: 1\n"), (3, "b: 2\r\n"), (5, "c: 3\n"), (7, "")]);
        assert_eq!(documents("only: one"), [(1, "only: one")]);
    }
}

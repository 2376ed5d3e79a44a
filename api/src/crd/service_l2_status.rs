//! MetalLB's `ServiceL2Status` (`metallb.io/v1beta1`, MetalLB v0.14 and later), read as it
//! is by an operator started with `--metallb-compat`: each MetalLB speaker keeps one per
//! Service it announces over layer 2, in MetalLB's namespace, naming the Service and its own
//! node in `status`. Its CRD is MetalLB's (Tideway ships none; MetalLB before v0.14 has
//! none), and it is never written. It converts into [`CoreStatus`], MetalLB's announcer of
//! that Service, which the operator keeps while eligible when it takes the address over.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use tideway_core::model::{ServiceL2Status as CoreStatus, ServiceName};

use crate::error::{ConvertError, Ctx};
use crate::validation;

/// MetalLB's `ServiceL2Status` (`metallb.io/v1beta1`): which node announces a Service.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
pub struct ServiceL2Status {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The status (empty until the speaker that created the object writes it).
    #[serde(default)]
    pub status: ServiceL2StatusStatus,
}

/// `ServiceL2Status.status` (MetalLB's `MetalLBServiceL2Status`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceL2StatusStatus {
    /// The node that receives the Service's traffic (its speaker announces it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// The Service's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_namespace: String,
    /// The interfaces that receive the traffic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceInfo>,
}

/// One of `status.interfaces`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
pub struct InterfaceInfo {
    /// The interface's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl kube::Resource for ServiceL2Status {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ServiceL2Status".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "metallb.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1beta1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "servicel2statuses".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Converts a `ServiceL2Status`; `Ok(None)` while its status names no Service or no node (a
/// speaker creates the object, then writes its status). The interfaces are not kept: which
/// node announces is what the operator reads.
pub fn service_l2_status(obj: &ServiceL2Status) -> Result<Option<CoreStatus>, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let namespace = obj.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = Ctx::new("ServiceL2Status", Some(&namespace), &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let s = &obj.status;
    if s.node.is_empty() || s.service_name.is_empty() || s.service_namespace.is_empty() {
        return Ok(None);
    }
    validation::namespace(&cx, "status.serviceNamespace", &s.service_namespace)?;
    Ok(Some(CoreStatus {
        namespace,
        name,
        service: ServiceName::new(s.service_namespace.clone(), s.service_name.clone()),
        node: s.node.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn convert(status: serde_json::Value) -> Result<Option<CoreStatus>, ConvertError> {
        let obj: ServiceL2Status = serde_json::from_value(json!({
            "apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
            "metadata": {"name": "l2-c54z5", "namespace": "metallb-system",
                         "labels": {"metallb.io/node": "myk8s-worker3"}},
            "spec": {},
            "status": status,
        }))
        .expect("decodes");
        service_l2_status(&obj)
    }

    /// As a MetalLB speaker writes it (`kubectl get servicel2statuses -A`: `l2-c54z5`,
    /// allocated node `myk8s-worker3`, Service `default/svc3`).
    #[test]
    fn a_speakers_status_converts_to_its_node_and_service() {
        let s =
            convert(json!({"node": "myk8s-worker3", "serviceName": "svc3", "serviceNamespace": "default",
            "interfaces": [{"name": "eth0"}]}))
            .expect("converts")
            .expect("names a Service");
        assert_eq!(
            s,
            CoreStatus {
                namespace: "metallb-system".into(),
                name: "l2-c54z5".into(),
                service: ServiceName::new("default", "svc3"),
                node: "myk8s-worker3".into(),
            }
        );
    }

    /// Before its speaker writes the status, the object says nothing: it is left out.
    #[test]
    fn a_status_not_written_yet_is_left_out() {
        assert_eq!(convert(json!({})), Ok(None));
        assert_eq!(convert(json!({"serviceName": "svc3", "serviceNamespace": "default"})), Ok(None));
        assert_eq!(convert(json!({"node": "n", "serviceName": "svc3"})), Ok(None));
        let obj = ServiceL2Status::default();
        assert_eq!(service_l2_status(&obj).expect_err("no name").field, "metadata.name");
    }

    /// Manifests (`--source file:`, the lab) read them too; one without its status is skipped.
    #[test]
    fn manifests_hold_them() {
        let text = "apiVersion: metallb.io/v1beta1\nkind: ServiceL2Status\n\
            metadata: {name: l2-c54z5, namespace: metallb-system}\n\
            status: {node: myk8s-worker3, serviceName: svc3, serviceNamespace: default}\n---\n\
            apiVersion: metallb.io/v1beta1\nkind: ServiceL2Status\n\
            metadata: {name: l2-fresh, namespace: metallb-system}\n";
        let m = crate::manifest::load_str("metallb.yaml", text);
        assert!(m.errors.is_empty() && m.ignored.is_empty(), "{:?} {:?}", m.errors, m.ignored);
        let names: Vec<&str> = m.snapshot.service_l2_statuses.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["l2-c54z5"]);
    }

    #[test]
    fn a_bad_service_namespace_is_named() {
        let e = convert(json!({"node": "n", "serviceName": "svc3", "serviceNamespace": "Not_A_Namespace"}))
            .expect_err("bad namespace");
        assert_eq!(
            (e.kind, e.object.as_str(), e.field.as_str()),
            ("ServiceL2Status", "metallb-system/l2-c54z5", "status.serviceNamespace")
        );
    }
}

//! The `L2Announcement` CRD: the operator's decision of which node answers ARP / neighbour
//! solicitations for a LoadBalancer Service's IPs, and which nodes could. One per Service, in
//! its namespace and with its name; labelled with the announcing node so each agent watches
//! only its own (`tideway.io/node=<node>`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_core::model::{L2Announcement as CoreAnnouncement, ServiceName};

use crate::error::{ConvertError, Ctx};

/// Label carrying the announcing node.
pub const LABEL_NODE: &str = "tideway.io/node";

/// Which node announces a LoadBalancer Service's IPs.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tideway.io",
    version = "v1alpha1",
    kind = "L2Announcement",
    namespaced,
    shortname = "l2a",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"IPs","type":"string","jsonPath":".spec.ips"}"#,
    printcolumn = r#"{"name":"Eligible","type":"string","priority":1,"jsonPath":".spec.eligibleNodes"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct L2AnnouncementSpec {
    /// The Service (same namespace).
    pub service_name: String,
    /// Its LoadBalancer IPs.
    #[serde(default)]
    pub ips: Vec<String>,
    /// The announcing node; absent when no node is eligible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Nodes that may receive the Service's external traffic under its
    /// `externalTrafficPolicy` and the pool's L2 node selectors.
    #[serde(default)]
    pub eligible_nodes: Vec<String>,
    /// Interfaces to announce on (empty: the node's interface holding its InternalIP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
}

/// The object the operator applies for `a`, owned by its Service (`service_uid`).
pub fn l2_announcement_object(a: &CoreAnnouncement, service_uid: Option<&str>) -> L2Announcement {
    let spec = L2AnnouncementSpec {
        service_name: a.service.name.clone(),
        ips: a.ips.iter().map(ToString::to_string).collect(),
        node: a.node.clone(),
        eligible_nodes: a.eligible.clone(),
        interfaces: a.interfaces.clone(),
    };
    let mut obj = L2Announcement::new(&a.service.name, spec);
    let labels: BTreeMap<String, String> =
        a.node.iter().map(|n| (LABEL_NODE.to_string(), n.clone())).collect();
    obj.metadata = ObjectMeta {
        name: Some(a.service.name.clone()),
        namespace: Some(a.service.namespace.clone()),
        labels: Some(labels),
        owner_references: service_uid.map(|uid| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: a.service.name.clone(),
                uid: uid.to_string(),
                controller: Some(true),
                ..Default::default()
            }]
        }),
        ..Default::default()
    };
    obj
}

/// Reads a decision back (agents, and the operator after a restart).
pub fn l2_announcement(obj: &L2Announcement) -> Result<CoreAnnouncement, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let namespace = obj.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = Ctx::new("L2Announcement", Some(&namespace), &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let mut ips = Vec::new();
    for (i, ip) in obj.spec.ips.iter().enumerate() {
        ips.push(cx.ip(format!("spec.ips[{i}]"), ip)?);
    }
    let service = if obj.spec.service_name.is_empty() { name } else { obj.spec.service_name.clone() };
    Ok(CoreAnnouncement {
        service: ServiceName::new(namespace, service),
        ips,
        node: obj.spec.node.clone().filter(|n| !n.is_empty()),
        eligible: obj.spec.eligible_nodes.clone(),
        interfaces: obj.spec.interfaces.clone(),
    })
}

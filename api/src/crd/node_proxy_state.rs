//! The `NodeProxyState` CRD: what one node's agent has programmed, written by that agent with
//! server-side apply (field manager `tideway-agent`) and owned by its Node.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_core::config::ProxyMode;
use tideway_core::model::{BgpReport, NodeProxyState as CoreState};

use super::schema;
use crate::error::{ConvertError, Ctx};

/// One per node, named after it. The spec only names the node; everything else is status.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tideway.io",
    version = "v1alpha1",
    kind = "NodeProxyState",
    status = "NodeProxyStateStatus",
    shortname = "nps",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".status.mode"}"#,
    printcolumn = r#"{"name":"Config","type":"string","jsonPath":".status.proxyConfig"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Services","type":"integer","jsonPath":".status.servicePorts"}"#,
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.rules"}"#,
    printcolumn = r#"{"name":"Drift","type":"integer","jsonPath":".status.driftRepairs"}"#,
    printcolumn = r#"{"name":"Last Sync","type":"date","jsonPath":".status.lastSyncTime"}"#,
    printcolumn = r#"{"name":"Error","type":"string","priority":1,"jsonPath":".status.lastError"}"#,
    printcolumn = r#"{"name":"Version","type":"string","priority":1,"jsonPath":".status.agentVersion"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeProxyStateSpec {
    /// The node this report is about.
    pub node_name: String,
}

/// What the agent programmed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeProxyStateStatus {
    /// Mode programmed (`nftables`, `iptables`, `ipvs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The `ProxyConfig` in force (absent: no config matched, defaults apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_config: Option<String>,
    /// Its `metadata.generation` when it was programmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_config_generation: Option<i64>,
    /// The first sync completed and the last one succeeded.
    #[serde(default)]
    pub ready: bool,
    /// When the last successful sync finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_sync_time: Option<Time>,
    /// How long the last sync took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_duration_seconds: Option<f64>,
    /// Service ports programmed.
    #[serde(default)]
    pub service_ports: i64,
    /// Endpoints programmed, over every Service port.
    #[serde(default)]
    pub endpoints: i64,
    /// Kernel objects programmed (rules, map elements, virtual servers).
    #[serde(default)]
    pub rules: i64,
    /// Drift repairs since the agent started.
    #[serde(default)]
    pub drift_repairs: i64,
    /// The last error, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Every Service change up to this `resourceVersion` is programmed: the highest Service
    /// version the agent had seen when it last programmed all it had seen. A Service is
    /// programmed here once this reaches the version at which its `metadata.generation` last
    /// changed (versions compare as integers since Kubernetes 1.35). Absent: the API server's
    /// versions do not compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub programmed_resource_version: Option<String>,
    /// LoadBalancer IPs this node answers ARP / neighbour solicitations for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub announcing: Vec<String>,
    /// Objects the agent refused as invalid, each naming the field and why (a ProxyConfig whose
    /// `spec.syncPeriod` is out of range, say): it programs with their last valid version, or
    /// without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_objects: Vec<String>,
    /// Interfaces a pool's `l2.interfaces` lists that this node lacks: it announces none of
    /// that pool's addresses while it lacks them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_interfaces: Vec<String>,
    /// What the node says over BGP (absent: its agent speaks no BGP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<NodeBgpStatus>,
    /// Kernel settings the node's rules need and its agent could not set, each as
    /// `name=value: why` (`net.ipv4.conf.all.route_localnet=1: Read-only file system`): the
    /// agent's container cannot write them. The ProxyConfig's `SysctlsSet` condition names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset_sysctls: Vec<String>,
    /// Listeners the agent cannot bind yet, each as `address: why`
    /// (`0.0.0.0:10256: Address in use (os error 98)`), retried every 5 s: another process holds
    /// the port — kube-proxy, while both run during a migration (the chart's
    /// `agent.healthzBindAddress` and `agent.metricsBindAddress` move the agent's aside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listener_conflicts: Vec<String>,
    /// When the agent stopped gracefully (SIGTERM: a rollout restarting it, a drain), leaving
    /// its rules programmed. While its Node stays Ready, its addresses stay for the operator's
    /// hand-over time (`--restart-hand-over`, 30 s) after it, so a rolling upgrade moves none.
    /// The next agent keeps reporting it until its gossip member is seen by another node's (at
    /// most 30 s), then clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Time>,
    /// The uninstall clean-up this node's agent has done (the value of the
    /// `tideway.io/cleanup` annotation it was asked with): it removed every rule, table and
    /// virtual server it programmed and programs nothing more until it restarts without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaned_up: Option<String>,
    /// The agent's release (`0.2.0`). Absent: an agent before 0.2.0, which did not report its
    /// graceful stops either; while such agents run (an upgrade from 0.1.x rolling), the
    /// operator keeps a node's addresses for its hand-over time whenever its agent goes away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
}

/// `status.bgp`: the node's BGP sessions and advertisements.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeBgpStatus {
    /// Sessions configured.
    #[serde(default)]
    pub sessions: i64,
    /// Of which established.
    #[serde(default)]
    pub established: i64,
    /// Prefixes advertised to some peer.
    #[serde(default)]
    pub prefixes: i64,
    /// Why FRR does not run the node's decision, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What in the BGP objects cannot be done as written, for this node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

fn time(t: std::time::SystemTime) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(t).ok().map(Time)
}

/// The object an agent applies for `state`, owned by its Node (`node_uid`) so it goes with it.
pub fn node_proxy_state(state: &CoreState, node_uid: Option<&str>) -> NodeProxyState {
    let mut obj = NodeProxyState::new(&state.node, NodeProxyStateSpec { node_name: state.node.clone() });
    obj.metadata = ObjectMeta {
        name: Some(state.node.clone()),
        owner_references: node_uid.map(|uid| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: state.node.clone(),
                uid: uid.to_string(),
                ..Default::default()
            }]
        }),
        ..Default::default()
    };
    obj.status = Some(node_proxy_state_status(state));
    obj
}

/// The status an agent reports for `state`.
pub fn node_proxy_state_status(state: &CoreState) -> NodeProxyStateStatus {
    NodeProxyStateStatus {
        mode: state.mode.map(|m| m.to_string()),
        proxy_config: state.proxy_config.clone(),
        proxy_config_generation: state.proxy_config_generation,
        ready: state.ready,
        last_sync_time: state.last_sync.and_then(time),
        last_sync_duration_seconds: state.last_sync_duration.map(|d| d.as_secs_f64()),
        service_ports: state.service_ports as i64,
        endpoints: state.endpoints as i64,
        rules: state.rules as i64,
        drift_repairs: state.drift_repairs as i64,
        last_error: state.last_error.clone(),
        programmed_resource_version: state.programmed_version.map(|v| v.to_string()),
        announcing: state.announcing.iter().map(ToString::to_string).collect(),
        invalid_objects: state.invalid_objects.clone(),
        missing_interfaces: state.missing_interfaces.clone(),
        unset_sysctls: state.unset_sysctls.clone(),
        listener_conflicts: state.listener_conflicts.clone(),
        stopped_at: state.stopped_at.and_then(time),
        cleaned_up: state.cleaned_up.clone(),
        agent_version: state.agent_version.clone(),
        bgp: state.bgp.as_ref().map(|b| NodeBgpStatus {
            sessions: i64::from(b.sessions),
            established: i64::from(b.established),
            prefixes: i64::from(b.prefixes),
            last_error: b.last_error.clone(),
            conflicts: b.conflicts.clone(),
        }),
    }
}

/// Reads a report back (operator, DNS). An object without status is a node whose agent has
/// not reported yet.
pub fn node_state_from(obj: &NodeProxyState) -> Result<CoreState, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("NodeProxyState", None, &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let st = obj.status.clone().unwrap_or_default();
    let mode = st
        .mode
        .as_deref()
        .map(|m| m.parse::<ProxyMode>().map_err(|e| cx.err("status.mode", e.to_string())))
        .transpose()?;
    let programmed_version = st
        .programmed_resource_version
        .as_deref()
        .map(|v| {
            v.parse::<u64>().map_err(|_| cx.err("status.programmedResourceVersion", "expected an integer"))
        })
        .transpose()?;
    let mut announcing = Vec::new();
    for (i, ip) in st.announcing.iter().enumerate() {
        announcing.push(cx.ip(format!("status.announcing[{i}]"), ip)?);
    }
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(CoreState {
        node: obj.spec.node_name.clone().if_empty(name),
        mode,
        proxy_config: st.proxy_config,
        proxy_config_generation: st.proxy_config_generation,
        ready: st.ready,
        last_sync: st.last_sync_time.map(|t| std::time::SystemTime::from(t.0)),
        last_sync_duration: st.last_sync_duration_seconds.and_then(|s| Duration::try_from_secs_f64(s).ok()),
        service_ports: count(st.service_ports),
        endpoints: count(st.endpoints),
        rules: count(st.rules),
        drift_repairs: count(st.drift_repairs),
        last_error: st.last_error,
        programmed_version,
        announcing,
        invalid_objects: st.invalid_objects,
        missing_interfaces: st.missing_interfaces,
        unset_sysctls: st.unset_sysctls,
        listener_conflicts: st.listener_conflicts,
        stopped_at: st.stopped_at.map(|t| std::time::SystemTime::from(t.0)),
        cleaned_up: st.cleaned_up,
        agent_version: st.agent_version,
        bgp: st.bgp.map(|b| BgpReport {
            sessions: count32(b.sessions),
            established: count32(b.established),
            prefixes: count32(b.prefixes),
            last_error: b.last_error,
            conflicts: b.conflicts,
        }),
    })
}

fn count32(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(if v < 0 { 0 } else { u32::MAX })
}

trait IfEmpty {
    fn if_empty(self, other: String) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, other: String) -> String {
        if self.is_empty() { other } else { self }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    #[test]
    fn reports_round_trip() {
        let state = CoreState {
            node: "node-a".into(),
            mode: Some(ProxyMode::Iptables),
            proxy_config: Some("default".into()),
            proxy_config_generation: Some(3),
            ready: true,
            last_sync: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            last_sync_duration: Some(Duration::from_millis(12)),
            service_ports: 4,
            endpoints: 9,
            rules: 120,
            drift_repairs: 1,
            last_error: None,
            programmed_version: Some(1_234),
            announcing: vec!["172.18.255.200".parse().unwrap()],
            invalid_objects: vec!["ProxyConfig default: spec.syncPeriod: must be at most 24h".into()],
            missing_interfaces: vec!["vlan100".into()],
            unset_sysctls: vec!["net.ipv4.conf.all.route_localnet=1: Read-only file system".into()],
            listener_conflicts: vec!["0.0.0.0:10256: Address in use (os error 98)".into()],
            stopped_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_100)),
            cleaned_up: Some("7".into()),
            agent_version: Some("0.2.0".into()),
            bgp: Some(BgpReport {
                sessions: 2,
                established: 1,
                prefixes: 5,
                last_error: Some("frr-reload.py: exit 1".into()),
                conflicts: vec!["peer b asks for myASN 65000".into()],
            }),
        };
        let obj = node_proxy_state(&state, Some("uid-1"));
        let json = serde_json::to_value(&obj).unwrap();
        assert_eq!(json["status"]["lastSyncTime"], "2023-11-14T22:13:20Z");
        assert_eq!(json["status"]["programmedResourceVersion"], "1234");
        assert_eq!(json["status"]["bgp"]["established"], 1);
        assert_eq!(json["status"]["listenerConflicts"][0], "0.0.0.0:10256: Address in use (os error 98)");
        assert_eq!(json["status"]["stoppedAt"], "2023-11-14T22:15:00Z");
        assert_eq!(json["status"]["cleanedUp"], "7");
        assert_eq!(json["status"]["agentVersion"], "0.2.0");
        assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(
            json["status"]["invalidObjects"][0],
            "ProxyConfig default: spec.syncPeriod: must be at most 24h"
        );
        let back = node_state_from(&serde_json::from_value(json).unwrap()).unwrap();
        assert_eq!(back, state);
    }
}

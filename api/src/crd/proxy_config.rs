//! The `ProxyConfig` CRD: proxy mode and settings per node selector.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;

use super::schema;
use serde::{Deserialize, Serialize};
use tideway_core::config::{
    DetectLocal, IpvsSettings, NodePortAddresses, ProxyConfig as CoreConfig, ProxyMode, ProxySettings,
    UnknownName,
};
use tideway_core::operator::rollout::ConfigStatus;

use crate::duration::format_duration;
use crate::error::{ConvertError, Ctx};
use crate::validation::{
    self,
    DurationRange::{Positive, ZeroOrMore},
};

/// Proxy mode and settings for the nodes matched by `nodeSelector`. When several configs match a
/// node, the highest `priority` wins, then the most specific selector, then the name.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tideway.io",
    version = "v1alpha1",
    kind = "ProxyConfig",
    status = "ProxyConfigStatus",
    shortname = "pxc",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Selected","type":"integer","jsonPath":".status.nodesSelected"}"#,
    printcolumn = r#"{"name":"Programmed","type":"integer","jsonPath":".status.nodesProgrammed"}"#,
    printcolumn = r#"{"name":"Failing","type":"integer","jsonPath":".status.nodesFailing"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfigSpec {
    /// `nftables` (default), `iptables` or `ipvs`.
    // The schema only admits these values; the type stays a string so that an object written
    // before the schema existed still decodes and is reported instead of breaking the watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::proxy_mode")]
    pub mode: Option<String>,
    /// Nodes this config applies to (empty: every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Precedence when several configs match a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Pod network CIDRs (local-traffic detection and masquerade decisions).
    #[serde(default, rename = "clusterCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub cluster_cidrs: Vec<String>,
    /// How pod traffic is told from the rest: `ClusterCIDR` (default: sources in
    /// `clusterCIDRs`), `NodeCIDR` (sources in the node's `spec.podCIDRs`), `BridgeInterface`
    /// (arriving through `detectLocal.bridgeInterface`) or `InterfaceNamePrefix` (arriving
    /// through an interface whose name starts with `detectLocal.interfaceNamePrefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::detect_local_mode")]
    pub detect_local_mode: Option<String>,
    /// The interface of the `BridgeInterface` and `InterfaceNamePrefix` modes, as kube-proxy's
    /// `detectLocal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_local: Option<DetectLocalSpec>,
    /// Masquerade every connection to a ClusterIP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade_all: Option<bool>,
    /// Packet-mark bit requesting masquerade (default 14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade_bit: Option<i32>,
    /// `["primary"]`, `["all"]`, or CIDRs selecting node addresses for NodePorts. Empty:
    /// kube-proxy's default for the mode (`primary` in nftables mode; `all` in iptables mode,
    /// 127.0.0.1 included, and IPVS mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_port_addresses: Vec<String>,
    /// Serve NodePorts on 127.0.0.1 too, as kube-proxy's iptables mode does (default true;
    /// iptables mode and IPv4 only, when `nodePortAddresses` takes in loopback: `["all"]` or a
    /// CIDR holding 127.0.0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localhost_node_ports: Option<bool>,
    /// Full resync interval (default `30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<String>,
    /// Minimum interval between syncs (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sync_period: Option<String>,
    /// Only program Services labelled `service.kubernetes.io/service-proxy-name` with this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_proxy_name: Option<String>,
    /// IPVS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvs: Option<IpvsSpec>,
    /// Algorithm of Services without the `tideway.io/load-balancing` annotation: `random`,
    /// `maglev`, or (IPVS mode) an IPVS scheduler (default: random; `ipvs.scheduler` in IPVS
    /// mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::load_balancing")]
    pub load_balancing: Option<String>,
    /// Buckets of each Maglev Service port's lookup table: the largest prime below a power of
    /// two, 7 to 65521 (default 4093); a table grows only when its endpoints outgrow it (fewer
    /// than 10 buckets each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maglev_table_size: Option<i32>,
}

/// The interfaces of the local-traffic detector (kube-proxy's `detectLocal`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DetectLocalSpec {
    /// The bridge pods' packets arrive through (`detectLocalMode: BridgeInterface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_interface: Option<String>,
    /// The start of the names of pods' interfaces (`detectLocalMode: InterfaceNamePrefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_name_prefix: Option<String>,
}

/// IPVS settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpvsSpec {
    /// rr (default), wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq or mh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::ipvs_scheduler")]
    pub scheduler: Option<String>,
    /// Stop nodes answering ARP for service addresses.
    #[serde(default, rename = "strictARP", skip_serializing_if = "Option::is_none")]
    pub strict_arp: Option<bool>,
    /// IPVS TCP session timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_timeout: Option<String>,
    /// IPVS TCP FIN timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_fin_timeout: Option<String>,
    /// IPVS UDP timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<String>,
}

/// Observed state, rolled up by the operator from every node's `NodeProxyState`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfigStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes whose configuration this object is (selector match and highest precedence).
    #[serde(default)]
    pub nodes_selected: i32,
    /// Selected nodes whose agent reports this config's current generation programmed.
    #[serde(default)]
    pub nodes_programmed: i32,
    /// Selected nodes whose agent reports an error.
    #[serde(default)]
    pub nodes_failing: i32,
    /// Up to ten failing nodes and their errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<NodeFailure>,
    /// `Ready`, `Progressing`, `Degraded`, `SysctlsSet` (false names a node that could not
    /// set a kernel setting it needs) and, while two configs tie for a node, `Conflict`; with
    /// reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A node that could not program its configuration.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeFailure {
    /// Node name.
    pub node: String,
    /// The agent's last error.
    pub message: String,
}

/// The status the operator writes for `status`, keeping condition transition times from
/// `previous`.
pub fn proxy_config_status(status: &ConfigStatus, previous: &[Condition], now: &Time) -> ProxyConfigStatus {
    let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    ProxyConfigStatus {
        observed_generation: Some(status.observed_generation),
        nodes_selected: count(status.selected),
        nodes_programmed: count(status.programmed),
        nodes_failing: count(status.failing),
        failures: status
            .failures
            .iter()
            .map(|(node, message)| NodeFailure { node: node.clone(), message: message.clone() })
            .collect(),
        conditions: super::conditions::conditions(
            &status.conditions,
            previous,
            status.observed_generation,
            now,
        ),
    }
}

/// The annotation an uninstall sets on a ProxyConfig to have every agent remove what it
/// programmed; its value names the request (see [`tideway_core::config::cleanup_requested`]).
pub const CLEANUP_ANNOTATION: &str = "tideway.io/cleanup";

/// Converts a `ProxyConfig` into core settings; an invalid field names itself.
pub fn proxy_config(pc: &ProxyConfig) -> Result<CoreConfig, ConvertError> {
    let name = pc.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("ProxyConfig", None, &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    Ok(CoreConfig {
        name,
        generation: pc.metadata.generation.unwrap_or(0),
        node_selector: super::selector::selector(&cx, "spec.nodeSelector", pc.spec.node_selector.as_ref())?,
        priority: pc.spec.priority.unwrap_or(0),
        settings: settings_from_spec(&cx, &pc.spec)?,
        cleanup: pc.metadata.annotations.as_ref().and_then(|a| a.get(CLEANUP_ANNOTATION)).cloned(),
    })
}

/// Converts a spec into settings (also used for `--mode` style overrides).
fn settings_from_spec(cx: &Ctx, spec: &ProxyConfigSpec) -> Result<ProxySettings, ConvertError> {
    let mut s = ProxySettings::default();
    if let Some(mode) = &spec.mode {
        s.mode = mode.parse::<ProxyMode>().map_err(|e| cx.err("spec.mode", e.to_string()))?;
    }
    validation::max_items(cx, "spec.clusterCIDRs", &spec.cluster_cidrs, validation::MAX_CLUSTER_CIDRS)?;
    for (i, c) in spec.cluster_cidrs.iter().enumerate() {
        s.cluster_cidrs.push(cx.cidr(format!("spec.clusterCIDRs[{i}]"), c)?);
    }
    validation::one_per_family(cx, "spec.clusterCIDRs", &s.cluster_cidrs)?;
    s.detect_local = detect_local(cx, spec)?;
    s.masquerade_all = spec.masquerade_all.unwrap_or(false);
    if let Some(bit) = spec.masquerade_bit {
        s.masquerade_bit = u8::try_from(bit)
            .ok()
            .filter(|b| i32::from(*b) <= validation::MASQUERADE_BIT_MAX)
            .ok_or_else(|| {
                cx.err(
                    "spec.masqueradeBit",
                    format!("{bit} is out of range 0-{}", validation::MASQUERADE_BIT_MAX),
                )
            })?;
    }
    s.localhost_node_ports = spec.localhost_node_ports.unwrap_or(true);
    validation::max_items(
        cx,
        "spec.nodePortAddresses",
        &spec.node_port_addresses,
        validation::MAX_NODE_PORT_ADDRESSES,
    )?;
    s.node_port_addresses = match spec.node_port_addresses.as_slice() {
        [] => NodePortAddresses::Unset,
        [one] if one == "primary" => NodePortAddresses::Primary,
        [one] if one == "all" => NodePortAddresses::All,
        list => {
            let mut cidrs = Vec::new();
            for (i, c) in list.iter().enumerate() {
                let field = format!("spec.nodePortAddresses[{i}]");
                if c == "primary" || c == "all" {
                    return Err(cx.err(field, format!("{c:?} stands alone: no other entry may follow it")));
                }
                cidrs.push(cx.cidr(field, c)?);
            }
            NodePortAddresses::Cidrs(cidrs)
        }
    };
    let dur = |field: &str, v: &Option<String>, range, default| -> Result<_, ConvertError> {
        v.as_deref()
            .map(|d| validation::duration(cx, field, d, range))
            .transpose()
            .map(|d| d.unwrap_or(default))
    };
    s.sync_period = dur("spec.syncPeriod", &spec.sync_period, Positive, s.sync_period)?;
    s.min_sync_period = dur("spec.minSyncPeriod", &spec.min_sync_period, ZeroOrMore, s.min_sync_period)?;
    if s.min_sync_period > s.sync_period {
        return Err(cx.err(
            "spec.minSyncPeriod",
            format!(
                "{} is longer than spec.syncPeriod {}",
                format_duration(s.min_sync_period),
                format_duration(s.sync_period)
            ),
        ));
    }
    if let Some(name) = &spec.service_proxy_name {
        validation::label_value(cx, "spec.serviceProxyName", name)?;
    }
    s.service_proxy_name = spec.service_proxy_name.clone().filter(|n| !n.is_empty());
    if let Some(ipvs) = &spec.ipvs {
        let zero = std::time::Duration::ZERO;
        s.ipvs = IpvsSettings {
            scheduler: ipvs
                .scheduler
                .as_deref()
                .unwrap_or("rr")
                .parse()
                .map_err(|e: UnknownName| cx.err("spec.ipvs.scheduler", e.to_string()))?,
            strict_arp: ipvs.strict_arp.unwrap_or(false),
            tcp_timeout: dur("spec.ipvs.tcpTimeout", &ipvs.tcp_timeout, ZeroOrMore, zero)?,
            tcp_fin_timeout: dur("spec.ipvs.tcpFinTimeout", &ipvs.tcp_fin_timeout, ZeroOrMore, zero)?,
            udp_timeout: dur("spec.ipvs.udpTimeout", &ipvs.udp_timeout, ZeroOrMore, zero)?,
        };
    }
    if let Some(lb) = spec.load_balancing.as_deref().filter(|v| !v.is_empty()) {
        s.load_balancing =
            Some(lb.parse().map_err(|e: UnknownName| cx.err("spec.loadBalancing", e.to_string()))?);
    }
    if let Some(size) = spec.maglev_table_size {
        let sizes = &tideway_core::maglev::TABLE_SIZES;
        s.maglev_table_size = u32::try_from(size).ok().filter(|n| sizes.contains(n)).ok_or_else(|| {
            let listed = sizes.map(|n| n.to_string()).join(", ");
            cx.err("spec.maglevTableSize", format!("{size} is not one of {listed}"))
        })?;
    }
    Ok(s)
}

/// `detectLocalMode` with the interface its mode needs.
fn detect_local(cx: &Ctx, spec: &ProxyConfigSpec) -> Result<DetectLocal, ConvertError> {
    let interfaces = spec.detect_local.clone().unwrap_or_default();
    for (field, name) in [
        ("bridgeInterface", &interfaces.bridge_interface),
        ("interfaceNamePrefix", &interfaces.interface_name_prefix),
    ] {
        if let Some(name) = name {
            validation::interface(cx, &format!("spec.detectLocal.{field}"), name)?;
        }
    }
    let interface = |field: &str, value: Option<String>, mode: &str| {
        value.ok_or_else(|| cx.err("spec.detectLocalMode", format!("{mode} needs detectLocal.{field}")))
    };
    Ok(match spec.detect_local_mode.as_deref() {
        None | Some("ClusterCIDR") => DetectLocal::ClusterCidr,
        Some("NodeCIDR") => DetectLocal::NodeCidr,
        Some(m @ "BridgeInterface") => {
            DetectLocal::BridgeInterface(interface("bridgeInterface", interfaces.bridge_interface, m)?)
        }
        Some(m @ "InterfaceNamePrefix") => DetectLocal::InterfaceNamePrefix(interface(
            "interfaceNamePrefix",
            interfaces.interface_name_prefix,
            m,
        )?),
        Some(other) => {
            return Err(cx.err(
                "spec.detectLocalMode",
                format!(
                    "unknown mode {other:?} (expected ClusterCIDR, NodeCIDR, BridgeInterface or \
                     InterfaceNamePrefix)"
                ),
            ));
        }
    })
}

/// The spec that converts to `c` (what the nodes run, spelled as a user writes it): the
/// inverse of [`proxy_config`] for the REST API.
pub fn spec_of(c: &CoreConfig) -> ProxyConfigSpec {
    let s = &c.settings;
    let node_selector = super::selector::selector_object(&c.node_selector);
    let node_port_addresses = match &s.node_port_addresses {
        NodePortAddresses::Unset => vec![],
        NodePortAddresses::Primary => vec!["primary".into()],
        NodePortAddresses::All => vec!["all".into()],
        NodePortAddresses::Cidrs(cidrs) => cidrs.iter().map(ToString::to_string).collect(),
    };
    let fmt = |d: std::time::Duration| format_duration(d);
    ProxyConfigSpec {
        mode: Some(s.mode.to_string()),
        node_selector,
        priority: Some(c.priority),
        cluster_cidrs: s.cluster_cidrs.iter().map(ToString::to_string).collect(),
        detect_local_mode: Some(s.detect_local.mode().into()),
        detect_local: match &s.detect_local {
            DetectLocal::BridgeInterface(name) => {
                Some(DetectLocalSpec { bridge_interface: Some(name.clone()), ..DetectLocalSpec::default() })
            }
            DetectLocal::InterfaceNamePrefix(name) => Some(DetectLocalSpec {
                interface_name_prefix: Some(name.clone()),
                ..DetectLocalSpec::default()
            }),
            DetectLocal::ClusterCidr | DetectLocal::NodeCidr => None,
        },
        masquerade_all: Some(s.masquerade_all),
        masquerade_bit: Some(i32::from(s.masquerade_bit)),
        node_port_addresses,
        localhost_node_ports: Some(s.localhost_node_ports),
        sync_period: Some(fmt(s.sync_period)),
        min_sync_period: Some(fmt(s.min_sync_period)),
        service_proxy_name: s.service_proxy_name.clone(),
        ipvs: Some(IpvsSpec {
            scheduler: Some(format!("{:?}", s.ipvs.scheduler).to_ascii_lowercase()),
            strict_arp: Some(s.ipvs.strict_arp),
            tcp_timeout: Some(fmt(s.ipvs.tcp_timeout)),
            tcp_fin_timeout: Some(fmt(s.ipvs.tcp_fin_timeout)),
            udp_timeout: Some(fmt(s.ipvs.udp_timeout)),
        }),
        load_balancing: s.load_balancing.map(|lb| lb.to_string()),
        maglev_table_size: i32::try_from(s.maglev_table_size).ok(),
    }
}

#[cfg(test)]
mod spec_tests {
    use super::*;

    #[test]
    fn a_spec_from_settings_converts_back_to_them() {
        let yaml = "apiVersion: tideway.io/v1alpha1\nkind: ProxyConfig\nmetadata: {name: edge, generation: 4}\n\
                    spec:\n  mode: ipvs\n  priority: 5\n  nodeSelector:\n    matchLabels: {role: edge}\n    \
                    matchExpressions: [{key: zone, operator: In, values: [a, b]}, {key: gpu, operator: DoesNotExist}]\n  \
                    clusterCIDRs: [10.244.0.0/16]\n  detectLocalMode: NodeCIDR\n  masqueradeAll: true\n  masqueradeBit: 12\n  \
                    nodePortAddresses: [192.168.0.0/24]\n  localhostNodePorts: false\n  syncPeriod: 1m30s\n  minSyncPeriod: 250ms\n  \
                    serviceProxyName: tideway\n  ipvs: {scheduler: wlc, strictARP: true, tcpTimeout: 15m, udpTimeout: 5s}\n  \
                    loadBalancing: maglev\n  maglevTableSize: 251\n";
        let pc: ProxyConfig = serde_saphyr::from_str(yaml).expect("yaml");
        let core = proxy_config(&pc).expect("valid");
        let again = ProxyConfig::new("edge", spec_of(&core));
        let mut back = proxy_config(&again).expect("the spec converts");
        back.generation = core.generation;
        assert_eq!(back, core);
        let defaults = proxy_config(&ProxyConfig::new("d", ProxyConfigSpec::default())).expect("valid");
        assert_eq!(proxy_config(&ProxyConfig::new("d", spec_of(&defaults))).expect("converts"), defaults);
    }

    #[test]
    fn maglev_table_sizes_are_the_listed_primes() {
        let with = |size: i32| {
            let spec = ProxyConfigSpec { maglev_table_size: Some(size), ..Default::default() };
            proxy_config(&ProxyConfig::new("m", spec))
        };
        assert_eq!(with(251).expect("a prime").settings.maglev_table_size, 251);
        for bad in [4096, 5, 65_537, 4091] {
            let e = with(bad).expect_err("refused").to_string();
            assert!(e.contains("spec.maglevTableSize") && e.contains(&bad.to_string()), "{e}");
        }
        let spec = ProxyConfigSpec { load_balancing: Some("fastest".into()), ..Default::default() };
        let e = proxy_config(&ProxyConfig::new("m", spec)).expect_err("refused").to_string();
        assert!(e.contains("spec.loadBalancing"), "{e}");
    }
}

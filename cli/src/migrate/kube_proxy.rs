//! kube-proxy's `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`, as a file or
//! inside kubeadm's `kube-system/kube-proxy` ConfigMap under `config.conf`) to a `ProxyConfig`.
//!
//! Every field is walked: a field left at its zero value means kube-proxy's default, which the
//! `ProxyConfig` default already is for the mode (see the chart README's table); a set field
//! is carried or named in the table with the reason. The mode is always written, because
//! kube-proxy's default (`iptables`) is not Tideway's (`nftables`).

use serde_json::Value;
use tideway_api::crd::{IpvsSpec, ProxyConfig, ProxyConfigSpec};

use super::error::MigrateError;
use super::left::Left;
use super::parse::{leaves, parse_yaml};
use super::values::Values;

const SOURCE: &str = "kube-proxy";

/// What a kube-proxy configuration becomes.
#[derive(Debug)]
pub(crate) struct Converted {
    /// The `default` ProxyConfig.
    pub(crate) config: ProxyConfig,
    /// Chart values (the chart's own `default` ProxyConfig off; agent arguments).
    pub(crate) values: Values,
    /// Settings not carried.
    pub(crate) left: Vec<Left>,
}

/// The configuration object inside `text`: the document itself, or a ConfigMap's `config.conf`.
fn configuration(text: &str) -> Result<Value, MigrateError> {
    let v = parse_yaml("kube-proxy configuration", text)?;
    match v["kind"].as_str() {
        Some("KubeProxyConfiguration") => Ok(v),
        Some("ConfigMap") => {
            let inner = v["data"]["config.conf"].as_str().ok_or_else(|| {
                MigrateError::Input("kube-proxy ConfigMap".into(), "has no data.config.conf".into())
            })?;
            configuration(inner)
        }
        other => Err(MigrateError::Input(
            "kube-proxy configuration".into(),
            format!("kind {other:?}: expected KubeProxyConfiguration or its ConfigMap"),
        )),
    }
}

/// Converts `text`.
pub(crate) fn convert(text: &str) -> Result<Converted, MigrateError> {
    let v = configuration(text)?;
    let mode = match v["mode"].as_str().unwrap_or("") {
        "" | "iptables" => "iptables",
        "ipvs" => "ipvs",
        "nftables" => "nftables",
        other => {
            return Err(MigrateError::Input(
                "kube-proxy configuration".into(),
                format!("mode {other:?} has no Linux equivalent"),
            ));
        }
    };
    // kube-proxy reads masquerading from `iptables` in IPVS mode too, sync periods from the
    // mode's own section.
    let masq = if mode == "nftables" { "nftables" } else { "iptables" };
    let mut spec = ProxyConfigSpec { mode: Some(mode.into()), ..ProxyConfigSpec::default() };
    let mut ipvs = IpvsSpec::default();
    let mut values = Values::default();
    let mut left = Vec::new();
    let mut leave = |path: &str, value: &Value, why: &str| {
        left.push(Left::new(SOURCE, path, value, why));
    };
    for (path, owned) in leaves(&v) {
        let value = &owned;
        let s = || value.as_str().map(str::to_string);
        let section = path.split('.').next().unwrap_or_default();
        match path.as_str() {
            "apiVersion" | "kind" | "mode" => {}
            "clusterCIDR" => {
                spec.cluster_cidrs =
                    s().unwrap_or_default().split(',').map(|c| c.trim().to_string()).collect();
            }
            "detectLocalMode" => match value.as_str() {
                Some(m @ ("ClusterCIDR" | "NodeCIDR" | "BridgeInterface" | "InterfaceNamePrefix")) => {
                    spec.detect_local_mode = Some(m.into())
                }
                // kube-proxy's empty mode is ClusterCIDR, Tideway's default too.
                Some("") => {}
                _ => leave(
                    &path,
                    value,
                    "Tideway tells local traffic by ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix",
                ),
            },
            "detectLocal.bridgeInterface" => {
                if let Some(name) = s().filter(|i| !i.is_empty()) {
                    spec.detect_local.get_or_insert_default().bridge_interface = Some(name);
                }
            }
            "detectLocal.interfaceNamePrefix" => {
                if let Some(prefix) = s().filter(|i| !i.is_empty()) {
                    spec.detect_local.get_or_insert_default().interface_name_prefix = Some(prefix);
                }
            }
            p if p.starts_with("nodePortAddresses") => {
                spec.node_port_addresses.push(s().unwrap_or_default());
            }
            p if p == format!("{masq}.masqueradeAll") => spec.masquerade_all = value.as_bool(),
            p if p == format!("{masq}.masqueradeBit") => {
                spec.masquerade_bit = value.as_i64().and_then(|b| i32::try_from(b).ok())
            }
            "iptables.localhostNodePorts" if mode == "iptables" => {
                spec.localhost_node_ports = value.as_bool()
            }
            p if p == format!("{mode}.syncPeriod") || p == "syncPeriod" => spec.sync_period = s(),
            p if p == format!("{mode}.minSyncPeriod") || p == "minSyncPeriod" => spec.min_sync_period = s(),
            "ipvs.scheduler" if mode == "ipvs" => ipvs.scheduler = s(),
            "ipvs.strictARP" if mode == "ipvs" => ipvs.strict_arp = value.as_bool(),
            "ipvs.tcpTimeout" if mode == "ipvs" => ipvs.tcp_timeout = s(),
            "ipvs.tcpFinTimeout" if mode == "ipvs" => ipvs.tcp_fin_timeout = s(),
            "ipvs.udpTimeout" if mode == "ipvs" => ipvs.udp_timeout = s(),
            "bindAddress" if value == "0.0.0.0" => {}
            "healthzBindAddress" if value != "0.0.0.0:10256" => {
                values.agent_args.push(format!("--healthz-bind-address={}", s().unwrap_or_default()))
            }
            "metricsBindAddress" if value != "127.0.0.1:10249" => {
                values.agent_args.push(format!("--metrics-bind-address={}", s().unwrap_or_default()))
            }
            "healthzBindAddress" | "metricsBindAddress" => {}
            _ if ["iptables", "ipvs", "nftables"].contains(&section) && section != mode => leave(
                &path,
                value,
                &format!("applies to {section} mode; this configuration runs {mode} mode"),
            ),
            _ if section == "conntrack" => leave(
                &path,
                value,
                "Tideway does not tune conntrack: set the net.netfilter.nf_conntrack_* sysctls on the nodes",
            ),
            _ if section == "clientConnection" => {
                leave(&path, value, "the agent talks to the API server with its ServiceAccount")
            }
            "hostnameOverride" => {
                leave(&path, value, "the agent takes its node name from NODE_NAME (the chart sets it)")
            }
            _ if section == "featureGates" => leave(&path, value, "Tideway has no feature gates"),
            "ipvs.excludeCIDRs" => {
                leave(&path, value, "Tideway never clears IPVS virtual servers it does not own")
            }
            _ => leave(&path, value, "no equivalent in Tideway"),
        }
    }
    if v["conntrack"]["maxPerCore"].is_null() {
        left.push(Left {
            source: SOURCE,
            setting: "conntrack (unset)".into(),
            value: "kube-proxy's defaults".into(),
            why: "kube-proxy raises nf_conntrack_max to max(32768 x CPUs, 131072) and sets the TCP \
                  established (24h) and close-wait (1h) timeouts; Tideway leaves conntrack as the node has it"
                .into(),
        });
    }
    if ipvs != IpvsSpec::default() {
        spec.ipvs = Some(ipvs);
    }
    let config = ProxyConfig::new("default", spec);
    tideway_api::crd::proxy_config(&config)
        .map_err(|e| MigrateError::Input("kube-proxy configuration".into(), e.to_string()))?;
    values.proxy_config_create = Some(false);
    left.sort_by(|a, b| a.setting.cmp(&b.setting));
    Ok(Converted { config, values, left })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubeadm's `kube-proxy` ConfigMap for `--pod-network-cidr 10.244.0.0/16`, zero values
    /// and all.
    const KUBEADM: &str = include_str!("../../tests/fixtures/kube-proxy-configmap.yaml");

    fn rows(c: &Converted) -> Vec<(&str, &str)> {
        c.left.iter().map(|l| (l.setting.as_str(), l.value.as_str())).collect()
    }

    #[test]
    fn kubeadms_default_becomes_iptables_mode_with_its_cluster_cidr() {
        let c = convert(KUBEADM).expect("converts");
        let s = &c.config.spec;
        assert_eq!(s.mode.as_deref(), Some("iptables"), "kube-proxy's default mode");
        assert_eq!(s.cluster_cidrs, ["10.244.0.0/16"]);
        assert!(s.node_port_addresses.is_empty() && s.sync_period.is_none() && s.masquerade_bit.is_none());
        assert_eq!(c.values.proxy_config_create, Some(false));
        assert!(c.values.agent_args.is_empty());
        assert_eq!(
            rows(&c),
            [
                ("clientConnection.kubeconfig", "/var/lib/kube-proxy/kubeconfig.conf"),
                ("conntrack (unset)", "kube-proxy's defaults")
            ],
            "only what differs by default"
        );
    }

    #[test]
    fn set_fields_are_carried_or_named() {
        let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n\
            clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\ndetectLocalMode: BridgeInterface\n\
            detectLocal: {bridgeInterface: cbr0}\nnodePortAddresses: [primary]\n\
            iptables: {masqueradeAll: true, masqueradeBit: 12, syncPeriod: 10s}\n\
            ipvs: {scheduler: lc, strictARP: true, syncPeriod: 15s, minSyncPeriod: 2s, excludeCIDRs: [10.0.0.0/8]}\n\
            nftables: {masqueradeBit: 3}\nconntrack: {maxPerCore: 0, tcpBeLiberal: true}\n\
            metricsBindAddress: 0.0.0.0:10249\nfeatureGates: {SomeGate: true}\n";
        let c = convert(text).expect("converts");
        let s = &c.config.spec;
        assert_eq!(s.mode.as_deref(), Some("ipvs"));
        assert_eq!(s.cluster_cidrs, ["10.244.0.0/16", "fd00:10:244::/56"]);
        assert_eq!((s.masquerade_all, s.masquerade_bit), (Some(true), Some(12)), "IPVS mode reads iptables'");
        assert_eq!((s.sync_period.as_deref(), s.min_sync_period.as_deref()), (Some("15s"), Some("2s")));
        assert_eq!(s.node_port_addresses, ["primary"]);
        assert_eq!(s.detect_local_mode.as_deref(), Some("BridgeInterface"));
        let detect = s.detect_local.as_ref().expect("detectLocal");
        assert_eq!(
            (detect.bridge_interface.as_deref(), detect.interface_name_prefix.as_deref()),
            (Some("cbr0"), None)
        );
        let ipvs = s.ipvs.as_ref().expect("ipvs");
        assert_eq!((ipvs.scheduler.as_deref(), ipvs.strict_arp), (Some("lc"), Some(true)));
        assert_eq!(c.values.agent_args, ["--metrics-bind-address=0.0.0.0:10249"]);
        let names: Vec<&str> = c.left.iter().map(|l| l.setting.as_str()).collect();
        assert_eq!(
            names,
            [
                "conntrack.tcpBeLiberal",
                "featureGates.SomeGate",
                "iptables.syncPeriod",
                "ipvs.excludeCIDRs[0]",
                "nftables.masqueradeBit"
            ]
        );
        assert!(c.left[2].why.contains("applies to iptables mode"), "{:?}", c.left[2]);
    }

    #[test]
    fn bad_input_is_named() {
        let e = convert("kind: Deployment\n").unwrap_err().to_string();
        assert!(e.contains("expected KubeProxyConfiguration"), "{e}");
        let e = convert("kind: KubeProxyConfiguration\nmode: kernelspace\n").unwrap_err().to_string();
        assert!(e.contains("kernelspace"), "{e}");
        let e =
            convert("kind: KubeProxyConfiguration\niptables: {masqueradeBit: 40}\n").unwrap_err().to_string();
        assert!(e.contains("spec.masqueradeBit"), "{e}");
    }
}

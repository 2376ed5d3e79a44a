//! `v1/Service` -> [`Service`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tideway_core::model::{
    ANNOTATION_LOAD_BALANCING, DEFAULT_AFFINITY_TIMEOUT, IpMode, LOAD_BALANCER_ANNOTATIONS,
    LoadBalancerIngress, LoadBalancerRequest, Service, ServiceCidr, ServiceName, ServicePort, ServiceType,
    SessionAffinity, TargetPort, TrafficDistribution, TrafficPolicy,
};
use tideway_core::net::IpFamily;

use crate::error::{ConvertError, Ctx};

/// Converts a ServiceCIDR: at most one range per family, as the API server allows.
pub fn service_cidr(c: &k8s_openapi::api::networking::v1::ServiceCIDR) -> Result<ServiceCidr, ConvertError> {
    let name = c.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("ServiceCIDR", None, &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let listed = c.spec.as_ref().and_then(|s| s.cidrs.clone()).unwrap_or_default();
    let cidrs = listed
        .iter()
        .enumerate()
        .map(|(i, text)| cx.cidr(format!("spec.cidrs[{i}]"), text))
        .collect::<Result<Vec<_>, _>>()?;
    crate::validation::one_per_family(&cx, "spec.cidrs", &cidrs)?;
    Ok(ServiceCidr { name, cidrs })
}

/// Converts a Service, validating every field the planner and DNS rely on.
pub fn service(svc: &k8s::Service) -> Result<Service, ConvertError> {
    let meta = &svc.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = Ctx::new("Service", Some(&namespace), &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let spec = svc.spec.clone().unwrap_or_default();
    let service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => ServiceType::ExternalName,
        Some(other) => {
            return Err(cx.err(
                "spec.type",
                format!(
                    "unknown type {other:?} (expected ClusterIP, NodePort, LoadBalancer or ExternalName)"
                ),
            ));
        }
    };
    let mut out = Service::new(ServiceName::new(namespace, name));
    out.service_type = service_type;
    out.labels = meta.labels.clone().unwrap_or_default();

    // ClusterIPs: `clusterIPs` wins, `clusterIP` is its first entry.
    let (field, raw): (&str, Vec<String>) = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ("spec.clusterIPs", ips.clone()),
        (_, Some(ip)) if !ip.is_empty() => ("spec.clusterIP", vec![ip.clone()]),
        _ => ("spec.clusterIP", vec![]),
    };
    if raw.first().is_some_and(|ip| ip == "None") {
        out.headless = true;
    } else if service_type != ServiceType::ExternalName {
        let mut families = BTreeSet::new();
        // Sized exactly, as every list a Service keeps: 100,000 Services hold them all.
        out.cluster_ips.reserve_exact(raw.len());
        for (i, ip) in raw.iter().enumerate() {
            let f = if raw.len() > 1 { format!("{field}[{i}]") } else { field.to_string() };
            let addr = cx.ip(&f, ip)?;
            if !families.insert(IpFamily::of(&addr)) {
                return Err(cx.err(f, "more than one ClusterIP of the same family"));
            }
            out.cluster_ips.push(addr);
        }
    }

    out.ports.reserve_exact(spec.ports.as_ref().map_or(0, Vec::len));
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let f = |x: &str| format!("spec.ports[{i}].{x}");
        let port = cx.port(f("port"), p.port)?;
        let node_port = p.node_port.map(|np| cx.port(f("nodePort"), np)).transpose()?;
        let target_port = match &p.target_port {
            None => None,
            Some(IntOrString::Int(n)) => Some(TargetPort::Number(cx.port(f("targetPort"), *n)?)),
            Some(IntOrString::String(s)) => Some(TargetPort::Name(s.clone())),
        };
        out.ports.push(ServicePort {
            name: p.name.clone().unwrap_or_default(),
            protocol: cx.protocol(f("protocol"), p.protocol.as_deref())?,
            port,
            target_port,
            node_port,
        });
    }
    for (i, ip) in spec.external_ips.iter().flatten().enumerate() {
        out.external_ips.push(cx.ip(format!("spec.externalIPs[{i}]"), ip)?);
    }
    for (i, range) in spec.load_balancer_source_ranges.iter().flatten().enumerate() {
        out.load_balancer_source_ranges.push(cx.cidr(format!("spec.loadBalancerSourceRanges[{i}]"), range)?);
    }
    let ingress =
        svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        let ip = ing
            .ip
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|ip| cx.ip(format!("status.loadBalancer.ingress[{i}].ip"), ip))
            .transpose()?;
        let ip_mode = match ing.ip_mode.as_deref() {
            None | Some("VIP") => IpMode::Vip,
            Some("Proxy") => IpMode::Proxy,
            Some(other) => {
                return Err(cx.err(
                    format!("status.loadBalancer.ingress[{i}].ipMode"),
                    format!("unknown ipMode {other:?} (expected VIP or Proxy)"),
                ));
            }
        };
        out.load_balancer_ingress.push(LoadBalancerIngress { ip, hostname: ing.hostname.clone(), ip_mode });
    }
    out.session_affinity = match spec.session_affinity.as_deref() {
        None | Some("None") => SessionAffinity::None,
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .unwrap_or(DEFAULT_AFFINITY_TIMEOUT as i32);
            if !(1..=86_400).contains(&timeout) {
                return Err(cx.err(
                    "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                    format!("{timeout} is out of range 1-86400"),
                ));
            }
            SessionAffinity::ClientIp { timeout_seconds: timeout as u32 }
        }
        Some(other) => {
            return Err(cx.err(
                "spec.sessionAffinity",
                format!("unknown value {other:?} (expected None or ClientIP)"),
            ));
        }
    };
    out.external_traffic_policy =
        policy(&cx, "spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref())?;
    out.internal_traffic_policy =
        policy(&cx, "spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref())?;
    out.health_check_node_port =
        spec.health_check_node_port.map(|p| cx.port("spec.healthCheckNodePort", p)).transpose()?;
    out.traffic_distribution = spec.traffic_distribution.as_deref().map(|t| match t {
        "PreferClose" => TrafficDistribution::PreferClose,
        "PreferSameZone" => TrafficDistribution::PreferSameZone,
        "PreferSameNode" => TrafficDistribution::PreferSameNode,
        other => TrafficDistribution::Other(other.to_string()),
    });
    out.external_name = spec.external_name.clone().filter(|s| !s.is_empty());
    if service_type == ServiceType::ExternalName && out.external_name.is_none() {
        return Err(cx.err("spec.externalName", "is required for type ExternalName"));
    }
    out.publish_not_ready_addresses = spec.publish_not_ready_addresses.unwrap_or(false);
    out.generation = meta.generation.unwrap_or(0);
    out.resource_version = meta.resource_version.as_deref().and_then(|v| v.parse().ok());
    if service_type == ServiceType::LoadBalancer {
        out.load_balancer = Some(Box::new(load_balancer_request(svc, &spec)));
    }
    // Kept as written: what a node can do with it depends on its mode, decided by the planner.
    out.load_balancing = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOAD_BALANCING))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    Ok(out)
}

/// One request's annotation, in whichever spelling the Service uses ([`LOAD_BALANCER_ANNOTATIONS`]:
/// Tideway's, then MetalLB's two): the key and value used, and a conflict naming both keys when
/// two spellings carry different values.
fn spelled(
    annotations: Option<&BTreeMap<String, String>>,
    keys: &[&'static str; 3],
) -> (Option<(&'static str, String)>, Option<String>) {
    let present: Vec<(&'static str, String)> = keys
        .iter()
        .filter_map(|k| annotations.and_then(|a| a.get(*k)).map(|v| (*k, v.trim().to_string())))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let conflict = present.iter().skip(1).find(|(_, v)| *v != present[0].1).map(|(k, v)| {
        let (used, value) = &present[0];
        format!("annotations {used}={value:?} and {k}={v:?} disagree; {used} is used")
    });
    (present.into_iter().next(), conflict)
}

/// What the Service asks of the address allocator. An unreadable request is kept as an error
/// for the operator to report: proxies still program the Service.
fn load_balancer_request(svc: &k8s::Service, spec: &k8s::ServiceSpec) -> LoadBalancerRequest {
    let annotations = svc.metadata.annotations.as_ref();
    let [ips_keys, pool_keys, shared_keys] = &LOAD_BALANCER_ANNOTATIONS;
    let (ips, ips_conflict) = spelled(annotations, ips_keys);
    let (pool, pool_conflict) = spelled(annotations, pool_keys);
    let (shared, shared_conflict) = spelled(annotations, shared_keys);
    let mut req = LoadBalancerRequest {
        class: spec.load_balancer_class.clone().filter(|c| !c.is_empty()),
        pool: pool.map(|(_, v)| v),
        sharing_key: shared.map(|(_, v)| v),
        selector: spec.selector.clone().unwrap_or_default(),
        conflicts: [ips_conflict, pool_conflict, shared_conflict].into_iter().flatten().collect(),
        ..Default::default()
    };
    let mut wanted: Vec<(String, String)> = Vec::new();
    if let Some(ip) = spec.load_balancer_ip.as_deref().filter(|ip| !ip.is_empty()) {
        wanted.push(("spec.loadBalancerIP".into(), ip.to_string()));
    }
    if let Some((key, list)) = ips {
        let field = format!("metadata.annotations[{key}]");
        wanted.extend(
            list.split(',').filter(|s| !s.trim().is_empty()).map(|s| (field.clone(), s.trim().into())),
        );
    }
    for (field, value) in wanted {
        match value.parse() {
            Ok(ip) if !req.ips.contains(&ip) => req.ips.push(ip),
            Ok(_) => {}
            Err(_) => {
                req.error = Some(format!("{field}: {value:?} is not a valid IP address"));
                req.ips.clear();
                break;
            }
        }
    }
    req
}

fn policy(cx: &Ctx, field: &str, value: Option<&str>) -> Result<TrafficPolicy, ConvertError> {
    match value {
        None | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(other) => Err(cx.err(field, format!("unknown policy {other:?} (expected Cluster or Local)"))),
    }
}

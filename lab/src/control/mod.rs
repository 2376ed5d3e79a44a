//! The lab's control plane, pure: what the API server and the controllers would make of the lab
//! file (addresses, ports, EndpointSlices, node and pod status), merged with what components
//! wrote back (Service status, announcements, node reports, CRD status).
//!
//! ```text
//!  LabSpec + Allocations + Health (which agents and pods run)
//!     | build: allocate, add the cluster DNS, compute EndpointSlices
//!     v
//!  World { nodes, pods, hosts (the topology to build), objects (the API's view) }
//!     | publish(writes): + status.loadBalancer, L2Announcements, NodeProxyStates, CRD status
//!     | ResourceVersions::stamp: each object's resourceVersion, the next one when it changed
//!     v
//!  cluster file (every component reads it through the file source)
//! ```

mod alloc;
mod endpoints;
mod state;
mod versions;
pub mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

pub(crate) use alloc::in_net;
pub use alloc::{Allocations, ControlError, Plan};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use serde_json::{Value, json};
pub use state::{ContainerPortState, DNS_LABEL, DNS_POD, NodeState, PodState};
use tideway_api::crd::ProxyConfig;
pub use versions::ResourceVersions;
pub use writes::Writes;

use crate::spec::{LabHost, LabRouter, LabSpec, namespace};

/// Which agents and pod processes run (the runner says; a node is Ready while its agent runs).
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Nodes whose agent is not running.
    pub nodes_down: BTreeSet<String>,
    /// Pods whose servers listen on every port, (namespace, name): only they are ready (the
    /// DNS pod is ready from the start).
    pub pods_started: BTreeSet<(String, String)>,
}

/// The cluster the lab runs.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Nodes.
    pub nodes: Vec<NodeState>,
    /// Pods (the DNS pod included).
    pub pods: Vec<PodState>,
    /// Outside hosts.
    pub hosts: Vec<LabHost>,
    /// Routers upstream of the nodes.
    pub routers: Vec<LabRouter>,
    /// Services as allocated (ClusterIPs, NodePorts).
    pub services: Vec<Service>,
    /// The objects of the API's view, before writes are merged.
    pub objects: Vec<Value>,
    /// Ready endpoints of each Service: (namespace, name) -> count.
    pub ready_endpoints: BTreeMap<(String, String), usize>,
}

fn ip_of(s: &str, what: &str) -> Result<Ipv4Addr, ControlError> {
    s.parse().map_err(|_| ControlError::Invalid(format!("{what}: {s:?} is not an IPv4 address")))
}

fn to_value<T: serde::Serialize>(kind: &str, api: &str, obj: &T) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    v["kind"] = json!(kind);
    v["apiVersion"] = json!(api);
    v
}

/// The built-in cluster DNS: a pod on the first node and the kube-dns Service.
fn with_dns(spec: &LabSpec, plan: &Plan) -> (Vec<Pod>, Vec<Service>) {
    let mut pods = spec.pods.clone();
    let mut services = spec.services.clone();
    let has = |svcs: &[Service]| {
        svcs.iter().any(|s| {
            namespace(&s.metadata) == "kube-system" && s.metadata.name.as_deref() == Some("kube-dns")
        })
    };
    if !has(&services) {
        let first = spec.nodes[0].metadata.name.clone().unwrap_or_default();
        pods.push(serde_json::from_value(json!({
            "metadata": {"name": DNS_POD, "namespace": "kube-system", "labels": {DNS_LABEL.0: DNS_LABEL.1}},
            "spec": {"nodeName": first, "containers": [{"name": "dns", "image": "tideway", "ports": [
                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}]}]},
        })).expect("built-in DNS pod"));
        services.push(serde_json::from_value(json!({
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {DNS_LABEL.0: DNS_LABEL.1}},
            "spec": {"clusterIP": plan.dns_ip.to_string(), "selector": {DNS_LABEL.0: DNS_LABEL.1}, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "metrics", "port": 9153, "protocol": "TCP"}]},
        })).expect("built-in DNS Service"));
    }
    (pods, services)
}

/// Builds the cluster of `spec`, keeping earlier allocations.
pub fn build(
    spec: &LabSpec,
    plan: &Plan,
    alloc: &mut Allocations,
    health: &Health,
) -> Result<World, ControlError> {
    let (pods, services) = with_dns(spec, plan);
    let node_names: BTreeSet<String> = spec.nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
    let pod_keys =
        pods.iter().map(|p| (namespace(&p.metadata), p.metadata.name.clone().unwrap_or_default())).collect();
    let svc_keys = services
        .iter()
        .map(|s| (namespace(&s.metadata), s.metadata.name.clone().unwrap_or_default()))
        .collect();
    alloc.retain(&node_names, &pod_keys, &svc_keys);
    let mut world = World { hosts: spec.hosts.clone(), routers: spec.routers.clone(), ..Default::default() };
    for n in &spec.nodes {
        world.nodes.push(node(n, plan, alloc, health, &mut world.objects)?);
    }
    for p in &pods {
        let state = pod(p, &world.nodes, alloc, health, &mut world.objects)?;
        world.pods.push(state);
    }
    for s in &services {
        let svc = service(s, plan, alloc)?;
        let mut ready = 0;
        let (ns, name) = (namespace(&svc.metadata), svc.metadata.name.clone().unwrap_or_default());
        for mut slice in endpoints::slices(&svc, &world.pods) {
            let content = serde_json::to_string(&(&slice.endpoints, &slice.ports)).unwrap_or_default();
            let slice_name = slice.metadata.name.clone().unwrap_or_default();
            if let Some(t) = alloc.trigger_time(&ns, &name, &slice_name, content) {
                let key = tideway_api::convert::ANNOTATION_TRIGGER_TIME.to_string();
                slice.metadata.annotations = Some(BTreeMap::from([(key, t)]));
            }
            ready += slice
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            world.objects.push(to_value("EndpointSlice", "discovery.k8s.io/v1", &slice));
        }
        world
            .ready_endpoints
            .insert((namespace(&svc.metadata), svc.metadata.name.clone().unwrap_or_default()), ready);
        world.objects.push(to_value("Service", "v1", &svc));
        world.services.push(svc);
    }
    let mut namespaces: BTreeMap<String, Namespace> =
        spec.namespaces.iter().map(|n| (n.metadata.name.clone().unwrap_or_default(), n.clone())).collect();
    for ns in world
        .pods
        .iter()
        .map(|p| p.namespace.clone())
        .chain(svc_keys_ns(&world.services))
        .chain(["default".into(), "kube-system".into()])
    {
        namespaces
            .entry(ns.clone())
            .or_insert_with(|| Namespace { metadata: meta(&ns, None), ..Default::default() });
    }
    world.objects.extend(namespaces.values().map(|n| to_value("Namespace", "v1", n)));
    // The API server's own ServiceCIDR, which it creates from its service range.
    world.objects.push(json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": [format!("{}/{}", plan.service_net.0, plan.service_net.1)]}}));
    for pc in &spec.proxy_configs {
        world.objects.push(proxy_config(pc, plan, alloc));
    }
    for pool in &spec.pools {
        let mut v = to_value("LoadBalancerPool", "tideway.io/v1alpha1", pool);
        let name = pool.metadata.name.clone().unwrap_or_default();
        v["metadata"]["generation"] =
            json!(alloc.generation("LoadBalancerPool", "", &name, pool.spec_json()));
        world.objects.push(v);
    }
    world.objects.extend(spec.bgp.iter().cloned());
    Ok(world)
}

trait SpecJson {
    fn spec_json(&self) -> String;
}

impl SpecJson for tideway_api::crd::LoadBalancerPool {
    fn spec_json(&self) -> String {
        serde_json::to_string(&self.spec).unwrap_or_default()
    }
}

fn svc_keys_ns(svcs: &[Service]) -> Vec<String> {
    svcs.iter().map(|s| namespace(&s.metadata)).collect()
}

fn meta(name: &str, ns: Option<&str>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(str::to_string),
        ..Default::default()
    }
}

fn node(
    n: &Node,
    plan: &Plan,
    alloc: &mut Allocations,
    health: &Health,
    out: &mut Vec<Value>,
) -> Result<NodeState, ControlError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let given = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| ip_of(&a.address, &format!("node {name}")))
        .transpose()?;
    let ip = alloc.node_ip(plan, &name, given)?;
    let index = alloc.node_index(&name)?;
    let pod_cidr = plan.pod_cidr(index);
    let mut labels = n.metadata.labels.clone().unwrap_or_default();
    labels.entry("kubernetes.io/hostname".into()).or_insert_with(|| name.clone());
    let ready = if health.nodes_down.contains(&name) { "False" } else { "True" };
    let cidr = format!("{}/{}", pod_cidr.0, pod_cidr.1);
    // What the spec declares beside Ready (taints, NetworkUnavailable...) is kept, as a
    // cluster's Node carries them; Ready is the lab's own to say.
    let taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let mut conditions: Vec<Value> = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ != "Ready")
        .map(|c| json!({"type": c.type_, "status": c.status}))
        .collect();
    conditions.push(json!({"type": "Ready", "status": ready}));
    out.push(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "taints": taints},
        "status": {"addresses": [{"type": "InternalIP", "address": ip.to_string()}, {"type": "Hostname", "address": name}],
                   "conditions": conditions},
    }));
    Ok(NodeState { name, ip, index, pod_cidr })
}

fn pod(
    p: &Pod,
    nodes: &[NodeState],
    alloc: &mut Allocations,
    health: &Health,
    out: &mut Vec<Value>,
) -> Result<PodState, ControlError> {
    let ns = namespace(&p.metadata);
    let name = p.metadata.name.clone().unwrap_or_default();
    let spec = p.spec.clone().unwrap_or_default();
    let node_name = spec.node_name.clone().unwrap_or_default();
    let node = nodes.iter().find(|n| n.name == node_name).ok_or_else(|| {
        ControlError::Invalid(format!("pod {ns}/{name}: node {node_name:?} is not in the lab"))
    })?;
    let ip = alloc.pod_ip(node.pod_cidr, (ns.clone(), name.clone()))?;
    let declared_not_ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status != "True"));
    let ports = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.clone().unwrap_or_default())
        .map(|p| ContainerPortState {
            name: p.name,
            port: p.container_port,
            protocol: p.protocol.unwrap_or_else(|| "TCP".into()),
        })
        .collect();
    let state = PodState {
        namespace: ns.clone(),
        name: name.clone(),
        node: node_name.clone(),
        ip,
        labels: p.metadata.labels.clone().unwrap_or_default(),
        ready: false,
        ports,
        hostname: spec.hostname.clone(),
        subdomain: spec.subdomain.clone(),
    };
    let started = state.is_dns() || health.pods_started.contains(&(ns.clone(), name.clone()));
    let state = PodState { ready: started && !declared_not_ready, ..state };
    let mut v = to_value("Pod", "v1", p);
    v["metadata"]["namespace"] = json!(ns);
    v["status"] = json!({
        "phase": "Running", "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}], "hostIP": node.ip.to_string(),
        "conditions": [{"type": "Ready", "status": if state.ready { "True" } else { "False" }}],
    });
    out.push(v);
    Ok(state)
}

fn service(s: &Service, plan: &Plan, alloc: &mut Allocations) -> Result<Service, ControlError> {
    let mut s = s.clone();
    let ns = namespace(&s.metadata);
    let name = s.metadata.name.clone().unwrap_or_default();
    let key = (ns.clone(), name.clone());
    s.metadata.namespace = Some(ns.clone());
    let spec_json = serde_json::to_string(&s.spec).unwrap_or_default();
    s.metadata.generation = Some(alloc.generation("Service", &ns, &name, spec_json));
    let mut spec = s.spec.take().unwrap_or_default();
    let kind = spec.type_.clone().unwrap_or_else(|| "ClusterIP".into());
    if kind != "ExternalName" && spec.cluster_ip.as_deref() != Some("None") {
        let given = spec
            .cluster_ip
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(|c| ip_of(c, &format!("Service {ns}/{name} clusterIP")))
            .transpose()?;
        let ip = alloc.cluster_ip(plan, key.clone(), given)?.to_string();
        spec.cluster_ip = Some(ip.clone());
        spec.cluster_ips = Some(vec![ip]);
        spec.ip_families = Some(vec!["IPv4".into()]);
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        for (i, p) in spec.ports.iter_mut().flatten().enumerate() {
            let given = p.node_port.map(|n| n as u16);
            p.node_port = Some(i32::from(alloc.node_port(plan, key.clone(), i, given)?));
        }
        if spec.external_traffic_policy.as_deref() == Some("Local") {
            let given = spec.health_check_node_port.map(|n| n as u16);
            spec.health_check_node_port =
                Some(i32::from(alloc.health_check_port(plan, key.clone(), given)?));
        }
    }
    s.spec = Some(spec);
    Ok(s)
}

fn proxy_config(pc: &ProxyConfig, plan: &Plan, alloc: &mut Allocations) -> Value {
    let mut pc = pc.clone();
    if pc.spec.cluster_cidrs.is_empty() {
        pc.spec.cluster_cidrs = vec![format!("{}/{}", plan.pod_net.0, plan.pod_net.1)];
    }
    let name = pc.metadata.name.clone().unwrap_or_default();
    let generation =
        alloc.generation("ProxyConfig", "", &name, serde_json::to_string(&pc.spec).unwrap_or_default());
    let mut v = to_value("ProxyConfig", "tideway.io/v1alpha1", &pc);
    v["metadata"]["generation"] = json!(generation);
    v
}

#[cfg(test)]
mod tests;

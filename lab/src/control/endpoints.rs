//! The EndpointSlice controller's job: the pods a Service selects, their readiness, and the
//! port each Service port reaches on each pod (a named `targetPort` resolved per pod, pods
//! resolving to different numbers landing in different slices, as Kubernetes does).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::state::PodState;
use crate::spec::namespace;

/// The port of `pod` a Service port targets (None: the pod has no such named port).
fn target_port(target: Option<&IntOrString>, port: i32, pod: &PodState) -> Option<i32> {
    match target {
        None => Some(port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            pod.ports.iter().find(|p| p.name.as_deref() == Some(name)).map(|p| p.port)
        }
    }
}

/// The slices of `svc` over `pods` (every pod of the lab; the selector picks).
pub(crate) fn slices(svc: &Service, pods: &[PodState]) -> Vec<EndpointSlice> {
    let ns = namespace(&svc.metadata);
    let name = svc.metadata.name.clone().unwrap_or_default();
    let spec = svc.spec.clone().unwrap_or_default();
    let Some(selector) = spec.selector.clone().filter(|s| !s.is_empty()) else { return Vec::new() };
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let publish_not_ready = spec.publish_not_ready_addresses.unwrap_or(false);
    let svc_ports = spec.ports.clone().unwrap_or_default();
    let mut groups: BTreeMap<Vec<Option<i32>>, Vec<&PodState>> = BTreeMap::new();
    for pod in
        pods.iter().filter(|p| p.namespace == ns && selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
    {
        let resolved: Vec<Option<i32>> =
            svc_ports.iter().map(|p| target_port(p.target_port.as_ref(), p.port, pod)).collect();
        groups.entry(resolved).or_default().push(pod);
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, (resolved, members))| {
            let ports = svc_ports
                .iter()
                .zip(&resolved)
                .filter_map(|(p, target)| {
                    Some(EndpointPort {
                        name: p.name.clone(),
                        port: Some((*target)?),
                        protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                        app_protocol: p.app_protocol.clone(),
                    })
                })
                .collect();
            let endpoints = members
                .iter()
                .map(|pod| {
                    let ready = pod.ready || publish_not_ready;
                    Endpoint {
                        addresses: vec![pod.ip.to_string()],
                        conditions: Some(EndpointConditions {
                            ready: Some(ready),
                            serving: Some(ready),
                            terminating: Some(false),
                        }),
                        hostname: pod
                            .hostname
                            .clone()
                            .filter(|_| pod.subdomain.as_deref() == Some(name.as_str())),
                        node_name: Some(pod.node.clone()),
                        target_ref: Some(ObjectReference {
                            kind: Some("Pod".into()),
                            name: Some(pod.name.clone()),
                            namespace: Some(pod.namespace.clone()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                })
                .collect();
            let mut labels = BTreeMap::from([
                ("kubernetes.io/service-name".to_string(), name.clone()),
                ("endpointslice.kubernetes.io/managed-by".to_string(), "lab.tideway.io".to_string()),
            ]);
            if headless {
                labels.insert("service.kubernetes.io/headless".into(), String::new());
            }
            EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(format!("{name}-{i}")),
                    namespace: Some(ns.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints,
                ports: Some(ports),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ContainerPortState;

    fn pod(name: &str, app: &str, ready: bool, port_name: &str, port: i32) -> PodState {
        PodState {
            namespace: "default".into(),
            name: name.into(),
            node: "n1".into(),
            ip: format!("10.10.0.{}", name.len() + 1).parse().unwrap(),
            labels: [("app".to_string(), app.to_string())].into(),
            ready,
            ports: vec![ContainerPortState { name: Some(port_name.into()), port, protocol: "TCP".into() }],
            hostname: None,
            subdomain: None,
        }
    }

    fn svc(yaml: &str) -> Service {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn selects_by_labels_and_resolves_named_ports_per_pod() {
        let pods = [
            pod("a", "web", true, "http", 8080),
            pod("bb", "web", false, "http", 9090),
            pod("ccc", "db", true, "http", 80),
        ];
        let s = svc(
            "metadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{name: p, port: 80, targetPort: http}]\n",
        );
        let out = slices(&s, &pods);
        assert_eq!(out.len(), 2, "two resolved port numbers, two slices");
        let ports: Vec<i32> = out.iter().map(|s| s.ports.as_ref().unwrap()[0].port.unwrap()).collect();
        assert_eq!(ports, vec![8080, 9090]);
        let ready: Vec<bool> =
            out.iter().map(|s| s.endpoints[0].conditions.as_ref().unwrap().ready.unwrap()).collect();
        assert_eq!(ready, vec![true, false]);
        assert_eq!(out[0].metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"], "web");
    }

    #[test]
    fn no_selector_no_slices_and_numbers_pass_through() {
        let pods = [pod("a", "web", true, "http", 8080)];
        assert!(slices(&svc("metadata: {name: x}\nspec: {ports: [{port: 80}]}\n"), &pods).is_empty());
        let s = svc(
            "metadata: {name: x}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}, {name: u, port: 53, protocol: UDP}]\n",
        );
        let out = slices(&s, &pods);
        let ports = out[0].ports.clone().unwrap();
        assert_eq!(
            (ports[0].port, ports[1].port, ports[1].protocol.as_deref()),
            (Some(8080), Some(53), Some("UDP"))
        );
    }
}

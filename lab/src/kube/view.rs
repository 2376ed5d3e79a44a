//! What `lab status` shows of a kube lab, read from the API server: one reflector per kind the
//! status names (Nodes, Pods, Services, EndpointSlices, the agents' NodeProxyStates and the
//! operator's L2Announcements), so a status is built from memory, not from a list per call.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tideway_api::crd::{L2Announcement, NodeProxyState};

/// The API server's objects as the lab reads them.
#[derive(Clone)]
pub struct KubeView {
    nodes: Store<Node>,
    pods: Store<Pod>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    states: Store<NodeProxyState>,
    announcements: Store<L2Announcement>,
}

/// Starts a reflector of every `K` on the current runtime; its store.
fn reflect<K>(client: &Client) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(Api::<K>::all(client.clone()), watcher::Config::default()))
            .default_backoff()
            .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader
}

fn to_json<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

impl KubeView {
    /// Starts watching with `client` (the lab's admin credentials).
    pub fn start(client: &Client) -> KubeView {
        KubeView {
            nodes: reflect(client),
            pods: reflect(client),
            services: reflect(client),
            slices: reflect(client),
            states: reflect(client),
            announcements: reflect(client),
        }
    }

    /// The nodes as `lab status` shows them (without the lab's own columns).
    pub fn nodes(&self) -> Vec<Value> {
        let states: BTreeMap<String, Value> = self
            .states
            .state()
            .iter()
            .map(|s| (s.metadata.name.clone().unwrap_or_default(), to_json(s.as_ref())))
            .collect();
        let mut nodes: Vec<Value> = self
            .nodes
            .state()
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let status = n.status.clone().unwrap_or_default();
                let ip = status.addresses.unwrap_or_default().into_iter().find(|a| a.type_ == "InternalIP");
                let ready = status.conditions.unwrap_or_default().into_iter().find(|c| c.type_ == "Ready");
                let state = states.get(&name).cloned().unwrap_or(Value::Null);
                json!({
                    "name": name, "ip": ip.map(|a| a.address),
                    "podCIDR": n.spec.as_ref().and_then(|s| s.pod_cidr.clone()),
                    "ready": ready.as_ref().is_some_and(|c| c.status == "True"),
                    "readyCondition": ready.map(|c| c.status),
                    "mode": state["status"]["mode"], "lastSync": state["status"]["lastSyncTime"],
                    "synced": state["status"]["ready"] == true,
                    "announcing": state["status"]["announcing"], "bgp": state["status"]["bgp"],
                })
            })
            .collect();
        nodes.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        nodes
    }

    /// The Services: addresses, ports, the announcing node, ready endpoints.
    pub fn services(&self) -> Vec<Value> {
        let announcers: BTreeMap<(String, String), String> = self
            .announcements
            .state()
            .iter()
            .map(|a| {
                let v = to_json(a.as_ref());
                let key = (
                    v["spec"]["serviceNamespace"]
                        .as_str()
                        .or(v["metadata"]["namespace"].as_str())
                        .unwrap_or("")
                        .to_string(),
                    v["spec"]["serviceName"].as_str().unwrap_or("").to_string(),
                );
                (key, v["spec"]["node"].as_str().unwrap_or("").to_string())
            })
            .collect();
        let mut ready: BTreeMap<(String, String), usize> = BTreeMap::new();
        for s in self.slices.state() {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name"))
            else {
                continue;
            };
            let n = s
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            *ready.entry((ns, svc.clone())).or_default() += n;
        }
        let mut out: Vec<Value> = self
            .services
            .state()
            .iter()
            .map(|s| {
                let (ns, name) = (s.metadata.namespace.clone().unwrap_or_default(), s.metadata.name.clone().unwrap_or_default());
                let spec = s.spec.clone().unwrap_or_default();
                let ingress = s.status.as_ref().and_then(|st| st.load_balancer.as_ref()).and_then(|lb| lb.ingress.clone());
                let key = (ns.clone(), name.clone());
                json!({
                    "namespace": ns, "name": name, "type": spec.type_.as_deref().unwrap_or("ClusterIP"),
                    "clusterIP": spec.cluster_ip, "externalTrafficPolicy": spec.external_traffic_policy,
                    "ports": service_ports(&spec),
                    "externalIPs": ingress.unwrap_or_default().iter().filter_map(|i| i.ip.clone()).collect::<Vec<_>>(),
                    "announcer": announcers.get(&key),
                    "readyEndpoints": ready.get(&key).copied().unwrap_or(0),
                    "nextHops": Value::Null,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a["namespace"].as_str(), a["name"].as_str()).cmp(&(b["namespace"].as_str(), b["name"].as_str()))
        });
        out
    }

    /// The pods: where they run, their address, whether they are Ready.
    pub fn pods(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .pods
            .state()
            .iter()
            .map(|p| {
                let status = p.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                json!({
                    "namespace": p.metadata.namespace, "name": p.metadata.name,
                    "node": p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    "ip": status.pod_ip, "ready": ready,
                    "started": status.phase.as_deref() == Some("Running"), "phase": status.phase,
                    "hostNetwork": p.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false),
                    "deleting": p.metadata.deletion_timestamp.is_some(),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a["namespace"].as_str(), a["name"].as_str()).cmp(&(b["namespace"].as_str(), b["name"].as_str()))
        });
        out
    }
}

/// A Service's ports as `lab status` shows them: `PORT/PROTO`, `PORT:NODEPORT/PROTO`.
pub(crate) fn service_ports(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> Vec<String> {
    let ports = spec.ports.iter().flatten();
    ports
        .map(|p| {
            let proto = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(np) => format!("{}:{np}/{proto}", p.port),
                None => format!("{}/{proto}", p.port),
            }
        })
        .collect()
}

//! What `lab status` shows of the running lab: nodes (Ready, agent, network, mode, BGP), Services
//! (addresses, announcer or next hops), pods, hosts, routers and the components' APIs.

use serde_json::{Value, json};

use super::lab::Lab;
use super::pods::pod_key;
use crate::spec::LabHost;

impl Lab {
    /// `running`, `killed` (held down by `lab kill agent`) or `restarting` (exited; kubelet's
    /// backoff).
    fn agent_state(&self, node: &str) -> &'static str {
        let label = format!("agent/{node}");
        if self.procs.running(&label) {
            "running"
        } else if self.procs.held(&label) {
            "killed"
        } else {
            "restarting"
        }
    }

    /// What `lab status` shows.
    pub fn status(&self) -> Value {
        if let Some(side) = &self.kube {
            return self.kube_status(side);
        }
        let (routers, next_hops) = self.routers_status();
        let state = |node: &str| self.writes.node_states.get(node).cloned().unwrap_or(Value::Null);
        let nodes: Vec<Value> = self.world.nodes.iter().map(|n| json!({
            "name": n.name, "ip": n.ip.to_string(), "podCIDR": format!("{}/{}", n.pod_cidr.0, n.pod_cidr.1),
            "ready": !self.health.nodes_down.contains(&n.name),
            "agent": self.agent_state(&n.name),
            "network": self.faults.network(&n.name),
            "mode": state(&n.name)["status"]["mode"], "lastSync": state(&n.name)["status"]["lastSyncTime"],
            "synced": state(&n.name)["status"]["ready"] == true,
            "announcing": state(&n.name)["status"]["announcing"],
            "bgp": state(&n.name)["status"]["bgp"],
            "namespace": self.names.node(&n.name),
        })).collect();
        let services: Vec<Value> = self.world.services.iter().map(|s| {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            let name = s.metadata.name.clone().unwrap_or_default();
            let key = format!("{ns}_{name}");
            let spec = s.spec.clone().unwrap_or_default();
            json!({
                "namespace": ns, "name": name, "type": spec.type_.as_deref().unwrap_or("ClusterIP"),
                "clusterIP": spec.cluster_ip, "externalTrafficPolicy": spec.external_traffic_policy,
                "ports": crate::kube::view::service_ports(&spec),
                "externalIPs": self.writes.ingress.get(&key).map(|i| i["ingress"].as_array().cloned().unwrap_or_default().iter().filter_map(|x| x["ip"].as_str().map(str::to_string)).collect::<Vec<_>>()).unwrap_or_default(),
                "announcer": self.writes.announcements.get(&key).map(|a| a["spec"]["node"].clone()).unwrap_or(Value::Null),
                "readyEndpoints": self.world.ready_endpoints.get(&(ns.clone(), name.clone())).copied().unwrap_or(0),
                "nextHops": self.writes.ingress.get(&key).and_then(|i| i["ingress"][0]["ip"].as_str()).and_then(|ip| next_hops.get(ip)),
            })
        }).collect();
        let pods: Vec<Value> = self.world.pods.iter().map(|p| json!({
            "namespace": p.namespace, "name": p.name, "node": p.node, "ip": p.ip.to_string(), "ready": p.ready,
            "started": p.is_dns() || self.health.pods_started.contains(&pod_key(p)),
            "netns": self.names.pod(&p.namespace, &p.name),
        })).collect();
        let hosts: Vec<Value> = self.world.hosts.iter().map(|h: &LabHost| json!({"name": h.name, "ip": h.ip.to_string(), "router": h.router, "netns": self.names.host(&h.name)})).collect();
        let token = crate::token::read(self.dir.path());
        let ca = Some(crate::certs::ca_path(self.dir.path())).filter(|p| p.exists());
        json!({"name": self.names.lab(), "dir": self.dir.path(), "apiToken": token, "caFile": ca, "proxyConfig": self.spec.proxy_configs.first().and_then(|c| c.metadata.name.clone()), "nodes": nodes, "services": services, "pods": pods, "hosts": hosts, "routers": routers, "apis": self.apis, "api": if self.faults.api_down { "down" } else { "up" }, "nodeMonitorGracePeriod": format!("{}s", self.faults.grace.as_secs_f64())})
    }
}

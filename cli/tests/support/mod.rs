//! A two-node dataplane scenario: namespaces, pods, the cluster manifest the agents read, and
//! helpers to ask the agents and the pods what happened.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tideway_tests::netns::{Cluster, Netns, eventually};

pub(crate) mod coredns;
pub(crate) mod dns_server;
pub(crate) mod real_api;
pub(crate) mod twin;

pub(crate) const WEB: &str = "10.96.0.10:80";

/// `secs` seconds, times `TIDEWAY_TEST_TIME_SCALE` (a VM without hardware acceleration runs
/// everything several times slower).
pub(crate) fn patience(secs: f64) -> Duration {
    let scale =
        std::env::var("TIDEWAY_TEST_TIME_SCALE").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(1.0);
    Duration::from_secs_f64(secs * scale.max(1.0))
}

/// A loopback port nothing listens on (it was free a moment ago).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Services of the battery, as Kubernetes YAML (`mode` goes into the ProxyConfig).
pub(crate) fn manifest(mode: &str, extra: &str) -> String {
    let mut y = format!(
        r#"apiVersion: v1
kind: Node
metadata: {{name: node-a, labels: {{topology.kubernetes.io/zone: zone-a}}}}
spec: {{podCIDRs: [10.244.1.0/24]}}
status: {{addresses: [{{type: InternalIP, address: 192.168.0.10}}]}}
---
apiVersion: v1
kind: Node
metadata: {{name: node-b, labels: {{topology.kubernetes.io/zone: zone-b}}}}
spec: {{podCIDRs: [10.244.2.0/24]}}
status: {{addresses: [{{type: InternalIP, address: 192.168.0.11}}]}}
---
apiVersion: tideway.io/v1alpha1
kind: ProxyConfig
metadata: {{name: default}}
spec: {{mode: {mode}, clusterCIDRs: [10.244.0.0/16]}}
---
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {{name: kubernetes}}
spec: {{cidrs: [10.96.0.0/16]}}
"#
    );
    let svc = |name: &str, spec: &str, status: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: demo}}\nspec: {spec}\n{status}"
        )
    };
    let slice = |svc: &str, proto: &str, eps: &[(&str, &str)]| {
        let mut s = format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {svc}-1, namespace: demo, labels: {{kubernetes.io/service-name: {svc}}}}}\naddressType: IPv4\nports: [{{name: p, port: 8080, protocol: {proto}}}]\nendpoints:\n"
        );
        for (ip, node) in eps {
            s.push_str(&format!("- {{addresses: [{ip}], nodeName: {node}, conditions: {{ready: true}}}}\n"));
        }
        s
    };
    let all = [
        ("10.244.1.11", "node-a"),
        ("10.244.1.12", "node-a"),
        ("10.244.2.11", "node-b"),
        ("10.244.2.12", "node-b"),
    ];
    let lb = |ip: &str| format!("status: {{loadBalancer: {{ingress: [{{ip: {ip}}}]}}}}\n");
    y += &svc("web", "{clusterIP: 10.96.0.10, ports: [{name: p, port: 80}]}", "");
    y += &slice("web", "TCP", &all);
    y += &svc(
        "np",
        "{type: NodePort, clusterIP: 10.96.0.11, ports: [{name: p, port: 80, nodePort: 30080}]}",
        "",
    );
    y += &slice("np", "TCP", &all[2..]);
    y += &svc(
        "lb",
        "{type: LoadBalancer, clusterIP: 10.96.0.12, loadBalancerSourceRanges: [192.168.0.0/24], ports: [{name: p, port: 80, nodePort: 30081}]}",
        &lb("192.168.0.200"),
    );
    y += &slice("lb", "TCP", &[all[0], all[2]]);
    y += &svc(
        "ext",
        "{clusterIP: 10.96.0.13, externalIPs: [192.168.0.150], ports: [{name: p, port: 80}]}",
        "",
    );
    y += &slice("ext", "TCP", &[all[3]]);
    y += &svc(
        "local",
        "{type: LoadBalancer, clusterIP: 10.96.0.14, externalTrafficPolicy: Local, healthCheckNodePort: 32000, ports: [{name: p, port: 80, nodePort: 30082}]}",
        &lb("192.168.0.201"),
    );
    y += &slice("local", "TCP", &[all[1], all[3]]);
    y += &svc(
        "local-none",
        "{type: LoadBalancer, clusterIP: 10.96.0.18, externalTrafficPolicy: Local, healthCheckNodePort: 32001, ports: [{name: p, port: 80, nodePort: 30083}]}",
        &lb("192.168.0.202"),
    );
    y += &slice("local-none", "TCP", &[all[2]]);
    y += &svc(
        "itp",
        "{clusterIP: 10.96.0.15, internalTrafficPolicy: Local, ports: [{name: p, port: 80}]}",
        "",
    );
    y += &slice("itp", "TCP", &[all[0], all[2]]);
    y += &svc("empty", "{clusterIP: 10.96.0.16, ports: [{name: p, port: 80}]}", "");
    y += &svc(
        "sticky",
        "{clusterIP: 10.96.0.17, sessionAffinity: ClientIP, ports: [{name: p, port: 80}]}",
        "",
    );
    y += &slice("sticky", "TCP", &all);
    y += &svc("dns", "{clusterIP: 10.96.0.53, ports: [{name: p, port: 53, protocol: UDP}]}", "");
    y += extra;
    y
}

/// The UDP Service's endpoints (changed by the conntrack test).
pub(crate) fn dns_slice(ip: &str, node: &str) -> String {
    format!(
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: dns-1, namespace: demo, labels: {{kubernetes.io/service-name: dns}}}}\naddressType: IPv4\nports: [{{name: p, port: 8080, protocol: UDP}}]\nendpoints:\n- {{addresses: [{ip}], nodeName: {node}}}\n"
    )
}

/// The battery's cluster: two nodes, four pods, a client, routes for the external addresses.
pub(crate) fn cluster(test: &str) -> Cluster {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tideway"));
    let mut c = Cluster::new(
        test,
        bin,
        &[("node-a", "192.168.0.10", "10.244.1"), ("node-b", "192.168.0.11", "10.244.2")],
    );
    c.add_pod(0, "a1", 11, 8080);
    c.add_pod(0, "a2", 12, 8080);
    c.add_pod(1, "b1", 11, 8080);
    c.add_pod(1, "b2", 12, 8080);
    for dst in
        ["10.96.0.0/16", "192.168.0.200/32", "192.168.0.201/32", "192.168.0.202/32", "192.168.0.150/32"]
    {
        c.client_route(dst, 0);
    }
    // A second client address outside the LB source ranges, routable back from the nodes.
    c.client.sh("ip addr add 203.0.113.5/32 dev eth0");
    for n in &c.nodes {
        n.ns.sh("ip route add 203.0.113.5/32 via 192.168.0.100");
    }
    c
}

/// Starts the agent on node `i` reading `file`; `env` may put wrapper tools first in PATH.
pub(crate) fn start_agent(c: &mut Cluster, i: usize, file: &str, env: &[(&str, &str)]) -> usize {
    start_agent_with(c, i, file, env, "2s")
}

/// [`start_agent`] with another sync period (how often the kernel is checked for drift).
pub(crate) fn start_agent_with(
    c: &mut Cluster,
    i: usize,
    file: &str,
    env: &[(&str, &str)],
    sync: &str,
) -> usize {
    let node = c.nodes[i].name.clone();
    let source = format!("file:{}", c.path(file).display());
    let log = format!("agent-{node}.log");
    let token_file = c.path("api-token");
    std::fs::write(&token_file, API_TOKEN).expect("write the API token");
    let token_file = token_file.display().to_string();
    c.spawn_on(
        i,
        &[
            "agent",
            "--node",
            &node,
            "--source",
            &source,
            "--min-sync-period",
            "100ms",
            "--sync-period",
            sync,
            "--file-poll-interval",
            "100ms",
            "--api-token-file",
            &token_file,
        ],
        &log,
        env,
    )
}

/// The bearer token the agents of these tests take on their REST API.
pub(crate) const API_TOKEN: &str = "test-api-token";

/// GETs `path` from the agent's status port inside node `ns`, with the agents' token.
pub(crate) fn agent_get(ns: &Netns, path: &str) -> Result<String, String> {
    get_with(ns, "127.0.0.1:10249".parse().expect("addr"), path, Some(API_TOKEN)).map(|(_, body)| body)
}

/// A plain HTTP/1.0 GET from inside `ns`: (status code, body).
pub(crate) fn http_get(ns: &Netns, addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    get_with(ns, addr, path, None)
}

/// [`http_get`], with `token` as the bearer if given.
fn get_with(ns: &Netns, addr: SocketAddr, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
    let path = path.to_string();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n{auth}\r\n").map_err(|e| e.to_string())?;
        let mut text = String::new();
        s.read_to_string(&mut text).map_err(|e| e.to_string())?;
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no status line")?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Ok((code, body))
    })
}

/// The agent's status JSON.
pub(crate) fn status(ns: &Netns) -> Result<serde_json::Value, String> {
    serde_json::from_str(&agent_get(ns, "/api/v1/status")?).map_err(|e| e.to_string())
}

/// Waits until node `ns`'s agent completed a sync with `syncs` above `after`.
pub(crate) fn wait_synced(ns: &Netns, after: u64) -> Result<serde_json::Value, String> {
    eventually(patience(20.0), || {
        let s = status(ns)?;
        match s["syncs"].as_u64() {
            Some(n) if n > after && s["synced"] == true => Ok(s),
            _ => Err(format!("not synced yet: {s}")),
        }
    })
}

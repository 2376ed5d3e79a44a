//! What `lab up` and `lab status` print: progress, the tour of things to try, status tables.
//! Pure functions of the lab's status JSON.

use std::fmt::Write;
use std::time::Duration;

use serde_json::Value;

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// Whether the lab works yet (every agent synced, every LoadBalancer Service with an address
/// and an announcer), and a line saying where it stands.
pub fn readiness(status: &Value) -> (bool, String) {
    let nodes = arr(&status["nodes"]);
    if status["components"] == false {
        return bare_readiness(status);
    }
    // A node speaking BGP is synced once its sessions are established too.
    let peered = |n: &&Value| n["bgp"].is_null() || n["bgp"]["established"] == n["bgp"]["sessions"];
    let synced = nodes.iter().filter(|n| n["synced"] == true).filter(peered).count();
    let lbs: Vec<&Value> = arr(&status["services"]).iter().filter(|s| s["type"] == "LoadBalancer").collect();
    let assigned = lbs.iter().filter(|s| !arr(&s["externalIPs"]).is_empty()).count();
    // Nothing announces an address no pod serves (MetalLB does the same).
    let serving: Vec<&&Value> =
        lbs.iter().filter(|s| s["readyEndpoints"].as_u64().unwrap_or(0) > 0).collect();
    let announced =
        serving.iter().filter(|s| !s["announcer"].is_null() || !arr(&s["nextHops"]).is_empty()).count();
    let pods = arr(&status["pods"]);
    let started = pods.iter().filter(|p| p["started"] == true).count();
    let ready =
        synced == nodes.len() && started == pods.len() && assigned == lbs.len() && announced == serving.len();
    let msg = format!(
        "agents synced {synced}/{}, pods started {started}/{}, LoadBalancer IPs {assigned}/{}, announced {announced}/{} (of those with ready endpoints)",
        nodes.len(),
        pods.len(),
        lbs.len(),
        serving.len()
    );
    (ready, msg)
}

/// A kube lab without Tideway (`--no-components`) is ready once every node is Ready and
/// every pod started: no agent syncs, no address is assigned until the chart is installed.
fn bare_readiness(status: &Value) -> (bool, String) {
    let nodes = arr(&status["nodes"]);
    let ready = nodes.iter().filter(|n| n["ready"] == true).count();
    let pods = arr(&status["pods"]);
    let started = pods.iter().filter(|p| p["started"] == true).count();
    let msg = format!(
        "nodes Ready {ready}/{}, pods started {started}/{} (no Tideway: install the chart)",
        nodes.len(),
        pods.len()
    );
    (ready == nodes.len() && started == pods.len(), msg)
}

/// What to do with a kube lab without Tideway: the chart README's install, against it.
fn bare_tour(status: &Value, took: Duration) -> String {
    let kubeconfig = s(&status["kubeconfig"]);
    let pods = s(&status["podCIDR"]);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\ntideway lab {} is up in {:.1} s, without Tideway\n",
        s(&status["name"]),
        took.as_secs_f64()
    );
    let _ = writeln!(t, "Install it as the chart's README says:");
    let _ = writeln!(t, "  export KUBECONFIG={kubeconfig}");
    let _ = writeln!(t, "  kubectl create namespace tideway-system");
    let _ =
        writeln!(t, "  kubectl label namespace tideway-system pod-security.kubernetes.io/enforce=privileged");
    let _ = writeln!(
        t,
        "  helm install tideway helm/tideway -n tideway-system --wait --set 'proxyConfig.clusterCIDRs[0]={pods}'"
    );
    t
}

/// The first LoadBalancer Service with an address (name, address), preferring one announced
/// over layer 2 (the tour's ARP steps need one).
fn first_lb(status: &Value) -> Option<(String, String)> {
    let with_ip = |sv: &Value| {
        let ip = arr(&sv["externalIPs"]).first()?.as_str()?.to_string();
        Some((s(&sv["name"]).to_string(), ip))
    };
    let svcs = arr(&status["services"]);
    svcs.iter()
        .filter(|sv| !sv["announcer"].is_null())
        .find_map(with_ip)
        .or_else(|| svcs.iter().find_map(with_ip))
}

/// The tour's steps through a router, when the lab has one: its ECMP route to the first
/// address it routes, its sessions, and curls from a host behind it.
fn router_steps(t: &mut String, status: &Value, flag: &str) {
    let Some(router) = arr(&status["routers"]).first() else { return };
    let (name, netns) = (s(&router["name"]), s(&router["netns"]));
    // A Local Service shows the spread over nodes best: each node sends to its own pod.
    let svcs = arr(&status["services"]);
    let routed = |local: bool| {
        svcs.iter()
            .find(|sv| !arr(&sv["nextHops"]).is_empty() && (!local || sv["externalTrafficPolicy"] == "Local"))
    };
    let routed = routed(true).or_else(|| routed(false));
    let lb = routed.and_then(|sv| arr(&sv["externalIPs"]).first()).and_then(Value::as_str).unwrap_or("LB-IP");
    let behind = arr(&status["hosts"]).iter().find(|h| s(&h["router"]) == name).map(|h| s(&h["name"]));
    let _ = writeln!(
        t,
        "
BGP through router {name} (FRR; BFD at 100 ms x 3; multipath hashed on layer 4):"
    );
    let _ = writeln!(
        t,
        "  tideway lab exec{flag} {name} -- ip route show {lb}      # one next hop per advertising node"
    );
    let _ = writeln!(
        t,
        "  tideway lab exec{flag} {name} -- vtysh -N {netns} -c 'show bgp summary' -c 'show bfd peers brief'"
    );
    if let Some(host) = behind {
        let _ = writeln!(
            t,
            "  for i in $(seq 100); do tideway lab exec{flag} {host} -- curl -s {lb} | grep Hostname; done | sort | uniq -c"
        );
    }
    let _ = writeln!(
        t,
        "  tideway lab node{flag} NODE down; tideway lab exec{flag} {name} -- ip route show {lb}   # BFD (3 x 100 ms) withdraws the node in about 0.35 s"
    );
}

/// The tour printed once the lab is up.
pub fn tour(status: &Value, took: Duration) -> String {
    if status["components"] == false {
        return bare_tour(status, took);
    }
    let mut t = String::new();
    let name = s(&status["name"]);
    let modes: Vec<&str> = arr(&status["nodes"]).iter().filter_map(|n| n["mode"].as_str()).collect();
    let mode = modes.first().copied().unwrap_or("?");
    let _ = writeln!(t, "\ntideway lab {name} is up in {:.1} s ({mode} mode)\n", took.as_secs_f64());
    t.push_str(&status_tables(status));
    let flag = if name == "demo" { String::new() } else { format!(" --name {name}") };
    // The layer-2 steps need a host on the node network, not one behind a router.
    let on_lan = arr(&status["hosts"]).iter().find(|h| h["router"].is_null());
    let host = on_lan.map(|h| s(&h["name"]).to_string()).unwrap_or_else(|| "NODE".into());
    let node = arr(&status["nodes"])
        .get(1)
        .or_else(|| arr(&status["nodes"]).first())
        .map(|n| s(&n["name"]).to_string())
        .unwrap_or_default();
    let pod = arr(&status["pods"])
        .iter()
        .find(|p| p["namespace"] != "kube-system")
        .map(|p| s(&p["name"]).to_string())
        .unwrap_or_default();
    let (svc, lb) = first_lb(status).unwrap_or_else(|| ("svc1".into(), "LB-IP".into()));
    let dir = s(&status["dir"]);
    let _ = writeln!(t, "\nThings to try:");
    let _ = writeln!(t, "  tideway lab exec{flag} {host} -- curl -s {lb}");
    let _ = writeln!(
        t,
        "  for i in $(seq 100); do tideway lab exec{flag} {host} -- curl -s {lb} | grep Hostname; done | sort | uniq -c"
    );
    let _ = writeln!(
        t,
        "  tideway lab exec{flag} {host} -- ip neigh show {lb}          # the announcing node's MAC"
    );
    let announcer = arr(&status["services"])
        .iter()
        .find(|sv| s(&sv["name"]) == svc)
        .and_then(|sv| sv["announcer"].as_str())
        .unwrap_or("NODE");
    let _ = writeln!(
        t,
        "  tideway lab kill agent{flag} {announcer}; sleep 2; tideway lab exec{flag} {host} -- ip neigh show {lb}   # failover: another node's MAC, the Node still Ready"
    );
    let _ = writeln!(
        t,
        "  tideway lab start agent{flag} {announcer}                # it is back (the address stays where it moved)"
    );
    let _ = writeln!(
        t,
        "  tideway lab exec{flag} {pod} -- dig +search +short {svc}        # the cluster DNS, through the search path"
    );
    let _ = writeln!(
        t,
        "  tideway lab exec{flag} {node} -- iptables -t nat -S KUBE-SERVICES   # (nft list ruleset in nftables mode)"
    );
    let _ = writeln!(
        t,
        "  tideway trace -f {dir}/cluster.yaml --node {node} --src 172.18.0.100 --dst {lb}:80 --from external"
    );
    let _ = writeln!(
        t,
        "  tideway lab apply{flag} -f FILE   # add or update FILE's objects: change the ProxyConfig mode to switch live"
    );
    let operator = status["apis"]["operator"].as_str().unwrap_or("OPERATOR");
    let config = status["proxyConfig"].as_str().unwrap_or("default");
    let other = if mode == "nftables" { "iptables" } else { "nftables" };
    let _ = writeln!(
        t,
        "  curl -s --cacert {dir}/tls/ca.crt -X PATCH -H \"authorization: Bearer $(cat {dir}/api-token)\" -H 'content-type: application/merge-patch+json' \\\n      -d '{{\"spec\": {{\"mode\": \"{other}\"}}}}' https://{operator}/api/v1/proxyconfigs/{config}   # switch over REST"
    );
    router_steps(&mut t, status, &flag);
    let _ = writeln!(t, "  tideway lab status{flag}; tideway lab down{flag}");
    if let Some(token) = status["apiToken"].as_str() {
        let _ =
            writeln!(t, "\nChanges over the REST APIs need the lab's token: {token} (in {dir}/api-token)");
    }
    t
}

pub fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
    out
}

/// Who announces Service `sv`: its layer-2 announcer, or over BGP the nodes its routes go to.
fn announcer(status: &Value, sv: &Value) -> String {
    if let Some(node) = sv["announcer"].as_str() {
        return node.into();
    }
    let hops = arr(&sv["nextHops"]);
    if hops.is_empty() {
        return "-".into();
    }
    let node_of = |ip: &Value| {
        let node = arr(&status["nodes"]).iter().find(|n| n["ip"] == *ip);
        node.map_or_else(|| s(ip).to_string(), |n| s(&n["name"]).to_string())
    };
    format!("bgp:{}", hops.iter().map(node_of).collect::<Vec<_>>().join(","))
}

/// kubectl-style tables of nodes, Services, pods, hosts and APIs.
pub fn status_tables(status: &Value) -> String {
    let mut out = String::new();
    let mut nodes = vec![vec![
        "NODE".into(),
        "IP".into(),
        "POD CIDR".into(),
        "READY".into(),
        "AGENT".into(),
        "NETWORK".into(),
        "MODE".into(),
        "ANNOUNCING".into(),
    ]];
    for n in arr(&status["nodes"]) {
        let ann: Vec<&str> = arr(&n["announcing"]).iter().filter_map(Value::as_str).collect();
        nodes.push(vec![
            s(&n["name"]).into(),
            s(&n["ip"]).into(),
            s(&n["podCIDR"]).into(),
            if n["ready"] == true { "True".into() } else { "False".into() },
            n["agent"].as_str().unwrap_or("-").into(),
            n["network"].as_str().unwrap_or("-").into(),
            n["mode"].as_str().unwrap_or("-").into(),
            if ann.is_empty() { "-".into() } else { ann.join(",") },
        ]);
    }
    out.push_str(&table(&nodes));
    if status["api"] == "down" {
        out.push_str("API server: down (no component reaches the control plane)\n");
    }
    let mut svcs = vec![vec![
        "SERVICE".into(),
        "TYPE".into(),
        "CLUSTER-IP".into(),
        "EXTERNAL-IP".into(),
        "PORT(S)".into(),
        "ANNOUNCER".into(),
    ]];
    for sv in arr(&status["services"]) {
        let ext: Vec<&str> = arr(&sv["externalIPs"]).iter().filter_map(Value::as_str).collect();
        let ports: Vec<&str> = arr(&sv["ports"]).iter().filter_map(Value::as_str).collect();
        svcs.push(vec![
            format!("{}/{}", s(&sv["namespace"]), s(&sv["name"])),
            s(&sv["type"]).into(),
            sv["clusterIP"].as_str().unwrap_or("None").into(),
            if ext.is_empty() { "<none>".into() } else { ext.join(",") },
            ports.join(","),
            announcer(status, sv),
        ]);
    }
    out.push('\n');
    out.push_str(&table(&svcs));
    let mut pods = vec![vec!["POD".into(), "NODE".into(), "IP".into(), "READY".into()]];
    for p in arr(&status["pods"]) {
        pods.push(vec![
            format!("{}/{}", s(&p["namespace"]), s(&p["name"])),
            s(&p["node"]).into(),
            s(&p["ip"]).into(),
            p["ready"].to_string(),
        ]);
    }
    for h in arr(&status["hosts"]) {
        pods.push(vec![format!("host/{}", s(&h["name"])), "-".into(), s(&h["ip"]).into(), "-".into()]);
    }
    out.push('\n');
    out.push_str(&table(&pods));
    let mut apis = vec![vec!["API".into(), "ADDRESS".into()]];
    for (k, v) in status["apis"].as_object().into_iter().flatten() {
        let path = if k == "dns" {
            "/api/v1/stats"
        } else if k == "operator" || (k.starts_with("agent/") && !k.ends_with("healthz")) {
            "/api/v1/status"
        } else if k.ends_with("healthz") {
            "/healthz"
        } else if k.ends_with("ready") {
            "/ready"
        } else {
            "/metrics"
        };
        apis.push(vec![k.clone(), crate::certs::url(k, s(v), path)]);
    }
    out.push('\n');
    out.push_str(&table(&apis));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(synced: bool, ip: Option<&str>) -> Value {
        json!({
            "name": "demo", "dir": "/run/tideway-lab/demo",
            "nodes": [{"name": "n1", "ip": "172.18.0.2", "podCIDR": "10.10.0.0/24", "ready": true, "synced": synced, "mode": "iptables", "announcing": ["172.18.255.200"]}],
            "services": [{"namespace": "default", "name": "svc1", "type": "LoadBalancer", "clusterIP": "10.200.1.2",
                          "ports": ["80:30000/TCP"], "externalIPs": ip.into_iter().collect::<Vec<_>>(), "announcer": ip.map(|_| "n1"), "readyEndpoints": 1}],
            "pods": [{"namespace": "default", "name": "web", "node": "n1", "ip": "10.10.0.3", "ready": true, "started": true}],
            "hosts": [{"name": "mypc", "ip": "172.18.0.100"}],
            "apis": {"operator": "127.0.0.1:4000", "agent/n1": "127.0.0.1:4001"},
        })
    }

    #[test]
    fn ready_when_agents_synced_and_load_balancers_announced() {
        assert_eq!(
            readiness(&status(false, None)),
            (
                false,
                "agents synced 0/1, pods started 1/1, LoadBalancer IPs 0/1, announced 0/1 (of those with ready endpoints)"
                    .into()
            )
        );
        assert!(readiness(&status(true, Some("172.18.255.200"))).0);
        let mut cold = status(true, Some("172.18.255.200"));
        cold["pods"][0]["started"] = false.into();
        assert!(!readiness(&cold).0, "a pod whose server does not listen yet");
        // An address nothing serves is never announced: it does not hold the lab back.
        let mut empty = status(true, Some("172.18.255.200"));
        let mut svc = empty["services"][0].clone();
        svc["name"] = "empty".into();
        svc["externalIPs"] = serde_json::json!(["172.18.255.201"]);
        svc["announcer"] = Value::Null;
        svc["readyEndpoints"] = 0.into();
        empty["services"].as_array_mut().unwrap().push(svc.clone());
        assert!(readiness(&empty).0, "{:?}", readiness(&empty));
        svc["readyEndpoints"] = 2.into();
        empty["services"][1] = svc;
        assert!(!readiness(&empty).0, "a served address must be announced");
    }

    #[test]
    fn a_lab_without_tideway_is_ready_with_its_nodes_and_pods_and_tells_how_to_install() {
        let mut st = status(false, None);
        st["components"] = false.into();
        st["nodes"][0]["ready"] = false.into();
        assert_eq!(
            readiness(&st),
            (false, "nodes Ready 0/1, pods started 1/1 (no Tideway: install the chart)".into())
        );
        st["nodes"][0]["ready"] = true.into();
        assert!(readiness(&st).0, "no agent synced and no address assigned, and ready");
        st["podCIDR"] = "10.10.0.0/16".into();
        let t = tour(&st, Duration::from_secs(3));
        assert!(t.contains("--wait --set 'proxyConfig.clusterCIDRs[0]=10.10.0.0/16'"), "{t}");
    }

    #[test]
    fn the_tour_names_real_addresses() {
        let t = tour(&status(true, Some("172.18.255.200")), Duration::from_millis(4200));
        assert!(t.contains("is up in 4.2 s (iptables mode)"), "{t}");
        assert!(t.contains("tideway lab exec mypc -- curl -s 172.18.255.200"), "{t}");
        assert!(
            t.contains(
                "tideway lab kill agent n1; sleep 2; tideway lab exec mypc -- ip neigh show 172.18.255.200"
            ),
            "{t}"
        );
        assert!(t.contains("tideway lab start agent n1 "), "{t}");
        assert!(
            t.contains("default/svc1   LoadBalancer   10.200.1.2   172.18.255.200   80:30000/TCP   n1"),
            "{t}"
        );
        assert!(t.contains("https://127.0.0.1:4001/api/v1/status"), "{t}");
        assert!(t.contains("https://127.0.0.1:4000/api/v1/proxyconfigs/default"), "{t}");
        assert!(t.contains(r#"-d '{"spec": {"mode": "nftables"}}'"#), "{t}");
        let mut with_token = status(true, Some("172.18.255.200"));
        with_token["apiToken"] = "abc123".into();
        assert!(tour(&with_token, Duration::ZERO).contains("need the lab's token: abc123"));
    }

    #[test]
    fn a_lab_with_a_router_is_ready_once_the_router_routes_and_the_tour_goes_through_it() {
        let mut st = status(true, Some("172.18.255.200"));
        let mut bgp = st["services"][0].clone();
        bgp["name"] = "web-local".into();
        bgp["externalIPs"] = serde_json::json!(["203.0.113.10"]);
        bgp["announcer"] = Value::Null;
        bgp["externalTrafficPolicy"] = "Local".into();
        st["services"].as_array_mut().unwrap().push(bgp);
        assert!(!readiness(&st).0, "neither announced over ARP nor routed yet");
        st["nodes"][0]["bgp"] = serde_json::json!({"sessions": 1, "established": 0});
        st["services"][1]["nextHops"] = serde_json::json!(["172.18.0.2"]);
        assert!(!readiness(&st).0, "its session is not established yet");
        st["nodes"][0]["bgp"]["established"] = 1.into();
        st["services"][1]["nextHops"] = serde_json::json!(["172.18.0.2", "172.18.0.9"]);
        assert!(readiness(&st).0, "{:?}", readiness(&st));
        st["routers"] = serde_json::json!([{"name": "tor", "netns": "tw-demo-r-tor"}]);
        st["hosts"] = serde_json::json!([{"name": "far", "ip": "192.168.50.10", "router": "tor"},
                                         {"name": "mypc", "ip": "172.18.0.100", "router": null}]);
        let t = tour(&st, Duration::ZERO);
        assert!(
            t.contains("tideway lab exec mypc -- ip neigh show 172.18.255.200"),
            "layer 2 from the LAN: {t}"
        );
        assert!(t.contains("tideway lab exec tor -- ip route show 203.0.113.10"), "{t}");
        assert!(t.contains("tideway lab exec far -- curl -s 203.0.113.10 | grep Hostname"), "{t}");
        assert!(t.contains("vtysh -N tw-demo-r-tor -c 'show bgp summary'"), "{t}");
        assert!(t.contains("bgp:n1,172.18.0.9"), "next hops by node name, or address: {t}");
    }
}

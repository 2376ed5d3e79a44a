//! `tideway lab` end to end (root): the seed experiments on the built-in demo, traffic
//! policies, Services without endpoints, scaling, live mode switches with an open connection
//! (by `lab apply` and over the operator's REST API),
//! ARP, the faults a cluster has (an agent killed, a node down, a partition, the API down) and
//! failover of the announcer, and `lab down` after a crash. Each test runs its own lab
//! (labs are independent: each has its own LAN namespace).
//!
//! The seed experiments, the faults, the live mode switch and a bad ProxyConfig also run on
//! the real control plane (`lab_kube.rs`'s scenarios). These stay here because the file-fed
//! lab is
//! the demo a newcomer runs first and `make bench-lab` measures: its own faults (`lab start
//! agent`, a cut-off flag the lab's source reads) and its REST-only paths (the lab's token) are
//! not the kube lab's.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

const DEMO: &str = include_str!("../../examples/demo.yaml");

mod lab_support;

use lab_support::*;

#[test]
fn without_root_the_lab_refuses_at_once_and_says_why() {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "lab", "up", "--name", "noroot"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs root (CAP_NET_ADMIN"), "{err}");
}

#[test]
fn the_seed_experiments_work_on_the_demo() {
    let lab = TestLab::up("seed", DEMO, None);
    let lb = lab.lb_ip("svc1");
    wait_serving(&lab, "mypc", &lb, 2);
    // 100 curls from the outside client split across both pods.
    let seen = split(&lab, "mypc", &lb, 100);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (pod, n) in &seen {
        assert!((30..=70).contains(n), "{pod} served {n} of 100: {seen:?}");
    }
    // From a pod: the Service by name through the search path, and its ClusterIP.
    let by_name = lab.curl("webpod1", "http://svc2").expect("svc2 by name from a pod");
    assert!(by_name.starts_with("webpod"), "{by_name}");
    let cip = lab.status()["services"].as_array().unwrap().iter().find(|s| s["name"] == "svc3").unwrap()["clusterIP"]
        .as_str()
        .unwrap()
        .to_string();
    lab.curl("webpod2", &cip).expect("a ClusterIP from a pod");
    let dig = String::from_utf8_lossy(&lab.exec("webpod1", &["dig", "+search", "+short", "svc3"]).stdout)
        .into_owned();
    assert_eq!(dig.trim(), cip);
    // A NodePort from the outside client, on a node without a pod of the Service.
    let np =
        lab.status()["services"].as_array().unwrap().iter().find(|s| s["name"] == "svc1").unwrap()["ports"]
            [0]
        .as_str()
        .unwrap()
        .split(['/', ':'])
        .nth(1)
        .unwrap()
        .to_string();
    lab.curl("mypc", &format!("172.18.0.3:{np}")).expect("NodePort on myk8s-worker3");
    // As on kind's kube-proxy in iptables mode (nodePortAddresses unset): on the node's 127.0.0.1.
    lab.curl("myk8s-worker3", &format!("127.0.0.1:{np}")).expect("NodePort on 127.0.0.1 of myk8s-worker3");
    // ARP for the address resolves to the announcing node's MAC.
    let announcer = lab.announcer("svc1").expect("an announcer");
    let neigh = lab.neighbour("mypc", &lb);
    assert!(neigh.contains(&lab.mac_of(&announcer)), "{neigh} is not {announcer}'s MAC");
}

const LOCAL: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: local}\nspec:\n  type: LoadBalancer\n  externalTrafficPolicy: Local\n  selector: {app: webpod}\n  ports: [{port: 80}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: empty}\nspec:\n  type: LoadBalancer\n  selector: {app: nothing}\n  ports: [{port: 80}]\n";

#[test]
fn traffic_policies_and_services_without_endpoints() {
    let lab = TestLab::up("policy", &format!("{DEMO}{LOCAL}"), Some("nftables"));
    // Cluster: the pod sees a node's address (masqueraded); Local: the client's own.
    let cluster = lab.curl_body("mypc", &lab.lb_ip("svc1"));
    assert!(
        cluster.contains("RemoteAddr: 172.18.0.") && !cluster.contains("RemoteAddr: 172.18.0.100:"),
        "{cluster}"
    );
    let local_ip = lab.lb_ip("local");
    let local = eventually(patience(15.0), || {
        let body = lab.curl_body("mypc", &local_ip);
        if body.contains("RemoteAddr: 172.18.0.100:") { Ok(body) } else { Err(body) }
    });
    local.expect("ETP Local keeps the client address");
    let announcer = lab.announcer("local").expect("announced");
    assert!(
        announcer == "myk8s-worker" || announcer == "myk8s-worker2",
        "only nodes with a pod: {announcer}"
    );
    // The CLI over the lab's APIs: the same answers, with the reasons.
    let explain = ok(tideway(&["explain", "service", "default/local", "--lab", "policy"]), "explain");
    assert!(explain.contains("externalTrafficPolicy: Local"), "{explain}");
    assert!(explain.contains("(eligible: myk8s-worker, myk8s-worker2)"), "only nodes with a pod: {explain}");
    assert!(explain.contains(&format!("announced by:   {announcer}")), "{explain}");
    assert!(explain.contains(&format!("LoadBalancer:   {local_ip}")), "{explain}");
    let status = ok(tideway(&["status", "--lab", "policy"]), "status");
    let programmed = status.lines().filter(|l| l.contains(" nftables ") && l.contains(" yes ")).count();
    assert_eq!(programmed, 4, "every node programmed in nftables mode:\n{status}");
    // Every node's report says it programmed the Service as it is now: its programmed
    // resourceVersion reaches the Service's (the lab's objects carry versions as a cluster's do).
    let on = eventually(patience(15.0), || {
        let explain = ok(tideway(&["explain", "service", "default/local", "--lab", "policy"]), "explain");
        let line = explain.lines().find_map(|l| l.trim().strip_prefix("programmed on:")).unwrap_or("-");
        let nodes: Vec<String> = line.split(',').map(|n| n.trim().to_string()).collect();
        if nodes.len() == 4 { Ok(nodes) } else { Err(explain) }
    });
    on.expect("programmed on every node");
    let dst = format!("{local_ip}:80");
    let args = [
        "trace",
        "--lab",
        "policy",
        "--node",
        &announcer,
        "--src",
        "172.18.0.100",
        "--dst",
        &dst,
        "--from",
        "external",
    ];
    let trace = ok(tideway(&args), "trace --lab");
    let pod_on_announcer = if announcer == "myk8s-worker" { "10.10.1." } else { "10.10.2." };
    assert!(trace.contains("(nftables, programmed)"), "{trace}");
    let verdict = trace.lines().find(|l| l.starts_with("verdict:")).unwrap_or_default();
    assert!(
        verdict.contains(pod_on_announcer) && !verdict.contains('|'),
        "Local: only this node's pod: {trace}"
    );
    // The agents' APIs listen off loopback in their nodes: the lab's token is needed.
    let status = lab.status();
    let agent = api_url(&status, "agent/myk8s-worker", "/api/v1/status");
    let token = format!("authorization: Bearer {}", status["apiToken"].as_str().unwrap());
    let code = |extra: &[&str]| {
        let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5"];
        args.extend(extra);
        args.push(&agent);
        String::from_utf8_lossy(&curl_api(&status).args(&args).output().unwrap().stdout).into_owned()
    };
    assert_eq!(code(&[]), "401");
    assert_eq!(code(&["-H", "authorization: Bearer wrong"]), "401");
    assert_eq!(code(&["-H", &token]), "200");
    // The DNS API says what the server answers, and why.
    let dns = api_url(&status, "dns", "/api/v1/records?name=local.default.svc.cluster.local&type=A");
    let out = curl_api(&status).args(["-s", "--max-time", "5", &dns]).output().unwrap();
    let records: Value = serde_json::from_slice(&out.stdout).expect("records JSON");
    let local = status["services"].as_array().unwrap().iter().find(|s| s["name"] == "local").unwrap();
    assert_eq!(records["answers"][0]["data"], local["clusterIP"], "{records}");
    // No endpoints: refused at once, not a timeout, on its NodePort and its ClusterIP (its
    // LoadBalancer IP is not announced at all while nothing serves, as MetalLB does).
    let svc =
        lab.status()["services"].as_array().unwrap().iter().find(|s| s["name"] == "empty").cloned().unwrap();
    assert!(svc["announcer"].is_null(), "{svc}");
    let node_port = svc["ports"][0].as_str().unwrap().split(['/', ':']).nth(1).unwrap().to_string();
    let cluster_ip = svc["clusterIP"].as_str().unwrap().to_string();
    for (from, url) in [("mypc", format!("172.18.0.4:{node_port}")), ("webpod1", cluster_ip)] {
        let t = Instant::now();
        let out = lab.exec(from, &["curl", "-s", "--max-time", "5", &url]);
        assert_eq!(out.status.code(), Some(7), "connection refused (curl exit 7) from {from} to {url}");
        assert!(t.elapsed() < Duration::from_secs(2), "refused after {:?}", t.elapsed());
    }
    // `tideway mode` over the operator's API: a bad mode is refused naming the field, and
    // nothing changes.
    let out = tideway(&["mode", "ipvz", "--lab", "policy"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("400 spec.mode"), "{err}");
    assert!(lab.status()["nodes"].as_array().unwrap().iter().all(|n| n["mode"] == "nftables"));
}

const HASHED: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: hashed, annotations: {tideway.io/load-balancing: maglev}}\nspec:\n  type: LoadBalancer\n  selector: {app: webpod}\n  ports: [{port: 80}]\n";

/// A Maglev Service with externalTrafficPolicy Cluster, its address routed by the client
/// through one node and then another (as ECMP in front of the nodes would): each flow (fixed
/// source port) reaches the same pod through either node, the one `tideway trace` names.
#[test]
fn a_maglev_flow_reaches_the_same_pod_through_any_node() {
    let lab = TestLab::up("maglev", &format!("{DEMO}{HASHED}"), Some("nftables"));
    let lb = lab.lb_ip("hashed");
    wait_serving(&lab, "mypc", &lb, 2);
    // Source ports above the kernel's ephemeral range (32768-60999), so no curl of the waits
    // below can hold one of them.
    let ports = 61_001..61_021u16;
    let through = |node: &str| -> BTreeMap<u16, String> {
        ok(lab.exec("mypc", &["ip", "route", "replace", &format!("{lb}/32"), "via", node]), "ip route");
        // Each node programs the Service on its own time: the pass starts once this one serves.
        wait_serving(&lab, "mypc", &lb, 2);
        // One HTTP/1.0 request per source port, the socket closed with a reset (linger 0) so
        // that no TIME_WAIT keeps the port from connecting again through the other node.
        let client = format!(
            "import socket, struct\nfor p in range({}, {}):\n s = socket.socket()\n s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n s.settimeout(2)\n s.bind(('172.18.0.100', p))\n s.connect(('{lb}', 80))\n s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n d = b''\n while True:\n  c = s.recv(4096)\n  if not c: break\n  d += c\n name = [l[10:] for l in d.decode().splitlines() if l.startswith('Hostname: ')]\n print(p, name[0] if name else '?')\n s.close()\n",
            ports.start, ports.end
        );
        let out = ok(lab.exec("mypc", &["python3", "-c", &client]), "the client's connections");
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(p, who)| (p.parse().expect("port"), who.to_string()))
            .collect()
    };
    let first = through("172.18.0.4");
    let second = through("172.18.0.5");
    assert_eq!(first.len(), 20, "{first:?}");
    let conntrack =
        ok(lab.exec("myk8s-worker2", &["conntrack", "-L", "-p", "tcp", "--sport", "61001"]), "conntrack");
    assert!(conntrack.contains(&lb), "the second pass went through myk8s-worker2: {conntrack}");
    assert_eq!(first, second, "each flow reaches one pod through either node");
    let pods: std::collections::BTreeSet<&String> = first.values().collect();
    assert_eq!(pods.len(), 2, "20 flows reach both pods: {first:?}");
    for port in ports.clone().take(4) {
        let (src, dst) = (format!("172.18.0.100:{port}"), format!("{lb}:80"));
        let args = [
            "trace",
            "--lab",
            "maglev",
            "--node",
            "myk8s-worker",
            "--src",
            &src,
            "--dst",
            &dst,
            "--from",
            "external",
        ];
        let trace = ok(tideway(&args), "trace --lab");
        let verdict = trace.lines().find(|l| l.starts_with("verdict:")).unwrap_or_default().to_string();
        let pod_ip = lab.status()["pods"].as_array().and_then(|p| {
            p.iter()
                .find(|x| x["name"] == first[&port].as_str())
                .and_then(|x| x["ip"].as_str().map(str::to_string))
        });
        let pod_ip = pod_ip.unwrap_or_else(|| panic!("no IP for {} in the lab status", first[&port]));
        assert!(verdict.contains(&format!("{pod_ip}:")) && !verdict.contains('|'), "port {port}: {trace}");
    }
    let explain = ok(tideway(&["explain", "service", "default/hashed", "--lab", "maglev"]), "explain");
    assert!(explain.contains("load balancing: maglev (tideway.io/load-balancing)"), "{explain}");
    assert!(explain.contains("    maglev (4093 buckets) on myk8s-control-plane, myk8s-worker"), "{explain}");
}

#[test]
fn scale_to_zero_and_back() {
    let lab = TestLab::up("scale", DEMO, Some("iptables"));
    let lb = lab.lb_ip("svc1");
    lab.curl("mypc", &lb).expect("served");
    let no_pods: String =
        DEMO.split("\n---").filter(|d| !d.contains("kind: Pod")).collect::<Vec<_>>().join("\n---");
    lab.change("replace", &no_pods);
    eventually(patience(15.0), || {
        match lab.exec("mypc", &["curl", "-s", "--max-time", "2", &lb]).status.code() {
            Some(7) => Ok(()),
            other => Err(format!("curl exit {other:?}")),
        }
    })
    .expect("refused with no pods");
    lab.apply(DEMO);
    eventually(patience(15.0), || lab.curl("mypc", &lb)).expect("served again");
    // The endpoints changed while the agents ran: kube-proxy's programming latency, from the
    // slices' trigger times (the lab's control plane stamps them) to the kernel.
    let status = lab.status();
    let metrics = api_url(&status, "agent/myk8s-worker", "/metrics");
    let text = eventually(patience(15.0), || {
        let out = curl_api(&status).args(["-s", "--max-time", "5", &metrics]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix("kubeproxy_network_programming_duration_seconds_count "))
            .and_then(|n| n.trim().parse::<u64>().ok());
        if count.is_some_and(|n| n > 0) { Ok(text) } else { Err(text) }
    });
    assert!(text.is_ok(), "no programming latency observed:\n{}", text.unwrap_err());
}

const WORKER4: &str = "---\napiVersion: v1\nkind: Node\nmetadata: {name: myk8s-worker4}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: webpod3, labels: {app: webpod}}\nspec:\n  nodeName: myk8s-worker4\n  containers: [{name: c, image: whoami, ports: [{containerPort: 80}]}]\n";

#[test]
fn nodes_and_pods_come_with_lab_apply_and_go_with_lab_delete() {
    let lab = TestLab::up("grow", DEMO, Some("nftables"));
    let lb = lab.lb_ip("svc1");
    lab.apply(WORKER4);
    let seen = eventually(patience(10.0), || {
        let seen = split(&lab, "mypc", &lb, 30);
        if seen.len() == 3 { Ok(seen) } else { Err(format!("{seen:?}")) }
    });
    seen.expect("the new node's pod serves too");
    // Seen serving through svc1 says the new node's pod is an endpoint, not that its own agent
    // has programmed svc2 yet: ask until it has.
    let from_new_node = eventually(patience(10.0), || lab.curl("webpod3", "http://svc2"))
        .expect("the new node reaches the Services");
    assert!(from_new_node.starts_with("webpod"));
    // Removal is graceful: the endpoint goes first, the pod and its node a little later, so
    // not one connection fails on the way.
    lab.change("delete", WORKER4);
    eventually(patience(10.0), || {
        let seen = split(&lab, "mypc", &lb, 20);
        if seen.contains_key("webpod3") { Err(format!("{seen:?}")) } else { Ok(()) }
    })
    .expect("the removed pod serves no more");
    eventually(patience(15.0), || {
        let netns =
            String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout)
                .into_owned();
        let gone = !netns.contains("tw-grow-n-myk8s-worker4") && !netns.contains("tw-grow-p-default-webpod3");
        if gone { Ok(()) } else { Err(netns) }
    })
    .expect("the removed node and pod leave no namespace");
    assert!(lab.status()["nodes"].as_array().unwrap().iter().all(|n| n["mode"] == "nftables"));
}

/// `PATCH /api/v1/proxyconfigs/default` to `mode` with curl on the host (with `token` when
/// given): the HTTP status and the JSON answer.
fn patch_mode(lab: &TestLab, mode: &str, token: Option<&str>) -> (u16, Value) {
    let status = lab.status();
    let url = api_url(&status, "operator", "/api/v1/proxyconfigs/default");
    let body = format!(r#"{{"spec": {{"mode": "{mode}"}}}}"#);
    let mut args = vec!["-s", "--max-time", "5", "-X", "PATCH", "-w", "\n%{http_code}"];
    args.extend(["-H", "content-type: application/merge-patch+json", "-d", &body]);
    let auth = token.map(|t| format!("authorization: Bearer {t}"));
    if let Some(a) = &auth {
        args.extend(["-H", a]);
    }
    args.push(&url);
    let out = curl_api(&status).args(&args).output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn live_mode_switch_keeps_an_open_connection_and_leaves_nothing_behind() {
    let lab = TestLab::up("switch", DEMO, Some("iptables"));
    let lb = lab.lb_ip("svc1");
    let node = lab.announcer("svc1").unwrap();
    let mut conn = Conn::open(&lab, "mypc", &lb);
    let first = conn.ask();
    assert!(first.starts_with("webpod"), "{first}");
    // The first switch by `lab apply` of a changed file, the second over the operator's REST
    // API (a JSON merge patch with the lab's token), as a user with curl would.
    for (mode, over_rest) in [("nftables", false), ("iptables", true)] {
        if over_rest {
            let (code, p) = patch_mode(&lab, mode, None);
            assert_eq!(code, 401, "no token: {p}");
            let (code, p) = patch_mode(&lab, "ipvz", lab.status()["apiToken"].as_str());
            assert_eq!((code, p["errors"][0]["field"].as_str()), (400, Some("spec.mode")), "{p}");
            let (code, p) = patch_mode(&lab, mode, lab.status()["apiToken"].as_str());
            assert_eq!((code, p["spec"]["mode"].as_str()), (202, Some(mode)), "{p}");
        } else {
            lab.apply(&DEMO.replace("mode: iptables", &format!("mode: {mode}")));
        }
        wait_switched(&lab, &node, mode);
        assert_eq!(conn.ask(), first, "the open connection survived the switch to {mode}");
        lab.curl("mypc", &lb).expect("new connections too");
    }
}

/// Kills `fault` on the node announcing `lb` and waits for `mypc`'s neighbour entry to point
/// at another node that serves it; the old announcer and how long the move took. How fast is
/// the benchmark's to measure (`make bench-lab`): a test on a loaded machine asserts only that
/// the address moves, within a bound generous enough never to flake.
fn fail_over(lab: &TestLab, lb: &str, fault: &[&str]) -> (String, Duration) {
    lab.curl("mypc", lb).expect("served before the fault");
    let old = lab.announcer("svc1").unwrap();
    let old_mac = lab.mac_of(&old);
    assert!(lab.neighbour("mypc", lb).contains(&old_mac));
    let mut args = vec!["lab"];
    args.extend(fault.iter().map(|a| if *a == "NODE" { old.as_str() } else { a }));
    args.extend(["--name", &lab.name]);
    let started = Instant::now();
    ok(tideway(&args), "the fault");
    let moved = eventually(patience(10.0), || {
        let n = lab.neighbour("mypc", lb);
        if !n.contains(&old_mac) && n.contains("lladdr") { Ok(n) } else { Err(n) }
    })
    .unwrap_or_else(|e| panic!("the address did not move: {e}\n{}", lab.diagnose()));
    let took = started.elapsed();
    let new = lab.announcer("svc1").unwrap();
    assert_ne!(new, old);
    assert!(moved.contains(&lab.mac_of(&new)), "{moved}");
    lab.curl("mypc", lb).expect("served through the new announcer");
    assert_eq!(node_row(lab, &old)["ready"], true, "the Node is still Ready: the agents' gossip moved it");
    (old, took)
}

#[test]
fn the_address_moves_when_the_announcing_agent_dies_or_its_node_drops_off_while_the_node_stays_ready() {
    let lab = TestLab::up("failover", DEMO, Some("nftables"));
    let lb = lab.lb_ip("svc1");
    // The agent killed: kubelet still runs, so the Node stays Ready; the gossip tells the
    // operator (target 2 s, measured by the benchmark), and nothing restarts the agent until asked.
    let (old, _) = fail_over(&lab, &lb, &["kill", "agent", "NODE"]);
    assert_eq!(node_row(&lab, &old)["agent"], "killed");
    ok(tideway(&["lab", "start", "agent", &old, "--name", &lab.name]), "lab start agent");
    eventually(patience(10.0), || {
        let row = node_row(&lab, &old);
        if row["agent"] == "running" && row["synced"] == true { Ok(()) } else { Err(row.to_string()) }
    })
    .expect("the agent runs again");
    // MetalLB's speaker runs only in a kube lab that installs it: here a clear refusal.
    let refused = tideway(&["lab", "kill", "speaker", &old, "--name", &lab.name]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("only in a kube lab"), "{said}");
    // The whole node off the network (Ready for the 50 s grace period): it moves all the same.
    let (old, _) = fail_over(&lab, &lb, &["node", "NODE", "down"]);
    assert_eq!(node_row(&lab, &old)["network"], "down");
    ok(tideway(&["lab", "node", &old, "up", "--name", &lab.name]), "lab node up");
    // The returning node rejoins the gossip and the announcement may settle again: served
    // within the test's patience, not necessarily by the very first connection.
    eventually(patience(10.0), || lab.curl("mypc", &lb)).expect("served");
}

#[test]
fn a_node_cut_off_turns_not_ready_after_the_grace_period() {
    let lab = TestLab::up_with("grace", DEMO, &["--mode", "nftables", "--node-monitor-grace-period", "2s"]);
    let node = "myk8s-worker3";
    ok(tideway(&["lab", "node", node, "down", "--name", &lab.name]), "lab node down");
    assert_eq!(node_row(&lab, node)["ready"], true, "Ready until the grace period ran out");
    eventually(patience(15.0), || {
        let row = node_row(&lab, node);
        if row["ready"] == false { Ok(()) } else { Err(row.to_string()) }
    })
    .expect("NotReady after the grace period");
    ok(tideway(&["lab", "node", node, "up", "--name", &lab.name]), "lab node up");
    eventually(patience(15.0), || {
        let row = node_row(&lab, node);
        if row["ready"] == true && row["network"] == "up" { Ok(()) } else { Err(row.to_string()) }
    })
    .expect("the node is back");
}

/// What node `node`'s agent says of itself (its REST API, forwarded to the host: the forward
/// enters the node's namespace, which a partition does not cut).
fn agent_status(lab: &TestLab, node: &str) -> Result<Value, String> {
    let s = lab.status();
    let url = api_url(&s, &format!("agent/{node}"), "/api/v1/status");
    let token = s["apiToken"].as_str().unwrap_or_default().to_string();
    let out = curl_api(&s)
        .args(["-s", "--max-time", "1", "-H", &format!("authorization: Bearer {token}")])
        .arg(url)
        .output()
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Whether node `node`'s agent says it is fenced.
fn fenced(lab: &TestLab, node: &str) -> Result<bool, String> {
    let v = agent_status(lab, node)?;
    v["fenced"].as_bool().ok_or_else(|| v.to_string())
}

const ON_LB0: &str = "---\napiVersion: tideway.io/v1alpha1\nkind: LoadBalancerPool\nmetadata: {name: my-ippool}\nspec:\n  addresses: [172.18.255.200-172.18.255.250]\n  l2: {interfaces: [lb0]}\n";

/// A ClusterIP Service: a change every agent syncs on.
const NUDGE: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: nudge}\nspec: {selector: {app: webpod}, ports: [{port: 81}]}\n";

const THREE: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: web1}\nspec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web2}\nspec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web3}\nspec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}\n";

/// A pool announced on an interface only one node has (MetalLB's L2Advertisement
/// `interfaces`): the other nodes' agents say they lack it, the operator moves every address
/// of the pool to the node that has it, and mypc is served through that interface.
#[test]
fn only_a_node_with_the_pools_interface_announces_its_addresses() {
    let lab = TestLab::up("ifaces", &format!("{DEMO}{THREE}"), Some("nftables"));
    let services = ["svc1", "web1", "web2", "web3"];
    for svc in services {
        lab.lb_ip(svc);
    }
    // lb0: a macvlan of myk8s-worker2's eth0, so on the node network too; no address yet.
    let add = ["ip", "link", "add", "lb0", "link", "eth0", "type", "macvlan", "mode", "bridge"];
    ok(lab.exec("myk8s-worker2", &add), "a macvlan on myk8s-worker2");
    ok(lab.exec("myk8s-worker2", &["ip", "link", "set", "lb0", "up"]), "lb0 up");
    let loose = ["sh", "-c", "echo 2 > /proc/sys/net/ipv4/conf/lb0/rp_filter"];
    ok(lab.exec("myk8s-worker2", &loose), "loose reverse-path filtering on lb0");
    lab.apply(ON_LB0);
    // Reverse-path filtering drops what arrives on an interface without an IPv4 address: the
    // agent says so, and no longer once lb0 has an address of its own, as a VLAN interface has.
    let warnings = |want: bool| {
        eventually(patience(15.0), || {
            let status = agent_status(&lab, "myk8s-worker2")?;
            let w = &status["interface_warnings"];
            let has = w
                .as_array()
                .is_some_and(|a| a.iter().any(|m| m.as_str().unwrap_or("").starts_with("lb0 has no IPv4")));
            if has == want { Ok(()) } else { Err(format!("interface_warnings {w}")) }
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()))
    };
    warnings(true);
    ok(lab.exec("myk8s-worker2", &["ip", "addr", "add", "172.18.0.55/32", "dev", "lb0"]), "lb0's address");
    lab.apply(NUDGE);
    warnings(false);
    eventually(patience(15.0), || {
        let who: Vec<Option<String>> = services.iter().map(|s| lab.announcer(s)).collect();
        if who.iter().all(|w| w.as_deref() == Some("myk8s-worker2")) {
            Ok(())
        } else {
            Err(format!("{who:?}"))
        }
    })
    .unwrap_or_else(|e| panic!("announcers {e}\n{}", lab.diagnose()));
    for node in ["myk8s-control-plane", "myk8s-worker", "myk8s-worker3"] {
        let status = agent_status(&lab, node).expect("agent status");
        assert_eq!(status["missing_interfaces"], serde_json::json!(["lb0"]), "{node}: {status}");
    }
    let lb = lab.lb_ip("web2");
    lab.curl("mypc", &lb).expect("served through lb0");
    let lb0 = ok(lab.exec("myk8s-worker2", &["cat", "/sys/class/net/lb0/address"]), "lb0's MAC");
    let neigh = lab.neighbour("mypc", &lb);
    assert!(neigh.contains(lb0.trim()), "{neigh} is not lb0's MAC {lb0}");
}

#[test]
fn a_partitioned_node_still_reaches_outside_hosts_fences_itself_and_the_api_can_go_down() {
    let lab = TestLab::up("partition", DEMO, Some("nftables"));
    let lb = lab.lb_ip("svc1");
    lab.curl("mypc", &lb).expect("served");
    let node = lab.announcer("svc1").unwrap();
    let other = ["myk8s-worker3", "myk8s-worker2"].into_iter().find(|n| *n != node).unwrap();
    // Any HTTP answer from the agent's health port is a connection made.
    let ping = |from: &str, to: &str| {
        lab.exec(from, &["curl", "-s", "--max-time", "1", &format!("http://{to}:10256/healthz")])
            .status
            .success()
    };
    let ip = node_row(&lab, &node)["ip"].as_str().unwrap().to_string();
    let other_ip = node_row(&lab, other)["ip"].as_str().unwrap().to_string();
    assert!(ping("mypc", &ip) && ping(&node, &other_ip), "the node network works");
    assert_eq!(fenced(&lab, &node), Ok(false));
    ok(tideway(&["lab", "partition", &node, "--name", &lab.name]), "lab partition");
    assert_eq!(node_row(&lab, &node)["network"], "partitioned");
    assert!(ping("mypc", &ip), "an outside host still reaches the partitioned node");
    assert!(!ping(&node, &other_ip) && !ping(other, &ip), "the other nodes do not");
    // Cut off from the majority and the API server, the agent stops answering for its
    // addresses; the others move them.
    eventually(patience(15.0), || if fenced(&lab, &node)? { Ok(()) } else { Err("not fenced".into()) })
        .expect("the partitioned agent fences itself");
    eventually(patience(15.0), || {
        let a = lab.announcer("svc1").ok_or("no announcer")?;
        if a != node { lab.curl("mypc", &lb) } else { Err(a) }
    })
    .expect("the address moved and is served");
    ok(tideway(&["lab", "heal", &node, "--name", &lab.name]), "lab heal");
    assert!(ping(&node, &other_ip), "healed");
    eventually(patience(15.0), || if fenced(&lab, &node)? { Err("still fenced".into()) } else { Ok(()) })
        .expect("the fence lifts");
    // The API down alone fences nobody.
    ok(tideway(&["lab", "api", "down", "--name", &lab.name]), "lab api down");
    assert_eq!(lab.status()["api"], "down");
    assert!(
        ok(tideway(&["lab", "status", "--name", &lab.name]), "lab status").contains("API server: down"),
        "lab status says so"
    );
    std::thread::sleep(patience(1.0));
    assert_eq!(fenced(&lab, &node), Ok(false));
    lab.curl("mypc", &lb).expect("served during the API outage");
    ok(tideway(&["lab", "api", "up", "--name", &lab.name]), "lab api up");
    assert_eq!(lab.status()["api"], "up");
}

#[test]
fn down_removes_everything_even_after_kill_9() {
    let lab = TestLab::up("crash", DEMO, Some("nftables"));
    let lab_pid = std::fs::read_to_string("/run/tideway-lab/crash/ready").unwrap().trim().to_string();
    Command::new("kill").args(["-9", &lab_pid]).status().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    ok(tideway(&["lab", "down", "--name", "crash"]), "lab down");
    let netns = String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout)
        .into_owned();
    assert!(!netns.contains("tw-crash-"), "{netns}");
    assert!(!std::path::Path::new("/run/tideway-lab/crash").exists());
    let etc: Vec<String> = std::fs::read_dir("/etc/netns")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!etc.iter().any(|e| e.starts_with("tw-crash-")), "{etc:?}");
    let ps = String::from_utf8_lossy(&Command::new("ps").args(["-eo", "args"]).output().unwrap().stdout)
        .into_owned();
    assert!(!ps.lines().any(|l| l.contains("lab:/run/tideway-lab/crash")), "processes left:\n{ps}");
    // Idempotent.
    ok(tideway(&["lab", "down", "--name", "crash"]), "lab down again");
    drop(lab);
}

/// The seed experiments and a live switch with IPVS programming the nodes (the host kernel has
/// no IPVS: `make test-ipvs` runs this in a VM; the host run leaves it out).
#[test]
fn ipvs_mode_runs_the_seed_experiments_and_switches_live() {
    let lab = TestLab::up("ipvs", DEMO, Some("ipvs"));
    let lb = lab.lb_ip("svc1");
    wait_serving(&lab, "mypc", &lb, 2);
    let seen = split(&lab, "mypc", &lb, 40);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (pod, n) in &seen {
        assert!((8..=32).contains(n), "{pod} served {n} of 40: {seen:?}");
    }
    // A name lookup and a connection through IPVS, each of which can take most of curl's 2 s
    // in an emulated VM: tried within the test's patience.
    let by_name =
        eventually(patience(5.0), || lab.curl("webpod1", "http://svc2")).expect("svc2 by name from a pod");
    assert!(by_name.starts_with("webpod"), "{by_name}");
    // The node-local DNS listener, link-local only in IPVS mode (IPVS takes the ClusterIP's
    // packets at LOCAL_IN before a socket sees them): the pod's node answers at 169.254.20.10.
    let svc2_ip = lab.status()["services"].as_array().unwrap().iter().find(|s| s["name"] == "svc2").cloned();
    let svc2_ip = svc2_ip.expect("svc2")["clusterIP"].as_str().unwrap().to_string();
    let local = eventually(patience(5.0), || {
        let out = lab.exec(
            "webpod1",
            &["dig", "+short", "+time=2", "+tries=1", "@169.254.20.10", "svc2.default.svc.cluster.local"],
        );
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if got == svc2_ip { Ok(got) } else { Err(format!("dig @169.254.20.10 svc2 from webpod1: {got:?}")) }
    });
    local.expect("the node-local listener answers in IPVS mode");
    // Only the announcer answers ARP (strictARP keeps the other nodes, which hold the address
    // on kube-ipvs0, silent).
    let announcer = lab.announcer("svc1").expect("an announcer");
    let neigh = lab.neighbour("mypc", &lb);
    assert!(neigh.contains(&lab.mac_of(&announcer)), "{neigh} is not {announcer}'s MAC");
    for mode in ["nftables", "ipvs"] {
        lab.apply(&DEMO.replace("mode: iptables", &format!("mode: {mode}")));
        // Every agent's first transactions in a mode load the kernel modules they use; in an
        // emulated VM that alone can take minutes (the VM script loads them before the tests).
        wait_all_in_mode(&lab, mode, patience(40.0));
        eventually(patience(15.0), || lab.curl("mypc", &lb))
            .unwrap_or_else(|e| panic!("after the switch to {mode}: {e}"));
    }
}

//! The lab's scenarios on the real control plane, in the kube demo's one lab: the seed
//! experiments; a fault of each kind (an agent SIGKILLed on a Ready node, which its kubelet
//! restarts; a node off the network; a partition; the API server refusing every node); the
//! live mode switch made with `kubectl`; and a bad ProxyConfig, which the API server refuses
//! while nothing programmed is lost. They found that an object the components refuse got its
//! condition only when something else woke the operator (now a refusal wakes it), and that a
//! partitioned agent never fenced itself: reading only its own Node, as in any cluster, it
//! counted itself the whole cluster, and its watches' connections went silent rather than
//! failing (now it counts the agents its gossip has seen and asks the API server while it
//! reaches a minority). The file-fed lab's agents read every Node and its cut-off flag tells
//! them at once, which hid both.
//!
//! A node a fault takes off is never the control plane's (the API server runs in its
//! namespace) nor the operator leader's (a leader cut off cannot move anything): the faults'
//! own Service is announced only by the other workers ([`fault_target`]).
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use super::{kubectl, kubectl_json};
use crate::lab_support::*;

/// The control-plane node (the API server's namespace).
const CONTROL_PLANE: &str = "myk8s-control-plane";

fn service(lab: &TestLab, name: &str) -> Value {
    let s = lab.status();
    s["services"].as_array().unwrap().iter().find(|x| x["name"] == name).cloned().unwrap()
}

/// The demo's seed experiments, as the file-fed lab's test runs them.
pub(crate) fn the_seed_experiments(lab: &TestLab) {
    let lb = lab.lb_ip("svc1");
    wait_serving_within(lab, "mypc", &lb, 2, patience(60.0));
    // 100 curls from the outside client split across both pods.
    let seen = split(lab, "mypc", &lb, 100);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (pod, n) in &seen {
        assert!((30..=70).contains(n), "{pod} served {n} of 100: {seen:?}");
    }
    // From a pod: a name through the search path once the cluster DNS answers it (its Pods
    // may still be starting), the Service by name, and a ClusterIP.
    let cip = service(lab, "svc3")["clusterIP"].as_str().unwrap().to_string();
    let dig = eventually(patience(60.0), || {
        let out = lab.exec("webpod1", &["dig", "+search", "+short", "+time=2", "+tries=1", "svc3"]);
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if got == cip { Ok(got) } else { Err(format!("dig svc3 from webpod1: {got:?}, want {cip}")) }
    });
    dig.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    let by_name =
        eventually(patience(15.0), || lab.curl("webpod1", "http://svc2")).expect("svc2 by name from a pod");
    assert!(by_name.starts_with("webpod"), "{by_name}");
    lab.curl("webpod2", &cip).expect("a ClusterIP from a pod");
    // A NodePort the API server allocated, from the outside client and on a node's 127.0.0.1
    // (iptables mode, as kube-proxy's with nodePortAddresses unset).
    let ports = service(lab, "svc1")["ports"][0].as_str().unwrap().to_string();
    let np = ports.split(['/', ':']).nth(1).unwrap().to_string();
    let ip = node_row(lab, "myk8s-worker3")["ip"].as_str().unwrap().to_string();
    lab.curl("mypc", &format!("{ip}:{np}")).expect("NodePort on myk8s-worker3");
    lab.curl("myk8s-worker3", &format!("127.0.0.1:{np}")).expect("NodePort on 127.0.0.1 of myk8s-worker3");
    // ARP for the address resolves to the announcing node's MAC.
    let announcer = lab.announcer("svc1").expect("an announcer");
    let neigh = lab.neighbour("mypc", &lb);
    assert!(neigh.contains(&lab.mac_of(&announcer)), "{neigh} is not {announcer}'s MAC");
}

/// The node the operator's leader runs on (its Lease's holder is its Pod).
fn leader_node(lab: &TestLab) -> String {
    let lease = kubectl_json(lab, &["-n", "tideway-system", "get", "lease", "tideway-operator"]);
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_else(|| panic!("no leader: {lease}"));
    let pod = kubectl_json(lab, &["-n", "tideway-system", "get", "pod", holder]);
    pod["spec"]["nodeName"].as_str().unwrap().to_string()
}

/// The Service the faults take its announcer off: the demo's web pods behind an address of
/// [`FAULT_POOL`], which only the workers that do not run the operator's leader announce.
const FAULT_SERVICE: &str = "faultweb";
const FAULT_POOL: &str = "faults";

/// The pool and Service of the faults, announced only by `nodes`.
fn fault_objects(nodes: &[String]) -> String {
    let nodes = nodes.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ");
    format!(
        "apiVersion: tideway.io/v1alpha1\nkind: LoadBalancerPool\nmetadata: {{name: {FAULT_POOL}}}\n\
         spec:\n  addresses: [172.18.254.10-172.18.254.19]\n  autoAssign: false\n  l2:\n    nodeSelectors:\n\
         \x20   - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{nodes}]}}]\n\
         ---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {FAULT_SERVICE}\n\
         \x20 annotations: {{tideway.io/address-pool: {FAULT_POOL}}}\nspec:\n  type: LoadBalancer\n\
         \x20 selector: {{app: webpod}}\n  ports: [{{port: 80, targetPort: 80}}]\n"
    )
}

/// The address a fault takes off its announcer, announced by a node that is neither the
/// control plane's nor the operator leader's, with a ready endpoint on another node (so it can
/// be served while that node is cut off): (the address, the node). Which node announces the
/// demo's Services is the operator's choice, and after a fault or two none may qualify: the
/// faults' own Service is announced only by the workers the leader does not run on (at least
/// two), its endpoints are the demo's web pods (on two nodes).
pub(crate) fn fault_target(lab: &TestLab) -> (String, String) {
    let leader = leader_node(lab);
    let status = lab.status();
    let nodes: Vec<String> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str().map(str::to_string))
        .filter(|n| n != CONTROL_PLANE && *n != leader)
        .collect();
    assert!(nodes.len() >= 2, "two workers besides the leader's: {nodes:?}");
    let file = std::env::temp_dir().join(format!("fault-objects-{}.yaml", std::process::id()));
    std::fs::write(&file, fault_objects(&nodes)).unwrap();
    let applied = kubectl(lab, &["apply", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    applied.unwrap_or_else(|e| panic!("the faults' pool and Service: {e}"));
    let found = eventually(patience(30.0), || {
        let s = lab.status();
        let svc = s["services"].as_array().unwrap().iter().find(|x| x["name"] == FAULT_SERVICE).cloned();
        let svc = svc.ok_or("no Service yet")?;
        let (ip, node) = (svc["externalIPs"][0].as_str(), svc["announcer"].as_str());
        match (ip, node) {
            (Some(ip), Some(node))
                if nodes.iter().any(|n| n == node) && endpoint_off(lab, "default", FAULT_SERVICE, node) =>
            {
                Ok((ip.to_string(), node.to_string()))
            }
            _ => Err(format!("{FAULT_SERVICE} not announced by one of {nodes:?} yet: {svc}")),
        }
    });
    let (ip, node) = found.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    wait_serving_within(lab, "mypc", &ip, 1, patience(30.0));
    (ip, node)
}

/// Whether Service `ns/name` has a ready endpoint on a node other than `node` (its
/// EndpointSlices, as the EndpointSlice controller wrote them).
fn endpoint_off(lab: &TestLab, ns: &str, name: &str, node: &str) -> bool {
    let selector = format!("kubernetes.io/service-name={name}");
    let slices = kubectl_json(lab, &["-n", ns, "get", "endpointslices", "-l", &selector]);
    let endpoints = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default());
    endpoints.into_iter().any(|e| e["conditions"]["ready"] == true && e["nodeName"] != node)
}

/// Which Service `lb` belongs to.
fn service_of(lab: &TestLab, lb: &str) -> String {
    let s = lab.status();
    let svc = s["services"].as_array().unwrap().iter().find(|x| x["externalIPs"][0] == lb).cloned();
    svc.and_then(|x| x["name"].as_str().map(str::to_string)).unwrap_or_else(|| panic!("no Service has {lb}"))
}

/// Waits until `mypc`'s neighbour entry for `lb` names a node other than `old` that serves
/// it, and the lab shows that node as the announcer; the new node.
fn moved_off(lab: &TestLab, lb: &str, old: &str) -> String {
    let svc = service_of(lab, lb);
    let old_mac = lab.mac_of(old);
    let new = eventually(patience(15.0), || {
        let n = lab.neighbour("mypc", lb);
        let new = lab.announcer(&svc).ok_or("no announcer")?;
        if new != old && !n.contains(&old_mac) && n.contains(&lab.mac_of(&new)) {
            Ok(new)
        } else {
            Err(format!("{svc} announced by {new}, mypc's entry {n}"))
        }
    });
    let new = new.unwrap_or_else(|e| panic!("the address did not move off {old}: {e}\n{}", lab.diagnose()));
    // A pod on the node cut off stays an endpoint until its Node turns NotReady (as with
    // kube-proxy): a connection sent to it times out, so some tries may fail.
    eventually(patience(30.0), || lab.curl("mypc", lb))
        .unwrap_or_else(|e| panic!("not served through the new announcer {new}: {e}\n{}", lab.diagnose()));
    new
}

/// The agent Pod's container status on `node`.
fn agent_container(lab: &TestLab, node: &str) -> Value {
    let pods = kubectl_json(lab, &["get", "pods", "-A", "-l", "app.kubernetes.io/component=agent"]);
    let pod = pods["items"].as_array().unwrap().iter().find(|p| p["spec"]["nodeName"] == node).cloned();
    let pod = pod.unwrap_or_else(|| panic!("no agent Pod on {node}"));
    pod["status"]["containerStatuses"][0].clone()
}

/// `lab kill agent` SIGKILLs the announcing agent's container: its kubelet restarts it (exit
/// 137 recorded, the restart counted), the Node stays Ready, the restarted agent syncs and
/// the address is served, by it or by the node it moved to meanwhile. `lab start agent` is
/// the file-fed lab's: here it is refused, saying why.
pub(crate) fn an_agent_killed_on_a_ready_node_is_restarted_by_its_kubelet(lab: &TestLab) {
    let (lb, node) = fault_target(lab);
    let before = agent_container(lab, &node)["restartCount"].as_i64().unwrap();
    let killed_at = k8s_now();
    ok(tideway(&["lab", "kill", "agent", &node, "--name", &lab.name]), "lab kill agent");
    let restarted = eventually(patience(60.0), || {
        let c = agent_container(lab, &node);
        if c["restartCount"].as_i64() > Some(before) && c["ready"] == true {
            Ok(c)
        } else {
            Err(c.to_string())
        }
    });
    let restarted = restarted.unwrap_or_else(|e| panic!("not restarted: {e}\n{}", lab.diagnose()));
    assert_eq!(restarted["lastState"]["terminated"]["exitCode"], 137, "{restarted}");
    assert_eq!(node_row(lab, &node)["ready"], true, "the Node stays Ready");
    eventually(patience(30.0), || {
        let row = node_row(lab, &node);
        let since = row["lastSync"].as_str().unwrap_or_default() >= killed_at.as_str();
        if row["synced"] == true && since { Ok(()) } else { Err(row.to_string()) }
    })
    .unwrap_or_else(|e| panic!("the restarted agent did not sync: {e}"));
    eventually(patience(15.0), || lab.curl("mypc", &lb)).expect("served after the restart");
    let start = tideway(&["lab", "start", "agent", &node, "--name", &lab.name]);
    assert!(!start.status.success(), "lab start agent in a kube lab");
    assert!(String::from_utf8_lossy(&start.stderr).contains("kubelet restarts"), "{start:?}");
}

/// Now as the API server writes times (second precision, UTC).
fn k8s_now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The node off the network, its Node Ready for the grace period: the agents' gossip moves its
/// address; then the controller-manager turns it NotReady (Unknown), as the audit log shows.
/// It comes back. The node: its name.
pub(crate) fn a_node_off_the_network_loses_its_address_then_turns_not_ready(lab: &TestLab) -> String {
    let (lb, node) = fault_target(lab);
    ok(tideway(&["lab", "node", &node, "down", "--name", &lab.name]), "lab node down");
    let downed = Instant::now();
    moved_off(lab, &lb, &node);
    // The grace period is 50 s: Ready is asserted only well within it.
    if downed.elapsed() < std::time::Duration::from_secs(40) {
        assert_eq!(node_row(lab, &node)["ready"], true, "Ready until the grace period runs out");
    }
    eventually(patience(120.0), || {
        let ready = node_row(lab, &node)["readyCondition"].clone();
        if ready == "Unknown" { Ok(()) } else { Err(format!("{node} Ready is {ready}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    let marked = super::audit(lab).into_iter().find(|e| {
        e["objectRef"]["resource"] == "nodes"
            && e["objectRef"]["subresource"] == "status"
            && e["objectRef"]["name"] == node.as_str()
            && matches!(e["verb"].as_str(), Some("update" | "patch"))
            && e["user"]["username"]
                .as_str()
                .is_some_and(|u| u.contains("node-controller") || u == "system:kube-controller-manager")
            && e["responseStatus"]["code"] == 200
    });
    assert!(marked.is_some(), "no status write of {node} by the controller-manager in the audit log");
    ok(tideway(&["lab", "node", &node, "up", "--name", &lab.name]), "lab node up");
    eventually(patience(60.0), || {
        let row = node_row(lab, &node);
        if row["ready"] == true && row["synced"] == true { Ok(()) } else { Err(row.to_string()) }
    })
    .unwrap_or_else(|e| panic!("{node} did not come back: {e}\n{}", lab.diagnose()));
    node
}

/// `lab partition`: the node reaches only the outside hosts. The others' gossip moves its
/// address, and its agent, cut off from the majority of the agents it has seen and from the
/// API server (whose watches hang rather than fail, so the agent asks it), fences itself.
/// `lab heal`: the fence lifts and the node is back, Ready and synced.
pub(crate) fn a_partitioned_node_fences_itself_and_its_address_moves(lab: &TestLab) {
    let (lb, node) = fault_target(lab);
    assert_eq!(fenced(lab, &node), Ok(false), "{node} fenced before the partition");
    ok(tideway(&["lab", "partition", &node, "--name", &lab.name]), "lab partition");
    let partitioned = Instant::now();
    eventually(patience(20.0), || if fenced(lab, &node)? { Ok(()) } else { Err("not fenced".into()) })
        .unwrap_or_else(|e| panic!("the partitioned agent did not fence itself: {e}\n{}", lab.diagnose()));
    eprintln!("partitioned {node} fenced itself after {:?}", partitioned.elapsed());
    let new = moved_off(lab, &lb, &node);
    ok(tideway(&["lab", "heal", &node, "--name", &lab.name]), "lab heal");
    eventually(patience(30.0), || if fenced(lab, &node)? { Err("still fenced".into()) } else { Ok(()) })
        .unwrap_or_else(|e| panic!("the fence did not lift after the heal: {e}\n{}", lab.diagnose()));
    eventually(patience(60.0), || {
        let row = node_row(lab, &node);
        if row["ready"] == true && row["synced"] == true { Ok(()) } else { Err(row.to_string()) }
    })
    .unwrap_or_else(|e| panic!("{node} did not come back: {e}\n{}", lab.diagnose()));
    eventually(patience(15.0), || lab.curl("mypc", &lb)).expect("served after the heal");
    // Its watches hung through the partition: what they held said it still announced the
    // address. Asked afresh, only the new announcer answers for it.
    let old_mac = lab.mac_of(&node);
    for _ in 0..3 {
        lab.exec("mypc", &["ip", "neigh", "flush", "to", &lb]);
        eventually(patience(10.0), || lab.curl("mypc", &lb)).expect("served");
        let n = lab.neighbour("mypc", &lb);
        assert!(!n.contains(&old_mac), "the healed {node} answers for {lb}, now {new}'s: {n}");
    }
}

/// Whether node `node`'s agent says it is fenced (its metrics, on the node's 127.0.0.1, over
/// the HTTPS the chart turns on; `/metrics` needs no token).
fn fenced(lab: &TestLab, node: &str) -> Result<bool, String> {
    let out = lab.exec(node, &["curl", "-sk", "--max-time", "2", "https://127.0.0.1:10249/metrics"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("tideway_agent_fenced "));
    match line.and_then(|l| l.split_whitespace().nth(1)) {
        Some("1") => Ok(true),
        Some("0") => Ok(false),
        _ => Err(format!("no tideway_agent_fenced from {node}'s agent: {:?}", out.status)),
    }
}

/// `lab api down`: the API server refuses every node (a pod's and a node's connection alike)
/// while its loopback still serves `kubectl` on the host; nobody fences itself and traffic is
/// served. `lab api up` undoes it.
pub(crate) fn the_api_server_down_fences_nobody(lab: &TestLab) {
    let lb = lab.lb_ip("svc1");
    let api = |from: &str| {
        let cp = node_row(lab, CONTROL_PLANE)["ip"].as_str().unwrap().to_string();
        let url = format!("https://{cp}:6443/livez");
        // Any HTTP answer (401 without credentials) is a connection made.
        let out = lab
            .exec(from, &["curl", "-sk", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}", &url]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_ne!(api("myk8s-worker2"), "000", "a node reaches the API server");
    ok(tideway(&["lab", "api", "down", "--name", &lab.name]), "lab api down");
    assert_eq!(lab.status()["api"], "down");
    for from in ["myk8s-worker2", CONTROL_PLANE, "webpod1"] {
        assert_eq!(api(from), "000", "{from} still reaches the API server");
    }
    kubectl(lab, &["get", "--raw", "/livez"]).expect("the host's way in, through the loopback");
    std::thread::sleep(patience(2.0));
    for node in ["myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3"] {
        assert_eq!(fenced(lab, node), Ok(false), "{node} fenced itself with only the API down");
    }
    lab.curl("mypc", &lb).expect("served while the API server is down");
    ok(tideway(&["lab", "api", "up", "--name", &lab.name]), "lab api up");
    assert_eq!(lab.status()["api"], "up");
    assert_ne!(api("myk8s-worker2"), "000", "the API server is back");
}

/// `kubectl patch proxyconfig default` to nftables and back to iptables: every node switches,
/// leaves nothing of the old mode, and a connection opened before keeps being answered.
pub(crate) fn a_live_mode_switch_with_kubectl_keeps_an_open_connection(lab: &TestLab) {
    let lb = lab.lb_ip("svc1");
    let node = lab.announcer("svc1").unwrap();
    let mut conn = Conn::open(lab, "mypc", &lb);
    let first = conn.ask();
    assert!(first.starts_with("webpod"), "{first}");
    for mode in ["nftables", "iptables"] {
        let patch = format!(r#"{{"spec": {{"mode": "{mode}"}}}}"#);
        kubectl(lab, &["patch", "proxyconfig", "default", "--type", "merge", "-p", &patch]).unwrap();
        wait_switched(lab, &node, mode);
        assert_eq!(conn.ask(), first, "the open connection survived the switch to {mode}");
        lab.curl("mypc", &lb).expect("new connections too");
    }
}

/// A bad ProxyConfig never reaches the nodes: the API server refuses an invalid mode on the
/// live `default` and a new config whose sync period overflows, each message naming the field;
/// every node keeps its mode and traffic is served.
pub(crate) fn a_bad_proxy_config_is_refused_and_nothing_programmed_is_lost(lab: &TestLab) {
    let modes = |lab: &TestLab| -> Vec<Value> {
        lab.status()["nodes"].as_array().unwrap().iter().map(|n| n["mode"].clone()).collect()
    };
    let before = modes(lab);
    let bad = kubectl(
        lab,
        &["patch", "proxyconfig", "default", "--type", "merge", "-p", r#"{"spec": {"mode": "ipvz"}}"#],
    );
    let err = bad.expect_err("an invalid mode is refused");
    assert!(err.contains("spec.mode"), "{err}");
    let file = std::env::temp_dir().join(format!("bad-proxyconfig-{}.yaml", std::process::id()));
    let config = "apiVersion: tideway.io/v1alpha1\nkind: ProxyConfig\nmetadata: {name: sync-period-overflow}\n\
                  spec: {syncPeriod: \"9999999999999999999999h\"}\n";
    std::fs::write(&file, config).unwrap();
    let err =
        kubectl(lab, &["apply", "-f", file.to_str().unwrap()]).expect_err("an overflowing period is refused");
    let _ = std::fs::remove_file(&file);
    assert!(err.contains("spec.syncPeriod"), "{err}");
    assert_eq!(kubectl_json(lab, &["get", "proxyconfig", "default"])["spec"]["mode"], "iptables");
    assert_eq!(modes(lab), before);
    lab.curl("mypc", &lab.lb_ip("svc1")).expect("served");
}

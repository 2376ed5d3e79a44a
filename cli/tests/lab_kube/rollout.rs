//! A rolling restart of the agents' DaemonSet moves no LoadBalancer address: each agent says
//! in its NodeProxyState that it stopped (`stoppedAt`), the operator keeps the node's addresses
//! for its hand-over time while the next Pod starts, and the kernel rules serve meanwhile.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{kubectl, kubectl_json};
use crate::lab_support::{BIN, TestLab, patience};

/// From `mypc`, until the stop file exists: a new connection every 20 ms (an HTTP GET that
/// must answer within 2 s: a connection error, a reset or a timeout is a failure), and one
/// held connection asked every 200 ms. Prints what happened as JSON, with the longest time
/// between two answered requests.
const CLIENT: &str = r#"
import json, os, socket, sys, time
ip, stop = sys.argv[1], sys.argv[2]
held = socket.create_connection((ip, 80), timeout=2).makefile("rw")
sent = failed = 0
held_ok, held_asked, errors, last = True, 0, [], 0.0
answered, gap = time.time(), 0.0
while not os.path.exists(stop):
    t = time.time()
    try:
        s = socket.create_connection((ip, 80), timeout=2)
        s.sendall(b"GET / HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        if b"Hostname:" not in data:
            raise Exception("answer %r" % data[:60])
        gap, answered = max(gap, time.time() - answered), time.time()
    except Exception as e:
        failed += 1
        errors.append("%.2f %s" % (t, e))
    sent += 1
    if held_ok and t - last >= 0.2:
        last = t
        try:
            held.write("x\n"); held.flush()
            line = held.readline()
            if not line.startswith("webpod"):
                raise Exception("held connection answered %r" % line)
            held_asked += 1
        except Exception as e:
            held_ok = False
            errors.append("held %.2f %s" % (t, e))
    time.sleep(max(0.0, 0.02 - (time.time() - t)))
print(json.dumps({"sent": sent, "failed": failed, "held": held_ok, "held_asked": held_asked,
    "longest_gap_ms": round(gap * 1000), "errors": errors[:20]}))
"#;

/// [`CLIENT`] running from `mypc` against one address.
pub(crate) struct Traffic {
    client: std::process::Child,
    stop: std::path::PathBuf,
}

impl Traffic {
    /// Starts the client against `lb` and lets it run 2 s.
    pub(crate) fn start(lab: &TestLab, lb: &str) -> Traffic {
        let stop =
            std::env::temp_dir().join(format!("tideway-traffic-stop-{}-{}", lab.name, std::process::id()));
        let _ = std::fs::remove_file(&stop);
        let client = Command::new(BIN)
            .args(["lab", "exec", "--name", &lab.name, "mypc", "--", "python3", "-c", CLIENT, lb])
            .arg(&stop)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the client runs");
        std::thread::sleep(std::time::Duration::from_secs(2));
        Traffic { client, stop }
    }

    /// Lets it run 2 s more, stops it, and returns its report.
    pub(crate) fn stop(self) -> Value {
        std::thread::sleep(std::time::Duration::from_secs(2));
        std::fs::write(&self.stop, "").unwrap();
        let out = self.client.wait_with_output().unwrap();
        let _ = std::fs::remove_file(&self.stop);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("client: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The demo's LoadBalancer Services and the node announcing each, from the lab's status.
pub(crate) fn announcers(lab: &TestLab) -> Vec<(String, Option<String>)> {
    ["svc1", "svc2", "svc3"].iter().map(|s| (s.to_string(), lab.announcer(s))).collect()
}

/// What the operators' logs (every pod the lab's kubelets ran, gone ones too where their logs
/// stay) say of agents' liveness and of announcers: why an address moved.
pub(crate) fn liveness_log(lab: &TestLab) -> String {
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap_or_default()).join("nodes");
    let mut out = String::new();
    for node in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        // The live pods' and the torn-down pods' (whose logs the lab keeps in `gone/`).
        let pods = ["pods", "gone"].map(|d| std::fs::read_dir(node.path().join(d)));
        for pod in pods.into_iter().flatten().flatten().flatten() {
            let name = pod.file_name().to_string_lossy().into_owned();
            if !name.contains("tideway-operator") {
                continue;
            }
            for log in std::fs::read_dir(pod.path().join("containers")).into_iter().flatten().flatten() {
                let text = std::fs::read_to_string(log.path()).unwrap_or_default();
                // Not the debug lines: the in-release upgrade turns them on, and they name
                // the announcement kinds in every request.
                let told = |l: &&str| !l.contains(" DEBUG ") && !l.contains(" TRACE ");
                for line in text
                    .lines()
                    .filter(told)
                    .filter(|l| l.contains("liveness") || l.contains("announc") || l.contains("leader"))
                {
                    out += &format!("{name}: {line}\n");
                }
            }
        }
    }
    // The operator also says why each address moved in an Event of its Service.
    let events =
        kubectl_json(lab, &["get", "events", "-A", "--field-selector", "involvedObject.kind=Service"]);
    for e in events["items"].as_array().into_iter().flatten() {
        let (object, reason) = (&e["involvedObject"]["name"], &e["reason"]);
        out += &format!("event {object} {reason} at {}: {}\n", e["lastTimestamp"], e["message"]);
    }
    out
}

/// The agents' Pods, by node: their UIDs, namespaces and names.
fn agent_pods(lab: &TestLab) -> Vec<(String, String, String, String)> {
    let pods = kubectl_json(lab, &["get", "pods", "-A", "-l", "app.kubernetes.io/component=agent"]);
    let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out: Vec<_> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let m = &p["metadata"];
            (field(&p["spec"]["nodeName"]), field(&m["uid"]), field(&m["namespace"]), field(&m["name"]))
        })
        .collect();
    out.sort();
    out
}

/// `kubectl rollout restart` of the agents while traffic runs through svc1's address.
pub(crate) fn a_rolling_restart_of_the_agents_moves_no_address(lab: &TestLab) {
    let ds = kubectl_json(lab, &["get", "daemonsets", "-A", "-l", "app.kubernetes.io/component=agent"]);
    let ds = &ds["items"][0];
    let (ns, name) =
        (ds["metadata"]["namespace"].as_str().unwrap(), ds["metadata"]["name"].as_str().unwrap());
    let before = announcers(lab);
    assert!(before.iter().all(|(_, n)| n.is_some()), "{before:?}");
    let pods_before = agent_pods(lab);
    let traffic = Traffic::start(lab, &lab.lb_ip("svc1"));
    let started = std::time::Instant::now();
    kubectl(lab, &["-n", ns, "rollout", "restart", &format!("daemonset/{name}")]).unwrap();
    let timeout = format!("--timeout={}s", patience(300.0).as_secs());
    let rolled = kubectl(lab, &["-n", ns, "rollout", "status", &format!("daemonset/{name}"), &timeout]);
    let took = started.elapsed();
    let report = traffic.stop();
    rolled.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    let pods_after = agent_pods(lab);
    assert_eq!(pods_after.len(), pods_before.len(), "{pods_after:?}");
    let nodes = PathBuf::from(lab.status()["dir"].as_str().unwrap_or_default()).join("nodes");
    for ((node, old, ns, name), (_, new, _, _)) in pods_before.iter().zip(&pods_after) {
        assert_ne!(old, new, "{node}'s agent was not replaced");
        // The lab keeps a torn-down Pod's log, as `kubectl logs --previous` would not.
        let gone = tideway_lab::kubelet::volumes::gone_dir(&nodes.join(node), ns, name, old);
        let kept = std::fs::read_to_string(gone.join("containers/agent.log")).unwrap_or_default();
        assert!(!kept.is_empty(), "{node}'s replaced agent left no log in {}", gone.display());
    }
    eprintln!("rollout of {} agents in {took:?}: {report}", pods_after.len());
    assert_eq!(
        announcers(lab),
        before,
        "an address moved during the rollout: {report}\n{}",
        liveness_log(lab)
    );
    assert_eq!(report["failed"], 0, "requests failed during the rollout: {report}");
    assert_eq!(report["held"], true, "the held connection broke: {report}");
    assert!(report["sent"].as_u64().unwrap_or(0) > 100, "{report}");
}

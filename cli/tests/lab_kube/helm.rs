//! The chart's lifecycle with only helm and kubectl, as a platform team runs it: a kube lab
//! started without Tideway (`--no-components`); the previous release (v0.1.0, its chart and
//! image) installed as its README said, then upgraded to this one while traffic runs through a
//! LoadBalancer address (no request fails, no address moves, the CRDs take the new fields);
//! an uninstall that leaves no Tideway table or chain on any node and keeps `kube-dns`; then,
//! beside a kube-proxy-shaped node (kube-proxy's chains and its two ports held), a second
//! install that adopts what the first kept, an upgrade under traffic, a rollback and an
//! uninstall, through which that node's agent never restarts and its rules stay untouched.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{audit, kubectl, kubectl_json};
use crate::lab_support::{TestLab, eventually, ok, patience, tideway, wait_serving_within};
use crate::rollout::{Traffic, announcers, liveness_log};

/// The release as the chart README names it.
pub(crate) const RELEASE: &str = "tideway";
pub(crate) const NAMESPACE: &str = "tideway-system";

/// helm with the lab's admin kubeconfig; its output, or what it said.
pub(crate) fn helm(lab: &TestLab, args: &[&str]) -> Result<String, String> {
    let kubeconfig =
        PathBuf::from(lab.status()["kubeconfig"].as_str().expect("a kube lab names its kubeconfig"));
    let bin = tideway_lab::kube::chart::helm().expect("helm (make deps installs it)");
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("helm {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The chart in this repository.
pub(crate) fn chart() -> String {
    format!("{}/../helm/tideway", env!("CARGO_MANIFEST_DIR"))
}

/// The release upgraded from, as `make release-images` leaves it: its chart and its image.
const PREVIOUS: &str = "v0.1.0";

/// [`PREVIOUS`]'s directory (`chart/`, `image.oci.tar`).
fn previous_release() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/releases").join(PREVIOUS);
    assert!(
        dir.join("image.oci.tar").exists() && dir.join("chart/Chart.yaml").exists(),
        "{}: no {PREVIOUS} chart and image; build them with `make release-images`",
        dir.display()
    );
    dir
}

/// `helm install` or `helm upgrade` of `chart` with only what nothing can discover, as the
/// chart README says (the API server's address is read from `kube-public/cluster-info`, which
/// kubeadm publishes and the lab's control plane too).
///
/// Both releases run their failure detector at [`GOSSIP_TIME_SCALE`]: this test's cluster
/// shares two cores with the demo's, and while a `helm upgrade` restarts every Pod of both a
/// living agent's probe answers can come later than the failure detector's default suspicion
/// allows (at scale 1 a living agent was declared down, and an address moved, in about one of
/// four such runs). This release's chart has `gossip.timeScale`; v0.1.0's has not, but its
/// binaries take `--gossip-time-scale` through the chart's `extraArgs`. Without it, v0.1.0's
/// operator, still the leader in the upgrade's first seconds, once moved an address when a
/// stall made a living agent miss its probes, before helm had changed anything. What the test
/// proves is that the upgrade itself keeps the addresses; on a starved machine the chart's
/// documented knob is the cluster's to turn.
fn install(lab: &TestLab, verb: &str, chart: &str) -> Result<String, String> {
    let st = lab.status();
    let pods = format!("proxyConfig.clusterCIDRs[0]={}", st["podCIDR"].as_str().unwrap());
    let timeout = format!("{}s", patience(300.0).as_secs());
    let mut args =
        vec![verb, RELEASE, chart, "-n", NAMESPACE, "--wait", "--timeout", &timeout, "--set", &pods];
    let s = patience(GOSSIP_TIME_SCALE).as_secs_f64();
    let scale = format!("gossip.timeScale={s}");
    let (operator, agent) = (
        format!("operator.extraArgs[0]=--gossip-time-scale={s}"),
        format!("agent.extraArgs[0]=--gossip-time-scale={s}"),
    );
    if chart == self::chart() {
        args.extend(["--set", &scale]);
    } else {
        args.extend(["--set", &operator, "--set", &agent]);
    }
    helm(lab, &args)
}

/// The failure detector's time scale of this test's cluster (see [`install`]).
pub(crate) const GOSSIP_TIME_SCALE: f64 = 3.0;

/// Waits until every demo LoadBalancer Service has an address that answers from `mypc`.
fn demo_serves(lab: &TestLab) {
    for svc in ["svc1", "svc2", "svc3"] {
        let lb = eventually(patience(120.0), || {
            let s = lab.status();
            let svc = s["services"].as_array().into_iter().flatten().find(|x| x["name"] == svc).cloned();
            svc.and_then(|s| s["externalIPs"][0].as_str().map(str::to_string))
                .ok_or_else(|| "no address yet".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
        wait_serving_within(lab, "mypc", &lb, 1, patience(120.0));
    }
}

/// What Tideway left in a node's kernel: nftables tables and iptables chains of its names, in
/// both iptables backends.
pub(crate) fn leftovers(lab: &TestLab, node: &str) -> Vec<String> {
    let mut found = Vec::new();
    let out = lab.exec(node, &["nft", "list", "tables"]);
    found.extend(
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("tideway")).map(str::to_string),
    );
    for save in ["iptables-nft-save", "iptables-legacy-save"] {
        let out = lab.exec(node, &[save]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        found.extend(
            text.lines()
                .filter(|l| l.starts_with(':') && (l.contains("KUBE-") || l.contains("TIDEWAY")))
                .map(|l| format!("{save}: {l}")),
        );
    }
    found
}

/// kube-proxy's iptables mode as it holds a node: its chains (its canary too) and its two
/// listeners, `/healthz` on 0.0.0.0:10256 (404 elsewhere, as kube-proxy's) and `/metrics` on
/// 127.0.0.1:10249. The listeners are bounded in time and stopped on drop. A stand-in, though
/// the real kube-proxy now runs as a Pod in a kube lab (`lab peers kube-proxy`; the migration
/// test runs it beside the agents on every node): this test needs it on one node only, which
/// kubeadm's DaemonSet does not do unchanged, and checks only what a kube-proxy leaves in the
/// kernel and on its ports. Replacing it is left open in the peers issue.
struct KubeProxyShaped<'a> {
    lab: &'a TestLab,
    node: String,
}

/// Marks the stand-in listeners' command line, for `pkill`.
const LISTENERS: &str = "kube-proxy-shaped-listeners";

/// kube-proxy's iptables mode, as it leaves a node (the dataplane tests' too).
const KUBE_PROXY_RULES: &str = include_str!("../fixtures/kube-proxy-iptables.rules");

const LISTENER_SCRIPT: &str = r#"
import http.server, socketserver, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path in ("/healthz", "/livez", "/metrics")
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"lastUpdated": "", "currentTime": ""}' if ok else b"404 page not found")
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    allow_reuse_address = True
for addr in (("0.0.0.0", 10256), ("127.0.0.1", 10249)):
    threading.Thread(target=S(addr, H).serve_forever, daemon=True).start()
threading.Event().wait()
"#;

impl<'a> KubeProxyShaped<'a> {
    fn start(lab: &'a TestLab, node: &str) -> Self {
        // Running, so with its canary in every table it uses.
        let canary = |table: &str| format!("*{table}\n:KUBE-PROXY-CANARY - [0:0]\n");
        let rules = KUBE_PROXY_RULES.replacen("*nat\n", &canary("nat"), 1).replacen(
            "*filter\n",
            &canary("filter"),
            1,
        );
        let restore = format!("printf '%s' '{rules}' | iptables-nft-restore --noflush");
        let out = lab.exec(node, &["sh", "-c", &restore]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let script = LISTENER_SCRIPT.replace('\'', "'\\''");
        let serve = format!("setsid timeout 1200 python3 -c '{script}' {LISTENERS} >/dev/null 2>&1 &");
        let out = lab.exec(node, &["sh", "-c", &serve]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let shaped = KubeProxyShaped { lab, node: node.to_string() };
        eventually(patience(10.0), || {
            let out = lab.exec(
                node,
                &["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:10256/readyz"],
            );
            (String::from_utf8_lossy(&out.stdout) == "404")
                .then_some(())
                .ok_or_else(|| "kube-proxy's listener not up".to_string())
        })
        .unwrap();
        shaped
    }

    /// kube-proxy's rules in the node's nat and filter tables, counters aside.
    fn rules(&self) -> Vec<String> {
        let out =
            self.lab.exec(&self.node, &["sh", "-c", "iptables-nft-save -t nat; iptables-nft-save -t filter"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("KUBE-") && !l.contains("KUBE-FIREWALL"))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string())
            .collect()
    }

    /// The agent on this node: never restarted, and naming kube-proxy's two ports as taken.
    fn assert_the_agent_runs_beside(&self) {
        let selector = format!("spec.nodeName={}", self.node);
        let pods = kubectl_json(
            self.lab,
            &[
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/component=agent",
                "--field-selector",
                &selector,
            ],
        );
        let pod = &pods["items"][0];
        assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0, "{pod}");
        assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true, "{pod}");
        eventually(patience(30.0), || {
            let state = kubectl_json(self.lab, &["get", "nodeproxystate", &self.node]);
            let conflicts: Vec<&str> = state["status"]["listenerConflicts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let named = |port: &str| conflicts.iter().any(|c| c.starts_with(port));
            (named("0.0.0.0:10256: ") && named("127.0.0.1:10249: ")).then_some(()).ok_or(format!("{state}"))
        })
        .unwrap_or_else(|e| panic!("kube-proxy's ports not named as taken: {e}"));
    }
}

impl Drop for KubeProxyShaped<'_> {
    fn drop(&mut self) {
        let _ = self.lab.exec(&self.node, &["pkill", "-f", LISTENERS]);
    }
}

/// The DaemonSet's pod template environment value `name` of the agent's container.
fn agent_env(lab: &TestLab, name: &str) -> String {
    let ds = kubectl_json(lab, &["-n", NAMESPACE, "get", "daemonset", "tideway-agent"]);
    let env = ds["spec"]["template"]["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    env.iter().find(|e| e["name"] == name).and_then(|e| e["value"].as_str()).unwrap_or_default().to_string()
}

/// Every node's agent release as its NodeProxyState reports it (`None`: not reported, which
/// a CRD without the field would also give: the server prunes it).
fn agent_versions(lab: &TestLab) -> Vec<(String, Option<String>)> {
    let states = kubectl_json(lab, &["get", "nodeproxystates"]);
    let mut out: Vec<_> = states["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let name = s["metadata"]["name"].as_str().unwrap_or_default().to_string();
            (name, s["status"]["agentVersion"].as_str().map(str::to_string))
        })
        .collect();
    out.sort();
    out
}

/// `helm upgrade` (or install) under traffic through svc1's address: no request fails, the
/// held connection survives, no address moves.
fn under_traffic(lab: &TestLab, what: &str, run: impl FnOnce() -> Result<String, String>) {
    let before = announcers(lab);
    assert!(before.iter().all(|(_, n)| n.is_some()), "{before:?}");
    let traffic = Traffic::start(lab, &lab.lb_ip("svc1"));
    let started = std::time::Instant::now();
    let done = run();
    let took = started.elapsed();
    let report = traffic.stop();
    done.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    eprintln!("{what} took {took:?}: {report}");
    assert_eq!(announcers(lab), before, "an address moved during {what}: {report}\n{}", liveness_log(lab));
    assert_eq!(
        (&report["failed"], &report["held"]),
        (&Value::from(0), &Value::from(true)),
        "{what}: {report}"
    );
    assert!(report["sent"].as_u64().unwrap_or(0) > 100, "{report}");
}

/// `helm uninstall`: every node cleaned by the hook (nothing of Tideway's left beside
/// `kept`, kube-proxy's), kube-dns kept, the clean-up request gone.
fn uninstall(lab: &TestLab, nodes: &[&str], kept: &[String]) {
    let timeout = format!("{}s", patience(300.0).as_secs());
    let started = std::time::Instant::now();
    helm(lab, &["uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", &timeout]).unwrap();
    eprintln!("helm uninstall --wait took {:?}", started.elapsed());
    for node in nodes {
        let left: Vec<String> = leftovers(lab, node).into_iter().filter(|l| !kept.contains(l)).collect();
        assert_eq!(left, Vec::<String>::new(), "{node} keeps Tideway's objects");
    }
    let dns = kubectl_json(lab, &["-n", "kube-system", "get", "service", "kube-dns"]);
    assert_eq!(dns["spec"]["clusterIP"], "10.96.0.10", "{dns}");
    assert_eq!(dns["metadata"]["annotations"]["helm.sh/resource-policy"], "keep", "{dns}");
    assert!(kubectl(lab, &["get", "proxyconfig", "tideway-cleanup"]).is_err(), "the request is gone");
}

pub(crate) fn the_chart_installs_upgrades_rolls_back_and_uninstalls_with_helm(lab: &TestLab) {
    let st = lab.status();
    assert_eq!(st["components"], false, "{st}");
    let held: Vec<&str> = st["heldBack"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(held.iter().any(|h| h.starts_with("LoadBalancerPool/")), "the pool waits for its CRD: {held:?}");
    assert!(
        kubectl(lab, &["-n", "kube-system", "get", "service", "kube-dns"]).is_err(),
        "no DNS before the chart"
    );
    let nodes: Vec<&str> =
        st["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    kubectl(lab, &["create", "namespace", NAMESPACE]).unwrap();
    kubectl(lab, &["label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=privileged"])
        .unwrap();

    // The previous release, installed as its chart README said.
    let previous = previous_release();
    let loaded = ok(
        tideway(&[
            "lab",
            "load",
            "image",
            previous.join("image.oci.tar").to_str().unwrap(),
            "--name",
            &lab.name,
        ]),
        "lab load image",
    );
    assert!(loaded.contains("tideway:0.1.0"), "{loaded}");
    let previous_chart = previous.join("chart");
    install(lab, "install", previous_chart.to_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    demo_serves(lab);
    assert!(agent_versions(lab).iter().all(|(_, v)| v.is_none()), "{:?}", agent_versions(lab));

    // The upgrade to this release, as its README says, under traffic: the hook stops the old
    // operator first.
    under_traffic(lab, &format!("helm upgrade from {PREVIOUS}"), || install(lab, "upgrade", &chart()));
    assert_eq!(operator_stops(lab), 1, "the pre-upgrade hook scaled v0.1.0's operator to zero");
    let version = env!("CARGO_PKG_VERSION");
    eventually(patience(90.0), || {
        let versions = agent_versions(lab);
        versions.iter().all(|(_, v)| v.as_deref() == Some(version)).then_some(()).ok_or_else(|| {
            format!("agentVersion, a field new in {version}, kept on every node: {versions:?}")
        })
    })
    .unwrap();
    eventually(patience(60.0), || {
        let images = images_of_pods(lab, NAMESPACE);
        let current = images.iter().all(|i| i.ends_with(&format!(":{version}")));
        current.then_some(()).ok_or_else(|| format!("every Pod runs {version}: {images:?}"))
    })
    .unwrap();
    demo_serves(lab);
    uninstall(lab, &nodes, &[]);

    // One node keeps a kube-proxy (its rules and its ports) through the whole lifecycle.
    let kube_proxy = KubeProxyShaped::start(lab, nodes[nodes.len() - 1]);
    let its_rules = kube_proxy.rules();
    assert!(its_rules.iter().any(|r| r.contains("KUBE-PROXY-CANARY")), "{its_rules:?}");

    // A second install adopts what the first kept (kube-dns), beside kube-proxy.
    let started = std::time::Instant::now();
    install(lab, "install", &chart()).unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    eprintln!("helm install --wait took {:?}", started.elapsed());
    demo_serves(lab);
    assert_eq!(
        lab.status()["heldBack"].as_array().map(Vec::len),
        Some(0),
        "the pool was applied once served"
    );
    kube_proxy.assert_the_agent_runs_beside();
    assert_eq!(kube_proxy.rules(), its_rules, "kube-proxy's rules changed");

    // An upgrade that changes every Pod template, under traffic.
    let log_level = agent_env(lab, "RUST_LOG");
    let timeout = format!("{}s", patience(300.0).as_secs());
    let upgrade =
        ["upgrade", RELEASE, &chart(), "-n", NAMESPACE, "--reuse-values", "--set", "logLevel=debug"];
    let wait = ["--wait", "--timeout", &timeout];
    under_traffic(lab, "helm upgrade", || helm(lab, &[&upgrade[..], &wait[..]].concat()));
    assert_eq!(agent_env(lab, "RUST_LOG"), "debug", "the upgrade changed the agents' Pods");
    assert_eq!(operator_stops(lab), 1, "no hook from a release with the hand-over");

    // Back to the first revision of this install.
    let revisions = helm(lab, &["history", RELEASE, "-n", NAMESPACE, "-o", "json"]).unwrap();
    let revisions: Value = serde_json::from_str(&revisions).unwrap();
    let first = revisions[0]["revision"].to_string();
    helm(lab, &["rollback", RELEASE, &first, "-n", NAMESPACE, "--wait", "--timeout", &timeout]).unwrap();
    assert_eq!(agent_env(lab, "RUST_LOG"), log_level, "the rollback restored the agents' Pods");
    demo_serves(lab);

    // Uninstall: kube-proxy's rules untouched.
    let its_chains: Vec<String> = its_rules
        .iter()
        .filter(|r| r.starts_with(':'))
        .map(|r| format!("iptables-nft-save: {r} [0:0]"))
        .collect();
    uninstall(lab, &nodes, &its_chains);
    assert_eq!(kube_proxy.rules(), its_rules, "kube-proxy's rules changed");
}

/// How many times the API server let the pre-upgrade hook's ServiceAccount scale the
/// operator's Deployment (its audit log).
fn operator_stops(lab: &TestLab) -> usize {
    let hook = format!("system:serviceaccount:{NAMESPACE}:tideway-stop-operator");
    audit(lab)
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == hook.as_str())
        .filter(|e| e["objectRef"]["resource"] == "deployments" && e["objectRef"]["subresource"] == "scale")
        .filter(|e| e["verb"] == "patch" && e["responseStatus"]["code"] == 200)
        .count()
}

/// The image of every container in `namespace`'s Pods, once each.
pub(crate) fn images_of_pods(lab: &TestLab, namespace: &str) -> Vec<String> {
    let pods = kubectl_json(lab, &["-n", namespace, "get", "pods"]);
    let mut out: Vec<String> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["spec"]["containers"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

//! A cluster that runs kube-proxy, CoreDNS and MetalLB (L2) moves to Tideway, and back, while
//! it serves: the lab's peers run as Pods from their own images and manifests (`lab up
//! --peers`: kubeadm's addon phases, MetalLB's metallb-native.yaml); `tideway migrate
//! --from-cluster` reads their settings, then the chart README's hand-over steps as written.
//! Throughout, a client on `mypc` opens a connection to svc1's LoadBalancer address every 20 ms
//! and asks a held one every 200 ms, and glibc and musl resolve svc2 in a pod every 20 ms
//! (`options timeout:1`: a lookup that waits one out is slow).
//!
//! Printed for each way: failed requests, the longest time between two answered requests,
//! whether the held connection survived, failed and slow lookups. Asserted on the way there:
//! none failed, the held connection survived, every address is where it was, announced from
//! the node MetalLB announced it from. On the way back (Tideway uninstalled, the peers
//! reinstalled from their manifests): none failed, the held connection survived, every
//! address kept, the cluster serving and Tideway's rules gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::helm::{GOSSIP_TIME_SCALE, NAMESPACE, RELEASE, chart, helm, images_of_pods as images, leftovers};
use super::{kubectl, kubectl_json};
use crate::lab_support::lookups::{count, lookups_while};
use crate::lab_support::{TestLab, eventually, ok, patience, wait_serving_within};
use crate::rollout::Traffic;

/// MetalLB's pool and advertisement for the demo's addresses, as its docs write them.
const METALLB_OBJECTS: &str = "apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: my-ippool, namespace: metallb-system}
spec:
  addresses: [172.18.255.200-172.18.255.250]
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: my-l2, namespace: metallb-system}
";

/// The free address the chart's DNS Service takes while CoreDNS's `kube-dns` still exists (in
/// the Service range's static band, which the API server allocates from only when asked).
const TIDEWAY_DNS_IP: &str = "10.96.0.11";

/// The pod the lookups run in, and the name they resolve.
const POD: &str = "webpod1";
const NAME: &str = "svc2.default.svc.cluster.local";

/// The demo without Tideway's objects: the peers' cluster has none yet.
pub(crate) fn peers_demo(demo: &str) -> String {
    let kept: Vec<&str> = demo
        .split("\n---\n")
        .filter(|d| !d.contains("kind: ProxyConfig") && !d.contains("kind: LoadBalancerPool"))
        .collect();
    kept.join("\n---\n")
}

/// Says which step starts, with the time the client's errors carry (seconds since the epoch).
fn step(what: &str) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    eprintln!("{:.2} {what}", now.as_secs_f64());
}

/// kubectl with a YAML document on stdin.
fn kubectl_stdin(lab: &TestLab, args: &[&str], input: &str) -> Result<String, String> {
    use std::io::Write;
    let kubeconfig = lab.status()["kubeconfig"].as_str().unwrap().to_string();
    let mut child = std::process::Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child.stdin.take().unwrap().write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("kubectl {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Waits until every Pod of `namespace` is Ready.
fn all_ready(lab: &TestLab, namespace: &str) {
    eventually(patience(180.0), || {
        let pods = kubectl_json(lab, &["-n", namespace, "get", "pods"]);
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let ready = |p: &Value| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        };
        let waiting: Vec<&str> =
            items.iter().filter(|p| !ready(p)).filter_map(|p| p["metadata"]["name"].as_str()).collect();
        (!items.is_empty() && waiting.is_empty())
            .then_some(())
            .ok_or(format!("{namespace}: not Ready: {waiting:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// Each demo Service's LoadBalancer address, once it has one.
fn addresses(lab: &TestLab) -> BTreeMap<String, String> {
    ["svc1", "svc2", "svc3"]
        .iter()
        .map(|svc| {
            let ip = eventually(patience(120.0), || {
                let s = kubectl_json(lab, &["get", "service", svc]);
                s["status"]["loadBalancer"]["ingress"][0]["ip"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or(format!("{s}"))
            });
            (svc.to_string(), ip.unwrap_or_else(|e| panic!("{svc} has no address: {e}\n{}", lab.diagnose())))
        })
        .collect()
}

/// The node whose MAC `mypc` holds for each address, after asking it afresh.
fn answering_nodes(lab: &TestLab, ips: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let nodes: Vec<String> = lab.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str().map(str::to_string))
        .collect();
    let macs: BTreeMap<String, String> = nodes.iter().map(|n| (lab.mac_of(n), n.clone())).collect();
    ips.iter()
        .map(|(svc, ip)| {
            let _ = lab.exec("mypc", &["ip", "neigh", "flush", ip]);
            wait_serving_within(lab, "mypc", &format!("http://{ip}/"), 1, patience(60.0));
            let seen = lab.neighbour("mypc", ip);
            let node = macs.iter().find(|(mac, _)| seen.contains(mac.as_str())).map(|(_, n)| n.clone());
            (svc.clone(), node.unwrap_or_else(|| format!("no node's MAC in {seen:?}")))
        })
        .collect()
}

/// The peers' binary directory's kube-proxy, for `kube-proxy --cleanup` on each node.
fn kube_proxy_binary() -> PathBuf {
    tideway_lab::kube::peer_binary("kube-proxy").expect("kube-proxy (make peers)")
}

/// What the lab's kubeadm configuration for `addon` (written when the lab installed it) makes
/// the API server hold: `kubeadm init phase addon ADDON --print-manifest`.
fn kubeadm_manifest(lab: &TestLab, addon: &str) -> String {
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap());
    let config = dir.join(format!("kube/kubeadm-{addon}.yaml"));
    let binary = tideway_lab::kube::binary().expect("tideway-kube (make kube)");
    let out = std::process::Command::new(binary)
        .args(["kubeadm", "init", "phase", "addon", addon, "--print-manifest", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// From `mypc`, until the stop file exists: an ARP request for an address every 50 ms,
/// broadcast as a host whose cache expired asks; prints how many were answered, the longest
/// time without an answer, and each change of the MAC that answered.
const ARP_PROBE: &str = r#"
import fcntl, json, os, socket, struct, sys, time
ip, stop = sys.argv[1], sys.argv[2]
ifname = [i for i in sorted(os.listdir("/sys/class/net")) if i != "lo"][0]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((ifname, 0))
s.settimeout(0.01)
mac = s.getsockname()[4]
inet = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
me = fcntl.ioctl(inet.fileno(), 0x8915, struct.pack("256s", ifname.encode()))[20:24]
target = socket.inet_aton(ip)
ask = b"\xff" * 6 + mac + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + me + b"\x00" * 6 + target
start = last = time.time()
asked = answered = 0
gap, seen, macs = 0.0, None, []
while not os.path.exists(stop):
    s.send(ask)
    asked += 1
    until = time.time() + 0.05
    while time.time() < until:
        try:
            frame = s.recv(128)
        except socket.timeout:
            continue
        if frame[12:14] == b"\x08\x06" and frame[20:22] == b"\x00\x02" and frame[28:32] == target:
            now = time.time()
            gap, last = max(gap, now - last), now
            answered += 1
            who = frame[22:28].hex(":")
            if who != seen:
                seen = who
                macs.append([round(now - start, 2), who])
gap = max(gap, time.time() - last)
print(json.dumps({"asked": asked, "answered": answered, "longest_gap_ms": round(gap * 1000), "macs": macs}))
"#;

/// [`ARP_PROBE`] running from `mypc` against one address.
struct ArpProbe {
    probe: std::process::Child,
    stop: PathBuf,
}

impl ArpProbe {
    fn start(lab: &TestLab, ip: &str) -> ArpProbe {
        let stop = std::env::temp_dir().join(format!("tideway-arp-stop-{}-{}", lab.name, std::process::id()));
        let _ = std::fs::remove_file(&stop);
        let probe = std::process::Command::new(crate::lab_support::BIN)
            .args(["lab", "exec", "--name", &lab.name, "mypc", "--", "python3", "-c", ARP_PROBE, ip])
            .arg(&stop)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the ARP probe runs");
        ArpProbe { probe, stop }
    }

    fn stop(self) -> Value {
        std::fs::write(&self.stop, "").unwrap();
        let out = self.probe.wait_with_output().unwrap();
        let _ = std::fs::remove_file(&self.stop);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("ARP probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Runs `steps` under the client's traffic and the lookup loops; their reports.
fn served_while(lab: &TestLab, what: &str, steps: impl FnOnce()) -> (Value, Vec<(&'static str, String)>) {
    let arp = ArpProbe::start(lab, &lab.lb_ip("svc1"));
    let traffic = Traffic::start(lab, &lab.lb_ip("svc1"));
    step(&format!("{what}: the lookups start"));
    let lookups = lookups_while(lab, POD, NAME, (600, Duration::from_secs(2)), steps);
    let mut report = traffic.stop();
    report["arp"] = arp.stop();
    eprintln!("{what}: requests {report}");
    for (which, text) in &lookups {
        eprintln!("{what}: {which} lookups:\n{text}");
    }
    (report, lookups)
}

pub(crate) fn the_cluster_moves_from_its_peers_to_tideway_and_back(lab: &TestLab, release: &str) {
    // The peers' cluster, as kubeadm and MetalLB's manifest left it.
    all_ready(lab, "kube-system");
    all_ready(lab, "metallb-system");
    let peers: Vec<String> =
        ["kube-system", "metallb-system"].iter().flat_map(|ns| images(lab, ns)).collect();
    assert_eq!(
        peers,
        [
            "registry.k8s.io/coredns/coredns:v1.15.0".to_string(),
            format!("registry.k8s.io/kube-proxy:{release}"),
            "quay.io/metallb/controller:v0.16.1".into(),
            "quay.io/metallb/speaker:v0.16.1".into(),
        ],
        "each peer runs from its own image"
    );
    // MetalLB's webhook answers once its controller has made its certificate.
    eventually(patience(120.0), || kubectl_stdin(lab, &["apply", "-f", "-"], METALLB_OBJECTS))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    let ips = addresses(lab);
    let metallbs = answering_nodes(lab, &ips);
    eprintln!("MetalLB's addresses and nodes: {ips:?} {metallbs:?}");
    let dns_ip =
        kubectl_json(lab, &["get", "service", "svc2"])["spec"]["clusterIP"].as_str().unwrap().to_string();
    let dug = ok(lab.exec(POD, &["dig", "+short", NAME]), "dig");
    assert_eq!(dug.trim(), dns_ip, "CoreDNS answers through kube-dns");

    // There, as the chart README says.
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap()).join("migrated");
    let kubeconfig = lab.status()["kubeconfig"].as_str().unwrap().to_string();
    let (report, lookups) = served_while(lab, "to Tideway", || to_tideway(lab, &dir, &kubeconfig));
    assert_eq!((&report["failed"], &report["held"]), (&Value::from(0), &Value::from(true)), "{report}");
    // At most one lookup per client waits out a timeout, when CoreDNS's Pods go: one in flight
    // to a CoreDNS Pod in its lameduck loses its reply, because the agent deletes the UDP
    // conntrack entries to endpoints it no longer routes to (a terminating one, once others are
    // ready). kube-proxy keeps those of every serving endpoint (pkg/proxy/conntrack/cleanup.go);
    // tried here, that lost lookups as the Pods exited instead (a slow one per client in two
    // runs of two, a failed one in a third), so the agent keeps its rule (core's conntrack.rs).
    for (which, text) in &lookups {
        assert_eq!(count(text, "failed"), 0, "{which} to Tideway\n{text}");
        assert!(count(text, "slow") <= 1, "{which} to Tideway\n{text}");
    }
    assert_eq!(addresses(lab), ips, "every Service kept its address");
    assert_eq!(answering_nodes(lab, &ips), metallbs, "every address answers from MetalLB's node");
    for ns in ["kube-system", "metallb-system"] {
        assert!(!images(lab, ns).iter().any(|i| !i.contains("tideway")), "{ns}: {:?}", images(lab, ns));
    }

    // And back: nothing fails either. At most two lookups per client may wait out a timeout
    // as the DNS Pods change (a run before Tideway's DNS Pods drained at the uninstall, their
    // endpoints not serving before they exit, saw one as CoreDNS's Pods joined kube-dns and
    // one as Tideway's left it; the run since saw none).
    let (report, lookups) = served_while(lab, "back to the peers", || back_to_the_peers(lab));
    eprintln!("the way back: {report} {lookups:?}");
    assert_eq!((&report["failed"], &report["held"]), (&Value::from(0), &Value::from(true)), "{report}");
    for (which, text) in &lookups {
        assert_eq!(count(text, "failed"), 0, "{which} back to the peers\n{text}");
        assert!(count(text, "slow") <= 2, "{which} back to the peers\n{text}");
    }
    for node in lab.status()["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()) {
        let tideways: Vec<String> = leftovers(lab, node)
            .into_iter()
            .filter(|l| l.contains("tideway") || l.contains("TIDEWAY"))
            .collect();
        assert_eq!(tideways, Vec::<String>::new(), "{node} keeps Tideway's objects");
    }
    // MetalLB's controller, started with its pool there, keeps each Service's own address.
    let back = addresses(lab);
    assert_eq!(back, ips, "every Service kept its address");
    for ip in back.values() {
        wait_serving_within(lab, "mypc", &format!("http://{ip}/"), 1, patience(60.0));
    }
    let dug = ok(lab.exec(POD, &["dig", "+short", NAME]), "dig");
    assert_eq!(dug.trim(), dns_ip, "CoreDNS answers again");
}

/// The hand-over, step by step as the chart README has it.
fn to_tideway(lab: &TestLab, dir: &Path, kubeconfig: &str) {
    let dir_s = dir.display().to_string();
    ok(
        crate::lab_support::tideway(&[
            "migrate",
            "--from-cluster",
            "--kubeconfig",
            kubeconfig,
            "--out",
            &dir_s,
        ]),
        "tideway migrate --from-cluster",
    );
    step("tideway migrate --from-cluster done");
    let objects = std::fs::read_to_string(dir.join("objects.yaml")).unwrap();
    assert!(objects.contains("mode: iptables") && objects.contains("name: my-ippool"), "{objects}");
    kubectl(lab, &["create", "namespace", NAMESPACE]).unwrap();
    kubectl(lab, &["label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=privileged"])
        .unwrap();
    let values = dir.join("values.yaml").display().to_string();
    let dns_ip = format!("dns.service.clusterIP={TIDEWAY_DNS_IP}");
    // As the lifecycle test's installs (helm.rs): three kube labs share two cores, and a living
    // agent starved of its probe answers would be declared down and its addresses moved.
    let scale = format!("gossip.timeScale={}", patience(GOSSIP_TIME_SCALE).as_secs_f64());
    let timeout = format!("{}s", patience(300.0).as_secs());
    let chart = chart();
    let install = [
        "install",
        RELEASE,
        &chart,
        "-n",
        NAMESPACE,
        "--wait",
        "--timeout",
        &timeout,
        "--values",
        &values,
        "--set",
        "metallb.compat=true",
        "--set",
        "dns.service.name=tideway-dns",
        "--set",
        &dns_ip,
        "--set",
        &scale,
    ];
    // MetalLB's controller first: two allocators must never race for one address.
    step("MetalLB's controller scaled to zero");
    kubectl(lab, &["-n", "metallb-system", "scale", "deployment", "controller", "--replicas=0"]).unwrap();
    // The chart's CRDs and the migrated objects first (helm leaves CRDs that exist alone), the
    // ProxyConfig in nftables mode while kube-proxy runs (its own table beside kube-proxy's
    // chains; kube-proxy's mode once kube-proxy is gone), so that the agents program and
    // announce as they start.
    step("the chart's CRDs and the migrated objects, the ProxyConfig in nftables mode");
    kubectl(lab, &["apply", "--server-side", "-f", &format!("{chart}/crds")]).unwrap();
    let nftables = objects.replace("mode: iptables", "mode: nftables");
    eventually(patience(30.0), || kubectl_stdin(lab, &["apply", "-f", "-"], &nftables)).unwrap();
    // MetalLB's speakers stop answering at once, everywhere: stopped one by one instead (the
    // install preempts them), the last ones would elect themselves for the others' addresses.
    step("MetalLB's L2Advertisement deleted, then helm install");
    kubectl(lab, &["-n", "metallb-system", "delete", "l2advertisement", "my-l2"]).unwrap();
    helm(lab, &install).unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    programmed(lab, "nftables");
    step("kube-proxy's DaemonSet deleted");
    kubectl(lab, &["-n", "kube-system", "delete", "daemonset", "kube-proxy"]).unwrap();
    let kube_proxy = kube_proxy_binary().display().to_string();
    for node in lab.status()["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()) {
        ok(lab.exec(node, &[&kube_proxy, "--cleanup"]), "kube-proxy --cleanup");
    }
    step("to iptables mode");
    kubectl(
        lab,
        &["patch", "proxyconfig", "default", "--type", "merge", "-p", r#"{"spec":{"mode":"iptables"}}"#],
    )
    .unwrap();
    programmed(lab, "iptables");
    // DNS: Tideway's DNS Pods carry `k8s-app: kube-dns`, so CoreDNS's Service reaches them too.
    step("CoreDNS's Deployment deleted");
    kubectl(lab, &["-n", "kube-system", "delete", "deployment", "coredns"]).unwrap();
    // MetalLB: its controller and speakers gone (the agents, of a higher priority, took the
    // speakers' port at the install), its objects and CRDs kept until compat is off.
    step("MetalLB's controller and speakers deleted");
    kubectl(lab, &["-n", "metallb-system", "delete", "deployment", "controller"]).unwrap();
    kubectl(lab, &["-n", "metallb-system", "delete", "daemonset", "speaker"]).unwrap();
    kubectl(lab, &["delete", "validatingwebhookconfiguration", "metallb-webhook-configuration"]).unwrap();
    let upgrade =
        ["upgrade", RELEASE, &chart, "-n", NAMESPACE, "--reuse-values", "--set", "metallb.compat=false"];
    step("helm upgrade: metallb.compat=false");
    helm(lab, &[&upgrade[..], &["--wait", "--timeout", &timeout]].concat()).unwrap();
    step("MetalLB's objects and CRDs deleted");
    kubectl_stdin(lab, &["delete", "--ignore-not-found", "-f", "-"], METALLB_OBJECTS).unwrap();
    kubectl_stdin(lab, &["delete", "-f", "-"], &metallb_crds()).unwrap();
    step("done");
}

/// MetalLB's CustomResourceDefinitions, as the manifest `lab peers metallb` applies has them
/// (its module's metallb-native.yaml).
fn metallb_crds() -> String {
    let dir = tideway_lab::kube::peers::images_dir().expect("MetalLB's manifest (make peers)");
    let manifest = std::fs::read_to_string(dir.join("metallb-native.yaml")).unwrap();
    let crds: Vec<&str> =
        manifest.split("\n---\n").filter(|d| d.contains("kind: CustomResourceDefinition\n")).collect();
    assert_eq!(crds.len(), 9, "MetalLB's nine CRDs");
    crds.join("\n---\n")
}

/// Waits until every node is programmed in `mode`.
fn programmed(lab: &TestLab, mode: &str) {
    eventually(patience(90.0), || {
        let states = kubectl_json(lab, &["get", "nodeproxystates"]);
        let items = states["items"].as_array().cloned().unwrap_or_default();
        let synced = |s: &Value| s["status"]["mode"] == mode && s["status"]["ready"] == true;
        (items.len() == lab.status()["nodes"].as_array().unwrap().len() && items.iter().all(synced))
            .then_some(())
            .ok_or(format!("not every node programmed in {mode}: {states}"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// Tideway uninstalled, the peers back from their manifests, as the chart README says.
fn back_to_the_peers(lab: &TestLab) {
    step("the ProxyConfig in nftables mode");
    kubectl(
        lab,
        &["patch", "proxyconfig", "default", "--type", "merge", "-p", r#"{"spec":{"mode":"nftables"}}"#],
    )
    .unwrap();
    programmed(lab, "nftables");
    step("kube-proxy by kubeadm's addon phase");
    ok(
        crate::lab_support::tideway(&["lab", "peers", "kube-proxy", "--name", &lab.name]),
        "lab peers kube-proxy",
    );
    all_ready(lab, "kube-system");
    // kubeadm's own apply of CoreDNS reads the version of the Deployment labelled `k8s-app:
    // kube-dns` (Tideway's, then): its manifest is applied instead.
    step("CoreDNS by kubeadm's manifest");
    kubectl_stdin(lab, &["apply", "-f", "-"], &kubeadm_manifest(lab, "coredns")).unwrap();
    all_ready(lab, "kube-system");
    // Tideway's operator stopped first, as MetalLB's controller was on the way there: two
    // allocators must never race for one address (the agents keep announcing what it decided).
    step("Tideway's operator scaled to zero");
    kubectl(lab, &["-n", NAMESPACE, "scale", "deployment", "tideway-operator", "--replicas=0"]).unwrap();
    // MetalLB's CRDs and pool before its manifest: its controller, started without a pool,
    // clears every Service's address as "not allowed by config" (controller/service.go) and
    // the agents stop serving them; with the pool there at its first load, it keeps each
    // Service's own. Its advertisement only once every speaker runs (they wait for the agents'
    // port), so that they announce together rather than each electing itself as it starts.
    step("MetalLB's CRDs and pool, then its manifest");
    kubectl_stdin(lab, &["apply", "--server-side", "-f", "-"], &metallb_crds()).unwrap();
    kubectl(lab, &["wait", "--for=condition=established", "crd/ipaddresspools.metallb.io"]).unwrap();
    let (pool, advertisement) = METALLB_OBJECTS.split_once("---\n").unwrap();
    kubectl_stdin(lab, &["apply", "-f", "-"], pool).unwrap();
    ok(crate::lab_support::tideway(&["lab", "peers", "metallb", "--name", &lab.name]), "lab peers metallb");
    let timeout = format!("{}s", patience(300.0).as_secs());
    step("helm uninstall");
    helm(lab, &["uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", &timeout]).unwrap();
    all_ready(lab, "metallb-system");
    step("MetalLB's L2Advertisement");
    kubectl_stdin(lab, &["apply", "-f", "-"], advertisement).unwrap();
    kubectl(lab, &["-n", "kube-system", "delete", "service", "tideway-dns"]).unwrap();
    step("done");
}

//! `tideway lab up --kube` end to end (root, and the control plane `make kube` builds): the
//! demo's traffic served through Tideway's Pods, which the real API server, controllers and
//! scheduler placed and the lab's kubelets run; the lab's scenarios on that one lab
//! ([`scenarios`]: the seed experiments, an agent killed, a node off the network, the API
//! server down, a partition, the live mode switch, a bad ProxyConfig);
//! what a platform engineer checks with `kubectl` (the pinned release, etcd in `livez`, the
//! controllers' leader Leases, slices written by the EndpointSlice controller); every Tideway
//! component authenticated as its chart ServiceAccount with a token bound to its Pod; a
//! rolling restart of the agents that moves no address and fails no request ([`rollout`]);
//! cluster names answered by the pods' nodes, the DNS Deployment scaled to zero included
//! ([`node_dns`]);
//! a new node, its kernel empty, programmed only when the agent is given the API server's
//! address (the `kubernetes` Service's ClusterIP is served by nothing there yet); and a cluster
//! of kube-proxy, CoreDNS and MetalLB, each a Pod from its own image, moved to Tideway and back
//! under traffic ([`migration`]).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const DEMO: &str = include_str!("../../examples/demo.yaml");
/// The release `kube/go.mod` pins.
const GO_MOD: &str = include_str!("../../kube/go.mod");

#[path = "lab_kube/helm.rs"]
mod helm;
mod lab_support;
#[path = "lab_kube/migration.rs"]
mod migration;
#[path = "lab_kube/node_dns.rs"]
mod node_dns;
#[path = "lab_kube/rollout.rs"]
mod rollout;
#[path = "lab_kube/scenarios.rs"]
mod scenarios;

use lab_support::*;

/// The Kubernetes release kube/go.mod requires (`k8s.io/kubernetes vX.Y.Z`).
fn pinned_release() -> String {
    GO_MOD
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
        .map(|v| v.trim().to_string())
        .expect("kube/go.mod requires k8s.io/kubernetes")
}

/// kubectl with the lab's admin kubeconfig.
fn kubectl(lab: &TestLab, args: &[&str]) -> Result<String, String> {
    let kubeconfig =
        PathBuf::from(lab.status()["kubeconfig"].as_str().expect("a kube lab names its kubeconfig"));
    let out = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn kubectl_json(lab: &TestLab, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(lab, &all).unwrap()).unwrap()
}

/// The API server's audit events (one JSON object per line).
fn audit(lab: &TestLab) -> Vec<Value> {
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap());
    let text = std::fs::read_to_string(dir.join("kube/audit.log")).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn the_chart_installs_upgrades_rolls_back_and_uninstalls_with_helm_alone() {
    let archive = tideway_tests::image_archive();
    let lab =
        TestLab::up_with("khelm", DEMO, &["--kube", "--no-components", "--image", archive.to_str().unwrap()]);
    helm::the_chart_installs_upgrades_rolls_back_and_uninstalls_with_helm(&lab);
}

#[test]
fn a_cluster_moves_from_kube_proxy_coredns_and_metallb_to_tideway_and_back() {
    let archive = tideway_tests::image_archive();
    let peers = ["--peers", "kube-proxy,coredns,metallb"];
    let args =
        [&["--kube", "--no-components", "--image", archive.to_str().unwrap()][..], &peers[..]].concat();
    let lab = TestLab::up_with("kmig", &migration::peers_demo(DEMO), &args);
    migration::the_cluster_moves_from_its_peers_to_tideway_and_back(&lab, &pinned_release());
}

#[test]
fn the_demo_runs_on_a_real_control_plane_with_tideway_as_the_charts_pods() {
    let archive = tideway_tests::image_archive();
    let lab = TestLab::up_with(
        "kdemo",
        DEMO,
        &["--kube", "--image", archive.to_str().unwrap(), "--token-rotation", &format!("{ROTATION}s")],
    );

    // The demo's traffic, through the agents the chart's DaemonSet put on every node.
    for svc in ["svc1", "svc2", "svc3"] {
        let lb = eventually(patience(180.0), || {
            let s = lab.status();
            let svc = s["services"].as_array().into_iter().flatten().find(|x| x["name"] == svc).cloned();
            let svc = svc.ok_or("no such Service yet")?;
            svc["externalIPs"][0].as_str().map(str::to_string).ok_or_else(|| format!("no address yet: {svc}"))
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
        wait_serving_within(&lab, "mypc", &lb, 1, patience(180.0));
    }
    scenarios::the_seed_experiments(&lab);
    node_dns::cluster_names_resolve_on_the_node_with_the_dns_deployment_scaled_to_zero(&lab);
    tideway_runs_from_its_image_with_the_charts_security_context(&lab);
    rollout::a_rolling_restart_of_the_agents_moves_no_address(&lab);
    // The faults that move an address (the faults' own Service's, announced only by the
    // workers the operator's leader does not run on), first the partition.
    scenarios::a_partitioned_node_fences_itself_and_its_address_moves(&lab);
    scenarios::an_agent_killed_on_a_ready_node_is_restarted_by_its_kubelet(&lab);
    scenarios::a_live_mode_switch_with_kubectl_keeps_an_open_connection(&lab);
    scenarios::a_bad_proxy_config_is_refused_and_nothing_programmed_is_lost(&lab);
    a_pool_the_conversion_refuses_says_why(&lab);

    // What kubectl says of the control plane.
    let version = kubectl_json(&lab, &["version"]);
    assert_eq!(version["serverVersion"]["gitVersion"], pinned_release().as_str(), "{version}");
    let livez = kubectl(&lab, &["get", "--raw", "/livez?verbose"]).unwrap();
    assert!(livez.lines().any(|l| l == "[+]etcd ok"), "{livez}");
    for lease in ["kube-controller-manager", "kube-scheduler"] {
        let l = kubectl_json(&lab, &["-n", "kube-system", "get", "lease", lease]);
        let holder = l["spec"]["holderIdentity"].as_str().unwrap_or_default();
        assert!(!holder.is_empty(), "{lease} has no holder: {l}");
    }
    let services = kubectl_json(&lab, &["get", "services", "-A"]);
    let selected: Vec<(String, String)> = services["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec"]["selector"].is_object())
        .map(|s| {
            (
                s["metadata"]["namespace"].as_str().unwrap().into(),
                s["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(selected.iter().any(|(_, n)| n == "svc1"), "{selected:?}");
    let slices = kubectl_json(&lab, &["get", "endpointslices", "-A"]);
    for (ns, name) in &selected {
        let mine: Vec<&Value> = slices["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["metadata"]["namespace"] == ns.as_str())
            .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == name.as_str())
            .collect();
        assert!(!mine.is_empty(), "{ns}/{name} has no EndpointSlice");
        for s in mine {
            assert_eq!(
                s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
                "endpointslice-controller.k8s.io",
                "{ns}/{name}: {s}"
            );
        }
    }

    // Every Tideway component, as its chart ServiceAccount, with a token bound to its Pod.
    let pods = kubectl_json(&lab, &["get", "pods", "-A", "-l", "app.kubernetes.io/instance=tideway"]);
    let accounts: std::collections::BTreeSet<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap();
            format!("system:serviceaccount:{ns}:{}", p["spec"]["serviceAccountName"].as_str().unwrap())
        })
        .collect();
    assert!(accounts.len() >= 3, "operator, agent and DNS accounts: {accounts:?}");
    let events = audit(&lab);
    for account in &accounts {
        let bound = events.iter().filter(|e| e["user"]["username"] == account.as_str()).find(|e| {
            let extra = &e["user"]["extra"];
            extra["authentication.kubernetes.io/pod-name"][0].is_string()
                && extra["authentication.kubernetes.io/credential-id"][0]
                    .as_str()
                    .is_some_and(|c| c.starts_with("JTI="))
        });
        assert!(bound.is_some(), "no request by {account} with a pod-bound token in the audit log");
    }

    a_new_node_needs_the_api_servers_address(&lab);
    pods_run_from_a_loaded_image_under_their_security_context(&lab);

    // `lab replace` deletes what the lab applied and the file no longer names.
    let without_svc3: String =
        DEMO.split("\n---").filter(|doc| !doc.contains("name: svc3}")).collect::<Vec<_>>().join("\n---");
    assert!(!without_svc3.contains("name: svc3}"), "the demo's svc3 is named as the test expects");
    lab.change("replace", &without_svc3);
    eventually(patience(30.0), || match kubectl(&lab, &["get", "service", "svc3"]) {
        Err(e) if e.contains("NotFound") => Ok(()),
        other => Err(format!("svc3 still there: {other:?}")),
    })
    .unwrap();
    assert!(kubectl(&lab, &["get", "service", "svc1"]).is_ok(), "svc1 kept");

    // The faults: a node off the network (NotReady after the grace period, by the
    // controller-manager), the API server down.
    scenarios::a_node_off_the_network_loses_its_address_then_turns_not_ready(&lab);
    scenarios::the_api_server_down_fences_nobody(&lab);
    the_agents_and_the_operator_move_to_their_rotated_tokens(&lab, &accounts);
}

/// How often the kubelets rewrite projected tokens here (seconds).
const ROTATION: u64 = 20;

/// The kubelets rewrite each Pod's projected token every [`ROTATION`] seconds (a new token,
/// a new JTI); the agents and the operator read the new file and authenticate with it, as the
/// audit log shows: more than one credential for the same Pod. (kube-rs re-reads a token file
/// once its copy is a minute old.) The DNS server only lists and watches: a watch
/// authenticates once, at its start, and lasts up to five minutes, so its next token shows
/// later than this test waits.
fn the_agents_and_the_operator_move_to_their_rotated_tokens(
    lab: &TestLab,
    accounts: &std::collections::BTreeSet<String>,
) {
    let writers: Vec<&String> = accounts
        .iter()
        .filter(|a| a.ends_with(":tideway-agent") || a.ends_with(":tideway-operator"))
        .collect();
    assert_eq!(writers.len(), 2, "the agent's and the operator's accounts: {accounts:?}");
    eventually(patience(150.0), || {
        let events = audit(lab);
        for account in &writers {
            let mut by_pod: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
                Default::default();
            for e in events.iter().filter(|e| e["user"]["username"] == account.as_str()) {
                let extra = &e["user"]["extra"];
                if let (Some(pod), Some(jti)) = (
                    extra["authentication.kubernetes.io/pod-name"][0].as_str(),
                    extra["authentication.kubernetes.io/credential-id"][0].as_str(),
                ) {
                    by_pod.entry(pod.to_string()).or_default().insert(jti.to_string());
                }
            }
            if !by_pod.values().any(|jtis| jtis.len() >= 2) {
                return Err(format!("{account}: no Pod has used a second token yet: {by_pod:?}"));
            }
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// Tideway's Pods (the agents, DNS, the operator) run as runc containers from the image `lab
/// up --image` loaded, not as the build's binary, each under the runtime's default seccomp
/// profile; each agent, unprivileged, set its node's `route_localnet` through the host's
/// `/proc/sys/net` the chart mounts (a fresh network namespace starts with 0), and says it left
/// none unset and holds its ports.
fn tideway_runs_from_its_image_with_the_charts_security_context(lab: &TestLab) {
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap());
    let pods = kubectl_json(lab, &["get", "pods", "-A", "-l", "app.kubernetes.io/instance=tideway"]);
    let mut components = std::collections::BTreeSet::new();
    for p in pods["items"].as_array().unwrap() {
        let (uid, node) = (p["metadata"]["uid"].as_str().unwrap(), p["spec"]["nodeName"].as_str().unwrap());
        for c in p["spec"]["containers"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let root = dir.join("nodes").join(node).join("runc");
            let state = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["state", &format!("{uid}-{name}")])
                .output()
                .unwrap();
            let state: Value = serde_json::from_slice(&state.stdout).unwrap_or_else(|_| {
                panic!(
                    "{} {name}: no runc container ({})",
                    p["metadata"]["name"],
                    String::from_utf8_lossy(&state.stderr)
                )
            });
            assert_eq!(state["status"], "running", "{} {name}: {state}", p["metadata"]["name"]);
            let bundle = PathBuf::from(state["bundle"].as_str().unwrap_or_default());
            let spec: Value =
                serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
            let seccomp = &spec["linux"]["seccomp"]["defaultAction"];
            assert_eq!(
                seccomp, "SCMP_ACT_ERRNO",
                "{} {name}: under RuntimeDefault seccomp",
                p["metadata"]["name"]
            );
            components
                .insert(p["metadata"]["labels"]["app.kubernetes.io/component"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(components, ["agent", "dns", "operator"].map(String::from).into(), "{pods}");
    for n in lab.status()["nodes"].as_array().unwrap() {
        let node = n["name"].as_str().unwrap();
        let out = lab.exec(node, &["cat", "/proc/sys/net/ipv4/conf/all/route_localnet"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{node}: route_localnet");
    }
    let states = eventually(patience(60.0), || {
        let s = kubectl_json(lab, &["get", "nodeproxystates", "-A"]);
        let items = s["items"].as_array().cloned().unwrap_or_default();
        let reported = items.iter().filter(|i| i["status"].is_object()).count();
        if reported == lab.status()["nodes"].as_array().unwrap().len() {
            Ok(items)
        } else {
            Err(format!("{s}"))
        }
    })
    .unwrap_or_else(|e| panic!("every node's state: {e}\n{}", lab.diagnose()));
    for st in states {
        let unset = st["status"]["unsetSysctls"].as_array().cloned().unwrap_or_default();
        assert!(unset.is_empty(), "{}: {unset:?}", st["metadata"]["name"]);
        let conflicts = st["status"]["listenerConflicts"].as_array().cloned().unwrap_or_default();
        assert!(conflicts.is_empty(), "{}: {conflicts:?}", st["metadata"]["name"]);
    }
    eventually(patience(30.0), || {
        let configs = kubectl_json(lab, &["get", "proxyconfigs", "-A"]);
        let items = configs["items"].as_array().cloned().unwrap_or_default();
        let set = |c: &Value| {
            let conditions = c["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conditions.iter().any(|c| c["type"] == "SysctlsSet" && c["status"] == "True")
        };
        if !items.is_empty() && items.iter().all(set) { Ok(()) } else { Err(format!("{configs}")) }
    })
    .unwrap_or_else(|e| panic!("every ProxyConfig's SysctlsSet: {e}"));
}

/// A LoadBalancerPool the server stores and the components refuse (`api/tests/refused.yaml`'s
/// `address-range-reversed`: no CEL function orders two addresses): its `Valid` condition says
/// why, naming the field; deleted, it is forgotten.
fn a_pool_the_conversion_refuses_says_why(lab: &TestLab) {
    let file = std::env::temp_dir().join(format!("refused-pool-{}.yaml", std::process::id()));
    let pool = "apiVersion: tideway.io/v1alpha1\nkind: LoadBalancerPool\nmetadata: {name: address-range-reversed}\n\
                spec: {addresses: [192.168.9.20-192.168.9.10]}\n";
    std::fs::write(&file, pool).unwrap();
    kubectl(lab, &["apply", "-f", file.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&file);
    let valid = eventually(patience(30.0), || {
        let p = kubectl_json(lab, &["get", "loadbalancerpool", "address-range-reversed"]);
        let conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let valid = conditions.into_iter().find(|c| c["type"] == "Valid" && c["status"] == "False");
        valid.ok_or_else(|| format!("no Valid=False yet: {p}"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", lab.diagnose(), operator_logs(lab)));
    assert_eq!(valid["reason"], "InvalidSpec", "{valid}");
    assert!(valid["message"].as_str().unwrap_or_default().contains("spec.addresses[0]"), "{valid}");
    kubectl(lab, &["delete", "loadbalancerpool", "address-range-reversed"]).unwrap();
}

/// The last lines of the operators' logs, warnings and leadership first.
fn operator_logs(lab: &TestLab) -> String {
    let pods = kubectl_json(
        lab,
        &["-n", "tideway-system", "get", "pods", "-l", "app.kubernetes.io/component=operator"],
    );
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap());
    let mut out = String::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let (node, name) =
            (pod["spec"]["nodeName"].as_str().unwrap_or(""), pod["metadata"]["name"].as_str().unwrap_or(""));
        let log = dir.join(format!("nodes/{node}/pods/tideway-system_{name}/containers/operator.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> =
            text.lines().filter(|l| !l.contains("DEBUG") && !l.contains("TRACE")).collect();
        let notable =
            lines.iter().filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("leader"));
        let notable: Vec<&&str> = notable.collect();
        out += &format!(
            "{name} notable:\n{}\n",
            notable[notable.len().saturating_sub(30)..]
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        out += &format!("{name} last:\n{}\n", lines[lines.len().saturating_sub(30)..].join("\n"));
    }
    out
}

/// A container's output, where the lab's kubelet keeps it (it serves no `kubectl logs`).
fn container_log(lab: &TestLab, pod: &Value, container: &str) -> String {
    let dir = PathBuf::from(lab.status()["dir"].as_str().unwrap());
    let (node, name) = (pod["spec"]["nodeName"].as_str().unwrap(), pod["metadata"]["name"].as_str().unwrap());
    let log = dir.join(format!("nodes/{node}/pods/default_{name}/containers/{container}.log"));
    std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()))
}

fn waiting_reason(lab: &TestLab, pod: &str) -> Result<String, String> {
    let p = kubectl_json(lab, &["get", "pod", pod]);
    p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{pod} is not waiting: {}", p["status"]))
}

/// `tideway lab load image` makes the image `make image` built available, as `kind load
/// image-archive` does; the lab's kubelet runs Pods naming it under runc with the spec a CRI
/// runtime writes: the user, capabilities, seccomp and no_new_privs the Pod asks for, a
/// read-only `/proc/sys` and root filesystem, a ConfigMap volume, env; probes run in the
/// container; traffic reaches it through Tideway; `imagePullPolicy: Always` fails as a pull
/// without a registry, and runAsNonRoot refuses root as kubelet does.
fn pods_run_from_a_loaded_image_under_their_security_context(lab: &TestLab) {
    let loaded = ok(
        tideway(&[
            "lab",
            "load",
            "image",
            tideway_tests::image_archive().to_str().unwrap(),
            "--name",
            &lab.name,
        ]),
        "lab load image",
    );
    let reference = format!("loaded ghcr.io/tideway-net/tideway:{}", env!("CARGO_PKG_VERSION"));
    assert!(loaded.contains(&reference), "{loaded}");
    let pods = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/image-pods.yaml");
    kubectl(lab, &["apply", "-f", pods.to_str().unwrap()]).unwrap();

    let check = eventually(patience(60.0), || {
        let p = kubectl_json(lab, &["get", "pod", "imgcheck"]);
        if p["status"]["phase"] == "Succeeded" { Ok(p) } else { Err(format!("imgcheck: {}", p["status"])) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    let out = container_log(lab, &check, "c");
    for line in [
        "Uid: 65532\t65532\t65532\t65532",
        "CapEff: 0000000000000000",
        "NoNewPrivs: 1",
        "Seccomp: 2",
        "sysctl=refused",
        "rootfs=refused",
        "key=from-a-configmap",
        "foo=bar host=imgcheck",
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in imgcheck's output:\n{out}");
    }

    let lb = eventually(patience(60.0), || {
        let s = kubectl_json(lab, &["get", "service", "imgweb"]);
        s["status"]["loadBalancer"]["ingress"][0]["ip"].as_str().map(str::to_string).ok_or(format!("{s}"))
    })
    .unwrap();
    wait_serving_within(lab, "mypc", &format!("http://{lb}/"), 1, patience(60.0));
    let web = kubectl_json(lab, &["get", "pod", "imgweb"]);
    assert_eq!(
        web["status"]["containerStatuses"][0]["restartCount"], 0,
        "its exec liveness probe passes: {web}"
    );
    // Pulled every time, from no registry: kubelet's reason alternates between the failed pull
    // and its back-off, and a loaded machine may show either first.
    let always = eventually(patience(30.0), || waiting_reason(lab, "imgalways")).unwrap_or_default();
    assert!(["ErrImagePull", "ImagePullBackOff"].contains(&always.as_str()), "{always}");
    let refused = eventually(patience(30.0), || waiting_reason(lab, "imgroot")).unwrap_or_default();
    assert_eq!(refused, "CreateContainerConfigError");
}

/// Runs `cmd` (argv) and asserts it succeeded.
fn run(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0]).args(&cmd[1..]).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A namespace of the test's, and what it added to a node's, removed also when the test fails.
struct EmptyNode {
    ns: String,
    via: String,
    agent: Option<std::process::Child>,
}

impl EmptyNode {
    fn stop_agent(&mut self) {
        if let Some(mut child) = self.agent.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EmptyNode {
    fn drop(&mut self) {
        self.stop_agent();
        let _ = Command::new("ip").args(["netns", "delete", &self.ns]).status();
        let _ = Command::new("ip")
            .args(["netns", "exec", &self.via, "nft", "delete", "table", "ip", "tw_empty_node"])
            .status();
    }
}

/// The item the chart's `apiServer.address` answers: a node whose kernel holds no rules yet
/// (a new or rebooted node, kube-proxy gone) reaches the API server only at its own address.
/// The test's "node" is a namespace of its own behind a lab node, which masquerades it to the
/// node network and drops what it sends to the Service range, so only its own rules could serve
/// a ClusterIP. Its agent runs as the chart runs it: in-cluster configuration (the
/// ServiceAccount files, `KUBERNETES_SERVICE_HOST/PORT`), the agent's ServiceAccount.
fn a_new_node_needs_the_api_servers_address(lab: &TestLab) {
    let status = lab.status();
    let node =
        status["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "myk8s-worker3").unwrap().clone();
    let via = node["namespace"].as_str().unwrap().to_string();
    let ns = format!("tw-empty{}", std::process::id());
    let mut empty = EmptyNode { ns: ns.clone(), via: via.clone(), agent: None };
    run(&["ip", "netns", "add", &ns]);
    run(&[
        "ip",
        "link",
        "add",
        "tw-empty0",
        "netns",
        &ns,
        "type",
        "veth",
        "peer",
        "name",
        "tw-empty1",
        "netns",
        &via,
    ]);
    for (inside, link, addr) in [(&ns, "tw-empty0", "10.99.0.2/30"), (&via, "tw-empty1", "10.99.0.1/30")] {
        run(&["ip", "-n", inside, "addr", "add", addr, "dev", link]);
        run(&["ip", "-n", inside, "link", "set", link, "up"]);
    }
    run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    run(&["ip", "-n", &ns, "route", "add", "default", "via", "10.99.0.1"]);
    run(&["ip", "netns", "exec", &via, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let rules = "table ip tw_empty_node {
        chain pre { type filter hook prerouting priority -400; ip saddr 10.99.0.0/30 ip daddr 10.200.0.0/16 drop; }
        chain post { type nat hook postrouting priority 100; ip saddr 10.99.0.0/30 masquerade; }
    }";
    let nft = Command::new("ip")
        .args(["netns", "exec", &via, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(rules.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(nft.success(), "nft in {via}");

    // The agent's in-cluster files: a token of its ServiceAccount, the cluster's CA.
    let secrets = lab.dir.join("empty-node-serviceaccount");
    std::fs::create_dir_all(&secrets).unwrap();
    let token =
        kubectl(lab, &["-n", "tideway-system", "create", "token", "tideway-agent", "--duration=1h"]).unwrap();
    std::fs::write(secrets.join("token"), token.trim()).unwrap();
    std::fs::write(secrets.join("namespace"), "tideway-system").unwrap();
    let ca = kubectl(
        lab,
        &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"],
    )
    .unwrap();
    let ca = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(ca.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    std::fs::write(secrets.join("ca.crt"), ca.stdout).unwrap();
    std::fs::create_dir_all("/run/secrets/kubernetes.io/serviceaccount").unwrap();

    let start_agent = |host: &str, port: &str| {
        let script = format!(
            "mount --bind {} /run/secrets/kubernetes.io/serviceaccount && exec nsenter --net=/run/netns/{ns} \
             env KUBERNETES_SERVICE_HOST={host} KUBERNETES_SERVICE_PORT={port} {BIN} agent --node=myk8s-worker3 \
             --source=kubernetes --mode=iptables --no-gossip --healthz-bind-address=127.0.0.1:10256 \
             --metrics-bind-address=127.0.0.1:10249",
            secrets.display()
        );
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(lab.dir.join(format!("empty-node-agent-{host}.log"))).unwrap())
            .spawn()
            .expect("unshare (util-linux)")
    };
    let readyz = || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "curl",
                "-s",
                "--max-time",
                "2",
                "-w",
                " %{http_code}",
                "http://127.0.0.1:10256/readyz",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let programmed = || run(&["ip", "netns", "exec", &ns, "iptables-save", "-t", "nat"]);
    let cip =
        status["services"].as_array().unwrap().iter().find(|s| s["name"] == "svc1").unwrap()["clusterIP"]
            .as_str()
            .unwrap()
            .to_string();

    // Without the API server's address: the `kubernetes` Service's ClusterIP, which nothing on
    // this node serves. The agent says so, and programs nothing.
    empty.agent = Some(start_agent("10.200.1.1", "443"));
    let said = eventually(patience(40.0), || {
        let r = readyz();
        if r.ends_with(" 503") && r.contains("10.200.1.1") { Ok(r) } else { Err(format!("readyz: {r:?}")) }
    })
    .unwrap();
    assert!(said.contains("does not answer"), "{said}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(!programmed().contains(&cip), "programmed without an API server: {}", programmed());
    empty.stop_agent();

    // With it: the agent lists, programs the node, and a ClusterIP answers from there.
    empty.agent = Some(start_agent("172.18.0.2", "6443"));
    eventually(patience(60.0), || {
        let r = readyz();
        if r.ends_with(" 200") { Ok(()) } else { Err(format!("readyz: {r:?}")) }
    })
    .unwrap();
    assert!(programmed().contains(&cip), "{}", programmed());
    let served = eventually(patience(20.0), || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "curl", "-s", "--max-time", "2", &format!("http://{cip}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("Hostname: webpod") { Ok(text) } else { Err(format!("curl {cip}: {text:?}")) }
    });
    served.unwrap();
}

//! `tideway dns` and `tideway agent` with `--source kubernetes` against the real API server
//! (root; needs `make kube`): the real binaries, each with a kubeconfig holding a token the
//! server mints for its chart ServiceAccount, RBAC as the chart renders it, real DNS answers and
//! real rules. One control plane for the binary (its Service CIDR the battery's 10.96.0.0/16),
//! the phases in turn:
//! * `dns`: while its role lacks `namespaces` it has not listed every kind, so the cluster zone
//!   answers SERVFAIL and `/ready` 503; granted, it answers; a Service created later is
//!   answered, and gone once deleted;
//! * `dns --require-programmed`: a pod on a node whose agent has not reported the Service's
//!   version yet is told to retry (SERVFAIL); reported, the pod gets the address;
//! * `agent`, in node-a's namespace and reaching the server through a relay there: while its
//!   role lacks EndpointSlices it does not sync and the kernel is untouched; granted, it
//!   programs the battery's Services (real traffic to every endpoint), reports its
//!   NodeProxyState (server-side applied, programmed up to the Service's version at least), and
//!   an endpoint change made with the API reaches the kernel.
//!
//! What stays on the imitation (`kubernetes.rs`): an invalid Service update (the real server
//! refuses it before any watch sees it) and a 410 answered to a watch on cue.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use support::dns_server::{Dns, http_code};
use support::real_api::{Api, battery, get, merge, relays};
use support::*;
use tideway_tests::netns::{eventually, tcp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_and_agent_on_the_real_api_server() {
    tideway_tests::netns::require_root("the control plane and the agent");
    let values = [("dns.requireProgrammed".to_string(), "true".to_string())];
    let mut api = Api::start("kapi", &values).await;
    api.applier.apply_all(battery("")).await.unwrap();
    dns_serves(&mut api).await;
    dns_holds_back(&mut api).await;
    agent(&mut api).await;
    api.record_usage();
}

async fn dns_serves(api: &mut Api) {
    let role = api.standalone.withdraw("tideway-dns", "namespaces").await.unwrap();
    let kubeconfig = api.standalone.token_kubeconfig("kube-system", "tideway-dns").await.unwrap();
    let ready: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let flags = ["--ready-listen", &ready.to_string(), "--health-listen", "none", "--metrics-listen", "none"];
    let dns = Dns::start(&kubeconfig, &api.standalone.dir, "dns", &flags);
    let web = "web.demo.svc.cluster.local";

    // Before every kind is listed the cluster zone answers SERVFAIL and /ready says 503.
    dns.until(None, web, "status: SERVFAIL", 10.0);
    assert_eq!(http_code(ready, "/ready").0, 503);
    api.applier.apply(&role).await.unwrap();
    dns.until(None, web, "10.96.0.10", 15.0);
    assert_eq!(http_code(ready, "/ready").0, 200);

    // A Service created later is answered as soon as its watch event arrives; deleted, gone.
    let late = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "late", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.99", "ports": [{"port": 80}]}});
    api.applier.apply(&late).await.unwrap();
    dns.until(None, "late.demo.svc.cluster.local", "10.96.0.99", 5.0);
    api.applier.delete(&late).await.unwrap();
    dns.until(None, "late.demo.svc.cluster.local", "status: NXDOMAIN", 5.0);
    let out = dns.dig(None, web);
    assert!(out.contains("10.96.0.10"), "{out}\n{}", dns.log());
}

async fn dns_holds_back(api: &mut Api) {
    let admin = api.admin.clone();
    // A pod on node-a, at 127.0.0.5 so that dig can ask from its address.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": "demo"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]}});
    api.applier.apply(&pod).await.unwrap();
    let ip = json!({"status": {"podIP": "127.0.0.5", "podIPs": [{"ip": "127.0.0.5"}]}});
    merge(&admin, "/api/v1/namespaces/demo/pods/client/status", ip).await;
    let web = get(&admin, "/api/v1/namespaces/demo/services/web").await.unwrap();
    let written: u64 = web["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap();
    // node-a's agent has programmed every change before the Service's.
    let state = json!({"apiVersion": "tideway.io/v1alpha1", "kind": "NodeProxyState",
        "metadata": {"name": "node-a"}, "spec": {"nodeName": "node-a"}});
    api.applier.apply(&state).await.unwrap();
    let path = "/apis/tideway.io/v1alpha1/nodeproxystates/node-a/status";
    let report = |version: u64| json!({"status": {"programmedResourceVersion": version.to_string()}});
    merge(&admin, path, report(written - 1)).await;

    let kubeconfig = api.standalone.token_kubeconfig("kube-system", "tideway-dns").await.unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let flags = ["--require-programmed", "--metrics-listen", &metrics.to_string(), "--health-listen", "none"];
    let dns = Dns::start(
        &kubeconfig,
        &api.standalone.dir,
        "dns-programmed",
        &[&flags[..], &["--ready-listen", "none"]].concat(),
    );
    let name = "web.demo.svc.cluster.local";
    // Asked from outside any pod, the answer is the usual one.
    dns.until(None, name, "10.96.0.10", 15.0);
    // node-a has programmed up to just before the Service: its pod is told to retry.
    let out = dns.dig(Some("127.0.0.5"), name);
    assert!(out.contains("status: SERVFAIL"), "{out}\n{}", dns.log());
    let (_, text) = http_code(metrics, "/metrics");
    assert!(text.contains("tideway_dns_not_programmed_total 1"), "{text}");
    // The agent reports it programmed: the pod gets the address.
    merge(&admin, path, report(written)).await;
    dns.until(Some("127.0.0.5"), name, "10.96.0.10", 5.0);
    api.applier.delete(&state).await.unwrap();
    api.applier.delete(&pod).await.unwrap();
}

async fn agent(api: &mut Api) {
    let role = api.standalone.withdraw("tideway-agent", "endpointslices").await.unwrap();
    let mut c = cluster("kapi-agent");
    // The API server where node-a's agent reaches it: a relay on node-a's loopback.
    let (port, _relay) = relays(&[&c.nodes[0].ns], api.standalone.cp.host_endpoint());
    let kc = api.kubeconfig_via("tideway-system", "tideway-agent", port).await.display().to_string();
    // The REST API takes the tests' token (it needs one on loopback too).
    let token_file = c.path("api-token");
    std::fs::write(&token_file, API_TOKEN).unwrap();
    let token_file = token_file.display().to_string();
    let args = [
        "agent",
        "--node",
        "node-a",
        "--source",
        "kubernetes",
        "--kubeconfig",
        &kc,
        "--min-sync-period",
        "100ms",
        "--sync-period",
        "2s",
        "--api-token-file",
        &token_file,
    ];
    c.spawn_on(0, &args, "agent.log", &[]);

    // RBAC withholds EndpointSlices: not synced, so the kernel is not touched.
    tokio::time::sleep(patience(3.0)).await;
    let tables = c.nodes[0].ns.sh("nft list tables");
    assert!(
        !tables.contains("tideway"),
        "programmed before the source synced: {tables}\n{}",
        c.log("agent.log")
    );
    api.applier.apply(&role).await.unwrap();
    let st = wait_synced(&c.nodes[0].ns, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));
    assert_eq!(st["mode"], "nftables");

    // Real traffic through the rules the API's objects asked for.
    let web: SocketAddr = WEB.parse().unwrap();
    eventually(patience(10.0), || {
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..40 {
            names.insert(tcp(&c.client, web)?.name);
        }
        if names.len() == 4 { Ok(names) } else { Err(format!("only {names:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));

    // The node's report, server-side applied, programmed up to the Service's version at least.
    let path = "/apis/tideway.io/v1alpha1/nodeproxystates/node-a";
    let mut report = Value::Null;
    for _ in 0..100 {
        report = get(&api.admin, path).await.unwrap_or_default();
        if report["status"]["ready"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(report["status"]["ready"], true, "{report}\n{}", c.log("agent.log"));
    assert_eq!(report["status"]["mode"], "nftables");
    assert_eq!(report["status"]["proxyConfig"], "default");
    let managers: Vec<&str> = report["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["operation"].as_str())
        .collect();
    assert!(managers.iter().all(|m| *m == "Apply"), "written with server-side apply only: {managers:?}");
    let version = |v: &Value| v.as_str().and_then(|v| v.parse::<u64>().ok());
    let service = get(&api.admin, "/api/v1/namespaces/demo/services/web").await.unwrap();
    let programmed = version(&report["status"]["programmedResourceVersion"]).expect("a programmed version");
    assert!(programmed >= version(&service["metadata"]["resourceVersion"]).unwrap(), "{report}");
    assert!(report["status"]["rules"].as_i64().unwrap() > 0, "{report}");

    // An endpoint change made with the API arrives over the watch and reaches the kernel.
    let one = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "demo", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "p", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.1.11"], "nodeName": "node-a", "conditions": {"ready": true}}]});
    api.applier.apply(&one).await.unwrap();
    eventually(patience(10.0), || {
        let names: std::collections::BTreeSet<String> =
            (0..20).map(|_| tcp(&c.client, web).map(|a| a.name)).collect::<Result<_, _>>()?;
        if names.len() == 1 && names.contains("a1") { Ok(()) } else { Err(format!("{names:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));
}

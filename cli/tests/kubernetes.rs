//! `tideway agent` and `tideway dns` with `--source kubernetes`, against a stand-in API server:
//! the real binaries, the real kube client (through `--kubeconfig`), real rules and real DNS
//! answers. The agent test needs root (network namespaces).

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::*;
use tideway_tests::fake_api::{Account, BackgroundApi};
use tideway_tests::netns::{eventually, tcp};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tideway")
}

#[test]
fn agent_programs_from_the_kubernetes_api_and_reports_its_node() {
    tideway_tests::netns::require_root("the agent");
    let mut c = cluster("kube-agent");
    // The API server answers on node-a's loopback, as the agent's in-cluster address would.
    let server = BackgroundApi::start(Some(&c.nodes[0].ns.name));
    server.preload_yaml(&manifest("nftables", ""));
    server.api.forbid("EndpointSlice", true);
    let kubeconfig = server.api.kubeconfig(&c.dir, Account::Agent);
    let args = ["agent", "--node", "node-a", "--source", "kubernetes", "--kubeconfig"];
    let mut args: Vec<&str> = args.to_vec();
    let kc = kubeconfig.display().to_string();
    args.extend([kc.as_str(), "--min-sync-period", "100ms", "--sync-period", "2s"]);
    // The REST API takes the tests' token (it needs one on loopback too).
    let token_file = c.path("api-token");
    std::fs::write(&token_file, API_TOKEN).unwrap();
    let token_file = token_file.display().to_string();
    args.extend(["--api-token-file", token_file.as_str()]);
    c.spawn_on(0, &args, "agent.log", &[]);

    // RBAC denies EndpointSlices: not synced, so the kernel is not touched.
    std::thread::sleep(patience(2.0));
    let tables = c.nodes[0].ns.sh("nft list tables");
    assert!(!tables.contains("tideway"), "programmed before the source synced: {tables}");
    server.api.forbid("EndpointSlice", false);
    let st = wait_synced(&c.nodes[0].ns, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));
    assert_eq!(st["mode"], "nftables");

    // Real traffic through the rules the API's objects asked for.
    let web: SocketAddr = WEB.parse().unwrap();
    let seen = eventually(patience(10.0), || {
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..40 {
            names.insert(tcp(&c.client, web)?.name);
        }
        if names.len() == 4 { Ok(names) } else { Err(format!("only {names:?}")) }
    });
    seen.unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));

    // The node's report, written with server-side apply.
    let report = eventually(patience(10.0), || {
        let r = server.api.get("NodeProxyState", None, "node-a").ok_or("no NodeProxyState yet")?;
        if r["status"]["ready"] == true { Ok(r) } else { Err(format!("not ready: {r}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));
    assert_eq!(report["status"]["mode"], "nftables");
    assert_eq!(report["status"]["proxyConfig"], "default");
    // Programmed up to the Service's own version at least (versions compare as integers).
    let version = |v: &serde_json::Value| v.as_str().and_then(|v| v.parse::<u64>().ok());
    let web_version =
        server.api.get("Service", Some("demo"), "web").map(|s| s["metadata"]["resourceVersion"].clone());
    let programmed = version(&report["status"]["programmedResourceVersion"]);
    assert!(programmed >= web_version.as_ref().and_then(version) && programmed.is_some(), "{report}");
    assert!(report["status"]["rules"].as_i64().unwrap() > 0, "{report}");

    // An endpoint change arrives over the watch and reaches the kernel.
    let one = json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "demo",
        "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
        "ports": [{"name": "p", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.1.11"], "nodeName": "node-a", "conditions": {"ready": true}}]});
    server.api.upsert(one);
    eventually(patience(10.0), || {
        let names: std::collections::BTreeSet<String> =
            (0..20).map(|_| tcp(&c.client, web).map(|a| a.name)).collect::<Result<_, _>>()?;
        if names.len() == 1 && names.contains("a1") { Ok(()) } else { Err(format!("{names:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent.log")));

    // 410 Gone: the agent relists, finds nothing new, and does not resync the kernel.
    // The status is written just after the kernel changes; read it once it has settled.
    let before = eventually(patience(5.0), || {
        let first = status(&c.nodes[0].ns)?;
        std::thread::sleep(Duration::from_millis(200));
        let second = status(&c.nodes[0].ns)?;
        if first["syncs"] == second["syncs"] { Ok(second) } else { Err(format!("still syncing: {second}")) }
    })
    .expect("status settles");
    let lists = |api: &tideway_tests::fake_api::FakeApi| {
        api.requests_to("/apis/discovery.k8s.io").iter().filter(|r| r.is_first_view()).count()
    };
    let listed = lists(&server.api);
    server.api.expire_watches("EndpointSlice");
    eventually(patience(10.0), || {
        if lists(&server.api) > listed { Ok(()) } else { Err("no relist".to_string()) }
    })
    .expect("relisted");
    std::thread::sleep(Duration::from_millis(500));
    let after = status(&c.nodes[0].ns).expect("status");
    assert_eq!(after["syncs"], before["syncs"], "a relist without differences changes nothing");
    assert_eq!(tcp(&c.client, web).expect("still served").name, "a1");
}

struct Dns {
    child: Child,
    addr: SocketAddr,
}

/// `tideway dns --source kubernetes` on a free loopback port with `extra` flags, its log in
/// `dir/dns.log`.
fn start_dns(kubeconfig: &std::path::Path, dir: &std::path::Path, extra: &[&str]) -> Dns {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.join("dns.log")).unwrap();
    let child = Command::new(bin())
        .args(["dns", "--source", "kubernetes", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--listen", &addr.to_string(), "--upstream", "127.0.0.1:9"])
        .args(["--no-loop-probe", "--workers", "1", "--lameduck", "0s"])
        // Not the fixed default port: the DNS tests run side by side.
        .args(["--api-listen", "none"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("tideway dns");
    Dns { child, addr }
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dig(addr: SocketAddr, name: &str) -> String {
    let out = Command::new("dig")
        .args([&format!("@{}", addr.ip()), "-p", &addr.port().to_string(), "+tries=1", "+time=2", name])
        .output()
        .expect("dig (dnsutils) is installed by the test command");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ready_code(addr: SocketAddr) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else { return 0 };
    let _ = write!(s, "GET /ready HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn dns_serves_from_the_kubernetes_api() {
    let server = BackgroundApi::start(None);
    let dir = std::env::temp_dir().join(format!("tideway-kube-dns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    server.preload_yaml(&manifest("nftables", ""));
    server.api.preload([json!({"kind": "Namespace", "metadata": {"name": "demo"}})]);
    server.api.forbid("Namespace", true);
    let kubeconfig = server.api.kubeconfig(&dir, Account::Dns);
    let ready: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let dns = start_dns(
        &kubeconfig,
        &dir,
        &["--ready-listen", &ready.to_string(), "--health-listen", "none", "--metrics-listen", "none"],
    );
    let log = || std::fs::read_to_string(dir.join("dns.log")).unwrap_or_default();

    // Before every kind is listed the cluster zone answers SERVFAIL and /ready says 503.
    let out = eventually(Duration::from_secs(10), || {
        let out = dig(dns.addr, "web.demo.svc.cluster.local");
        if out.contains("status: SERVFAIL") { Ok(out) } else { Err(out) }
    });
    out.unwrap_or_else(|e| panic!("{e}\n{}", log()));
    assert_eq!(ready_code(ready), 503);
    server.api.forbid("Namespace", false);
    eventually(Duration::from_secs(15), || {
        let out = dig(dns.addr, "web.demo.svc.cluster.local");
        if out.contains("10.96.0.10") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    assert_eq!(ready_code(ready), 200);

    // A Service created later is answered as soon as its watch event arrives.
    server.api.upsert(json!({"kind": "Service", "metadata": {"name": "late", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.99", "ports": [{"port": 80}]}}));
    eventually(Duration::from_secs(5), || {
        let out = dig(dns.addr, "late.demo.svc.cluster.local");
        if out.contains("10.96.0.99") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));

    // An invalid update keeps the last valid version; a deletion removes the name.
    server.api.upsert(json!({"kind": "Service", "metadata": {"name": "late", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}}));
    eventually(Duration::from_secs(5), || {
        let skipped = log().contains("invalid object skipped");
        if skipped { Ok(()) } else { Err("the invalid update was not seen".to_string()) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let out = dig(dns.addr, "late.demo.svc.cluster.local");
    assert!(out.contains("10.96.0.99"), "{out}\n{}", log());
    server.api.delete("Service", Some("demo"), "late");
    eventually(Duration::from_secs(5), || {
        let out = dig(dns.addr, "late.demo.svc.cluster.local");
        if out.contains("status: NXDOMAIN") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let out = dig(dns.addr, "web.demo.svc.cluster.local");
    assert!(out.contains("10.96.0.10"), "{out}\n{}", log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dig` from source address `from` (a pod's address on loopback).
fn dig_from(addr: SocketAddr, from: &str, name: &str) -> String {
    let out = Command::new("dig")
        .args([
            &format!("@{}", addr.ip()),
            "-p",
            &addr.port().to_string(),
            "-b",
            from,
            "+tries=1",
            "+time=2",
            name,
        ])
        .output()
        .expect("dig (dnsutils) is installed by the test command");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn metrics_text(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return String::new();
    };
    let _ = write!(s, "GET /metrics HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

#[test]
fn dns_holds_a_cluster_ip_back_until_the_pods_node_has_programmed_it() {
    let server = BackgroundApi::start(None);
    let dir = std::env::temp_dir().join(format!("tideway-kube-dns-programmed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    server.api.preload([
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo", "generation": 3},
               "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}),
        // A pod on node-a, reachable as 127.0.0.5 so that dig can ask from its address.
        json!({"kind": "Pod", "metadata": {"name": "client", "namespace": "demo"},
               "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]},
               "status": {"podIP": "127.0.0.5", "podIPs": [{"ip": "127.0.0.5"}]}}),
    ]);
    // node-a's agent has programmed every Service change before the Service was written.
    let written: u64 =
        server.api.get("Service", Some("demo"), "web").expect("preloaded")["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("the test API server gives integer versions");
    let report = |version: u64| {
        json!({"kind": "NodeProxyState", "apiVersion": "tideway.io/v1alpha1", "metadata": {"name": "node-a"},
               "spec": {"nodeName": "node-a"}, "status": {"programmedResourceVersion": version.to_string()}})
    };
    server.api.upsert(report(written - 1));
    // Holding answers back needs the NodeProxyStates the chart grants with dns.requireProgrammed.
    server.api.chart_values("custom-dns");
    let kubeconfig = server.api.kubeconfig(&dir, Account::Dns);
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let dns = start_dns(
        &kubeconfig,
        &dir,
        &[
            "--require-programmed",
            "--metrics-listen",
            &metrics.to_string(),
            "--health-listen",
            "none",
            "--ready-listen",
            "none",
        ],
    );
    let addr = dns.addr;
    let log = || std::fs::read_to_string(dir.join("dns.log")).unwrap_or_default();
    let name = "web.demo.svc.cluster.local";

    // Asked from outside any pod, the answer is the usual one.
    eventually(Duration::from_secs(15), || {
        let out = dig(addr, name);
        if out.contains("10.96.0.10") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    // node-a has programmed up to just before the Service: its pod is told to retry.
    let out = dig_from(addr, "127.0.0.5", name);
    assert!(out.contains("status: SERVFAIL"), "{out}\n{}", log());
    assert!(
        metrics_text(metrics).contains("tideway_dns_not_programmed_total 1"),
        "{}",
        metrics_text(metrics)
    );
    // The agent reports it programmed: the pod gets the address.
    server.api.upsert(report(written));
    eventually(Duration::from_secs(5), || {
        let out = dig_from(addr, "127.0.0.5", name);
        if out.contains("10.96.0.10") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let _ = std::fs::remove_dir_all(&dir);
}

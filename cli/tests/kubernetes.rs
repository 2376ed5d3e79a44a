//! `tideway agent` and `tideway dns` with `--source kubernetes`, against the imitation API
//! server, for what the real one does not do on cue: a 410 answered to the agent's watch (it
//! relists, finds nothing new, and leaves the kernel alone) and an invalid Service update (the
//! real server refuses it before a watch could carry it; the DNS server keeps the last valid
//! version). The rest runs against the real API server in `kubernetes_api.rs`. The agent test
//! needs root (network namespaces).

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
fn agent_relists_after_410_gone_without_touching_the_kernel() {
    tideway_tests::netns::require_root("the agent");
    let mut c = cluster("kube-agent");
    // The API server answers on node-a's loopback, as the agent's in-cluster address would.
    let server = BackgroundApi::start(Some(&c.nodes[0].ns.name));
    server.preload_yaml(&manifest("nftables", ""));
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
    tcp(&c.client, web).expect("still served");
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

#[test]
fn dns_keeps_the_last_valid_version_of_an_invalid_update() {
    let server = BackgroundApi::start(None);
    let dir = std::env::temp_dir().join(format!("tideway-kube-dns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    server.preload_yaml(&manifest("nftables", ""));
    server.api.preload([json!({"kind": "Namespace", "metadata": {"name": "demo"}})]);
    let kubeconfig = server.api.kubeconfig(&dir, Account::Dns);
    let dns = start_dns(
        &kubeconfig,
        &dir,
        &["--ready-listen", "none", "--health-listen", "none", "--metrics-listen", "none"],
    );
    let log = || std::fs::read_to_string(dir.join("dns.log")).unwrap_or_default();

    eventually(Duration::from_secs(15), || {
        let out = dig(dns.addr, "web.demo.svc.cluster.local");
        if out.contains("10.96.0.10") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));

    // A Service created later is answered as soon as its watch event arrives.
    server.api.upsert(json!({"kind": "Service", "metadata": {"name": "late", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.99", "ports": [{"port": 80}]}}));
    eventually(Duration::from_secs(5), || {
        let out = dig(dns.addr, "late.demo.svc.cluster.local");
        if out.contains("10.96.0.99") { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));

    // An invalid update keeps the last valid version.
    server.api.upsert(json!({"kind": "Service", "metadata": {"name": "late", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}}));
    eventually(Duration::from_secs(5), || {
        let skipped = log().contains("invalid object skipped");
        if skipped { Ok(()) } else { Err("the invalid update was not seen".to_string()) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let out = dig(dns.addr, "late.demo.svc.cluster.local");
    assert!(out.contains("10.96.0.99"), "{out}\n{}", log());
    let _ = std::fs::remove_dir_all(&dir);
}

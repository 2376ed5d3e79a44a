//! The node agent on a real kernel: two nodes, four pods and a client in network namespaces,
//! real TCP and UDP traffic, one battery per proxy mode. Needs root; IPVS needs a kernel with
//! `ip_vs` (the host usually has none: `make test-ipvs` runs these in a VM).

mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use support::*;
use tideway_tests::netns::{Answer, Cluster, Netns, connect, eventually, exchange, tcp, tcp_from, udp};

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// Skips (with a note) when the test cannot run here; fails instead when the environment
/// says it must run (`TIDEWAY_REQUIRE_IPVS=1` in the VM).
fn runnable(mode: &str) -> bool {
    if !tideway_tests::netns::is_root() {
        eprintln!("skipping: dataplane tests need root");
        return false;
    }
    if mode == "ipvs" && !ipvs_available() {
        assert!(
            std::env::var_os("TIDEWAY_REQUIRE_IPVS").is_none(),
            "IPVS required but the kernel has no ip_vs"
        );
        eprintln!("skipping: this kernel has no IPVS (run `make test-ipvs`)");
        return false;
    }
    true
}

fn ipvs_available() -> bool {
    let _ = std::process::Command::new("modprobe").args(["-q", "ip_vs"]).status();
    std::path::Path::new("/proc/net/ip_vs").exists()
}

/// A running battery: the cluster, its manifest file and both agents.
struct Battery {
    c: Cluster,
    mode: String,
    agents: Vec<usize>,
}

impl Battery {
    fn start(test: &str, mode: &str, env: &[(&str, &str)]) -> Battery {
        Battery::start_with(test, mode, env, "2s")
    }

    /// Agents checking for drift every `sync` only.
    fn start_with(test: &str, mode: &str, env: &[(&str, &str)], sync: &str) -> Battery {
        let mut c = cluster(test);
        std::fs::write(c.path("cluster.yaml"), manifest(mode, "")).expect("manifest");
        let mut agents = Vec::new();
        for i in 0..2 {
            agents.push(start_agent_with(&mut c, i, "cluster.yaml", env, sync));
        }
        let b = Battery { c, mode: mode.to_string(), agents };
        for n in &b.c.nodes {
            let s = wait_synced(&n.ns, 0).unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
            assert_eq!(s["mode"], mode, "{s}");
        }
        b
    }

    fn node(&self, i: usize) -> &Netns {
        &self.c.nodes[i].ns
    }

    fn pod(&self, node: usize, i: usize) -> &Netns {
        &self.c.nodes[node].pods[i].ns
    }

    /// Everything worth reading when a check fails: node-a's status and kernel rules, and
    /// both agents' logs.
    fn logs(&self) -> String {
        let rules = match self.mode.as_str() {
            "nftables" => "nft list ruleset",
            "iptables" => "iptables-save",
            _ => "ipvsadm -Ln; ipset list -t; iptables-save",
        };
        let rules = String::from_utf8_lossy(&self.node(0).try_sh(rules).stdout).into_owned();
        format!(
            "--- node-a status\n{:?}\n--- node-a rules\n{rules}\n--- agent-node-a.log\n{}\n--- agent-node-b.log\n{}",
            status(self.node(0)),
            self.c.log("agent-node-a.log"),
            self.c.log("agent-node-b.log")
        )
    }

    /// Rewrites the manifest; waits until node-a's status satisfies `done`.
    fn rewrite(
        &self,
        mode: &str,
        extra: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        std::fs::write(self.c.path("cluster.yaml"), manifest(mode, extra)).expect("manifest");
        eventually(patience(20.0), || match status(self.node(0))? {
            s if done(&s) => Ok(s),
            s => Err(format!("not there yet: {s}")),
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()))
    }

    /// Answers from `n` fresh connections.
    fn spread(&self, from: &Netns, dst: &str, n: usize) -> Vec<Answer> {
        (0..n)
            .map(|_| tcp(from, addr(dst)).unwrap_or_else(|e| panic!("{dst}: {e}\n{}", self.logs())))
            .collect()
    }
}

fn names(answers: &[Answer]) -> BTreeSet<String> {
    answers.iter().map(|a| a.name.clone()).collect()
}

/// A connection attempt that must fail: refused quickly (reject) or not answered (drop).
fn refused(ns: &Netns, src: Option<IpAddr>, dst: &str) -> (String, Duration) {
    let t = Instant::now();
    match tcp_from(ns, src, addr(dst)) {
        Ok(a) => panic!("{dst} answered {a:?}, expected no service"),
        Err(e) => (e, t.elapsed()),
    }
}

fn assert_rejected(ns: &Netns, dst: &str) {
    let (e, took) = refused(ns, None, dst);
    assert!(e.contains("refused"), "{dst}: expected a reject, got {e:?}");
    assert!(took < patience(1.0), "{dst}: reject took {took:?}");
}

fn assert_dropped(ns: &Netns, src: Option<IpAddr>, dst: &str) {
    let (e, took) = refused(ns, src, dst);
    assert!(!e.contains("refused"), "{dst}: expected a drop, got a reject ({e})");
    assert!(took >= Duration::from_millis(1900), "{dst}: failed after {took:?} ({e}), expected a timeout");
}

/// The Service behaviours users try first, through every mode's real kernel rules.
fn behaviour(mode: &str) {
    if !runnable(mode) {
        return;
    }
    let mut b = Battery::start(&format!("beh-{mode}"), mode, &[]);
    // A host process on a NodePort's port: it must never see the NodePort's traffic.
    let host = b.c.spawn_on(0, &["whoami", "--name", "host", "--listen", "0.0.0.0:30080"], "host.log", &[]);
    let (client, a1, b1) = (&b.c.client, b.pod(0, 0), b.pod(1, 0));

    // ClusterIP from a pod: spread over all four endpoints, source kept except on hairpin.
    let answers = b.spread(a1, WEB, 40);
    assert!(names(&answers).len() >= 3, "40 connections reached only {:?}", names(&answers));
    for a in &answers {
        if a.name == "a1" {
            assert_ne!(a.peer.ip(), ip("10.244.1.11"), "hairpin traffic must be masqueraded: {a:?}");
        } else {
            assert_eq!(a.peer.ip(), ip("10.244.1.11"), "pod-to-service traffic keeps its source: {a:?}");
        }
    }

    // ClusterIP from outside the cluster CIDR: served and masqueraded.
    for a in b.spread(client, WEB, 8) {
        assert_ne!(a.peer.ip(), ip("192.168.0.100"), "off-cluster source must be masqueraded: {a:?}");
    }

    // NodePort (endpoints on node-b only): answered by them, never by the host listener.
    let answers = b.spread(client, "192.168.0.10:30080", 10);
    assert!(names(&answers).is_subset(&["b1".into(), "b2".into()].into()), "{answers:?}");
    for a in &answers {
        assert_eq!(a.peer.ip(), ip("192.168.0.10"), "ETP Cluster NodePort is masqueraded to the node: {a:?}");
    }

    // LoadBalancer with source ranges: inside served, outside dropped.
    let answers = b.spread(client, "192.168.0.200:80", 10);
    assert!(names(&answers).is_subset(&["a1".into(), "b1".into()].into()), "{answers:?}");
    assert_dropped(client, Some(ip("203.0.113.5")), "192.168.0.200:80");

    // externalIPs.
    assert_eq!(names(&b.spread(client, "192.168.0.150:80", 4)), ["b2".to_string()].into());

    // externalTrafficPolicy: Local keeps the client address and serves only local endpoints.
    for dst in ["192.168.0.201:80", "192.168.0.10:30082"] {
        for a in b.spread(client, dst, 6) {
            assert_eq!(a.name, "a2", "{dst}: ETP Local must pick node-a's endpoint");
            assert_eq!(a.peer.ip(), ip("192.168.0.100"), "{dst}: ETP Local keeps the source");
        }
    }
    // ...and drops when this node has none, while node-b (which has one) serves.
    assert_dropped(client, None, "192.168.0.202:80");
    for a in b.spread(client, "192.168.0.11:30083", 4) {
        assert_eq!((a.name.as_str(), a.peer.ip()), ("b1", ip("192.168.0.100")));
    }
    // Health-check node ports tell the load balancer which nodes to use.
    let (code, body) = http_get(client, addr("192.168.0.10:32000"), "/").expect("health check");
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("health check JSON");
    assert_eq!(json["localEndpoints"], 1, "{body}");
    let (code, body) = http_get(client, addr("192.168.0.10:32001"), "/").expect("health check");
    assert_eq!(code, 503, "{body}");
    let (code, _) = http_get(client, addr("192.168.0.11:32001"), "/").expect("health check");
    assert_eq!(code, 200);
    // The node's proxy health (kube-proxy's :10256/healthz).
    let (code, body) = http_get(client, addr("192.168.0.10:10256"), "/healthz").expect("healthz");
    assert_eq!(code, 200, "{body}");

    // internalTrafficPolicy: Local: each node's pods reach only their node's endpoint.
    assert_eq!(names(&b.spread(a1, "10.96.0.15:80", 8)), ["a1".to_string()].into());
    assert_eq!(names(&b.spread(b1, "10.96.0.15:80", 8)), ["b1".to_string()].into());

    // No endpoints: rejected at once, from a pod and from outside.
    assert_rejected(a1, "10.96.0.16:80");
    assert_rejected(client, "10.96.0.16:80");

    // ClientIP session affinity: one client, one endpoint.
    assert_eq!(names(&b.spread(client, "10.96.0.17:80", 10)).len(), 1);
    assert_eq!(names(&b.spread(a1, "10.96.0.17:80", 10)).len(), 1);

    // Status and metrics name what was programmed.
    let s = status(b.node(0)).expect("status");
    assert_eq!(s["failures"], 0, "{s}\n{}", b.logs());
    assert_eq!(s["last_error"], serde_json::Value::Null, "{s}");
    let metrics = agent_get(b.node(0), "/metrics").expect("metrics");
    assert!(metrics.contains("kubeproxy_sync_proxy_rules_duration_seconds_count"), "{metrics}");
    assert_eq!(agent_get(b.node(0), "/proxyMode").expect("proxyMode").trim(), mode);
    b.c.stop(host);
}

/// UDP: a client that kept its source port across "no endpoints" and endpoint changes is
/// served by the current endpoint at once (stale conntrack entries are deleted).
fn udp_conntrack(mode: &str) {
    if !runnable(mode) {
        return;
    }
    let b = Battery::start(&format!("udp-{mode}"), mode, &[]);
    let a1 = b.pod(0, 0);
    let dns = addr("10.96.0.53:53");
    assert!(udp(a1, dns, 40000).is_err(), "no endpoints yet");
    b.rewrite(mode, &dns_slice("10.244.2.11", "node-b"), |_| true);
    let a = eventually(patience(5.0), || udp(a1, dns, 40000)).unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert_eq!(a.name, "b1");
    b.rewrite(mode, &dns_slice("10.244.2.12", "node-b"), |_| true);
    let a = eventually(patience(5.0), || match udp(a1, dns, 40000)? {
        a if a.name == "b2" => Ok(a),
        a => Err(format!("still served by {a:?}")),
    });
    a.unwrap_or_else(|e| panic!("stale UDP flow kept: {e}\n{}", b.logs()));
    if mode != "ipvs" {
        // IPVS moves the flow itself (the real server is deleted at once and
        // expire_nodest_conn drops its connection entry); the others needed conntrack.
        let s = status(b.node(0)).expect("status");
        assert!(s["conntrack_deleted"].as_u64().unwrap_or(0) >= 1, "{s}");
    }
}

/// Hand-made damage to the rules is found by the periodic check and repaired.
fn drift(mode: &str) {
    if !runnable(mode) {
        return;
    }
    let b = Battery::start(&format!("drift-{mode}"), mode, &[]);
    let node = b.node(0);
    let damage = match mode {
        "nftables" => "nft flush chain ip tideway services",
        "iptables" => "iptables -t nat -F KUBE-SERVICES",
        _ => "ipvsadm -D -t 10.96.0.10:80",
    };
    node.sh(damage);
    let s = eventually(patience(15.0), || {
        let s = status(node)?;
        if s["drift_repairs"].as_u64().unwrap_or(0) >= 1 { Ok(s) } else { Err(format!("no repair yet: {s}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert!(!s["last_drift"].as_array().expect("last_drift").is_empty(), "{s}");
    tcp(&b.c.client, addr(WEB)).unwrap_or_else(|e| panic!("after repair: {e}\n{}", b.logs()));
}

/// Stopping the agent leaves traffic flowing; starting it again changes nothing.
fn restart(mode: &str) {
    if !runnable(mode) {
        return;
    }
    let mut b = Battery::start(&format!("rst-{mode}"), mode, &[]);
    let agent = b.agents[0];
    b.c.stop(agent);
    assert!(status(b.node(0)).is_err(), "agent still answering");
    b.spread(&b.c.client, WEB, 4);
    b.spread(&b.c.client, "192.168.0.201:80", 2);
    b.agents[0] = start_agent(&mut b.c, 0, "cluster.yaml", &[]);
    let s = wait_synced(b.node(0), 0).unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert_eq!(s["failures"], 0, "{s}\n{}", b.logs());
    b.spread(&b.c.client, WEB, 4);
}

/// A failing tool leaves the last good rules in place; the agent reports it and retries.
fn apply_error(mode: &str) {
    if !runnable(mode) {
        return;
    }
    if mode == "nftables" {
        return nftables_rejects(mode);
    }
    let dir = std::env::temp_dir().join(format!("tw-wrap-{}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("wrapper dir");
    let fail = dir.join("fail");
    for tool in ["iptables-nft-restore", "iptables-legacy-restore", "ipset"] {
        let Ok(out) = std::process::Command::new("sh").args(["-c", &format!("command -v {tool}")]).output()
        else {
            continue;
        };
        let real = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if real.is_empty() {
            continue;
        }
        let script = format!(
            "#!/bin/sh\nif [ -e {} ]; then echo 'injected failure' >&2; exit 1; fi\nexec {real} \"$@\"\n",
            fail.display()
        );
        let path = dir.join(tool);
        std::fs::write(&path, script).expect("wrapper");
        std::process::Command::new("chmod").arg("+x").arg(&path).status().expect("chmod");
    }
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let b = Battery::start(&format!("fail-{mode}"), mode, &[("PATH", &path)]);
    let extra = "---\napiVersion: v1\nkind: Service\nmetadata: {name: late, namespace: demo}\n\
                 spec: {clusterIP: 10.96.0.99, ports: [{name: p, port: 80}]}\n";
    std::fs::write(&fail, "").expect("fail marker");
    std::fs::write(b.c.path("cluster.yaml"), manifest(mode, extra)).expect("manifest");
    let s = eventually(patience(10.0), || {
        let s = status(b.node(0))?;
        if s["failures"].as_u64().unwrap_or(0) >= 1 { Ok(s) } else { Err(format!("no failure yet: {s}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert!(s["last_error"].as_str().unwrap_or("").contains("injected failure"), "{s}");
    // The old rules still serve; the new Service is not there yet.
    b.spread(&b.c.client, WEB, 4);
    assert!(tcp(&b.c.client, addr("10.96.0.99:80")).is_err());
    // The tool recovers: the retry programs the new Service (it has no endpoints: reject).
    std::fs::remove_file(&fail).expect("remove marker");
    eventually(patience(10.0), || match tcp(&b.c.client, addr("10.96.0.99:80")) {
        Err(e) if e.contains("refused") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// nftables changes go to the kernel as one netlink transaction: a hand-made rule that still
/// jumps to a chain the agent deletes makes the kernel refuse the whole change. The agent
/// reports it, then a full resync (which replaces the table, hand-made rule included) brings
/// the node to the desired state.
fn nftables_rejects(mode: &str) {
    // No periodic drift check: it would remove the hand-made rule before the change.
    let b = Battery::start_with("rej-nftables", mode, &[], "1h");
    let node = b.node(0);
    let chains = node.sh("nft list table ip tideway");
    let sticky = chains
        .lines()
        .filter_map(|l| l.trim().strip_prefix("chain "))
        .map(|c| c.trim_end_matches('{').trim().trim_matches('"').to_string())
        .find(|c| c.starts_with("service-") && c.contains("sticky"))
        .unwrap_or_else(|| panic!("no chain for the sticky Service:\n{chains}"));
    node.sh(&format!(
        "nft add chain ip tideway hand-made && nft add rule ip tideway hand-made jump {sticky}"
    ));
    let without_sticky: String = manifest(mode, "")
        .split("---\n")
        .filter(|doc| !doc.contains("name: sticky"))
        .collect::<Vec<_>>()
        .join("---\n");
    std::fs::write(b.c.path("cluster.yaml"), without_sticky).expect("manifest");
    eventually(patience(10.0), || {
        let s = status(node)?;
        if s["failures"].as_u64().unwrap_or(0) >= 1 { Ok(s) } else { Err(format!("no failure yet: {s}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    let log = b.c.log("agent-node-a.log");
    assert!(
        log.contains(&format!("delete chain {sticky}: Device or resource busy")),
        "the error names the refused change:\n{log}"
    );
    // The retry is a full sync: the sticky chains and the hand-made one are gone, the rest serves.
    eventually(patience(10.0), || {
        let chains = node.sh("nft list table ip tideway");
        let s = status(node)?;
        if chains.contains("sticky") || chains.contains("hand-made") || !s["last_error"].is_null() {
            return Err(format!("not converged: {s}\n{chains}"));
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    b.spread(&b.c.client, WEB, 4);
}

/// Switching modes keeps open connections and leaves nothing of the old mode behind.
fn mode_switch(from: &str, to: &str) {
    if !runnable(from) || !runnable(to) {
        return;
    }
    let b = Battery::start(&format!("sw-{from}-{to}"), from, &[]);
    let node = b.node(0);
    let mut conn = connect(b.pod(0, 0), None, addr(WEB)).expect("connect");
    let first = exchange(&mut conn).expect("first exchange");
    let s = b.rewrite(to, "", |s| s["mode"] == to);
    assert_eq!(s["mode"], to, "{s}");
    assert_eq!(s["mode_switches"], 1, "{s}");
    assert_eq!(exchange(&mut conn).expect("open connection survives the switch").name, first.name);
    b.spread(b.pod(0, 0), WEB, 6);
    b.spread(&b.c.client, "192.168.0.201:80", 2);
    if from == "ipvs" {
        // IPVS keeps its virtual servers while they carry the open connection.
        assert!(!s["retiring"].as_array().expect("retiring").is_empty(), "{s}");
        drop(conn);
        eventually(patience(15.0), || match leftovers(node, from) {
            l if l.is_empty() => Ok(()),
            l => Err(format!("{from} rules left after the connection closed: {l:?}")),
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    } else {
        let left = leftovers(node, from);
        assert!(left.is_empty(), "{from} rules left after switching to {to}: {left:?}");
    }
    b.spread(b.pod(0, 0), WEB, 4);
}

/// Objects of `mode` present in the node's kernel.
fn leftovers(ns: &Netns, mode: &str) -> Vec<String> {
    let mut out = Vec::new();
    match mode {
        "nftables" => {
            if ns.try_sh("nft list table ip tideway").status.success() {
                out.push("table ip tideway".into());
            }
            if ns.try_sh("nft list table ip6 tideway").status.success() {
                out.push("table ip6 tideway".into());
            }
        }
        "iptables" => {
            let saved = ns.sh("iptables-save 2>/dev/null; ip6tables-save 2>/dev/null");
            out.extend(
                saved
                    .lines()
                    .filter(|l| l.contains("KUBE-SVC-") || l.contains("KUBE-SEP-"))
                    .map(String::from),
            );
        }
        _ => {
            let virtuals = ns.sh("ipvsadm -Ln 2>/dev/null || true");
            out.extend(
                virtuals.lines().filter(|l| l.starts_with("TCP") || l.starts_with("UDP")).map(String::from),
            );
            if ns.try_sh("ip link show kube-ipvs0").status.success() {
                out.push("kube-ipvs0".into());
            }
        }
    }
    out
}

macro_rules! modes {
    ($($mode:ident),*) => {$(
        mod $mode {
            #[test]
            fn behaviour() { super::behaviour(stringify!($mode)) }
            #[test]
            fn udp_conntrack() { super::udp_conntrack(stringify!($mode)) }
            #[test]
            fn drift() { super::drift(stringify!($mode)) }
            #[test]
            fn restart() { super::restart(stringify!($mode)) }
            #[test]
            fn apply_error() { super::apply_error(stringify!($mode)) }
        }
    )*};
}

modes!(nftables, iptables, ipvs);

#[test]
fn switch_nftables_to_iptables() {
    mode_switch("nftables", "iptables");
}

#[test]
fn switch_iptables_to_nftables() {
    mode_switch("iptables", "nftables");
}

#[test]
fn switch_nftables_to_ipvs() {
    mode_switch("nftables", "ipvs");
}

#[test]
fn switch_ipvs_to_iptables() {
    mode_switch("ipvs", "iptables");
}

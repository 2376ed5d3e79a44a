//! The node agent on a real kernel: two nodes, four pods and a client in network namespaces,
//! real TCP and UDP traffic, one battery per proxy mode. Needs root; IPVS needs a kernel with
//! `ip_vs` (the host usually has none: `make test-ipvs` runs these in a VM).

mod support;

use std::collections::{BTreeMap, BTreeSet};
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

/// Fails, saying why, when the test cannot run here: it needs root, and IPVS needs a kernel
/// with `ip_vs` (`make test-ipvs` boots one; `make unit` leaves the IPVS tests out).
fn require(mode: &str) {
    tideway_tests::netns::require_root("the dataplane battery");
    assert!(
        mode != "ipvs" || ipvs_available(),
        "this kernel has no IPVS (ip_vs): run the IPVS tests with `make test-ipvs`, which boots a kernel that has it"
    );
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
        Battery::start_from(test, mode, env, sync, &manifest(mode, ""))
    }

    /// Agents reading the cluster file `text`.
    fn start_from(test: &str, mode: &str, env: &[(&str, &str)], sync: &str, text: &str) -> Battery {
        let mut c = cluster(test);
        std::fs::write(c.path("cluster.yaml"), text).expect("manifest");
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
    require(mode);
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
    if mode == "nftables" {
        // kube-proxy's nftables checks (KEP-1880): a port no Service of a ClusterIP defines is
        // rejected, an address of the ServiceCIDR that no Service holds is dropped.
        assert_rejected(a1, "10.96.0.10:81");
        assert_rejected(client, "10.96.0.10:81");
        assert_dropped(a1, None, "10.96.0.99:80");
    }

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
    require(mode);
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
        // The status is written once the sync's other side effects are done, a moment after
        // the kernel already serves b2.
        let counted = eventually(patience(5.0), || match status(b.node(0))? {
            s if s["conntrack_deleted"].as_u64().unwrap_or(0) >= 1 => Ok(s),
            s => Err(format!("no conntrack deletion counted: {s}")),
        });
        counted.unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    }
}

/// Hand-made damage to the rules is found by the periodic check and repaired.
fn drift(mode: &str) {
    require(mode);
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
    match mode {
        "nftables" => drift_by_content(&b),
        "iptables" => iptables_edit_in_place(&b, "iptables"),
        _ => {}
    }
}

/// The same check on iptables' legacy backend (the battery's default is the nft one).
#[test]
fn iptables_legacy_drift_by_content() {
    require("iptables");
    let b = Battery::start("drift-legacy", "iptables", &[("TIDEWAY_IPTABLES_BACKEND", "legacy")]);
    iptables_edit_in_place(&b, "iptables-legacy");
}

/// iptables: a DNAT rule edited in place (`iptables -R`, the rule count unchanged) is found by
/// content within a check period, only its chain is named, and the rules read as before; the
/// same for a chain an incremental sync wrote, once a check has learnt it.
fn iptables_edit_in_place(b: &Battery, tool: &str) {
    let node = b.node(0);
    edit_dnat_in_place(b, tool, "-j DNAT --to-destination");
    let served = names(&b.spread(&b.c.client, WEB, 40));
    assert!(served.len() > 1, "every endpoint serves again: {served:?}\n{}", b.logs());
    // An incremental sync writes the new endpoint's chain; a check after it learns it.
    let before = status(node).expect("status");
    let syncs = before["syncs"].as_u64().unwrap_or(0);
    let s = b.rewrite("iptables", &dns_slice("10.244.2.11", "node-b"), |s| {
        s["syncs"].as_u64().unwrap_or(0) > syncs
    });
    assert_eq!(s["full_syncs"], before["full_syncs"], "the rewrite is applied incrementally: {s}");
    let checks = drift_checks(node);
    eventually(patience(15.0), || match drift_checks(node) {
        n if n > checks => Ok(()),
        n => Err(format!("{n} checks")),
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    edit_dnat_in_place(b, tool, "-j DNAT --to-destination 10.244.2.11:8080");
}

fn drift_checks(node: &Netns) -> u64 {
    let metrics = agent_get(node, "/metrics").expect("metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("tideway_drift_checks_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no tideway_drift_checks_total\n{metrics}"))
}

/// Edits the first endpoint chain's rule containing `dnat` to send elsewhere; waits for the
/// repair naming that chain alone and the rules reading as before.
fn edit_dnat_in_place(b: &Battery, tool: &str, dnat: &str) {
    let node = b.node(0);
    let rules = || {
        let mut lines: Vec<String> = node
            .sh(&format!("{tool}-save"))
            .lines()
            .filter(|l| l.contains("KUBE-"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let before = rules();
    let saved = node.sh(&format!("{tool}-save -t nat"));
    let (chain, pos, args) = saved
        .lines()
        .filter_map(|l| l.strip_prefix("-A KUBE-SEP-"))
        .scan(BTreeMap::<String, usize>::new(), |seen, rest| {
            let (chain, args) = rest.split_once(' ').expect("rule");
            let n = seen.entry(chain.to_string()).or_default();
            *n += 1;
            Some((format!("KUBE-SEP-{chain}"), *n, args.to_string()))
        })
        .find(|(_, _, args)| args.contains(dnat))
        .unwrap_or_else(|| panic!("no rule with {dnat}\n{saved}"));
    let (head, _) = args.split_once("--to-destination").expect("DNAT");
    let repairs = status(node).expect("status")["drift_repairs"].as_u64().unwrap_or(0);
    node.sh(&format!("{tool} -w 5 -t nat -R {chain} {pos} {head}--to-destination 10.244.9.9:80"));
    assert_ne!(rules(), before, "the edit took");
    let s = eventually(patience(15.0), || match status(node)? {
        s if s["drift_repairs"].as_u64().unwrap_or(0) > repairs => Ok(s),
        s => Err(format!("no repair yet: {s}")),
    })
    .unwrap_or_else(|e| panic!("{chain} edited: {e}\n{}", b.logs()));
    let found: Vec<String> = serde_json::from_value(s["last_drift"].clone()).expect("last_drift");
    let want = format!("chain nat/{chain} (chain_rules): rules differ from the applied ones");
    assert!(found.len() == 1 && found[0].ends_with(&want), "{found:?}");
    assert_eq!(rules(), before, "the rules differ after the repair");
}

/// nftables: damage the count check could not see is found by content, only the object
/// that differs is rewritten, and the table lists as before.
fn drift_by_content(b: &Battery) {
    let node = b.node(0);
    let table = || {
        let mut lines: Vec<String> =
            node.sh("nft list table ip tideway").lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let before = table();
    let cases = [
        (
            // One transaction, so the periodic check never sees half of it.
            "nft 'delete element ip tideway to-cluster-ip { 10.96.0.10 . tcp . 80 }; \
             add element ip tideway to-cluster-ip { 10.96.0.10 . tcp . 81 }'",
            "table ip tideway to-cluster-ip (set_elements)",
        ),
        (
            "nft insert rule ip tideway filter-input counter accept",
            "table ip tideway filter-input (chain_rules)",
        ),
        (
            "nft add chain ip tideway filter-forward '{ policy drop; }'",
            "table ip tideway filter-forward (chain_hook)",
        ),
    ];
    for (damage, want) in cases {
        let repairs = status(node).expect("status")["drift_repairs"].as_u64().unwrap_or(0);
        node.sh(damage);
        let s = eventually(patience(15.0), || match status(node)? {
            s if s["drift_repairs"].as_u64().unwrap_or(0) > repairs => Ok(s),
            s => Err(format!("no repair yet: {s}")),
        })
        .unwrap_or_else(|e| panic!("{damage}: {e}\n{}", b.logs()));
        let found: Vec<String> = serde_json::from_value(s["last_drift"].clone()).expect("last_drift");
        assert!(found.len() == 1 && found[0].starts_with(want), "{damage}: {found:?}");
        assert_eq!(table(), before, "{damage}: the table differs after the repair");
    }
    // The whole table deleted under a tracked connection: the repair programs the Service it
    // used first, then everything.
    tcp(&b.c.client, addr(WEB)).unwrap_or_else(|e| panic!("before the table goes: {e}\n{}", b.logs()));
    let repairs = status(node).expect("status")["drift_repairs"].as_u64().unwrap_or(0);
    node.sh("nft delete table ip tideway");
    eventually(patience(15.0), || match status(node)? {
        s if s["drift_repairs"].as_u64().unwrap_or(0) > repairs => Ok(s),
        s => Err(format!("no repair yet: {s}")),
    })
    .unwrap_or_else(|e| panic!("table deleted: {e}\n{}", b.logs()));
    assert_eq!(table(), before, "the table differs after the repair");
    let log = b.c.log("agent-node-a.log");
    assert!(log.contains("programmed first"), "the Service in use went first:\n{log}");
    tcp(&b.c.client, addr(WEB)).unwrap_or_else(|e| panic!("after the table came back: {e}\n{}", b.logs()));
    let metrics = agent_get(node, "/metrics").expect("metrics");
    for kind in ["set_elements", "chain_rules", "chain_hook"] {
        assert!(
            metrics.contains(&format!("tideway_drift_repairs_total{{kind=\"{kind}\"}}")),
            "{kind}\n{metrics}"
        );
    }
    tcp(&b.c.client, addr(WEB)).unwrap_or_else(|e| panic!("after the repairs: {e}\n{}", b.logs()));
}

/// Stopping the agent leaves traffic flowing; starting it again changes nothing.
fn restart(mode: &str) {
    require(mode);
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
    require(mode);
    if mode == "nftables" {
        return nftables_rejects(mode);
    }
    let dir = std::env::temp_dir().join(format!("tw-wrap-{}-{mode}", std::process::id()));
    let fail = dir.join("fail");
    let when_failing = format!("if [ -e {} ]; then echo 'injected failure' >&2; exit 1; fi", fail.display());
    wrap_tools(&dir, &["iptables-nft-restore", "iptables-legacy-restore", "ipset"], &when_failing);
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
    require(from);
    require(to);
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

/// `tideway agent --cleanup` on a node its stopped agent programmed leaves no object of any
/// mode behind, in either iptables backend; run again, it finds nothing.
fn cleanup(mode: &str) {
    require(mode);
    let mut b = Battery::start(&format!("cl-{mode}"), mode, &[]);
    b.c.stop(b.agents[0]);
    let node = b.node(0);
    assert!(!leftovers(node, mode).is_empty(), "the agent left its {mode} rules programmed on stop");
    let run = || {
        let out = node.try_sh(&format!("{} agent --cleanup 2>&1", env!("CARGO_BIN_EXE_tideway")));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "--cleanup failed: {text}");
        text
    };
    let first = run();
    let removed = if mode == "iptables" { "iptables-" } else { mode };
    assert!(first.lines().any(|l| l.starts_with(removed) && l.ends_with(": removed")), "{first}");
    for m in ["nftables", "iptables", "ipvs"] {
        assert_eq!(leftovers(node, m), Vec::<String>::new(), "{m} objects left after --cleanup\n{first}");
    }
    let saved = node.sh(
        "iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; iptables-legacy-save 2>/dev/null || true",
    );
    // KUBE-FIREWALL is the kubelet's chain too (kube-proxy's clean-up leaves it as well).
    let left: Vec<&str> =
        saved.lines().filter(|l| l.contains("KUBE-") && !l.contains("KUBE-FIREWALL")).collect();
    assert!(left.is_empty(), "chains left after --cleanup: {left:?}\n{saved}");
    let second = run();
    assert!(second.lines().all(|l| l.ends_with(": nothing to remove")), "{second}");
}

/// kube-proxy's iptables mode, as it leaves a node (chains, jumps, one Service): its ruleset,
/// not kube-proxy itself, which is not built here yet (the peers issue builds it); these tests
/// check what the agent does beside those kernel objects.
const KUBE_PROXY_RULES: &str = include_str!("fixtures/kube-proxy-iptables.rules");

/// Beside a kube-proxy (its iptables chains, its healthz port held), the agent in nftables mode
/// does not exit: it programs the node, names the port conflict in its status, serves the port
/// once it is free, and takes none of kube-proxy's chains for leftovers of its own.
#[test]
fn beside_kube_proxy_the_agent_leaves_its_chains_alone_and_waits_for_its_port() {
    require("nftables");
    let mut c = cluster("beside-kp");
    std::fs::write(c.path("cluster.yaml"), manifest("nftables", "")).expect("manifest");
    let rules = |ns: &Netns| {
        let saved = ns.sh("iptables-save -t nat; iptables-save -t filter");
        saved
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    c.nodes[0].ns.sh(&format!("printf '%s' '{KUBE_PROXY_RULES}' | iptables-restore --noflush"));
    let before = rules(&c.nodes[0].ns);
    assert!(before.iter().any(|l| l.contains("KUBE-SVC-TCOU7JCQXEZGVUNU")), "{before:?}");
    let mut holder = c.nodes[0].ns.spawn(
        std::path::Path::new("python3"),
        &[
            "-c",
            "import socket,time; s=socket.socket(); s.bind(('0.0.0.0',10256)); s.listen(); time.sleep(60)",
        ],
        &c.path("holder.log"),
        &[],
    );
    let held = |ns: &Netns| !ns.try_sh("ss -Hltn sport = :10256").stdout.is_empty();
    eventually(patience(5.0), || {
        held(&c.nodes[0].ns).then_some(()).ok_or_else(|| "10256 not bound yet".to_string())
    })
    .unwrap();
    start_agent(&mut c, 0, "cluster.yaml", &[]);
    let node = &c.nodes[0].ns;
    let s = wait_synced(node, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    let conflicts = s["listener_conflicts"].as_array().cloned().unwrap_or_default();
    assert!(
        conflicts.len() == 1 && conflicts[0].as_str().unwrap_or_default().starts_with("0.0.0.0:10256: "),
        "{s}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    let s = eventually(patience(12.0), || match status(node)? {
        s if s["listener_conflicts"].as_array().is_some_and(Vec::is_empty) => Ok(s),
        s => Err(format!("still in conflict: {s}")),
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    let health = node.sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:10256/healthz");
    assert_eq!(health, "200", "{s}");
    assert_eq!(s["retiring"], serde_json::json!([]), "{s}");
    assert_eq!(rules(node), before, "kube-proxy's chains changed\n{}", c.log("agent-node-a.log"));
}

/// What `kube-proxy --cleanup` does to the chains of `rules` (its `CleanupLeftovers`): the
/// jumps from the built-in chains deleted, then its chains flushed and deleted. (Written out
/// until the real kube-proxy is built here.)
fn kube_proxy_cleanup(rules: &str) -> String {
    let mut out = String::new();
    for block in rules.split("COMMIT\n").filter(|b| !b.trim().is_empty()) {
        let lines: Vec<&str> = block.lines().collect();
        out.push_str(&format!("{}\n", lines[0]));
        let chains: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix(':')?.split(' ').next()).collect();
        for rest in lines.iter().filter_map(|l| l.strip_prefix("-A ")) {
            if !rest.starts_with("KUBE-") {
                out.push_str(&format!("-D {rest}\n"));
            }
        }
        chains.iter().for_each(|c| out.push_str(&format!(":{c} - [0:0]\n")));
        chains.iter().for_each(|c| out.push_str(&format!("-X {c}\n")));
        out.push_str("COMMIT\n");
    }
    out
}

/// What the node holds of iptables (nat, filter), IPVS and ipsets, counters aside.
fn proxy_objects(ns: &Netns) -> Vec<String> {
    let saved = ns.sh(
        "iptables-save -t nat; iptables-save -t filter; ipvsadm -Ln 2>/dev/null; ipset list -n 2>/dev/null; \
         ip -br link show kube-ipvs0 2>/dev/null; true",
    );
    saved
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

/// Beside a kube-proxy in `mode` (its chains, with the one only it writes), the agent in the
/// same mode writes no `KUBE-*` object and says why in its status, its `--cleanup` leaves
/// kube-proxy's objects alone, and once kube-proxy's own clean-up has run the agent programs
/// the node and serves its Services.
fn beside_kube_proxy_in(mode: &str) {
    require(mode);
    let mut c = cluster(&format!("kp-{mode}"));
    std::fs::write(c.path("cluster.yaml"), manifest(mode, "")).expect("manifest");
    let (table, signature) =
        if mode == "ipvs" { ("filter", "KUBE-IPVS-OUT-FILTER") } else { ("nat", "KUBE-PROXY-CANARY") };
    let rules =
        KUBE_PROXY_RULES.replacen(&format!("*{table}\n"), &format!("*{table}\n:{signature} - [0:0]\n"), 1);
    c.nodes[0].ns.sh(&format!("printf '%s' '{rules}' | iptables-restore --noflush"));
    if mode == "ipvs" {
        c.nodes[0].ns.sh("ip link add kube-ipvs0 type dummy");
    }
    let before = proxy_objects(&c.nodes[0].ns);
    assert!(before.iter().any(|l| l.contains(signature)), "{before:?}");
    start_agent(&mut c, 0, "cluster.yaml", &[]);
    let node = &c.nodes[0].ns;
    let s = eventually(patience(15.0), || match status(node)? {
        s if s["failures"].as_u64() >= Some(2) => Ok(s),
        s => Err(format!("not refused twice yet: {s}")),
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    let error = s["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("kube-proxy's {mode} mode programs this node (its chain {signature}")),
        "{s}"
    );
    assert_eq!(s["synced"], false, "{s}");
    assert_eq!(
        proxy_objects(node),
        before,
        "the agent wrote beside kube-proxy\n{}",
        c.log("agent-node-a.log")
    );

    let by_hand = node.sh(&format!("{} agent --cleanup 2>&1", env!("CARGO_BIN_EXE_tideway")));
    let left = |backend: &str| {
        by_hand
            .lines()
            .any(|l| l.starts_with(backend) && l.contains(&format!(": left alone: kube-proxy's {mode} mode")))
    };
    assert!(left("iptables-") && (mode != "ipvs" || left("ipvs")), "{by_hand}");
    assert_eq!(proxy_objects(node), before, "--cleanup removed kube-proxy's objects\n{by_hand}");

    node.sh(&format!("printf '%s' '{}' | iptables-restore --noflush", kube_proxy_cleanup(&rules)));
    if mode == "ipvs" {
        node.sh("ip link del kube-ipvs0");
    }
    let s = wait_synced(node, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    assert_eq!(s["mode"], mode, "{s}");
    let answer = tcp(&c.nodes[0].pods[0].ns, addr(WEB)).unwrap_or_else(|e| panic!("{WEB}: {e}\n{s}"));
    assert!(["a1", "a2", "b1", "b2"].contains(&answer.name.as_str()), "{answer:?}");
    let now = proxy_objects(node);
    assert!(now.iter().any(|l| l == ":TIDEWAY-OWNED -"), "{now:?}");
    assert!(!now.iter().any(|l| l.contains(signature) || l.contains("KUBE-SVC-TCOU7JCQXEZGVUNU")), "{now:?}");
}

#[test]
fn beside_kube_proxy_in_iptables_mode_the_agent_waits_for_it_to_go() {
    beside_kube_proxy_in("iptables");
}

#[test]
fn beside_kube_proxy_in_ipvs_mode_the_agent_waits_for_it_to_go() {
    beside_kube_proxy_in("ipvs");
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

/// Pods told apart by the interface their packets arrive on (`InterfaceNamePrefix`: the
/// battery's pods hang off `p<host>` veths), with no cluster CIDR at all: a pod's connection
/// to a ClusterIP keeps its source, an outside client's is masqueraded, as with the source
/// detector.
fn interface_detector(mode: &str) {
    require(mode);
    let text = manifest(mode, "").replace(
        "clusterCIDRs: [10.244.0.0/16]",
        "detectLocalMode: InterfaceNamePrefix, detectLocal: {interfaceNamePrefix: p}",
    );
    let b = Battery::start_from(&format!("iif-{mode}"), mode, &[], "2s", &text);
    let (client, a1) = (&b.c.client, b.pod(0, 0));
    for a in b.spread(a1, WEB, 12).iter().filter(|a| a.name != "a1") {
        assert_eq!(a.peer.ip(), ip("10.244.1.11"), "pod traffic keeps its source: {a:?}\n{}", b.logs());
    }
    for a in b.spread(client, WEB, 8) {
        assert_ne!(a.peer.ip(), ip("192.168.0.100"), "outside traffic is masqueraded: {a:?}\n{}", b.logs());
    }
}

#[test]
fn interface_detector_in_nftables_mode() {
    interface_detector("nftables");
}

#[test]
fn interface_detector_in_iptables_mode() {
    interface_detector("iptables");
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
            #[test]
            fn cleanup() { super::cleanup(stringify!($mode)) }
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

/// Puts wrappers for `tools` (those installed) in `dir`: each runs the shell line `first`,
/// then the real tool.
fn wrap_tools(dir: &std::path::Path, tools: &[&str], first: &str) {
    std::fs::create_dir_all(dir).expect("wrapper dir");
    for tool in tools {
        let out = std::process::Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        let real = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
        if real.is_empty() {
            continue;
        }
        let path = dir.join(tool);
        std::fs::write(&path, format!("#!/bin/sh\n{first}\nexec {real} \"$@\"\n")).expect("wrapper");
        std::process::Command::new("chmod").arg("+x").arg(&path).status().expect("chmod");
    }
}

/// Wrappers for the iptables restore tools that hang (as a very long kernel write would) while
/// `marker` exists, writing their pid to `pid_file` first.
fn hanging_restore_tools(dir: &std::path::Path, marker: &std::path::Path, pid_file: &std::path::Path) {
    let hang =
        format!("if [ -e {} ]; then echo $$ > {}; exec sleep 60; fi", marker.display(), pid_file.display());
    wrap_tools(dir, &["iptables-nft-restore", "iptables-legacy-restore"], &hang);
}

#[test]
fn sigterm_stops_the_agent_within_a_second_even_inside_a_kernel_write() {
    require("iptables");
    let mut c = cluster("stop");
    let (dir, marker, pid_file) = (c.path("tools"), c.path("hang"), c.path("restore.pid"));
    hanging_restore_tools(&dir, &marker, &pid_file);
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    std::fs::write(c.path("cluster.yaml"), manifest("iptables", "")).expect("manifest");
    let agent = start_agent(&mut c, 0, "cluster.yaml", &[("PATH", &path)]);
    wait_synced(&c.nodes[0].ns, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    // The next sync hangs inside iptables-restore.
    std::fs::write(&marker, "").expect("marker");
    let extra = "---\napiVersion: v1\nkind: Service\nmetadata: {name: late, namespace: demo}\n\
                 spec: {clusterIP: 10.96.0.99, ports: [{name: p, port: 80}]}\n";
    std::fs::write(c.path("cluster.yaml"), manifest("iptables", extra)).expect("manifest");
    let pid = eventually(patience(10.0), || {
        std::fs::read_to_string(&pid_file)
            .map_err(|e| e.to_string())?
            .trim()
            .parse::<i32>()
            .map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| {
        panic!("the sync never reached iptables-restore: {e}\n{}", c.log("agent-node-a.log"))
    });
    let asked = Instant::now();
    c.stop(agent);
    let took = asked.elapsed();
    assert!(took < Duration::from_millis(1500), "stopped after {took:?}\n{}", c.log("agent-node-a.log"));
    // The hung child was cancelled, not left behind; the rules of the last sync stay.
    eventually(Duration::from_secs(2), || {
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            Err(format!("{pid} still runs"))
        } else {
            Ok(())
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let rules = c.nodes[0].ns.sh("iptables-save -t nat");
    assert!(rules.contains("KUBE-SERVICES") && !rules.contains("10.96.0.99"), "{rules}");
}

#[test]
fn without_cap_net_admin_the_agent_stops_at_once_and_names_it() {
    tideway_tests::netns::require_root("dropping privileges for this test");
    let started = Instant::now();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_tideway")])
        .args(["agent", "--node", "node-a", "--source", "file:/nonexistent.yaml"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs CAP_NET_ADMIN"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// The manifest with NodePorts on every local address, localhost NodePorts as given.
fn all_addresses_manifest(mode: &str, localhost: bool) -> String {
    let settings =
        format!("clusterCIDRs: [10.244.0.0/16], nodePortAddresses: [all], localhostNodePorts: {localhost}}}");
    let out = manifest(mode, "").replace("clusterCIDRs: [10.244.0.0/16]}", &settings);
    assert!(out.contains("localhostNodePorts"), "the ProxyConfig line changed shape");
    out
}

#[test]
fn localhost_node_ports_answer_on_127_0_0_1_in_iptables_mode_only() {
    require("iptables");
    let mut c = cluster("localnp");
    std::fs::write(c.path("cluster.yaml"), all_addresses_manifest("iptables", true)).expect("manifest");
    start_agent(&mut c, 0, "cluster.yaml", &[]);
    let node = &c.nodes[0].ns;
    wait_synced(node, 0).unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    // As kube-proxy: route_localnet on, kubelet's anti-martian rule in place, and a NodePort
    // on 127.0.0.1 reaches a pod (masqueraded: the pod cannot answer 127.0.0.1).
    assert_eq!(node.sh("sysctl -n net.ipv4.conf.all.route_localnet").trim(), "1");
    let filter = node.sh("iptables-save -t filter");
    assert!(
        filter.contains("-A INPUT -j KUBE-FIREWALL")
            && filter.contains("block incoming localnet connections"),
        "{filter}"
    );
    let answer = eventually(patience(5.0), || tcp(node, addr("127.0.0.1:30080")))
        .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
    assert!(["a1", "a2", "b1", "b2"].contains(&answer.name.as_str()), "{answer:?}");
    assert_ne!(answer.peer.ip().to_string(), "127.0.0.1", "masqueraded");
    // Switched off: 127.0.0.1 is no NodePort address any more.
    let s = status(node).unwrap();
    std::fs::write(c.path("cluster.yaml"), all_addresses_manifest("iptables", false)).expect("manifest");
    wait_synced(node, s["syncs"].as_u64().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    eventually(patience(5.0), || match tcp(node, addr("127.0.0.1:30080")) {
        Err(e) if e.contains("refused") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log("agent-node-a.log")));
}

/// `nodePortAddresses` unset is kube-proxy's default for the mode: iptables mode serves a
/// NodePort on every local address (one added after the sync, and 127.0.0.1), nftables mode on
/// the node's primary address only. (IPVS mode serves every local address but never loopback:
/// the core's `unset_node_port_addresses_are_kube_proxys_default_per_mode`.)
#[test]
fn unset_node_port_addresses_are_kube_proxys_default_for_the_mode() {
    require("iptables");
    require("nftables");
    let b = Battery::start("npdefault", "iptables", &[]);
    let (node, client) = (b.node(0), &b.c.client);
    node.sh("ip addr add 192.168.0.20/24 dev eth0");
    let endpoints: BTreeSet<String> = ["b1".into(), "b2".into()].into();
    for (from, dst) in
        [(client, "192.168.0.10:30080"), (client, "192.168.0.20:30080"), (node, "127.0.0.1:30080")]
    {
        let answer = eventually(patience(10.0), || tcp(from, addr(dst)))
            .unwrap_or_else(|e| panic!("iptables mode, {dst}: {e}\n{}", b.logs()));
        assert!(endpoints.contains(&answer.name), "{dst}: {answer:?}");
    }
    b.rewrite("nftables", "", |s| s["mode"] == "nftables" && s["synced"] == true);
    assert!(endpoints.contains(&b.spread(client, "192.168.0.10:30080", 1)[0].name));
    for (from, dst) in [(client, "192.168.0.20:30080"), (node, "127.0.0.1:30080")] {
        eventually(patience(10.0), || match tcp(from, addr(dst)) {
            Err(e) if e.contains("refused") => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .unwrap_or_else(|e| panic!("nftables mode serves no NodePort on {dst}: {e}\n{}", b.logs()));
    }
}

/// The REST API, as curl sees it on the node: the trace of a pod's packet to a ClusterIP names
/// the endpoints the kernel spreads it over, the ruleset and the Service read back, and a
/// bad body is a 400 problem naming the field.
fn rest_api(mode: &str) {
    require(mode);
    let b = Battery::start(&format!("api-{mode}"), mode, &[]);
    let node = b.node(0);
    let curl = |args: &str| node.sh(&format!("curl -sS -m 10 -H 'authorization: Bearer {API_TOKEN}' {args}"));
    let refused =
        node.sh("curl -sS -m 10 -o /dev/null -w '%{http_code}' http://127.0.0.1:10249/api/v1/ruleset");
    assert_eq!(refused.trim(), "401", "no token, no answer on loopback either");
    // From a pod that is not one of the endpoints (an endpoint reaching itself is masqueraded).
    let body = r#"{"src": "10.244.1.99", "dst": "10.96.0.10", "port": 80}"#;
    let out = curl(&format!(
        "-X POST -H 'content-type: application/json' -d '{body}' http://127.0.0.1:10249/api/v1/trace"
    ));
    let t: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((t["mode"].as_str(), t["node"].as_str()), (Some(mode), Some("node-a")), "{t}");
    let verdict = t["verdict"].as_str().unwrap_or_default();
    let reached = names(&b.spread(b.pod(0, 0), WEB, 16));
    assert!(verdict.starts_with("DNAT to"), "{t}");
    for ip in ["10.244.1.11", "10.244.1.12", "10.244.2.11", "10.244.2.12"] {
        assert!(verdict.contains(&format!("{ip}:8080")), "{ip} missing from {verdict}");
    }
    assert!(reached.len() > 1, "the kernel spreads too: {reached:?}");
    let rules = curl("http://127.0.0.1:10249/api/v1/ruleset");
    assert!(rules.contains("10.96.0.10"), "{rules}");
    let svc: serde_json::Value =
        serde_json::from_str(&curl("http://127.0.0.1:10249/api/v1/services/demo/web")).expect("service JSON");
    assert_eq!(svc["ports"][0]["cluster_ip"], "10.96.0.10", "{svc}");
    let bad = curl(
        "-X POST -d '{\"src\": \"10.244.1.11\", \"dst\": \"10.96.0.10\", \"port\": 80, \"protocol\": \"icmp\"}' \
         -w '\\n%{http_code} %{content_type}' http://127.0.0.1:10249/api/v1/trace",
    );
    let (json, status) = bad.rsplit_once('\n').expect("status line");
    assert_eq!(status, "400 application/problem+json", "{bad}");
    let p: serde_json::Value = serde_json::from_str(json).expect("problem JSON");
    assert_eq!(p["errors"][0]["field"], "protocol", "{p}");
}

#[test]
fn rest_api_in_nftables_mode() {
    rest_api("nftables");
}

#[test]
fn rest_api_in_iptables_mode() {
    rest_api("iptables");
}

/// IPVS mode: a Service's `tideway.io/load-balancing` annotation becomes its virtual server's
/// scheduler (`lc` as asked, `maglev` as `mh`), the others keep the node's `ipvs.scheduler`;
/// `mh` sends one client to one real server.
#[test]
fn ipvs_scheduler_per_service() {
    require("ipvs");
    let b = Battery::start("sched-ipvs", "ipvs", &[]);
    let annotated = |name: &str, ip: &str, lb: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: demo, annotations: {{tideway.io/load-balancing: {lb}}}}}\nspec: {{clusterIP: {ip}, ports: [{{name: p, port: 80}}]}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, namespace: demo, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{name: p, port: 8080, protocol: TCP}}]\nendpoints:\n- {{addresses: [10.244.1.11], nodeName: node-a, conditions: {{ready: true}}}}\n- {{addresses: [10.244.1.12], nodeName: node-a, conditions: {{ready: true}}}}\n- {{addresses: [10.244.2.11], nodeName: node-b, conditions: {{ready: true}}}}\n- {{addresses: [10.244.2.12], nodeName: node-b, conditions: {{ready: true}}}}\n"
        )
    };
    let extra = annotated("least", "10.96.0.20", "lc") + &annotated("hashed", "10.96.0.21", "maglev");
    b.rewrite("ipvs", &extra, |_| true);
    // `ipvsadm -Ln -t VIP` heads the real servers with "TCP  VIP SCHEDULER".
    let scheduler = |vip: &str| -> Result<String, String> {
        let out = b.node(0).try_sh(&format!("ipvsadm -Ln -t {vip}"));
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = out.lines().find(|l| l.contains(vip));
        line.and_then(|l| l.split_whitespace().nth(2).map(str::to_owned))
            .ok_or_else(|| format!("no virtual server {vip}: {out}"))
    };
    let got = eventually(patience(20.0), || match scheduler("10.96.0.21:80")? {
        s if s == "mh" => Ok(s),
        s => Err(format!("10.96.0.21:80 scheduled by {s}")),
    });
    got.unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert_eq!(scheduler("10.96.0.20:80"), Ok("lc".into()));
    assert_eq!(scheduler(WEB), Ok("rr".into()), "an unannotated Service keeps the node's ipvs.scheduler");
    assert!(names(&b.spread(&b.c.client, "10.96.0.20:80", 8)).len() >= 2, "lc spreads");
    assert_eq!(names(&b.spread(&b.c.client, "10.96.0.21:80", 10)).len(), 1, "mh: one client, one server");
}

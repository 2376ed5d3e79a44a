//! The node-local DNS listener in the file-fed lab (root), in nftables and iptables modes:
//! pods whose resolv.conf names the kube-dns ClusterIP are answered by their node's agent, no
//! conntrack entry is made for their queries, the answers are the DNS server's, cluster names
//! resolve while the DNS pod is down, and glibc and musl clients looking up names in a loop
//! lose no lookup while the node's agent restarts, and none fails while it is killed with
//! SIGKILL, stays down 4 s and is started again (the one query the listener may have taken
//! when it was killed is asked again after the client's timeout); with resolv.conf naming the
//! listener and then the Service (IPVS mode's hand-over), none fails or waits while the agent
//! is down.

use std::process::Command;
use std::time::{Duration, Instant};

const DEMO: &str = include_str!("../../examples/demo.yaml");

mod lab_support;

use lab_support::lookups::{count, lookups_during};
use lab_support::*;

/// Queries the lab's DNS pod has answered (CoreDNS's counter).
fn dns_pod_requests(lab: &TestLab) -> f64 {
    let url = api_url(&lab.status(), "dns/metrics", "/metrics");
    let out = Command::new("curl").args(["-s", "--max-time", "2", &url]).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with("coredns_dns_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The node's conntrack entries for DNS to the kube-dns ClusterIP.
fn tracked_queries(lab: &TestLab, node: &str, cluster_ip: &str) -> usize {
    let out = lab.exec(node, &["conntrack", "-L", "-d", cluster_ip]);
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("dport=53")).count()
}

fn kube_dns_ip(lab: &TestLab) -> String {
    let status = lab.status();
    let svc = status["services"].as_array().unwrap().iter().find(|s| s["name"] == "kube-dns").cloned();
    svc.expect("kube-dns")["clusterIP"].as_str().unwrap().to_string()
}

fn dig(lab: &TestLab, pod: &str, args: &[&str]) -> String {
    let mut cmd = vec!["dig", "+time=2", "+tries=1"];
    cmd.extend(args);
    String::from_utf8_lossy(&lab.exec(pod, &cmd).stdout).into_owned()
}

/// The pid of the process holding a UDP socket on `addr` in `target`'s namespace.
fn pid_on_53(lab: &TestLab, target: &str, addr: &str) -> i32 {
    let out = String::from_utf8_lossy(&lab.exec(target, &["ss", "-lunpH", "src", addr]).stdout).into_owned();
    let pid = out.split("pid=").nth(1).and_then(|p| p.split(',').next()?.parse().ok());
    pid.unwrap_or_else(|| panic!("nothing on {addr} in {target}: {out}"))
}

/// The pid of the agent on `node` (the process holding the node-local listener's socket).
fn agent_pid(lab: &TestLab, node: &str) -> i32 {
    pid_on_53(lab, node, "169.254.20.10:53")
}

/// Asks `name` (`dig` arguments) of `server` from `pod`: the status and the answer, authority
/// and additional records without their TTLs, sorted.
fn answer(lab: &TestLab, pod: &str, server: &str, query: &[&str]) -> String {
    let mut args = vec![format!("@{server}"), "+noall".into(), "+comments".into(), "+answer".into()];
    args.extend(["+authority".into(), "+nocookie".into()]);
    args.extend(query.iter().map(|q| q.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = dig(lab, pod, &args);
    let status = text.lines().find_map(|l| l.split("status: ").nth(1)?.split(',').next()).unwrap_or("none");
    let mut records: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // name TTL class type data...: the TTL left out (the SOA's serial too: a counter).
            let data = if f.get(3) == Some(&"SOA") { f[4..6].join(" ") } else { f[4..].join(" ") };
            format!("{} {} {} {data}", f[0].to_lowercase(), f[2], f[3])
        })
        .collect();
    records.sort();
    format!("{status}: {}", records.join(" | "))
}

fn in_mode(mode: &str) {
    let lab = TestLab::up(&format!("nldns-{}", &mode[..2]), DEMO, Some(mode));
    let (pod, node, cluster_ip) = ("webpod1", "myk8s-worker", kube_dns_ip(&lab));
    let answered = || dig(&lab, pod, &["+search", "+short", "svc1"]).trim().to_string();
    eventually(patience(20.0), || Some(answered()).filter(|a| !a.is_empty()).ok_or("no answer".into()))
        .expect("a pod resolves svc1");

    // Answered by the node: the DNS pod sees none of 20 queries, conntrack holds none.
    let (before, tracked) = (dns_pod_requests(&lab), tracked_queries(&lab, node, &cluster_ip));
    for _ in 0..20 {
        assert!(!answered().is_empty(), "svc1 from {pod}");
    }
    assert_eq!(dns_pod_requests(&lab), before, "[{mode}] the DNS pod answered what the node should have");
    assert_eq!(tracked_queries(&lab, node, &cluster_ip), tracked, "[{mode}] queries were tracked");

    // The node's answers are the DNS server's, name by name (the DNS pod asked directly).
    let dns_pod =
        lab.status()["pods"].as_array().unwrap().iter().find(|p| p["name"] == "tideway-dns").cloned();
    let dns_pod = dns_pod.expect("the DNS pod")["ip"].as_str().unwrap().to_string();
    let svc1 = lab.status()["services"].as_array().unwrap().iter().find(|s| s["name"] == "svc1").cloned();
    let svc1_ip = svc1.expect("svc1")["clusterIP"].as_str().unwrap().to_string();
    let queries: Vec<Vec<&str>> = vec![
        vec!["svc1.default.svc.cluster.local"],
        vec!["SVC2.Default.Svc.Cluster.Local"],
        vec!["svc3.default.svc.cluster.local", "AAAA"],
        vec!["kube-dns.kube-system.svc.cluster.local", "SRV"],
        vec!["_dns._udp.kube-dns.kube-system.svc.cluster.local", "SRV"],
        vec!["-x", &svc1_ip],
        vec!["10-10-1-2.default.pod.cluster.local"],
        vec!["nothing.default.svc.cluster.local"],
        vec!["svc1.nowhere.svc.cluster.local"],
        vec!["default.svc.cluster.local"],
        vec!["cluster.local", "SOA"],
        vec!["ns.dns.cluster.local"],
    ];
    for q in &queries {
        let (local, server) = (answer(&lab, pod, "169.254.20.10", q), answer(&lab, pod, &dns_pod, q));
        assert_eq!(local, server, "[{mode}] {q:?}: the node's answer differs from the DNS server's");
        assert!(!local.starts_with("none"), "[{mode}] {q:?}: no answer");
    }

    // The DNS pod gone (its server killed; the lab starts it again 10 s later, as a kubelet
    // would): cluster names still resolve on the node.
    // The lookup loops run through it: none is lost.
    let reports = lookups_during(&lab, pod, "svc1", 6, || {
        std::thread::sleep(Duration::from_secs(1));
        let dns_pid = pid_on_53(&lab, "tideway-dns", "0.0.0.0:53");
        let killed = Command::new("kill").args(["-KILL", &dns_pid.to_string()]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {dns_pid}");
        let asked = dig(&lab, pod, &["+short", &format!("@{dns_pod}"), "svc1.default.svc.cluster.local"]);
        assert!(asked.contains("no servers could be reached"), "[{mode}] the DNS pod still answers: {asked}");
        for name in ["svc1", "svc2", "svc3"] {
            let got = dig(&lab, pod, &["+search", "+short", name]);
            assert!(got.trim().starts_with("10."), "[{mode}] {name} without the DNS pod: {got}");
        }
    });
    for (which, text) in &reports {
        assert_eq!(
            (count(text, "failed"), count(text, "slow")),
            (0, 0),
            "{which} [{mode}] DNS pod down\n{text}"
        );
    }
    eventually(patience(30.0), || {
        let back = dig(&lab, pod, &["+short", &format!("@{dns_pod}"), "svc1.default.svc.cluster.local"]);
        Some(()).filter(|_| back.trim().starts_with("10.")).ok_or(back)
    })
    .expect("the DNS pod is back");

    // A restart (SIGTERM, then started): the listener hands over first, no lookup is lost.
    let reports = lookups_during(&lab, pod, "svc1", 8, || {
        std::thread::sleep(Duration::from_secs(2));
        let pid = agent_pid(&lab, node);
        let term = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        assert!(term.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        std::thread::sleep(Duration::from_millis(1500));
        ok(tideway(&["lab", "kill", "agent", node, "--name", &lab.name]), "lab kill agent (already stopped)");
        ok(tideway(&["lab", "start", "agent", node, "--name", &lab.name]), "lab start agent");
    });
    for (which, text) in &reports {
        assert_eq!((count(text, "failed"), count(text, "slow")), (0, 0), "{which} [{mode}] restart\n{text}");
    }

    // SIGKILL, down 4 s, started: the rules left behind divert nothing without the listener,
    // and no lookup fails. A query the listener had taken when it was killed is lost with it
    // (its client asks again after its timeout): at most one per client.
    wait_answered_by_node(&lab, mode, &answered);
    let mut fell_back = 0.0;
    let reports = lookups_during(&lab, pod, "svc1", 10, || {
        std::thread::sleep(Duration::from_secs(2));
        let before_kill = dns_pod_requests(&lab);
        ok(tideway(&["lab", "kill", "agent", node, "--name", &lab.name]), "lab kill agent");
        std::thread::sleep(Duration::from_secs(4));
        fell_back = dns_pod_requests(&lab) - before_kill;
        ok(tideway(&["lab", "start", "agent", node, "--name", &lab.name]), "lab start agent");
    });
    for (which, text) in &reports {
        assert_eq!(count(text, "failed"), 0, "{which} [{mode}] SIGKILL\n{text}");
        assert!(count(text, "slow") <= 1, "{which} [{mode}] SIGKILL\n{text}");
    }
    assert!(fell_back > 0.0, "[{mode}] no query reached the DNS pod while the agent was down");
    wait_answered_by_node(&lab, mode, &answered);

    both_nameservers_with_the_agent_killed(&lab, mode, pod, node, &cluster_ip);
}

/// IPVS mode's hand-over (the kubelet's `clusterDNS` naming the listener, then the Service):
/// with the node's agent killed nothing listens on 169.254.20.10, the node answers port
/// unreachable, and glibc moves on to the next nameserver at once (musl asks both at once), so
/// no lookup fails or waits out a timeout. The mechanism holds the ClusterIP's rules out of it,
/// so the host's modes test it for IPVS mode too (the VM checks the listener answers there).
fn both_nameservers_with_the_agent_killed(
    lab: &TestLab,
    mode: &str,
    pod: &str,
    node: &str,
    cluster_ip: &str,
) {
    let netns = lab.status()["pods"].as_array().unwrap().iter().find(|p| p["name"] == pod).cloned();
    let netns = netns.expect("the pod")["netns"].as_str().unwrap().to_string();
    let path = format!("/etc/netns/{netns}/resolv.conf");
    let original = std::fs::read_to_string(&path).expect("the pod's resolv.conf");
    let both = original.replace(
        &format!("nameserver {cluster_ip}\n"),
        &format!("nameserver 169.254.20.10\nnameserver {cluster_ip}\n"),
    );
    assert_ne!(both, original, "the pod's resolv.conf names {cluster_ip}: {original}");
    std::fs::write(&path, &both).unwrap();
    ok(tideway(&["lab", "kill", "agent", node, "--name", &lab.name]), "lab kill agent");
    let refused = dig(lab, pod, &["+short", "@169.254.20.10", "svc1.default.svc.cluster.local"]);
    let reports = lookups_during(lab, pod, "svc1", 4, || {});
    std::fs::write(&path, &original).unwrap();
    ok(tideway(&["lab", "start", "agent", node, "--name", &lab.name]), "lab start agent");
    assert!(refused.contains("connection refused"), "[{mode}] 169.254.20.10 with no listener: {refused}");
    for (which, text) in &reports {
        assert_eq!(
            (count(text, "failed"), count(text, "slow")),
            (0, 0),
            "{which} [{mode}] both nameservers\n{text}"
        );
    }
}

/// Waits until the node answers again (after a start): lookups that leave the DNS pod's
/// counter where it was.
fn wait_answered_by_node(lab: &TestLab, mode: &str, answered: &dyn Fn() -> String) {
    let started = Instant::now();
    eventually(patience(15.0), || {
        let before = dns_pod_requests(lab);
        let fine = (0..5).all(|_| !answered().is_empty());
        (fine && dns_pod_requests(lab) == before)
            .then_some(())
            .ok_or("not answered by the node yet".to_string())
    })
    .unwrap_or_else(|e| panic!("[{mode}] after {:?}: {e}", started.elapsed()));
}

#[test]
fn nftables_pods_resolve_on_their_node_as_the_dns_server_answers_through_restarts_and_kills() {
    in_mode("nftables");
}

#[test]
fn iptables_pods_resolve_on_their_node_as_the_dns_server_answers_through_restarts_and_kills() {
    in_mode("iptables");
}

//! kube-proxy and Tideway's agent programming the same Services (root; needs `make kube` and
//! `make peers`), compared by the packets they pass: the real kube-proxy (the control plane's
//! release, `make peers`) with the configuration kubeadm's kube-proxy addon writes, and `tideway
//! agent`, each on node-a of a twin of the battery's cluster (`support::twin`), in nftables mode
//! and then in iptables mode. A prober sends real packets from a pod on node-a, from node-a itself and from
//! an outside host (inside and outside the LB source ranges) to the frontends of the battery's
//! Services and a few more ([`EXTRA`]), each from where it is meant to answer and from where it
//! is meant not to ([`probes`]): ClusterIPs, NodePorts (the node's address and its
//! loopback), LoadBalancer IPs, an external IP, each traffic policy, ClientIP affinity, UDP,
//! Services without endpoints and with terminating ones, health check node ports. Outcomes
//! must be equal: which endpoints answer, the source they see, how a refused or dropped try
//! fails, a health check's status.
//!
//! kubeadm's kube-proxy configuration is changed only where a process on a lab node must differ
//! from kubeadm's DaemonSet Pod, each change listed in `support::twin`. A difference the
//! two are allowed is listed in [`ALLOWED`] with the peer's source or docs that explain it; the
//! test fails when a listed difference no longer occurs and when an unlisted one does. Each
//! probe also says what it is meant to do (answer, fail, a health check's status), and kube-proxy's
//! outcomes must meet it: two proxies failing alike for a reason of the test's own do not pass
//! as agreeing. Probes that differ are sent again, one at a time, before they count. In each mode
//! a rule added on purpose to the Tideway twin (one frontend dropped) must show as the one
//! difference.

#![allow(clippy::print_stdout)]

#[path = "proxy_peers/probe.rs"]
mod probe;
mod support;

use probe::{Expect, From, Outcome, Probe, Send};
use serde_json::json;
use support::real_api::{Api, battery, merge, write_statuses};
use support::twin::{Proxy, Twin, kubeadm_addon};
use support::*;
use tideway_tests::netns::{eventually, tcp_from};

/// Services beside the battery's: UDP with and without endpoints, terminating endpoints
/// (serving and not) behind a ClusterIP and behind an `externalTrafficPolicy: Local`
/// LoadBalancer whose only local endpoint is terminating.
const EXTRA: &str = r#"---
apiVersion: v1
kind: Service
metadata: {name: term, namespace: demo}
spec: {clusterIP: 10.96.0.19, ports: [{name: p, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: term-1, namespace: demo, labels: {kubernetes.io/service-name: term}}
addressType: IPv4
ports: [{name: p, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.1.12], nodeName: node-a, conditions: {ready: false, serving: true, terminating: true}}
- {addresses: [10.244.2.12], nodeName: node-b, conditions: {ready: false, serving: true, terminating: true}}
- {addresses: [10.244.2.11], nodeName: node-b, conditions: {ready: false, serving: false, terminating: true}}
---
apiVersion: v1
kind: Service
metadata: {name: term-local, namespace: demo}
spec: {type: LoadBalancer, clusterIP: 10.96.0.20, externalTrafficPolicy: Local, healthCheckNodePort: 32002, ports: [{name: p, port: 80, nodePort: 30084}]}
status: {loadBalancer: {ingress: [{ip: 192.168.0.203}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: term-local-1, namespace: demo, labels: {kubernetes.io/service-name: term-local}}
addressType: IPv4
ports: [{name: p, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.1.12], nodeName: node-a, conditions: {ready: false, serving: true, terminating: true}}
- {addresses: [10.244.2.11], nodeName: node-b, conditions: {ready: true}}
---
apiVersion: v1
kind: Service
metadata: {name: udp-empty, namespace: demo}
spec: {clusterIP: 10.96.0.21, ports: [{name: p, port: 53, protocol: UDP}]}
"#;

/// A difference the proxies are allowed: the mode, the probe (its frontend's words and where
/// from) and why, citing the peer.
struct Allowed {
    mode: &'static str,
    what: &'static str,
    from: From,
    why: &'static str,
}

/// Every difference allowed, each with its reason.
const ALLOWED: &[Allowed] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_proxy_and_tideway_pass_every_packet_alike() {
    tideway_tests::netns::require_root("the control plane, kube-proxy and the agent");
    let mut api = Api::start("proxypeer", &[]).await;
    let kubeadm_config = kubeadm_addon(&mut api).await;
    let extra = format!("{EXTRA}{}", dns_slice("10.244.2.11", "node-b"));
    let objects = battery(&extra);
    api.applier.apply_all(objects.clone()).await.unwrap();
    write_statuses(&api.admin, &objects).await;

    let probes = probes();
    let mut unlisted = Vec::new();
    let mut seen = Vec::new();
    for mode in ["nftables", "iptables"] {
        let path = "/apis/tideway.io/v1alpha1/proxyconfigs/default";
        merge(&api.admin, path, json!({"spec": {"mode": mode}})).await;
        let peer = ready(&api, &Proxy::KubeProxy(kubeadm_config.clone()), mode).await;
        let mut theirs = probe_all(&peer, &probes);
        let twin = ready(&api, &Proxy::Tideway(Vec::new()), mode).await;
        let mut ours = probe_all(&twin, &probes);
        for (p, (t, o)) in probes.iter().zip(theirs.iter().zip(&ours)) {
            println!("{mode} {p}\n   kube-proxy: {t}\n   tideway:    {o}");
        }
        let unmet: Vec<String> = probes
            .iter()
            .zip(&theirs)
            .filter(|(p, o)| !p.met_by(o, mode))
            .map(|(p, o)| format!("{p} (expected {:?}): {o}", p.expect))
            .collect();
        assert!(
            unmet.is_empty(),
            "{mode}: the twin's network does not carry what kube-proxy's docs say:\n{}",
            unmet.join("\n")
        );
        confirm(&probes, (&peer, &mut theirs), (&twin, &mut ours));
        drop(peer);
        let differences = differ(&probes, &theirs, &ours);
        println!("{mode}: {} probes, {} alike", probes.len(), probes.len() - differences.len());
        for d in differences {
            match ALLOWED
                .iter()
                .position(|a| a.mode == mode && a.what == d.probe.what && a.from == d.probe.from)
            {
                Some(i) => seen.push(i),
                None => unlisted.push(format!("{mode}: {d}")),
            }
        }
        a_dropped_frontend_is_the_one_difference(&twin, &probes, &ours);
    }
    let gone: Vec<String> = ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !seen.contains(i))
        .map(|(_, a)| format!("{}: {} from {:?} ({})", a.mode, a.what, a.from, a.why))
        .collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "{} differences not allowed:\n{}\nallowed differences that no longer occur: {gone:?}",
        unlisted.len(),
        unlisted.join("\n")
    );
    api.record_usage();
}

/// One probe's outcomes where they differ.
struct Difference<'a> {
    probe: &'a Probe,
    theirs: &'a Outcome,
    ours: &'a Outcome,
}

impl std::fmt::Display for Difference<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  kube-proxy: {}\n  tideway:    {}", self.probe, self.theirs, self.ours)
    }
}

/// Probes whose outcomes differ are sent again, one at a time, to both twins: a try that failed
/// by chance (a loaded machine) does not make a difference, one the rules make comes back.
fn confirm(probes: &[Probe], theirs: (&Twin, &mut [Outcome]), ours: (&Twin, &mut [Outcome])) {
    let (peer, theirs) = theirs;
    let (twin, ours) = ours;
    for (i, p) in probes.iter().enumerate() {
        if theirs[i] != ours[i] {
            let again = (probe::run(peer, p), probe::run(twin, p));
            println!("{p}: sent again: kube-proxy {}, tideway {}", again.0, again.1);
            (theirs[i], ours[i]) = again;
        }
    }
}

fn differ<'a>(probes: &'a [Probe], theirs: &'a [Outcome], ours: &'a [Outcome]) -> Vec<Difference<'a>> {
    let all = probes.iter().zip(theirs).zip(ours);
    all.filter(|((_, t), o)| t != o)
        .map(|((probe, theirs), ours)| Difference { probe, theirs, ours })
        .collect()
}

/// Every frontend of the battery and of [`EXTRA`], from where it is meant to be reached and
/// from where it is meant not to be, with what it is meant to do there.
fn probes() -> Vec<Probe> {
    let at = |s: &str| s.parse().expect("an address");
    let probe = |what, from, to: &str, send, expect| Probe { what, from, to: at(to), send, expect };
    let (answer, fail) = (Expect::Answer, Expect::Fail);
    let mut all = Vec::new();
    let inside = [From::Pod, From::Node];
    for from in inside {
        all.extend([
            probe("web ClusterIP", from, "10.96.0.10:80", Send::Tcp, answer),
            probe("np ClusterIP", from, "10.96.0.11:80", Send::Tcp, answer),
            probe("lb ClusterIP", from, "10.96.0.12:80", Send::Tcp, answer),
            probe("ext ClusterIP", from, "10.96.0.13:80", Send::Tcp, answer),
            probe("local ClusterIP", from, "10.96.0.14:80", Send::Tcp, answer),
            probe("local-none ClusterIP", from, "10.96.0.18:80", Send::Tcp, answer),
            probe("itp ClusterIP", from, "10.96.0.15:80", Send::Tcp, answer),
            probe("empty ClusterIP", from, "10.96.0.16:80", Send::Tcp, fail),
            probe("sticky ClusterIP", from, "10.96.0.17:80", Send::Sticky, answer),
            probe("term ClusterIP", from, "10.96.0.19:80", Send::Tcp, answer),
            probe("term-local ClusterIP", from, "10.96.0.20:80", Send::Tcp, answer),
            probe("dns ClusterIP (UDP)", from, "10.96.0.53:53", Send::Udp, answer),
            probe("udp-empty ClusterIP (UDP)", from, "10.96.0.21:53", Send::Udp, fail),
        ]);
    }
    for from in [From::Pod, From::Node, From::Outside] {
        all.extend([
            probe("np NodePort", from, "192.168.0.10:30080", Send::Tcp, answer),
            probe("lb NodePort", from, "192.168.0.10:30081", Send::Tcp, answer),
            probe("local NodePort", from, "192.168.0.10:30082", Send::Tcp, answer),
            probe(
                "local-none NodePort",
                from,
                "192.168.0.10:30083",
                Send::Tcp,
                if from == From::Outside { fail } else { answer },
            ),
            probe("term-local NodePort", from, "192.168.0.10:30084", Send::Tcp, answer),
            probe("ext externalIP", from, "192.168.0.150:80", Send::Tcp, answer),
        ]);
    }
    for from in [From::Pod, From::Outside] {
        all.extend([
            probe(
                "lb LoadBalancer",
                from,
                "192.168.0.200:80",
                Send::Tcp,
                if from == From::Pod { fail } else { answer },
            ),
            probe("local LoadBalancer", from, "192.168.0.201:80", Send::Tcp, answer),
            probe(
                "local-none LoadBalancer",
                from,
                "192.168.0.202:80",
                Send::Tcp,
                if from == From::Outside { fail } else { answer },
            ),
            probe("term-local LoadBalancer", from, "192.168.0.203:80", Send::Tcp, answer),
        ]);
    }
    all.extend([
        probe("web ClusterIP", From::Outside, "10.96.0.10:80", Send::Tcp, answer),
        probe("empty ClusterIP", From::Outside, "10.96.0.16:80", Send::Tcp, fail),
        probe("lb LoadBalancer", From::Unlisted, "192.168.0.200:80", Send::Tcp, fail),
        probe(
            "np NodePort on loopback",
            From::Node,
            "127.0.0.1:30080",
            Send::Tcp,
            Expect::AnswerIn("iptables"),
        ),
        probe("local health check", From::Outside, "192.168.0.10:32000", Send::Health, Expect::Status(200)),
        probe(
            "local-none health check",
            From::Outside,
            "192.168.0.10:32001",
            Send::Health,
            Expect::Status(503),
        ),
        // Its only local endpoint is terminating: kube-proxy's health check counts ready ones.
        probe(
            "term-local health check",
            From::Outside,
            "192.168.0.10:32002",
            Send::Health,
            Expect::Status(503),
        ),
    ]);
    all
}

/// A twin with `proxy` in `mode`, once it serves the web Service and term-local, the first and
/// one of the last Services written (a full sync programs all of them at once); the agent must
/// also say it synced in that mode.
async fn ready(api: &Api, proxy: &Proxy, mode: &str) -> Twin {
    let twin = Twin::start(api, proxy, mode, &format!("{}-{mode}", &proxy.name()[..2]), |_| {}, &[]).await;
    if let Proxy::Tideway(_) = proxy {
        let st = wait_synced(&twin.c.nodes[0].ns, 0).unwrap_or_else(|e| panic!("{e}\n{}", twin.logged()));
        assert_eq!(st["mode"], mode, "{}", twin.logged());
    }
    for service in ["10.96.0.10:80", "10.96.0.20:80"] {
        eventually(patience(30.0), || tcp_from(twin.pod(), None, service.parse().unwrap()))
            .unwrap_or_else(|e| panic!("{service}: {e}\n{}", twin.logged()));
    }
    twin
}

/// Every probe, sixteen at a time (each on its own thread): their outcomes, in order.
fn probe_all(twin: &Twin, probes: &[Probe]) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(probes.len());
    for batch in probes.chunks(16) {
        outcomes.extend(std::thread::scope(|s| {
            let running: Vec<_> = batch.iter().map(|p| s.spawn(|| probe::run(twin, p))).collect();
            running.into_iter().map(|r| r.join().expect("a probe")).collect::<Vec<_>>()
        }));
    }
    outcomes
}

/// The comparison sees a rule changed on purpose: a rule that drops the web ClusterIP before
/// any proxy's hook makes that frontend, from the pod, the node and outside, the only
/// difference from this twin's own outcomes (`before`).
fn a_dropped_frontend_is_the_one_difference(twin: &Twin, probes: &[Probe], before: &[Outcome]) {
    let node = &twin.c.nodes[0].ns;
    node.sh("nft add table ip mutation && nft add chain ip mutation pre '{ type filter hook prerouting priority -400; }' \
         && nft add chain ip mutation out '{ type filter hook output priority -400; }' \
         && nft add rule ip mutation pre ip daddr 10.96.0.10 tcp dport 80 drop \
         && nft add rule ip mutation out ip daddr 10.96.0.10 tcp dport 80 drop");
    let after = probe_all(twin, probes);
    let differing: Vec<String> = differ(probes, before, &after)
        .iter()
        .map(|d| format!("{:?} {}", d.probe.from, d.probe.what))
        .collect();
    let from = [From::Pod, From::Node, From::Outside];
    let want: Vec<String> = from.iter().map(|f| format!("{f:?} web ClusterIP")).collect();
    assert_eq!(differing, want, "a dropped frontend, and it alone, differs");
    node.sh("nft delete table ip mutation");
}

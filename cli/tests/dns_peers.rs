//! CoreDNS and Tideway's DNS server on one cluster state (root; needs `make kube` and
//! `make peers`): the real CoreDNS (v1.15.0, `make peers`) with the Corefile kubeadm's CoreDNS
//! addon writes, and `tideway dns`, each reading the real API server with a token the server
//! mints for its own ServiceAccount (kubeadm's `coredns` with kubeadm's RBAC; the chart's
//! `tideway-dns`). A seeded state (namespaces, ClusterIP Services with named and unnamed ports,
//! headless Services with EndpointSlices, hostnames, not-ready endpoints, ExternalName Services,
//! external IPs) is written once; every name it defines is asked of both (A, AAAA, SRV, PTR,
//! CNAME through ExternalName, pod names, the `k8s_external` zone, negatives, wrong case, the
//! names a pod's search path expands to), and the answers must be equal up to order and TTL:
//! the same status, answer records and authority record types.
//!
//! kubeadm's Corefile is changed only where a process on the test's host must differ from a Pod,
//! each change listed in `support::coredns`; `tideway dns` gets the flags that say the same (`--pods
//! insecure`, `--ttl 30`, `--external-zone`). A difference the two servers are allowed is listed
//! in [`ALLOWED`] with the peer's source or docs that explain it; the test fails when a listed
//! difference no longer occurs, and when an unlisted one does.

#![allow(clippy::print_stdout)]

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;

use serde_json::{Value, json};
use support::coredns::{CoreDns, EXTERNAL};
use support::dns_server::{Dns, http_code};
use support::real_api::{Api, get};
use support::{free_port, patience};
use tideway_tests::netns::eventually;

/// The seed of the state: the same seed, the same Services, ports and endpoints.
const SEED: u64 = 0x7469_6465_7761_7901;
const ZONE: &str = "cluster.local";

/// A difference the servers are allowed: the question (name, type) and why, citing the peer.
struct Allowed {
    name: &'static str,
    qtype: &'static str,
    why: &'static str,
}

/// CoreDNS leaves an ExternalName's CNAME out when its in-zone target has no record of the
/// asked type, or does not exist: plugin/backend_lookup.go `A` and `AAAA` add the CNAME only
/// `if len(nextRecords) > 0`. The Kubernetes DNS spec (2.3, ExternalName) says the CNAME "must
/// exist"; Tideway answers it, with the rcode of its target (NXDOMAIN for a name nothing
/// defines).
const NO_TARGET: &str = "CoreDNS drops the CNAME of an ExternalName whose in-zone target has no such record";
/// CoreDNS answers no SRV or TXT at an ExternalName's name: its kubernetes plugin's `Services`
/// serves TXT for `dns-version` only (plugin/kubernetes/kubernetes.go) and an ExternalName has
/// no ports to make SRV records of. A CNAME applies to every type (RFC 1034 3.6.2): Tideway
/// answers it (without following it for these types).
const CNAME_ANY: &str = "CoreDNS gives no SRV or TXT answer at an ExternalName, Tideway its CNAME";

/// Every difference allowed, each with its reason.
const ALLOWED: &[Allowed] = &[
    Allowed { name: "alias.alpha.svc.cluster.local", qtype: "AAAA", why: NO_TARGET },
    Allowed { name: "dangling.alpha.svc.cluster.local", qtype: "A", why: NO_TARGET },
    Allowed { name: "DANGLING.ALPHA.SVC.CLUSTER.LOCAL", qtype: "A", why: NO_TARGET },
    Allowed { name: "dangling.alpha.svc.cluster.local", qtype: "AAAA", why: NO_TARGET },
    Allowed { name: "alias.alpha.svc.cluster.local", qtype: "SRV", why: CNAME_ANY },
    Allowed { name: "alias.alpha.svc.cluster.local", qtype: "TXT", why: CNAME_ANY },
    Allowed { name: "dangling.alpha.svc.cluster.local", qtype: "SRV", why: CNAME_ANY },
    Allowed { name: "dangling.alpha.svc.cluster.local", qtype: "TXT", why: CNAME_ANY },
    Allowed { name: "outside.alpha.svc.cluster.local", qtype: "SRV", why: CNAME_ANY },
    Allowed { name: "outside.alpha.svc.cluster.local", qtype: "TXT", why: CNAME_ANY },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coredns_and_tideway_answer_every_name_alike() {
    tideway_tests::netns::require_root("the control plane");
    let mut api = Api::start("dnspeer", &[]).await;
    api.standalone.kubeadm_addon("coredns").expect("kubeadm's CoreDNS addon");
    let state = State::generate(SEED);
    api.applier.apply_all(state.objects()).await.unwrap();
    let state = state.read_back(&api).await;

    let held: Value = get(&api.admin, "/api/v1/namespaces/kube-system/configmaps/coredns")
        .await
        .expect("kubeadm's ConfigMap");
    let kubeadm_corefile = held["data"]["Corefile"].as_str().expect("a Corefile").to_string();
    let dir = api.standalone.dir.clone();
    let coredns_kubeconfig = api.standalone.token_kubeconfig("kube-system", "coredns").await.unwrap();
    let coredns = CoreDns::start(&kubeadm_corefile, &coredns_kubeconfig, &dir);
    let tideway_kubeconfig = api.standalone.token_kubeconfig("kube-system", "tideway-dns").await.unwrap();
    let ready: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // What kubeadm's Corefile says, in `tideway dns`'s flags.
    let same =
        ["--ttl", "30", "--external-zone", EXTERNAL, "--health-listen", "none", "--metrics-listen", "none"];
    let ready_at = ready.to_string();
    let flags = [&same[..], &["--pods", "insecure", "--ready-listen", &ready_at]].concat();
    let tideway = Dns::start(&tideway_kubeconfig, &dir, "tideway-dns", &flags);
    // The last ClusterIP Service written: once both answer it, both have the whole state.
    let last = state.services.iter().rev().find(|s| s.kind == Kind::ClusterIp).expect("a ClusterIP Service");
    let probe = format!("{}.{}.svc.{ZONE}", last.name, last.namespace);
    eventually(patience(30.0), || {
        let ready = [http_code(coredns.ready, "/ready").0, http_code(ready, "/ready").0];
        let answers = [ask(coredns.addr, &probe, "A"), ask(tideway.addr, &probe, "A")];
        if ready == [200, 200] && answers.iter().all(|a| a.status == "NOERROR" && !a.answer.is_empty()) {
            return Ok(());
        }
        Err(format!("/ready {ready:?}, {probe}: {answers:?}\n{}\n{}", coredns.log(), tideway.log()))
    })
    .expect("both servers ready");

    let questions = state.questions();
    let differences = compare(&coredns, tideway.addr, &questions);
    let unlisted: Vec<&Difference> =
        differences.iter().filter(|d| !ALLOWED.iter().any(|a| d.is(a.name, a.qtype))).collect();
    let gone: Vec<String> = ALLOWED
        .iter()
        .filter(|a| !differences.iter().any(|d| d.is(a.name, a.qtype)))
        .map(|a| format!("{} {} ({})", a.name, a.qtype, a.why))
        .collect();
    let shown: Vec<String> = unlisted.iter().map(|d| d.to_string()).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "{} questions; {} differences not allowed:\n{}\nallowed differences that no longer occur: {gone:?}",
        questions.len(),
        unlisted.len(),
        shown.join("\n")
    );
    println!(
        "{} questions, {} answered alike, {} allowed differences",
        questions.len(),
        questions.len() - differences.len(),
        differences.len()
    );

    // The comparison sees a server that answers differently: the same server without pod
    // records (`--pods disabled`) differs on every pod name, and only there.
    drop(tideway);
    // Its answer to the last Service says it has the whole state: the server answers from
    // the zone only after every watch's first list.
    let mutated_flags = [&same[..], &["--pods", "disabled", "--ready-listen", "none"]].concat();
    let mutated = Dns::start(&tideway_kubeconfig, &dir, "tideway-dns-mutated", &mutated_flags);
    mutated.until(None, &probe, last.cluster_ip.as_deref().expect("a ClusterIP"), 30.0);
    let pods: BTreeSet<(String, String)> = questions
        .iter()
        .filter(|(n, _)| n.contains(".pod.") && !n.starts_with("1-2-3"))
        .map(|(n, t)| (n.clone(), t.to_string()))
        .collect();
    let differences: Vec<Difference> = compare(&coredns, mutated.addr, &questions)
        .into_iter()
        .filter(|d| !ALLOWED.iter().any(|a| d.is(a.name, a.qtype)))
        .collect();
    let differing: BTreeSet<(String, String)> =
        differences.iter().map(|d| (d.name.clone(), d.qtype.clone())).collect();
    let shown: Vec<String> = differences.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        differing,
        pods,
        "a server without pod records differs on the pod names, and only there:\n{}",
        shown.join("\n")
    );
    api.record_usage();
}

/// A question the servers answered differently.
struct Difference {
    name: String,
    qtype: String,
    theirs: Answer,
    ours: Answer,
}

impl Difference {
    fn is(&self, name: &str, qtype: &str) -> bool {
        self.name == name && self.qtype == qtype
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}\n  coredns: {:?}\n  tideway: {:?}", self.name, self.qtype, self.theirs, self.ours)
    }
}

/// Every question asked of CoreDNS and of the Tideway server at `ours`: where they differ.
fn compare(coredns: &CoreDns, ours: SocketAddr, questions: &[(String, &'static str)]) -> Vec<Difference> {
    let mut differences = Vec::new();
    for (name, qtype) in questions {
        let (theirs, ours) = (ask(coredns.addr, name, qtype), ask(ours, name, qtype));
        if theirs != ours {
            differences.push(Difference { name: name.clone(), qtype: qtype.to_string(), theirs, ours });
        }
    }
    differences
}

/// One answer, as compared: the status, the answer records (name, type, data; no TTL) and the
/// authority section's record types, each sorted.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: String,
    answer: BTreeSet<String>,
    authority: BTreeSet<String>,
}

/// `dig` for `name` and `qtype` at `addr`. A query unanswered within 3 s is sent once more, as
/// a resolver would: on a loaded machine (CI runs this beside the kube labs) one can be late.
fn ask(addr: SocketAddr, name: &str, qtype: &str) -> Answer {
    let out = Command::new("dig")
        .args([&format!("@{}", addr.ip()), "-p", &addr.port().to_string()])
        .args(["+tries=2", "+time=3", "+nocookie", "+norecurse", name, qtype])
        .output()
        .expect("dig (dnsutils) is installed");
    parse_dig(&String::from_utf8_lossy(&out.stdout))
}

fn parse_dig(text: &str) -> Answer {
    let status = text
        .lines()
        .find_map(|l| l.split("status: ").nth(1))
        .map(|s| s.split(',').next().unwrap_or("").to_string())
        .unwrap_or_else(|| format!("no answer: {text}"));
    let section = |title: &str| -> Vec<Vec<String>> {
        let mut lines = text.lines().skip_while(|l| !l.starts_with(title)).skip(1);
        let mut rows = Vec::new();
        for line in lines.by_ref() {
            if line.trim().is_empty() {
                break;
            }
            rows.push(line.split_whitespace().map(str::to_string).collect());
        }
        rows
    };
    // name TTL class type data...: the TTL left out, names compared without case.
    let answer = section(";; ANSWER SECTION:")
        .into_iter()
        .map(|f| {
            let data = f[4..].join(" ");
            let data = match f[3].as_str() {
                "TXT" => data,
                // A zone's serial is the time its server saw the zone's last change (CoreDNS:
                // `updateModified` in plugin/kubernetes/controller.go): two processes differ.
                "SOA" => f[4..]
                    .iter()
                    .enumerate()
                    .map(|(i, w)| if i == 2 { "SERIAL" } else { w })
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase(),
                _ => data.to_lowercase(),
            };
            format!("{} {} {data}", f[0].to_lowercase(), f[3])
        })
        .collect();
    let authority = section(";; AUTHORITY SECTION:")
        .into_iter()
        .map(|f| format!("{} {}", f[0].to_lowercase(), f[3]))
        .collect();
    Answer { status, answer, authority }
}

/// A small random number source, the same for the same seed (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone)]
struct Port {
    name: Option<&'static str>,
    protocol: &'static str,
    port: u16,
}

#[derive(Clone)]
struct Endpoint {
    ip: String,
    hostname: Option<String>,
    ready: bool,
}

#[derive(Clone)]
struct Service {
    namespace: String,
    name: String,
    kind: Kind,
    ports: Vec<Port>,
    endpoints: Vec<Endpoint>,
    external_ips: Vec<String>,
    /// The ClusterIP the server allocated (read back).
    cluster_ip: Option<String>,
    publish_not_ready: bool,
}

impl Service {
    /// A Service of `kind` with no ports, endpoints or external IPs yet.
    fn new(namespace: &str, name: &str, kind: Kind) -> Service {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let (ports, endpoints, external_ips) = (Vec::new(), Vec::new(), Vec::new());
        Service {
            namespace,
            name,
            kind,
            ports,
            endpoints,
            external_ips,
            cluster_ip: None,
            publish_not_ready: false,
        }
    }
}

#[derive(Clone, PartialEq)]
enum Kind {
    ClusterIp,
    Headless,
    ExternalName(String),
}

struct State {
    namespaces: Vec<String>,
    services: Vec<Service>,
}

const NAMES: &[&str] = &["web", "api", "db", "cache", "queue", "auth", "search", "metrics", "mail", "shop"];
const PORTS: &[Port] = &[
    Port { name: Some("http"), protocol: "TCP", port: 80 },
    Port { name: Some("https"), protocol: "TCP", port: 443 },
    Port { name: Some("dns"), protocol: "UDP", port: 53 },
    Port { name: Some("grpc"), protocol: "TCP", port: 9090 },
    Port { name: Some("sctp-x"), protocol: "SCTP", port: 7000 },
];

impl State {
    fn generate(seed: u64) -> State {
        let mut rng = Rng(seed);
        let namespaces = vec!["alpha".to_string(), "beta".to_string(), "quiet".to_string()];
        let mut services: Vec<Service> = Vec::new();
        let mut ip = 1;
        for ns in &namespaces[..2] {
            let mut names: Vec<&str> = NAMES.to_vec();
            for i in 0..6 {
                let name = names.remove(rng.below(names.len())).to_string();
                let kind = if i < 3 { Kind::ClusterIp } else { Kind::Headless };
                let mut ports: Vec<Port> = Vec::new();
                for _ in 0..1 + rng.below(2) {
                    let p = PORTS[rng.below(PORTS.len())].clone();
                    if !ports.iter().any(|q| q.name == p.name) {
                        ports.push(p);
                    }
                }
                if ports.len() == 1 && rng.chance(30) {
                    ports[0].name = None; // a single port may be unnamed
                }
                let mut endpoints = Vec::new();
                for k in 0..if kind == Kind::Headless { rng.below(4) } else { 0 } {
                    ip += 1;
                    let ip = format!("10.244.{}.{}", ip / 200 + 1, ip % 200 + 2);
                    let hostname = rng.chance(50).then(|| format!("{name}-{k}"));
                    endpoints.push(Endpoint { ip, hostname, ready: rng.chance(80) });
                }
                let external_ips = if kind == Kind::ClusterIp && rng.chance(50) {
                    vec![format!("192.0.2.{}", 10 + services.len())]
                } else {
                    Vec::new()
                };
                let mut service = Service::new(ns, &name, kind);
                service.publish_not_ready = service.kind == Kind::Headless && rng.chance(30);
                (service.ports, service.endpoints, service.external_ips) = (ports, endpoints, external_ips);
                services.push(service);
            }
        }
        // ExternalName Services in alpha, named for what their targets are: a Service of
        // alpha's (an IPv4 ClusterIP), a name in the zone that nothing defines, a name outside
        // the cluster (asked of the unreachable upstream).
        let targets = [
            ("alias", format!("{}.alpha.svc.{ZONE}", services[0].name)),
            ("dangling", format!("gone.alpha.svc.{ZONE}")),
            ("outside", "www.example.com".to_string()),
        ];
        for (name, target) in targets {
            services.push(Service::new("alpha", name, Kind::ExternalName(target)));
        }
        State { namespaces, services }
    }

    fn objects(&self) -> Vec<Value> {
        let mut objects: Vec<Value> = self
            .namespaces
            .iter()
            .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
            .collect();
        for s in &self.services {
            let ports: Vec<Value> = s
                .ports
                .iter()
                .map(|p| {
                    let mut v = json!({"protocol": p.protocol, "port": p.port});
                    if let Some(n) = p.name {
                        v["name"] = json!(n);
                    }
                    v
                })
                .collect();
            let mut spec = match &s.kind {
                Kind::ClusterIp => json!({"type": "ClusterIP", "ports": ports}),
                Kind::Headless => json!({"clusterIP": "None", "ports": ports}),
                Kind::ExternalName(target) => json!({"type": "ExternalName", "externalName": target}),
            };
            if !s.external_ips.is_empty() {
                spec["externalIPs"] = json!(s.external_ips);
            }
            if s.publish_not_ready {
                spec["publishNotReadyAddresses"] = json!(true);
            }
            objects.push(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": s.name, "namespace": s.namespace}, "spec": spec}));
            if s.kind == Kind::Headless {
                let endpoints: Vec<Value> = s
                    .endpoints
                    .iter()
                    .map(|e| {
                        let mut v = json!({"addresses": [e.ip], "conditions": {"ready": e.ready}});
                        if let Some(h) = &e.hostname {
                            v["hostname"] = json!(h);
                        }
                        v
                    })
                    .collect();
                let ports: Vec<Value> = s
                    .ports
                    .iter()
                    .map(|p| json!({"name": p.name.unwrap_or(""), "protocol": p.protocol, "port": p.port}))
                    .collect();
                objects.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": format!("{}-a", s.name), "namespace": s.namespace,
                        "labels": {"kubernetes.io/service-name": s.name, "endpointslice.kubernetes.io/managed-by": "tideway-test"}},
                    "addressType": "IPv4", "endpoints": endpoints, "ports": ports}));
            }
        }
        objects
    }

    /// The state with the ClusterIPs the server allocated.
    async fn read_back(mut self, api: &Api) -> State {
        for s in &mut self.services {
            let path = format!("/api/v1/namespaces/{}/services/{}", s.namespace, s.name);
            let held = get(&api.admin, &path).await.expect("the Service");
            s.cluster_ip = held["spec"]["clusterIP"]
                .as_str()
                .filter(|ip| *ip != "None" && !ip.is_empty())
                .map(str::to_string);
        }
        self
    }

    /// Every question the state defines, and the negatives around them.
    fn questions(&self) -> Vec<(String, &'static str)> {
        let mut q: Vec<(String, &'static str)> = Vec::new();
        for ns in &self.namespaces {
            q.push((format!("{ns}.svc.{ZONE}"), "A"));
            q.push((format!("nosuch.{ns}.svc.{ZONE}"), "A"));
            q.push((format!("10-244-1-5.{ns}.pod.{ZONE}"), "A"));
            q.push((format!("10-244-1-5.{ns}.pod.{ZONE}"), "AAAA"));
        }
        for (name, t) in [
            (ZONE.to_string(), "SOA"),
            (ZONE.to_string(), "NS"),
            (format!("svc.{ZONE}"), "A"),
            (format!("pod.{ZONE}"), "A"),
            (format!("web.nosuchns.svc.{ZONE}"), "A"),
            (format!("a.b.c.d.alpha.svc.{ZONE}"), "A"),
            (format!("1-2-3.alpha.pod.{ZONE}"), "A"),
            (format!("dns-version.{ZONE}"), "TXT"),
            (format!("nosuch.{ZONE}"), "A"),
        ] {
            q.push((name, t));
        }
        for s in &self.services {
            let fqdn = format!("{}.{}.svc.{ZONE}", s.name, s.namespace);
            for t in ["A", "AAAA", "SRV", "TXT"] {
                q.push((fqdn.clone(), t));
            }
            // Wrong case, and what a pod's search path makes of `name.namespace` and `name`.
            q.push((fqdn.to_uppercase(), "A"));
            q.push((format!("{}.{}.{}.svc.{ZONE}", s.name, s.namespace, s.namespace), "A"));
            q.push((format!("{}.{}.svc.{ZONE}.{ZONE}", s.name, s.namespace), "A"));
            q.push((format!("{}.{}.{ZONE}", s.name, s.namespace), "A"));
            q.push((format!("{}.{EXTERNAL}", s.name), "A"));
            for p in &s.ports {
                let proto = p.protocol.to_lowercase();
                if let Some(n) = p.name {
                    q.push((format!("_{n}._{proto}.{fqdn}"), "SRV"));
                    q.push((format!("_{n}._{proto}.{fqdn}"), "A"));
                }
            }
            q.push((format!("_nosuch._tcp.{fqdn}"), "SRV"));
            if let Some(ip) = &s.cluster_ip {
                q.push((reverse(ip), "PTR"));
            }
            for e in &s.endpoints {
                if let Some(h) = &e.hostname {
                    q.push((format!("{h}.{fqdn}"), "A"));
                }
                q.push((format!("{}.{fqdn}", e.ip.replace('.', "-")), "A"));
                q.push((reverse(&e.ip), "PTR"));
            }
            // The external zone: `<svc>.<ns>.<zone>` answers the external IPs.
            q.push((format!("{}.{}.{EXTERNAL}", s.name, s.namespace), "A"));
            q.push((format!("{}.{}.{EXTERNAL}", s.name, s.namespace), "AAAA"));
            for ip in &s.external_ips {
                q.push((reverse(ip), "PTR"));
            }
        }
        q.push((EXTERNAL.to_string(), "SOA"));
        q.push((format!("nosuch.alpha.{EXTERNAL}"), "A"));
        q
    }
}

/// `in-addr.arpa` name of an IPv4 address.
fn reverse(ip: &str) -> String {
    let mut octets: Vec<&str> = ip.split('.').collect();
    octets.reverse();
    format!("{}.in-addr.arpa", octets.join("."))
}

//! The behaviour battery: one table of packets and expected verdicts, traced through the
//! program of every backend. A row may override the expectation for a backend whose kernel
//! mechanism cannot do better (documented per row).

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::{NodeContext, compile};
use tideway_core::render;
use tideway_core::testing::*;
use tideway_core::trace::{Origin, Packet, TraceEnv, Verdict, render_trace, trace};

const TCP: Protocol = Protocol::Tcp;

fn cluster() -> ClusterState {
    let mut c = ClusterState::new();
    let mut svc = |s: tideway_core::model::Service| {
        c.apply(s);
    };
    svc(mk_service("ns1", "web").cluster_ip("10.96.0.10").port("http", TCP, 80).build());
    svc(mk_service("ns1", "empty").cluster_ip("10.96.0.11").port("http", TCP, 80).build());
    svc(mk_service("ns1", "np").cluster_ip("10.96.0.12").port("http", TCP, 80).node_port(30080).build());
    svc(mk_service("ns1", "np-local")
        .cluster_ip("10.96.0.13")
        .port("http", TCP, 80)
        .node_port(30081)
        .etp_local()
        .build());
    svc(mk_service("ns1", "np-local-none")
        .cluster_ip("10.96.0.14")
        .port("http", TCP, 80)
        .node_port(30082)
        .etp_local()
        .build());
    svc(mk_service("ns1", "lb")
        .cluster_ip("10.96.0.15")
        .port("http", TCP, 80)
        .node_port(30083)
        .lb_ip("192.168.0.200")
        .source_range("192.168.0.0/24")
        .build());
    svc(mk_service("ns1", "lb-local")
        .cluster_ip("10.96.0.16")
        .port("http", TCP, 80)
        .node_port(30084)
        .lb_ip("192.168.0.201")
        .etp_local()
        .health_check_node_port(32000)
        .build());
    svc(mk_service("ns1", "ext")
        .cluster_ip("10.96.0.17")
        .port("http", TCP, 80)
        .external_ip("192.168.0.150")
        .build());
    svc(mk_service("ns1", "itp-local").cluster_ip("10.96.0.18").port("http", TCP, 80).itp_local().build());
    svc(mk_service("ns1", "itp-local-ok").cluster_ip("10.96.0.19").port("http", TCP, 80).itp_local().build());
    svc(mk_service("ns1", "aff").cluster_ip("10.96.0.20").port("http", TCP, 80).affinity(10800).build());
    svc(mk_service("ns1", "term").cluster_ip("10.96.0.21").port("http", TCP, 80).build());
    svc(mk_service("ns1", "hairpin").cluster_ip("10.96.0.22").port("http", TCP, 80).build());
    svc(mk_service("ns1", "udp").cluster_ip("10.96.0.23").port("dns", Protocol::Udp, 53).build());
    svc(mk_service("ns1", "sctp").cluster_ip("10.96.0.24").port("s", Protocol::Sctp, 9999).build());
    svc(mk_service("ns1", "dual")
        .cluster_ip("10.96.0.25")
        .cluster_ip("fd00:96::25")
        .port("http", TCP, 80)
        .build());
    svc(mk_service("ns1", "other-proxy")
        .cluster_ip("10.96.0.26")
        .port("http", TCP, 80)
        .label("service.kubernetes.io/service-proxy-name", "someone-else")
        .build());
    svc(mk_service("ns1", "topo").cluster_ip("10.96.0.27").port("http", TCP, 80).build());
    svc(mk_service("ns1", "lb-proxy-mode")
        .cluster_ip("10.96.0.28")
        .port("http", TCP, 80)
        .node_port(30085)
        .lb_ip_proxy_mode("192.168.0.202")
        .build());
    svc(mk_service("ns1", "lb-local-none")
        .cluster_ip("10.96.0.29")
        .port("http", TCP, 80)
        .node_port(30086)
        .lb_ip("192.168.0.203")
        .etp_local()
        .build());

    let mut slice = |s: tideway_core::model::EndpointSlice| {
        c.apply(s);
    };
    let p = |svc: &str| mk_slice("ns1", svc).port("http", TCP, 8080);
    slice(p("web").ready("10.244.1.5", "node-a").ready("10.244.2.5", "node-b").build());
    slice(p("np").ready("10.244.1.6", "node-a").ready("10.244.2.6", "node-b").build());
    slice(p("np-local").ready("10.244.1.7", "node-a").ready("10.244.2.7", "node-b").build());
    slice(p("np-local-none").ready("10.244.2.8", "node-b").build());
    slice(p("lb").ready("10.244.1.8", "node-a").ready("10.244.2.9", "node-b").build());
    slice(p("lb-local").ready("10.244.1.10", "node-a").ready("10.244.2.10", "node-b").build());
    slice(p("ext").ready("10.244.2.11", "node-b").build());
    slice(p("itp-local").ready("10.244.2.12", "node-b").build());
    slice(p("itp-local-ok").ready("10.244.1.13", "node-a").ready("10.244.2.13", "node-b").build());
    slice(p("aff").ready("10.244.1.14", "node-a").ready("10.244.2.14", "node-b").build());
    slice(
        p("term")
            .endpoint("10.244.1.15", "node-a", false, true, true)
            .endpoint("10.244.2.15", "node-b", false, false, true)
            .build(),
    );
    slice(p("hairpin").ready("10.244.1.16", "node-a").build());
    slice(mk_slice("ns1", "udp").port("dns", Protocol::Udp, 5353).ready("10.244.1.17", "node-a").build());
    slice(mk_slice("ns1", "sctp").port("s", Protocol::Sctp, 9999).ready("10.244.2.18", "node-b").build());
    slice(p("dual").ready("10.244.1.19", "node-a").build());
    slice(p("dual").name("dual-v6").ready("fd00:244:1::19", "node-a").build());
    slice(p("other-proxy").ready("10.244.1.21", "node-a").build());
    slice(
        p("topo")
            .ready("10.244.1.20", "node-a")
            .zone_hint("zone-a")
            .ready("10.244.2.20", "node-b")
            .zone_hint("zone-b")
            .build(),
    );
    slice(p("lb-proxy-mode").ready("10.244.2.22", "node-b").build());
    slice(p("lb-local-none").ready("10.244.2.23", "node-b").build());
    c
}

fn dnat(eps: &[&str], masquerade: bool) -> Verdict {
    Verdict::Dnat { endpoints: eps.iter().map(|s| s.to_string()).collect(), masquerade }
}

struct Case {
    name: &'static str,
    src: &'static str,
    dst: &'static str,
    port: u16,
    proto: Protocol,
    from: Origin,
    want: Verdict,
    /// Expectation for IPVS mode when it differs, with the reason.
    ipvs: Option<(Verdict, &'static str)>,
}

fn case(
    name: &'static str,
    src: &'static str,
    dst: &'static str,
    port: u16,
    from: Origin,
    want: Verdict,
) -> Case {
    Case { name, src, dst, port, proto: TCP, from, want, ipvs: None }
}

const POD: &str = "10.244.1.9";

fn cases() -> Vec<Case> {
    use Origin::*;
    let no_short_circuit = "IPVS has one real-server list per frontend: pods reach local endpoints only";
    vec![
        case(
            "ClusterIP from a pod spreads over every endpoint",
            POD,
            "10.96.0.10",
            80,
            Pod,
            dnat(&["10.244.1.5:8080", "10.244.2.5:8080"], false),
        ),
        case(
            "ClusterIP from the node is masqueraded (off-cluster source)",
            NODE_A,
            "10.96.0.10",
            80,
            Node,
            dnat(&["10.244.1.5:8080", "10.244.2.5:8080"], true),
        ),
        case(
            "ClusterIP from outside is masqueraded",
            CLIENT,
            "10.96.0.10",
            80,
            External,
            dnat(&["10.244.1.5:8080", "10.244.2.5:8080"], true),
        ),
        case("no endpoints: rejected from a pod", POD, "10.96.0.11", 80, Pod, Verdict::Reject),
        case("no endpoints: rejected from the node", NODE_A, "10.96.0.11", 80, Node, Verdict::Reject),
        case(
            "NodePort from outside, masqueraded",
            CLIENT,
            NODE_A,
            30080,
            External,
            dnat(&["10.244.1.6:8080", "10.244.2.6:8080"], true),
        ),
        case(
            "NodePort from the node itself",
            NODE_A,
            NODE_A,
            30080,
            Node,
            dnat(&["10.244.1.6:8080", "10.244.2.6:8080"], true),
        ),
        case(
            "a port that is no NodePort reaches the node's own socket",
            CLIENT,
            NODE_A,
            30999,
            External,
            Verdict::Local,
        ),
        case(
            "ETP Local NodePort from outside: local endpoint, source kept",
            CLIENT,
            NODE_A,
            30081,
            External,
            dnat(&["10.244.1.7:8080"], false),
        ),
        Case {
            ipvs: Some((dnat(&["10.244.1.7:8080"], false), no_short_circuit)),
            ..case(
                "ETP Local NodePort from a pod: short-circuit to every endpoint",
                POD,
                NODE_A,
                30081,
                Pod,
                dnat(&["10.244.1.7:8080", "10.244.2.7:8080"], false),
            )
        },
        Case {
            ipvs: Some((dnat(&["10.244.1.7:8080"], false), no_short_circuit)),
            ..case(
                "ETP Local NodePort from the node: every endpoint, masqueraded",
                NODE_A,
                NODE_A,
                30081,
                Node,
                dnat(&["10.244.1.7:8080", "10.244.2.7:8080"], true),
            )
        },
        case(
            "ETP Local NodePort without local endpoint: dropped from outside",
            CLIENT,
            NODE_A,
            30082,
            External,
            Verdict::Drop,
        ),
        case(
            "ETP Local NodePort without local endpoint: pods still served",
            POD,
            NODE_A,
            30082,
            Pod,
            dnat(&["10.244.2.8:8080"], false),
        ),
        case(
            "LB IP from an allowed source",
            CLIENT,
            "192.168.0.200",
            80,
            External,
            dnat(&["10.244.1.8:8080", "10.244.2.9:8080"], true),
        ),
        case(
            "LB IP from outside the source ranges is dropped",
            BLOCKED_CLIENT,
            "192.168.0.200",
            80,
            External,
            Verdict::Drop,
        ),
        case(
            "source ranges do not apply to the NodePort",
            BLOCKED_CLIENT,
            NODE_A,
            30083,
            External,
            dnat(&["10.244.1.8:8080", "10.244.2.9:8080"], true),
        ),
        case(
            "ETP Local LB IP from outside: local endpoint, source kept",
            CLIENT,
            "192.168.0.201",
            80,
            External,
            dnat(&["10.244.1.10:8080"], false),
        ),
        Case {
            ipvs: Some((dnat(&["10.244.1.10:8080"], false), no_short_circuit)),
            ..case(
                "ETP Local LB IP from a pod: every endpoint",
                POD,
                "192.168.0.201",
                80,
                Pod,
                dnat(&["10.244.1.10:8080", "10.244.2.10:8080"], false),
            )
        },
        case(
            "health-check NodePort is delivered to the node",
            CLIENT,
            NODE_A,
            32000,
            External,
            Verdict::Local,
        ),
        case(
            "ETP Local LB IP without local endpoint: dropped from outside",
            CLIENT,
            "192.168.0.203",
            80,
            External,
            Verdict::Drop,
        ),
        case(
            "ETP Local LB IP without local endpoint: pods still served",
            POD,
            "192.168.0.203",
            80,
            Pod,
            dnat(&["10.244.2.23:8080"], false),
        ),
        case(
            "LB IP in ipMode Proxy is not captured",
            CLIENT,
            "192.168.0.202",
            80,
            External,
            Verdict::Forward { masquerade: false },
        ),
        case(
            "externalIP from outside, masqueraded",
            CLIENT,
            "192.168.0.150",
            80,
            External,
            dnat(&["10.244.2.11:8080"], true),
        ),
        case("ITP Local without local endpoint: dropped", POD, "10.96.0.18", 80, Pod, Verdict::Drop),
        case(
            "ITP Local: only local endpoints",
            POD,
            "10.96.0.19",
            80,
            Pod,
            dnat(&["10.244.1.13:8080"], false),
        ),
        case(
            "ClientIP affinity: first connection spreads",
            POD,
            "10.96.0.20",
            80,
            Pod,
            dnat(&["10.244.1.14:8080", "10.244.2.14:8080"], false),
        ),
        case(
            "terminating fallback: serving endpoint used when none is ready",
            POD,
            "10.96.0.21",
            80,
            Pod,
            dnat(&["10.244.1.15:8080"], false),
        ),
        case(
            "hairpin: a pod reaching itself is masqueraded",
            "10.244.1.16",
            "10.96.0.22",
            80,
            Pod,
            dnat(&["10.244.1.16:8080"], true),
        ),
        Case {
            proto: Protocol::Udp,
            ..case("UDP service", POD, "10.96.0.23", 53, Pod, dnat(&["10.244.1.17:5353"], false))
        },
        Case {
            proto: Protocol::Sctp,
            ..case("SCTP service", POD, "10.96.0.24", 9999, Pod, dnat(&["10.244.2.18:9999"], false))
        },
        case("dual-stack: IPv4 ClusterIP", POD, "10.96.0.25", 80, Pod, dnat(&["10.244.1.19:8080"], false)),
        case(
            "dual-stack: IPv6 ClusterIP",
            "fd00:244:1::9",
            "fd00:96::25",
            80,
            Pod,
            dnat(&["[fd00:244:1::19]:8080"], false),
        ),
        case(
            "another proxy's Service is left alone",
            POD,
            "10.96.0.26",
            80,
            Pod,
            Verdict::Forward { masquerade: false },
        ),
        case(
            "zone hints keep traffic in the node's zone",
            POD,
            "10.96.0.27",
            80,
            Pod,
            dnat(&["10.244.1.20:8080"], false),
        ),
    ]
}

fn run(mode: ProxyMode, node: &NodeContext, cases: &[Case]) {
    let ruleset = compile(&cluster(), node);
    let mut failures = Vec::new();
    for c in cases {
        let dst = ip(c.dst);
        let family = IpFamily::of(&dst);
        let program = render::Renderer::new(mode, &ruleset).lower(family);
        let env = TraceEnv::for_node(ruleset.family(family));
        let packet =
            Packet { src: ip(c.src), dst, protocol: c.proto, dport: c.port, sport: None, origin: c.from };
        let t = trace(&program, &packet, &env);
        let want = match (&c.ipvs, mode) {
            (Some((v, _)), ProxyMode::Ipvs) => v,
            _ => &c.want,
        };
        if &t.verdict() != want {
            failures.push(format!(
                "[{mode}] {}: want {want}, got {}\n{}",
                c.name,
                t.verdict(),
                render_trace(&t)
            ));
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn battery_nftables() {
    run(ProxyMode::Nftables, &mk_node_context(), &cases());
}

#[test]
fn battery_iptables() {
    run(ProxyMode::Iptables, &mk_node_context(), &cases());
}

#[test]
fn battery_ipvs() {
    run(ProxyMode::Ipvs, &mk_node_context(), &cases());
}

#[test]
fn masquerade_all_masquerades_pod_traffic_on_every_backend() {
    let mut node = mk_node_context();
    node.settings.masquerade_all = true;
    let rows = [case(
        "masqueradeAll",
        POD,
        "10.96.0.10",
        80,
        Origin::Pod,
        dnat(&["10.244.1.5:8080", "10.244.2.5:8080"], true),
    )];
    for mode in ProxyMode::ALL {
        run(mode, &node, &rows);
    }
}

#[test]
fn without_local_detection_only_external_frontends_masquerade() {
    let mut node = mk_node_context();
    node.settings.cluster_cidrs.clear();
    let rows = [
        case(
            "no detector: node traffic to a ClusterIP keeps its source",
            NODE_A,
            "10.96.0.10",
            80,
            Origin::Node,
            dnat(&["10.244.1.5:8080", "10.244.2.5:8080"], false),
        ),
        case(
            "no detector: NodePort still masquerades",
            CLIENT,
            NODE_A,
            30080,
            Origin::External,
            dnat(&["10.244.1.6:8080", "10.244.2.6:8080"], true),
        ),
    ];
    for mode in [ProxyMode::Nftables, ProxyMode::Iptables] {
        run(mode, &node, &rows);
    }
}

/// Traces one UDP query from a pod to `dst`:53 on a node whose node-local DNS listener answers
/// for the "udp" Service (`up`: its transparent socket is there): the verdict, and the trace.
fn dns_query(mode: ProxyMode, dst: &str, up: bool) -> (Verdict, String) {
    let node = mk_node_context().with_node_dns(Some(tideway_core::plan::NodeDns {
        address: ip("169.254.20.10"),
        service_ips: vec![ip("10.96.0.23")],
    }));
    let ruleset = compile(&cluster(), &node);
    let program = render::Renderer::new(mode, &ruleset).lower(IpFamily::V4);
    let mut env = TraceEnv::for_node(ruleset.family(IpFamily::V4));
    if !up {
        env.local_route_mark = None;
    }
    let packet = Packet {
        src: ip(POD),
        dst: ip(dst),
        protocol: Protocol::Udp,
        dport: 53,
        sport: Some(40000),
        origin: Origin::Pod,
    };
    let t = trace(&program, &packet, &env);
    (t.verdict(), render_trace(&t))
}

#[test]
fn a_node_local_dns_listener_takes_pods_queries_while_it_is_up() {
    let service = dnat(&["10.244.1.17:5353"], false);
    let expect = |mode: ProxyMode, dst: &str, up: bool, want: &Verdict| {
        let (got, steps) = dns_query(mode, dst, up);
        assert_eq!(&got, want, "[{mode}] {dst}, listener up: {up}\n{steps}");
    };
    for mode in [ProxyMode::Nftables, ProxyMode::Iptables] {
        // The listener takes it; without it, the Service does; the link-local address is local.
        expect(mode, "10.96.0.23", true, &Verdict::Local);
        expect(mode, "10.96.0.23", false, &service);
        expect(mode, "169.254.20.10", true, &Verdict::Local);
    }
    // IPVS takes the ClusterIP's packets before any socket: the link-local address only.
    expect(ProxyMode::Ipvs, "10.96.0.23", true, &service);
    expect(ProxyMode::Ipvs, "169.254.20.10", true, &Verdict::Local);
}

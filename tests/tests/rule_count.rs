//! Rule-count regression (after kube-proxy's number_generated_rules_test.go): the iptables
//! backend writes exactly as many rules as kube-proxy for ClusterIP Services
//! (2 + 3 x endpoints NAT rules each, plus 5 NAT and 3 filter base rules).

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::model::{EndpointSlice, Service};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::compile;
use tideway_core::program::Program;
use tideway_core::render;
use tideway_core::testing::*;

fn generate(services: usize, endpoints: usize, lb: bool) -> ClusterState {
    let mut c = ClusterState::new();
    for i in 0..services {
        let name = format!("svc{i}");
        let mut b = mk_service("namespace", &name).cluster_ip(&format!("10.0.0.{}", i + 1)).port(
            "8080",
            Protocol::Tcp,
            80 + i as u16,
        );
        if lb {
            b = b
                .node_port(30000 + i as u16)
                .lb_ip("1.2.3.4")
                .external_ip("1.2.3.4")
                .source_range("1.2.3.4/28");
        }
        let svc: Service = b.build();
        c.apply(svc);
        let mut s = mk_slice("namespace", &name).name(&name).port("8080", Protocol::Tcp, 8080);
        for j in 0..endpoints {
            s = s.ready(&format!("172.16.{}.{}", j / 250, j % 250 + 1), &format!("node-{j}"));
        }
        let slice: EndpointSlice = s.build();
        c.apply(slice);
    }
    c
}

/// (filter rules, nat rules) written by a full sync, as kube-proxy counts them.
fn counts(p: &Program) -> (usize, usize) {
    let asm = p.assemble();
    let count = |table: &str| {
        asm.chains.iter().filter(|c| c.def.table == table && !c.def.builtin).map(|c| c.rules.len()).sum()
    };
    (count("filter"), count("nat"))
}

fn program(c: &ClusterState) -> Program {
    let mut node = mk_node_context();
    node.settings.cluster_cidrs = vec![net("10.0.0.0/8")];
    render::Renderer::new(ProxyMode::Iptables, &compile(c, &node)).lower(IpFamily::V4)
}

#[test]
fn clusterip_rule_counts_match_kube_proxy() {
    // (services, endpoints per service, filter rules, nat rules) from kube-proxy's table.
    let table = [
        (0, 0, 3, 5),
        (1, 0, 4, 5),
        (1, 1, 3, 10),
        (1, 2, 3, 13),
        (1, 10, 3, 37),
        (10, 0, 13, 5),
        (10, 1, 3, 55),
        (10, 2, 3, 85),
        (10, 10, 3, 325),
    ];
    for (s, e, filter, nat) in table {
        assert_eq!(counts(&program(&generate(s, e, false))), (filter, nat), "{s} services x {e} endpoints");
        if s == 1 && e > 0 {
            assert_eq!(nat - 5, 2 + 3 * e, "a ClusterIP Service is 2 + 3 x endpoints NAT rules");
        }
    }
}

#[test]
fn load_balancer_rule_counts() {
    // A LoadBalancer Service with an externalIP and a source range. Filter: 4 REJECTs without
    // endpoints (ClusterIP, externalIP, LB IP, NodePort), else 1 firewall DROP, as kube-proxy.
    // NAT: 9 + 3 x endpoints (3 captures, 1 NodePort, 1 off-cluster masquerade, 2 KUBE-EXT,
    // 2 KUBE-FW); kube-proxy's own table for its variant of this Service says 8 + 3 x E.
    let table =
        [(1, 0, 7, 5), (1, 1, 4, 17), (1, 2, 4, 20), (1, 10, 4, 44), (10, 0, 43, 5), (10, 1, 13, 125)];
    for (s, e, filter, nat) in table {
        assert_eq!(counts(&program(&generate(s, e, true))), (filter, nat), "{s} LB services x {e} endpoints");
    }
}

#[test]
fn nftables_chains_do_not_grow_with_services() {
    let mut node = mk_node_context();
    node.settings.cluster_cidrs = vec![net("10.0.0.0/8")];
    let chains = |s| {
        let p = render::Renderer::new(ProxyMode::Nftables, &compile(&generate(s, 3, true), &node))
            .lower(IpFamily::V4);
        p.assemble().chains.len()
    };
    assert_eq!(chains(1), chains(200), "chains are per behaviour and endpoint count, not per Service");
}

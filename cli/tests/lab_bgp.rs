//! `tideway lab` with an upstream BGP router (root; FRR): on the example lab the nodes' FRR,
//! driven by their agents, peers with the router; the router's kernel routes hold exactly the
//! advertising nodes (every node for `externalTrafficPolicy: Cluster`, the nodes with a ready
//! endpoint for `Local`), curls from the host behind the router spread over the nodes, the
//! layer-2 pool is still announced over ARP, and a node taken off the network is withdrawn by
//! BFD and comes back.

mod lab_support;

use lab_support::*;

const BGP: &str = include_str!("../../examples/bgp.yaml");
const WORKER: &str = "172.18.0.4";
const WORKER2: &str = "172.18.0.5";
const WORKER3: &str = "172.18.0.3";

/// The router's next hops for `ip` (sorted; none: no route).
fn next_hops(lab: &TestLab, ip: &str) -> Vec<String> {
    tideway_lab::frr::bgp_routes(&format!("tw-{}-r-tor", lab.name)).remove(ip).unwrap_or_default()
}

/// Waits until the router routes `ip` over exactly `want`.
fn routed_over(lab: &TestLab, ip: &str, want: &[&str], secs: f64) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    eventually(patience(secs), || {
        let got = next_hops(lab, ip);
        if got == want { Ok(()) } else { Err(format!("{ip} is routed over {got:?}, not {want:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnose_bgp(lab)));
}

/// The lab's state plus the router's view of its sessions.
fn diagnose_bgp(lab: &TestLab) -> String {
    let netns = lab.status()["routers"][0]["netns"].as_str().unwrap_or_default().to_string();
    let vtysh =
        lab.exec("tor", &["vtysh", "-N", &netns, "-c", "show bgp summary", "-c", "show bfd peers brief"]);
    format!("router:\n{}\n{}", String::from_utf8_lossy(&vtysh.stdout), lab.diagnose())
}

const POD3: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: webpod3, labels: {app: webpod}}\nspec:\n  nodeName: myk8s-worker3\n  containers: [{name: container, image: traefik/whoami, ports: [{containerPort: 80}]}]\n";

#[test]
fn the_router_spreads_cluster_and_local_services_over_the_advertising_nodes_and_withdraws_a_node() {
    assert!(
        std::path::Path::new("/usr/lib/frr/bgpd").exists() && std::path::Path::new("/usr/bin/vtysh").exists(),
        "FRR is installed by the test command"
    );
    let lab = TestLab::up("bgp", BGP, None);
    let (web, local, l2) = (lab.lb_ip("web"), lab.lb_ip("web-local"), lab.lb_ip("web-l2"));
    assert!(web.starts_with("203.0.113.") && local.starts_with("203.0.113."), "{web} {local}");
    // Cluster: every node advertises; Local: every node with a ready endpoint (all three).
    routed_over(&lab, &web, &[WORKER, WORKER2, WORKER3], 30.0);
    routed_over(&lab, &local, &[WORKER, WORKER2, WORKER3], 30.0);
    wait_serving(&lab, "far", &local, 3);
    // Local keeps the client's address, and the router's layer-4 hash spreads the curls.
    let body = lab.curl_body("far", &local);
    assert!(body.contains("RemoteAddr: 192.168.50.10:"), "{body}");
    let seen = split(&lab, "far", &local, 60);
    assert_eq!(seen.len(), 3, "60 curls through the router reached {seen:?}");
    lab.curl("far", &web).expect("the Cluster Service from behind the router");
    // The layer-2 pool is still announced over ARP on the node network, not over BGP.
    assert!(lab.announcer("web-l2").is_some(), "{}", lab.diagnose());
    lab.curl("mypc", &l2).expect("the layer-2 address from the node network");
    assert!(next_hops(&lab, &l2).is_empty());
    let table = ok(tideway(&["lab", "status", "--name", &lab.name]), "lab status");
    assert!(table.contains("bgp:myk8s-worker"), "{table}");
    // The last endpoint on worker3 goes: worker3 withdraws the Local address only.
    lab.change("delete", POD3);
    routed_over(&lab, &local, &[WORKER, WORKER2], 30.0);
    routed_over(&lab, &web, &[WORKER, WORKER2, WORKER3], 5.0);
    // worker2 off the network: BFD withdraws it from both; back on, it is peered again.
    ok(tideway(&["lab", "node", "myk8s-worker2", "down", "--name", &lab.name]), "lab node down");
    routed_over(&lab, &web, &[WORKER, WORKER3], 5.0);
    routed_over(&lab, &local, &[WORKER], 5.0);
    lab.curl("far", &local).expect("served by the node left");
    ok(tideway(&["lab", "node", "myk8s-worker2", "up", "--name", &lab.name]), "lab node up");
    routed_over(&lab, &web, &[WORKER, WORKER2, WORKER3], 30.0);
    routed_over(&lab, &local, &[WORKER, WORKER2], 30.0);
}

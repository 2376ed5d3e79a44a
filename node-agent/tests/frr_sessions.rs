//! The rendered FRR configurations in real FRR: two nodes' decisions rendered by
//! [`tideway_core::bgp::frr::render`] and loaded into `zebra`, `bfdd` and `bgpd` in the nodes'
//! network namespaces, peering over one segment with a router namespace running FRR too. The
//! router's kernel routes are what is checked: a `Cluster` Service's address over both nodes
//! (ECMP), a `Local` one over the node with its endpoint only, a changed decision applied with
//! [`FrrReload`] (FRR's `frr-reload.py`) without resetting the session, and a node whose link
//! goes down withdrawn by BFD (100 ms × 3) long before the hold time.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tideway_core::announce::LocalEndpoints;
use tideway_core::bgp::{self, BfdProfile, BgpAdvertisement, BgpPeer, Objects};
use tideway_core::model::TrafficPolicy;
use tideway_core::testing::{ip, mk_node_info, mk_service_address};
use tideway_node_agent::frr::{FrrReload, Routing};
use tideway_tests::netns::{Netns, eventually, require_root};

const ROUTER: &str = "172.30.0.1";
const CLUSTER_VIP: &str = "203.0.113.10";
const LOCAL_VIP: &str = "203.0.113.20";

/// FRR's daemons in one namespace, under their own path space (`-N`).
struct Frr {
    ns: Netns,
    dir: PathBuf,
}

impl Frr {
    /// Starts zebra, bfdd and bgpd in `ns` and gives them `config` through vtysh, which hands
    /// each daemon its own commands (an integrated `frr.conf`, as a node's FRR takes it).
    fn start(ns: Netns, config: &str) -> Frr {
        let dir = PathBuf::from("/var/run/frr").join(&ns.name);
        std::fs::create_dir_all(&dir).expect("FRR's run directory");
        let (empty, conf) = (dir.join("empty.conf"), dir.join("frr.conf"));
        std::fs::write(&empty, "").expect("empty.conf");
        std::fs::write(&conf, config).expect("frr.conf");
        let chown = Command::new("chown").args(["-R", "frr:frr"]).arg(&dir).status();
        assert!(
            chown.is_ok_and(|s| s.success()),
            "the frr user exists (FRR is installed by the test command)"
        );
        for daemon in ["zebra", "bfdd", "bgpd"] {
            let pid = dir.join(format!("{daemon}.pid"));
            ns.sh(&format!(
                "/usr/lib/frr/{daemon} -d -N {} -f {} -i {} --log file:{}/{daemon}.log",
                ns.name,
                empty.display(),
                pid.display(),
                dir.display()
            ));
        }
        // vtysh needs every daemon's socket; they appear as the daemons come up.
        let loaded = eventually(Duration::from_secs(10), || {
            let out = ns.try_sh(&format!("vtysh -N {} -f {} 2>&1", ns.name, conf.display()));
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() { Ok(()) } else { Err(text) }
        });
        let frr = Frr { ns, dir };
        loaded.unwrap_or_else(|e| panic!("vtysh refused the configuration: {e}\n{}", frr.log()));
        frr
    }

    fn log(&self) -> String {
        ["zebra", "bfdd", "bgpd"]
            .iter()
            .map(|d| std::fs::read_to_string(self.dir.join(format!("{d}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for daemon in ["bgpd", "bfdd", "zebra"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(format!("{daemon}.pid"))) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The router: eBGP with every node, multipath across them, BFD as fast as the nodes ask.
fn router_config(nodes: &[&str]) -> String {
    let mut c = String::from(
        "frr defaults traditional\n!\nbfd\n profile fast\n  receive-interval 100\n  transmit-interval 100\n exit\nexit\n!\n",
    );
    c.push_str("router bgp 64513\n bgp router-id 172.30.0.1\n no bgp ebgp-requires-policy\n");
    c.push_str(" bgp bestpath as-path multipath-relax\n");
    for n in nodes {
        c.push_str(&format!(
            " neighbor {n} remote-as 64512\n neighbor {n} timers 30 90\n neighbor {n} bfd profile fast\n"
        ));
    }
    c.push_str(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\nexit\n");
    c
}

/// What `node` (at `addr`, with `local` endpoints of the Local Service) advertises, rendered.
fn node_config(node: &str, addr: &str, local: LocalEndpoints) -> String {
    let info = mk_node_info(node, "a");
    let peers =
        [BgpPeer { bfd_profile: Some("fast".into()), ..BgpPeer::new("tor", 64512, 64513, ip(ROUTER)) }];
    let advertisements = [BgpAdvertisement::new("all")];
    let bfd_profiles =
        [BfdProfile { receive_interval: 100, transmit_interval: 100, ..BfdProfile::new("fast") }];
    let addresses = [
        mk_service_address(
            "web",
            CLUSTER_VIP,
            "public",
            TrafficPolicy::Cluster,
            &info,
            LocalEndpoints::Absent,
        ),
        mk_service_address("api", LOCAL_VIP, "public", TrafficPolicy::Local, &info, local),
    ];
    let objects = Objects {
        peers: &peers,
        advertisements: &advertisements,
        bfd_profiles: &bfd_profiles,
        communities: &[],
    };
    let decided = bgp::decide(&info, Some(ip(addr)), objects, &addresses);
    assert!(decided.conflicts.is_empty(), "{:?}", decided.conflicts);
    bgp::frr::render(&decided)
}

/// The router's next hops for `vip`, sorted (none: no route).
fn next_hops(router: &Netns, vip: &str) -> Vec<String> {
    let out = router.sh(&format!("ip -j route show {vip}/32"));
    let routes: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let mut hops: Vec<String> = Vec::new();
    for r in routes.as_array().into_iter().flatten() {
        match r["nexthops"].as_array() {
            Some(list) => hops.extend(list.iter().filter_map(|h| h["gateway"].as_str().map(String::from))),
            None => hops.extend(r["gateway"].as_str().map(String::from)),
        }
    }
    hops.sort();
    hops
}

#[test]
fn real_frr_spreads_addresses_over_the_nodes_reloads_without_a_reset_and_bfd_withdraws_a_dead_node() {
    require_root("FRR in network namespaces");
    let tag = std::process::id() % 100_000;
    let router = Netns::create(&format!("frr-r-{tag}"));
    router
        .sh(&format!("ip link add br0 type bridge && ip addr add {ROUTER}/24 dev br0 && ip link set br0 up"));
    let nodes =
        [("node-a", "172.30.0.11", LocalEndpoints::Ready), ("node-b", "172.30.0.12", LocalEndpoints::Absent)];
    let mut speakers = Vec::new();
    for (i, (name, addr, local)) in nodes.iter().enumerate() {
        let ns = Netns::create(&format!("frr-{i}-{tag}"));
        let (inner, outer) = (format!("fn{i}-{tag}"), format!("fr{i}-{tag}"));
        ns.sh(&format!("ip link add {inner} type veth peer name {outer} netns {}", router.name));
        ns.sh(&format!(
            "ip addr add {addr}/24 dev {inner} && ip link set {inner} up && ip route add default via {ROUTER}"
        ));
        router.sh(&format!("ip link set {outer} master br0 && ip link set {outer} up"));
        ns.sh("sysctl -qw net.ipv4.ip_forward=1"); // a node forwards to its pods
        speakers.push(Frr::start(ns, &node_config(name, addr, *local)));
    }
    let router = Frr::start(router, &router_config(&["172.30.0.11", "172.30.0.12"]));
    let logs = || {
        format!("router:\n{}\nnodes:\n{}", router.log(), speakers.iter().map(Frr::log).collect::<String>())
    };

    // Cluster: both nodes; Local: only the node with the endpoint.
    let both = vec!["172.30.0.11".to_string(), "172.30.0.12".to_string()];
    eventually(Duration::from_secs(30), || {
        let (cluster, local) = (next_hops(&router.ns, CLUSTER_VIP), next_hops(&router.ns, LOCAL_VIP));
        if cluster == both && local == ["172.30.0.11"] {
            Ok(())
        } else {
            Err(format!("{cluster:?} {local:?}"))
        }
    })
    .unwrap_or_else(|e| panic!("the router's routes: {e}\n{}", logs()));

    // Both BFD sessions up (they start once BGP is established, after any collision).
    eventually(Duration::from_secs(15), || {
        let out = router.ns.sh(&format!("vtysh -N {} -c 'show bfd peers json'", router.ns.name));
        let peers: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        let up = peers.as_array().into_iter().flatten().filter(|p| p["status"] == "up").count();
        if up == 2 { Ok(()) } else { Err(out) }
    })
    .unwrap_or_else(|e| panic!("BFD sessions: {e}\n{}", logs()));

    // An endpoint of the Local Service starts on node-b: its agent renders the new decision and
    // FRR's reload applies the difference; the session stays up.
    let established = || {
        let out =
            router.ns.sh(&format!("vtysh -N {} -c 'show bgp neighbors 172.30.0.12 json'", router.ns.name));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        v["172.30.0.12"]["connectionsEstablished"].as_u64().unwrap_or(0)
    };
    let before = established();
    let forwarding = || speakers[1].ns.sh("sysctl -n net.ipv4.ip_forward net.ipv6.conf.all.forwarding");
    let forwarding_before = forwarding();
    let reload =
        FrrReload { pathspace: Some(speakers[1].ns.name.clone()), ..FrrReload::new(&speakers[1].dir) };
    reload
        .apply(&node_config("node-b", "172.30.0.12", LocalEndpoints::Ready))
        .unwrap_or_else(|e| panic!("frr-reload.py: {e}\n{}", logs()));
    eventually(Duration::from_secs(10), || {
        let local = next_hops(&router.ns, LOCAL_VIP);
        if local == both { Ok(()) } else { Err(format!("{local:?}")) }
    })
    .unwrap_or_else(|e| panic!("the Local address after the reload: {e}\n{}", logs()));
    assert!(before >= 1, "node-b's session was up");
    assert_eq!(established(), before, "the reload kept node-b's session");
    assert_eq!(forwarding(), forwarding_before, "the reload left the node's forwarding alone");

    // node-b's link goes down: BFD (3 × 100 ms) withdraws it, not the 90 s hold time.
    let down = Instant::now();
    speakers[1].ns.sh(&format!("ip link set fn1-{tag} down"));
    eventually(Duration::from_secs(5), || {
        let hops = next_hops(&router.ns, CLUSTER_VIP);
        if hops == ["172.30.0.11"] { Ok(()) } else { Err(format!("{hops:?}")) }
    })
    .unwrap_or_else(|e| panic!("node-b still a next hop: {e}\n{}", logs()));
    let took = down.elapsed();
    assert!(took < Duration::from_secs(2), "withdrawn after {took:?}: BFD, not the hold time");
}

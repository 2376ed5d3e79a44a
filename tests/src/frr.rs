//! FRR in network namespaces, for the BGP tests and benchmarks: a router namespace holding a
//! bridge (the nodes' segment) and running zebra, bfdd and bgpd, and node namespaces on that
//! segment running them too, each configuration given through vtysh (which hands each daemon
//! its own commands, as an integrated `frr.conf` is loaded).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tideway_core::announce::LocalEndpoints;
use tideway_core::bgp::{self, BfdProfile, BgpAdvertisement, BgpPeer, Objects};
use tideway_core::cluster::{BgpObject, BgpSpec, Snapshot};
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::ipam::Pool;
use tideway_core::model::{EndpointSlice, L2Settings, LoadBalancerPool, PoolOrigin, Service, TrafficPolicy};
use tideway_core::testing::{ip, mk_node, mk_node_info, mk_service_address};

use crate::netns::{Netns, eventually};

/// The router's address on the nodes' segment.
pub const ROUTER: &str = "172.30.0.1";
/// The router's ASN (the nodes speak 64512).
pub const ROUTER_ASN: u32 = 64513;

/// FRR's daemons in one namespace, under their own path space (`-N`, the namespace's name).
pub struct Frr {
    /// The namespace.
    pub ns: Netns,
    /// FRR's run directory for it (sockets, pid files, logs, configurations).
    pub dir: PathBuf,
}

impl Frr {
    /// Starts zebra, bfdd and bgpd in `ns` and gives them `config` through vtysh.
    pub fn start(ns: Netns, config: &str) -> Frr {
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

    /// The daemons' logs.
    pub fn log(&self) -> String {
        ["zebra", "bfdd", "bgpd"]
            .iter()
            .map(|d| std::fs::read_to_string(self.dir.join(format!("{d}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `vtysh -c command` here, its JSON answer (`null` when it gives none).
    pub fn json(&self, command: &str) -> serde_json::Value {
        let out = self.ns.sh(&format!("vtysh -N {} -c '{command}'", self.ns.name));
        serde_json::from_str(&out).unwrap_or_default()
    }

    /// BFD sessions up.
    pub fn bfd_up(&self) -> usize {
        self.json("show bfd peers json")
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["status"] == "up")
            .count()
    }

    /// This namespace's next hops for `vip`'s host route, sorted (none: no route).
    pub fn next_hops(&self, vip: &str) -> Vec<String> {
        let out = self.ns.sh(&format!("ip -j route show {vip}/32"));
        let routes: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let mut hops: Vec<String> = Vec::new();
        for r in routes.as_array().into_iter().flatten() {
            match r["nexthops"].as_array() {
                Some(list) => {
                    hops.extend(list.iter().filter_map(|h| h["gateway"].as_str().map(String::from)))
                }
                None => hops.extend(r["gateway"].as_str().map(String::from)),
            }
        }
        hops.sort();
        hops
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

/// A router and nodes on one segment, each node's FRR given its configuration.
pub struct BgpBed {
    /// The router.
    pub router: Frr,
    /// The nodes, in the order given.
    pub nodes: Vec<Frr>,
    /// The nodes' interfaces to the segment, in their namespaces.
    pub links: Vec<String>,
}

impl BgpBed {
    /// Builds the segment (`tag` keeps names apart), starts each node `(address, frr.conf)`
    /// (forwarding on, as a node's is), then the router peering with them all: eBGP from
    /// [`ROUTER_ASN`], multipath over them, BFD at 100 ms × 3, a connect retry of 1 s.
    pub fn start(tag: &str, nodes: &[(&str, String)]) -> BgpBed {
        let router = Netns::create(&format!("frr-r-{tag}"));
        router.sh(&format!(
            "ip link add br0 type bridge && ip addr add {ROUTER}/24 dev br0 && ip link set br0 up"
        ));
        let (mut speakers, mut links) = (Vec::new(), Vec::new());
        for (i, (addr, config)) in nodes.iter().enumerate() {
            let ns = Netns::create(&format!("frr-{i}-{tag}"));
            let (inner, outer) = (format!("fn{i}-{tag}"), format!("fr{i}-{tag}"));
            ns.sh(&format!("ip link add {inner} type veth peer name {outer} netns {}", router.name));
            ns.sh(&format!(
                "ip addr add {addr}/24 dev {inner} && ip link set {inner} up && ip route add default via {ROUTER}"
            ));
            router.sh(&format!("ip link set {outer} master br0 && ip link set {outer} up"));
            ns.sh("sysctl -qw net.ipv4.ip_forward=1");
            speakers.push(Frr::start(ns, config));
            links.push(inner);
        }
        let addrs: Vec<&str> = nodes.iter().map(|(a, _)| *a).collect();
        let router = Frr::start(router, &router_config(&addrs));
        BgpBed { router, nodes: speakers, links }
    }

    /// Every daemon's log, for a failure message.
    pub fn logs(&self) -> String {
        let nodes: String = self.nodes.iter().map(Frr::log).collect();
        format!("router:\n{}\nnodes:\n{nodes}", self.router.log())
    }

    /// Takes node `i`'s link to the segment down or up.
    pub fn link(&self, i: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        self.nodes[i].ns.sh(&format!("ip link set {} {state}", self.links[i]));
    }
}

fn router_config(nodes: &[&str]) -> String {
    let mut c = String::from(
        "frr defaults traditional\n!\nbfd\n profile fast\n  receive-interval 100\n  transmit-interval 100\n exit\nexit\n!\n",
    );
    c.push_str(&format!("router bgp {ROUTER_ASN}\n bgp router-id {ROUTER}\n no bgp ebgp-requires-policy\n"));
    c.push_str(" bgp bestpath as-path multipath-relax\n");
    for n in nodes {
        c.push_str(&format!(
            " neighbor {n} remote-as 64512\n neighbor {n} timers 30 90\n neighbor {n} timers connect 1\n neighbor {n} bfd profile fast\n"
        ));
    }
    c.push_str(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\nexit\n");
    c
}

/// A node's `frr.conf` for the bed, as Tideway renders it: node `node` at `addr` peers with the
/// router (BFD profile `fast`, 100 ms × 3), one advertisement covers every pool, and each of
/// `services` (name, LoadBalancer address, `externalTrafficPolicy`, this node's endpoints) has
/// its address from pool `public`.
pub fn node_config(
    node: &str,
    addr: &str,
    services: &[(&str, &str, TrafficPolicy, LocalEndpoints)],
) -> String {
    let info = mk_node_info(node, "a");
    let peers =
        [BgpPeer { bfd_profile: Some("fast".into()), ..BgpPeer::new("tor", 64512, ROUTER_ASN, ip(ROUTER)) }];
    let advertisements = [BgpAdvertisement::new("all")];
    let bfd_profiles =
        [BfdProfile { receive_interval: 100, transmit_interval: 100, ..BfdProfile::new("fast") }];
    let addresses: Vec<_> = services
        .iter()
        .map(|(svc, vip, policy, local)| mk_service_address(svc, vip, "public", *policy, &info, *local))
        .collect();
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

/// What the agents of the bed's nodes read, as a cluster holds it: `nodes` (name, address),
/// the default ProxyConfig (nftables), pool `public` (203.0.113.0/24, not announced over L2),
/// peer `tor` (the router, BFD profile `fast` at 100 ms × 3), one advertisement of every pool,
/// and `services` with their `slices`.
pub fn bgp_snapshot(nodes: &[(&str, &str)], services: Vec<Service>, slices: Vec<EndpointSlice>) -> Snapshot {
    let peer =
        BgpPeer { bfd_profile: Some("fast".into()), ..BgpPeer::new("tor", 64512, ROUTER_ASN, ip(ROUTER)) };
    let fast = BfdProfile { receive_interval: 100, transmit_interval: 100, ..BfdProfile::new("fast") };
    let pool = LoadBalancerPool {
        pool: Pool::new("public", &["203.0.113.0/24"]),
        l2: L2Settings { enabled: false, ..L2Settings::default() },
        generation: 1,
        origin: PoolOrigin::Tideway,
    };
    let settings = ProxySettings { mode: ProxyMode::Nftables, ..Default::default() };
    Snapshot {
        nodes: nodes.iter().map(|(n, a)| mk_node(n, a, "z")).collect(),
        proxy_configs: vec![ProxyConfig::every_node("default", 1, settings)],
        pools: vec![pool],
        services,
        endpoint_slices: slices,
        bgp: vec![
            BgpObject::tideway("tor", BgpSpec::Peer(peer)),
            BgpObject::tideway("fast", BgpSpec::BfdProfile(fast)),
            BgpObject::tideway("all", BgpSpec::Advertisement(BgpAdvertisement::new("all"))),
        ],
        ..Default::default()
    }
}

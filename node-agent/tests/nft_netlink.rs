//! The netlink nftables writer against `nft` itself (root, real kernel): every fixture's
//! program applied with `nft -f` in one namespace and over netlink in another must list the
//! same; and a random walk of incremental change sets applied over netlink must keep listing
//! what `nft -f` of the full program lists.

use std::collections::BTreeSet;

use serde_json::Value;
use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::model::{EndpointSlice, Service, ServiceName};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::compile;
use tideway_core::program::{ChangeSet, Program, ProgramState};
use tideway_core::render;
use tideway_core::render::nftables::text;
use tideway_core::testing::*;
use tideway_node_agent::dataplane::nft_netlink::NftNetlink;
use tideway_tests::netns::{Netns, is_root};

/// The ruleset as JSON, normalized: no handles, set elements sorted (hash sets list in hash
/// order), objects sorted by kind and name so creation order does not matter.
fn listing(ns: &Netns) -> Vec<String> {
    let out = ns.sh("nft -j list ruleset");
    let json: Value = serde_json::from_str(&out).expect("nft JSON");
    let mut objects: Vec<String> = Vec::new();
    for item in json["nftables"].as_array().expect("array") {
        let mut item = item.clone();
        if item.get("metainfo").is_some() {
            continue;
        }
        strip_handles(&mut item);
        for kind in ["set", "map"] {
            if let Some(elems) =
                item.get_mut(kind).and_then(|s| s.get_mut("elem")).and_then(Value::as_array_mut)
            {
                elems.sort_by_key(|e| e.to_string());
            }
        }
        objects.push(item.to_string());
    }
    // Rules keep their order within a chain: index them by chain and position.
    let mut position = std::collections::HashMap::<String, usize>::new();
    let mut keyed: Vec<String> = objects
        .into_iter()
        .map(|o| {
            let v: Value = serde_json::from_str(&o).expect("json");
            if let Some(r) = v.get("rule") {
                let chain = format!("{}/{}", r["family"], r["chain"]);
                let n = position.entry(chain.clone()).or_default();
                *n += 1;
                format!("rule {chain} #{n:04} {o}")
            } else {
                o
            }
        })
        .collect();
    keyed.sort();
    keyed
}

fn strip_handles(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("handle");
            m.values_mut().for_each(strip_handles);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_handles),
        _ => {}
    }
}

fn first_difference(a: &[String], b: &[String]) -> String {
    let sa: BTreeSet<&String> = a.iter().collect();
    let sb: BTreeSet<&String> = b.iter().collect();
    let only_a: Vec<_> = sa.difference(&sb).take(3).collect();
    let only_b: Vec<_> = sb.difference(&sa).take(3).collect();
    format!("only from nft -f:\n{only_a:#?}\nonly over netlink:\n{only_b:#?}")
}

fn nft_apply(ns: &Netns, programs: &[Program]) {
    let script: String = programs.iter().map(text::program).collect();
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name));
    std::fs::write(&path, script).expect("script");
    ns.sh(&format!("nft -f {}", path.display()));
    let _ = std::fs::remove_file(path);
}

fn open(ns: &Netns) -> NftNetlink {
    ns.run(|| NftNetlink::open().expect("netlink"))
}

#[test]
fn every_fixture_lists_the_same_as_nft() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    for path in tideway_tests::fixtures() {
        let f = tideway_tests::load(&path);
        let ruleset = compile(&f.cluster, &f.node);
        let programs: Vec<Program> =
            IpFamily::ALL.into_iter().map(|fam| render::lower(ProxyMode::Nftables, &ruleset, fam)).collect();
        let name = path.file_stem().expect("stem").to_string_lossy().to_string();
        let text_ns = Netns::create(&format!("twnl-t-{}-{name}", std::process::id()));
        let nl_ns = Netns::create(&format!("twnl-n-{}-{name}", std::process::id()));
        nft_apply(&text_ns, &programs);
        let mut nl = open(&nl_ns);
        nl.apply_full([&programs[0], &programs[1]]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (want, got) = (listing(&text_ns), listing(&nl_ns));
        assert!(want == got, "{name}: listings differ\n{}", first_difference(&want, &got));
        // Applying the same program again replaces the table atomically.
        nl.apply_full([&programs[0], &programs[1]]).unwrap_or_else(|e| panic!("{name} again: {e}"));
        assert!(listing(&nl_ns) == want, "{name}: second full apply differs");
    }
}

/// A small deterministic PRNG (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn service(rng: &mut Rng, i: u64) -> Service {
    let mut b = mk_service("ns", &format!("svc{i}")).cluster_ip(&format!("10.96.0.{}", i + 1)).port(
        "http",
        Protocol::Tcp,
        80,
    );
    if rng.below(4) == 0 {
        b = b.cluster_ip(&format!("fd00:96::{:x}", i + 1));
    }
    if rng.below(3) == 0 {
        b = b.port("dns", Protocol::Udp, 53);
    }
    match rng.below(4) {
        0 => b = b.node_port(30000 + i as u16),
        1 => b = b.node_port(30000 + i as u16).lb_ip(&format!("192.168.0.{}", 200 + i)),
        _ => {}
    }
    if rng.below(4) == 0 {
        b = b.etp_local();
    }
    if rng.below(5) == 0 {
        b = b.itp_local();
    }
    if rng.below(4) == 0 {
        b = b.affinity(600);
    }
    if rng.below(4) == 0 {
        b = b.source_range(["192.168.0.0/24", "10.1.0.0/16", "172.16.5.0/24"][rng.below(3) as usize]);
    }
    b.build()
}

fn slice(rng: &mut Rng, i: u64, v6: bool) -> EndpointSlice {
    let name = format!("svc{i}");
    let mut s = mk_slice("ns", &name).name(&format!("{name}-{}", if v6 { "v6" } else { "v4" }));
    s = s.port("http", Protocol::Tcp, 8080).port("dns", Protocol::Udp, 5353);
    for j in 0..rng.below(5) {
        let node = if rng.below(2) == 0 { "node-a" } else { "node-b" };
        let addr =
            if v6 { format!("fd00:244:1::{:x}", 16 * i + j + 1) } else { format!("10.244.{}.{}", i, j + 1) };
        let (ready, serving, terminating) = match rng.below(6) {
            0 => (false, true, true),
            1 => (false, false, false),
            _ => (true, true, false),
        };
        s = s.endpoint(&addr, node, ready, serving, terminating);
    }
    s.build()
}

fn mutate(rng: &mut Rng, c: &mut ClusterState) {
    let i = rng.below(16);
    match rng.below(5) {
        0 => {
            c.delete_service(&ServiceName::new("ns", format!("svc{i}")));
        }
        1 | 2 => {
            c.apply_service(service(rng, i));
        }
        _ => {
            let v6 = rng.below(4) == 0;
            c.apply_endpoint_slice(slice(rng, i, v6));
        }
    }
}

#[test]
fn incremental_changes_list_the_same_as_a_full_nft_load() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let node = mk_node_context();
    let mut rng = Rng(4242);
    let mut cluster = ClusterState::new();
    for _ in 0..20 {
        mutate(&mut rng, &mut cluster);
    }
    cluster.take_changes();
    let mut ruleset = compile(&cluster, &node);
    let mut states: Vec<ProgramState> = IpFamily::ALL
        .into_iter()
        .map(|f| ProgramState::new(render::lower(ProxyMode::Nftables, &ruleset, f)))
        .collect();
    let text_ns = Netns::create(&format!("twnl-it-{}", std::process::id()));
    let nl_ns = Netns::create(&format!("twnl-in-{}", std::process::id()));
    let mut nl = open(&nl_ns);
    nl.apply_full([states[0].program(), states[1].program()]).expect("initial apply");
    for step in 0..60 {
        mutate(&mut rng, &mut cluster);
        let changes = cluster.take_changes();
        let changed = ruleset.update(&cluster, &changes.services);
        let mut sets: Vec<ChangeSet> = Vec::new();
        for (fi, family) in IpFamily::ALL.into_iter().enumerate() {
            let full = render::lower(ProxyMode::Nftables, &ruleset, family);
            let state = &mut states[fi];
            if full.base != state.program().base {
                *state = ProgramState::new(full);
                sets.push(ChangeSet { full: true, ..ChangeSet::default() });
            } else {
                let keys: BTreeSet<_> =
                    changed.iter().filter(|k| k.0 == family).map(|k| k.1.clone()).collect();
                sets.push(state.replace_all(keys.iter().map(|k| (k.clone(), full.services.get(k).cloned()))));
            }
        }
        nl.apply_changes([states[0].program(), states[1].program()], [&sets[0], &sets[1]])
            .unwrap_or_else(|e| panic!("step {step}: {e}\n{sets:#?}"));
        if step % 5 == 4 {
            let programs = [states[0].program().clone(), states[1].program().clone()];
            text_ns.sh("nft flush ruleset");
            nft_apply(&text_ns, &programs);
            let (want, got) = (listing(&text_ns), listing(&nl_ns));
            assert!(want == got, "step {step}: listings differ\n{}", first_difference(&want, &got));
        }
    }
}

#[test]
fn a_refused_transaction_changes_nothing() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let path =
        tideway_tests::fixtures().into_iter().find(|p| p.ends_with("basic.yaml")).expect("basic fixture");
    let f = tideway_tests::load(&path);
    let ruleset = compile(&f.cluster, &f.node);
    let programs: Vec<Program> =
        IpFamily::ALL.into_iter().map(|fam| render::lower(ProxyMode::Nftables, &ruleset, fam)).collect();
    let ns = Netns::create(&format!("twnl-atomic-{}", std::process::id()));
    let mut nl = open(&ns);
    nl.apply_full([&programs[0], &programs[1]]).expect("apply");
    let before = listing(&ns);
    // A real change (one Service address leaves the map, a chain is flushed) followed by a
    // message the kernel refuses: deleting a chain that does not exist.
    let asm = programs[0].assemble();
    let service_ips = asm.sets.iter().find(|s| &*s.def.name == "service-ips").expect("service-ips");
    let mut cs = ChangeSet::default();
    cs.delete_elements.push((service_ips.def.id(), service_ips.elements[0].clone()));
    cs.flush_chains
        .push(asm.chains.iter().find(|c| &*c.def.name == "services").expect("services").def.clone());
    cs.delete_chains.push(tideway_core::program::ChainRef { table: "tideway", name: "no-such-chain".into() });
    let err = nl
        .apply_changes([&programs[0], &programs[1]], [&cs, &ChangeSet::default()])
        .expect_err("the kernel refuses the transaction");
    let msg = err.to_string();
    assert!(msg.contains("no-such-chain") && msg.contains("No such file or directory"), "{msg}");
    assert!(listing(&ns) == before, "a refused transaction changed the ruleset");
}

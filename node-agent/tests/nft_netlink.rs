//! The netlink nftables writer against `nft` itself (root, real kernel): every fixture's
//! program applied with `nft -f` in one namespace and over netlink in another must list the
//! same; and a random walk of incremental change sets applied over netlink must keep listing
//! what `nft -f` of the full program lists.

use std::collections::BTreeSet;

use serde_json::Value;
use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::compile;
use tideway_core::program::{ChangeSet, Program, ProgramState};
use tideway_core::render;
use tideway_core::render::nftables::text;
use tideway_core::testing::*;
use tideway_node_agent::dataplane::nft_netlink::NftNetlink;
use tideway_tests::netns::{Netns, require_root};

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
    require_root("reading nftables back over netlink");
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

use tideway_core::testing::random::{Rng, mutate};

#[test]
fn incremental_changes_list_the_same_as_a_full_nft_load() {
    require_root("reading nftables back over netlink");
    let node = mk_node_context();
    let mut rng = Rng(4242);
    let mut cluster = ClusterState::new();
    for _ in 0..20 {
        mutate(&mut rng, &mut cluster, 16);
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
        mutate(&mut rng, &mut cluster, 16);
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
    require_root("reading nftables back over netlink");
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

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
use tideway_core::render::nftables::capacity::{MIN_CAPACITY, Room};
use tideway_core::render::nftables::text;
use tideway_core::testing::*;
use tideway_node_agent::netlink::nft::NftNetlink;
use tideway_tests::netns::{Netns, require_root};

/// The ruleset as JSON, normalized: no handles, set elements sorted (hash sets list in hash
/// order), objects sorted by kind and name so creation order does not matter, and no set
/// sizes (the netlink writer declares each set with room to grow; `nft -f` text has none).
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
            if let Some(set) = item.get_mut(kind).and_then(Value::as_object_mut) {
                set.remove("size");
            }
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
        let programs: Vec<Program> = IpFamily::ALL
            .into_iter()
            .map(|fam| render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(fam))
            .collect();
        let name = path.file_stem().expect("stem").to_string_lossy().to_string();
        let text_ns = Netns::create(&format!("twnl-t-{}-{name}", std::process::id()));
        let nl_ns = Netns::create(&format!("twnl-n-{}-{name}", std::process::id()));
        nft_apply(&text_ns, &programs);
        let mut nl = open(&nl_ns);
        nl.apply_programs([&programs[0], &programs[1]]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (want, got) = (listing(&text_ns), listing(&nl_ns));
        assert!(want == got, "{name}: listings differ\n{}", first_difference(&want, &got));
        let map = nl_ns.sh("nft list map ip tideway cluster-endpoints");
        assert!(map.contains(&format!("size {MIN_CAPACITY}")), "{name}: maps are declared with room\n{map}");
        // Applying the same program again replaces the table atomically.
        nl.apply_programs([&programs[0], &programs[1]]).unwrap_or_else(|e| panic!("{name} again: {e}"));
        assert!(listing(&nl_ns) == want, "{name}: second full apply differs");
    }
}

#[test]
fn a_streamed_full_apply_declares_each_map_with_room_for_what_it_holds() {
    require_root("reading nftables back over netlink");
    let cluster = synthetic_cluster(600, 2);
    let ruleset = compile(&cluster, &mk_node_context());
    let programs: [Program; 2] =
        IpFamily::ALL.map(|f| render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(f));
    let text_ns = Netns::create(&format!("twnl-rt-{}", std::process::id()));
    let nl_ns = Netns::create(&format!("twnl-rn-{}", std::process::id()));
    nft_apply(&text_ns, &programs);
    let mut nl = open(&nl_ns);
    let rooms = nl
        .apply_full(4096, |apply| {
            for f in IpFamily::ALL {
                render::Renderer::new(ProxyMode::Nftables, &ruleset)
                    .stream(f, |skeleton, fragments| apply.family(skeleton, fragments));
            }
        })
        .expect("streamed apply");
    let (want, got) = (listing(&text_ns), listing(&nl_ns));
    assert!(want == got, "listings differ\n{}", first_difference(&want, &got));
    // 600 ClusterIP frontends, counted only once all were written.
    let set = nl_ns.sh("nft list set ip tideway to-cluster-ip");
    assert!(set.contains("size 1200"), "to-cluster-ip is declared for twice its 600 elements\n{set}");
    assert_eq!(rooms, [Room::of(&programs[0]), Room::of(&programs[1])], "the room counted is the program's");
}

use tideway_core::testing::random::{Rng, mutate};

/// A random cluster walked one mutation at a time, with what is kept of the nftables programs
/// of both families brought up to date by change sets, as the agent keeps them.
struct Walk {
    rng: Rng,
    cluster: ClusterState,
    ruleset: tideway_core::plan::Ruleset,
    states: Vec<ProgramState>,
}

impl Walk {
    fn new(seed: u64) -> Walk {
        let mut rng = Rng(seed);
        let mut cluster = ClusterState::new();
        for _ in 0..20 {
            mutate(&mut rng, &mut cluster, 16);
        }
        cluster.take_changes();
        let ruleset = compile(&cluster, &mk_node_context());
        let states = IpFamily::ALL
            .into_iter()
            .map(|f| ProgramState::new(&render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(f)))
            .collect();
        Walk { rng, cluster, ruleset, states }
    }

    /// The whole programs of the current ruleset.
    fn programs(&self) -> [Program; 2] {
        IpFamily::ALL.map(|f| render::Renderer::new(ProxyMode::Nftables, &self.ruleset).lower(f))
    }

    /// Replaces the tables as the agent's full sync does: each family's program streamed into
    /// the batch a fragment at a time, what is kept of it counted on the way.
    fn apply_full(
        &mut self,
        nl: &mut NftNetlink,
    ) -> Result<(), tideway_node_agent::dataplane::DataplaneError> {
        let ruleset = &self.ruleset;
        let mut kept = Vec::new();
        nl.apply_full(1 << 20, |apply| {
            for f in IpFamily::ALL {
                let (state, ()) = render::Renderer::new(ProxyMode::Nftables, ruleset)
                    .stream(f, |skeleton, fragments| apply.family(skeleton, fragments));
                kept.push(state);
            }
        })?;
        self.states = kept;
        Ok(())
    }

    fn kept(&self) -> [&ProgramState; 2] {
        [&self.states[0], &self.states[1]]
    }

    /// One mutation; the change sets (IPv4, IPv6) that bring the programs up to date, or
    /// `None` when the node-level part changed (a full apply).
    fn step(&mut self) -> Option<Vec<ChangeSet>> {
        mutate(&mut self.rng, &mut self.cluster, 16);
        let changes = self.cluster.take_changes();
        let changed = self.ruleset.update(&self.cluster, &changes.services);
        let mut sets = Vec::new();
        for state in &mut self.states {
            match render::Renderer::new(ProxyMode::Nftables, &self.ruleset).update(state, &changed) {
                Some(cs) => sets.push(cs),
                None => return None,
            }
        }
        Some(sets)
    }
}

#[test]
fn incremental_changes_list_the_same_as_a_full_nft_load() {
    require_root("reading nftables back over netlink");
    let mut walk = Walk::new(4242);
    let text_ns = Netns::create(&format!("twnl-it-{}", std::process::id()));
    let nl_ns = Netns::create(&format!("twnl-in-{}", std::process::id()));
    let mut nl = open(&nl_ns);
    walk.apply_full(&mut nl).expect("initial apply");
    for step in 0..60 {
        match walk.step() {
            Some(sets) => nl
                .apply_changes(walk.kept(), [&sets[0], &sets[1]])
                .unwrap_or_else(|e| panic!("step {step}: {e}\n{sets:#?}")),
            None => walk.apply_full(&mut nl).unwrap_or_else(|e| panic!("step {step}: {e}")),
        }
        if step % 5 == 4 {
            let programs = walk.programs();
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
    let programs: Vec<Program> = IpFamily::ALL
        .into_iter()
        .map(|fam| render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(fam))
        .collect();
    let ns = Netns::create(&format!("twnl-atomic-{}", std::process::id()));
    let mut nl = open(&ns);
    nl.apply_programs([&programs[0], &programs[1]]).expect("apply");
    let before = listing(&ns);
    // A real change (one Service address leaves the map, a chain is flushed) followed by a
    // message the kernel refuses: deleting a chain that does not exist.
    let asm = programs[0].assemble();
    let service_ips = asm.sets.iter().find(|s| &*s.def.name == "to-cluster-ip").expect("to-cluster-ip");
    let mut cs = ChangeSet::default();
    cs.delete_elements.push((service_ips.def.id(), service_ips.elements[0].clone()));
    cs.flush_chains
        .push(asm.chains.iter().find(|c| &*c.def.name == "services").expect("services").def.clone());
    cs.delete_chains.push(tideway_core::program::ChainRef { table: "tideway", name: "no-such-chain".into() });
    let kept = [ProgramState::new(&programs[0]), ProgramState::new(&programs[1])];
    let err = nl
        .apply_changes([&kept[0], &kept[1]], [&cs, &ChangeSet::default()])
        .expect_err("the kernel refuses the transaction");
    let msg = err.to_string();
    assert!(msg.contains("no-such-chain") && msg.contains("No such file or directory"), "{msg}");
    assert!(listing(&ns) == before, "a refused transaction changed the ruleset");
}

mod drift {
    //! Drift found by content and repaired object by object, on a real kernel: each kind of
    //! hand-made damage is named, the repair rewrites only what differs, and the table then
    //! lists exactly as it did before the damage.

    use super::*;
    use tideway_core::plan::Ruleset;
    use tideway_node_agent::dataplane::{Dataplane, Desired, DriftKind, Nftables, Update};

    /// What the agent holds between syncs: plans and what is kept of their programs.
    #[derive(Clone)]
    pub(super) struct Wanted {
        ruleset: Ruleset,
        kept: [ProgramState; 2],
    }

    impl Wanted {
        pub(super) fn of(ruleset: Ruleset) -> Wanted {
            let programs =
                IpFamily::ALL.map(|f| render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(f));
            Wanted { kept: programs.each_ref().map(ProgramState::new), ruleset }
        }

        /// As the agent gives it to the dataplane.
        fn desired(&self) -> Desired<'_> {
            Desired::new(ProxyMode::Nftables, &self.ruleset, self.kept.each_ref())
        }
    }

    fn programs(fixture: &str) -> Wanted {
        let path = tideway_tests::fixtures().into_iter().find(|p| p.ends_with(fixture)).expect("fixture");
        let f = tideway_tests::load(&path);
        Wanted::of(compile(&f.cluster, &f.node))
    }

    fn applied(ns: &Netns, p: &Wanted) -> Nftables {
        let p = p.clone();
        ns.run(move || {
            let mut dp = Nftables::new();
            dp.apply(&p.desired(), Update::Full).expect("apply");
            dp
        })
    }

    /// Another program's transaction elsewhere in nf_tables: the generation moves, so the next
    /// check reads our table back in full instead of stopping at the generation.
    fn touch(ns: &Netns) {
        ns.sh("nft add table ip unrelated && nft delete table ip unrelated");
    }

    fn kinds(dp: &mut Nftables, p: &Wanted) -> BTreeSet<(DriftKind, String)> {
        let drift = dp.verify(&p.desired(), true).expect("verify");
        drift.into_iter().map(|d| (d.kind, d.object)).collect()
    }

    /// The handle of the first rule of `chain`.
    fn first_handle(ns: &Netns, chain: &str) -> String {
        let out = ns.sh(&format!("nft -a list chain ip tideway {chain}"));
        let line = out.lines().find(|l| l.contains("# handle") && !l.contains("chain ")).expect("a rule");
        line.rsplit(' ').next().expect("handle").to_string()
    }

    /// ClientIP affinity survives a full sync (hourly, and on every restart): the clients the
    /// affinity sets hold, with what is left of their timeouts, are in the new table.
    #[test]
    fn a_full_sync_keeps_the_clients_of_clientip_affinity() {
        require_root("nftables in a namespace");
        let p = programs("basic.yaml");
        let ns = Netns::create(&format!("twnl-aff-{}", std::process::id()));
        let mut dp = applied(&ns, &p);
        let sets: Value = serde_json::from_str(&ns.sh("nft -j list sets ip")).expect("json");
        let affinity: Vec<String> = sets["nftables"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|o| o["set"]["name"].as_str())
            .filter(|n| n.starts_with("affinity"))
            .map(str::to_string)
            .collect();
        assert!(!affinity.is_empty(), "basic.yaml has a ClientIP Service");
        for set in &affinity {
            ns.sh(&format!("nft add element ip tideway {set} '{{ 10.244.9.9 timeout 600s expires 500s }}'"));
        }
        let want = p.clone();
        ns.run(move || dp.apply(&want.desired(), Update::Full).expect("a full sync"));
        for set in &affinity {
            let listed = ns.sh(&format!("nft list set ip tideway {set}"));
            assert!(listed.contains("10.244.9.9"), "the full sync dropped the client from {set}:\n{listed}");
            // Its time left carried over (500 s when added), not started again at 600 s.
            assert!(listed.contains("expires 8m"), "{listed}");
        }
    }

    #[test]
    fn every_fixture_reads_back_clean_after_full_and_incremental_applies() {
        require_root("reading nftables back over netlink");
        for path in tideway_tests::fixtures() {
            let name = path.file_name().expect("name").to_string_lossy().to_string();
            let p = programs(&name);
            let ns = Netns::create(&format!("twdr-f-{}", std::process::id()));
            let mut dp = applied(&ns, &p);
            touch(&ns);
            assert_eq!(kinds(&mut dp, &p), BTreeSet::new(), "{name}");
        }
        // A random walk of change sets: the digests learnt after each keep the check clean.
        let mut walk = Walk::new(77);
        let ns = Netns::create(&format!("twdr-w-{}", std::process::id()));
        let mut dp = applied(&ns, &Wanted::of(walk.ruleset.clone()));
        for step in 0..30 {
            let sets = walk.step();
            let desired = Desired::new(ProxyMode::Nftables, &walk.ruleset, walk.kept());
            let update = match &sets {
                Some(sets) => Update::Changes([&sets[0], &sets[1]]),
                None => Update::Full,
            };
            dp.apply(&desired, update).unwrap_or_else(|e| panic!("step {step}: {e}"));
            touch(&ns);
            let drift = dp.verify(&desired, true).expect("verify");
            assert!(drift.is_empty(), "step {step}: {drift:?}");
        }
    }

    #[test]
    fn large_maps_read_by_key_find_replaced_and_missing_elements() {
        require_root("reading nftables back over netlink");
        let mut c = tideway_core::testing::synthetic_cluster(600, 10);
        c.apply(mk_node("node-a", "192.168.0.10", "zone-a"));
        let p = Wanted::of(compile(&c, &mk_node_context()));
        let ns = Netns::create(&format!("twdr-l-{}", std::process::id()));
        let mut dp = applied(&ns, &p);
        touch(&ns);
        assert_eq!(kinds(&mut dp, &p), BTreeSet::new(), "6,000 endpoints read back clean");
        let listing = ns.sh("nft list map ip tideway cluster-endpoints");
        let first = listing.lines().find(|l| l.contains(" : ") && !l.contains("typeof")).expect("an element");
        let first = first.trim().trim_start_matches("elements = {").trim().trim_end_matches(',');
        let key = first.split(" : ").next().expect("key").to_string();
        let want: BTreeSet<_> =
            [(DriftKind::SetElements, "table ip tideway cluster-endpoints".to_string())].into();
        for damage in [
            format!(
                "nft delete element ip tideway cluster-endpoints '{{ {key} }}' && \
                     nft add element ip tideway cluster-endpoints '{{ {key} : 10.99.99.99 . 9999 }}'"
            ),
            format!("nft delete element ip tideway cluster-endpoints '{{ {key} }}'"),
        ] {
            ns.sh(&damage);
            assert_eq!(kinds(&mut dp, &p), want, "{damage}");
            dp.repair(&p.desired(), &[]).expect("repair");
            touch(&ns);
            assert_eq!(kinds(&mut dp, &p), BTreeSet::new(), "{damage}: repaired");
        }
    }

    #[test]
    fn a_change_that_outgrows_a_map_is_applied_whole() {
        require_root("programming nftables over netlink");
        let node = mk_node_context();
        let mut wanted = Wanted::of(compile(&tideway_core::testing::synthetic_cluster(10, 2), &node));
        let ns = Netns::create(&format!("twdr-o-{}", std::process::id()));
        let mut dp = applied(&ns, &wanted);
        // 1,100 Services: more than the Service map was declared with room for.
        let large = tideway_core::testing::synthetic_cluster(1100, 2);
        let names: Vec<_> = large.services().map(|s| s.name.clone()).collect();
        let changed = wanted.ruleset.update(&large, &names);
        let sets: Vec<ChangeSet> = wanted
            .kept
            .iter_mut()
            .map(|k| {
                render::Renderer::new(ProxyMode::Nftables, &wanted.ruleset)
                    .update(k, &changed)
                    .expect("same node")
            })
            .collect();
        assert!(
            sets[0].add_elements.iter().filter(|(s, _)| &*s.name == "to-cluster-ip").count() > MIN_CAPACITY
        );
        // Sent as it is, the kernel refuses it: a set's size is a limit.
        let err = open(&ns)
            .apply_changes(wanted.kept.each_ref(), [&sets[0], &sets[1]])
            .expect_err("the kernel holds a set to its size");
        assert!(err.to_string().contains("os error 23"), "ENFILE: {err}");
        // The dataplane sees it coming and rewrites the table with more room.
        dp.apply(&wanted.desired(), Update::Changes([&sets[0], &sets[1]])).expect("applied whole");
        let map = ns.sh("nft list set ip tideway to-cluster-ip");
        assert_eq!(map.matches(" . tcp . ").count(), 1100, "{map}");
        assert!(map.contains("size 2200"), "{map}");
        touch(&ns);
        assert_eq!(kinds(&mut dp, &wanted), BTreeSet::new());
    }

    #[test]
    fn a_check_with_nothing_changed_stops_at_the_generation() {
        require_root("reading nftables back over netlink");
        let p = programs("basic.yaml");
        let ns = Netns::create(&format!("twdr-g-{}", std::process::id()));
        let mut dp = applied(&ns, &p);
        // Nothing changed: clean without reading the table (a damaged rule would not be seen
        // if it did not move the generation, and every change does).
        assert_eq!(kinds(&mut dp, &p), BTreeSet::new());
        ns.sh("nft insert rule ip tideway filter-input counter accept");
        assert_eq!(kinds(&mut dp, &p).len(), 1, "a change moves the generation and is read back");
        dp.repair(&p.desired(), &[]).expect("repair");
        // Our own repair leaves the generation ours; an unrelated commit makes the next
        // check read everything, and find nothing.
        assert_eq!(kinds(&mut dp, &p), BTreeSet::new());
        touch(&ns);
        assert_eq!(kinds(&mut dp, &p), BTreeSet::new());
    }

    #[test]
    fn each_kind_of_damage_is_found_and_only_it_is_rewritten() {
        require_root("reading nftables back over netlink");
        let p = programs("basic.yaml");
        let v4 = "table ip tideway";
        type Case = (&'static str, fn(&Netns) -> String, Vec<(DriftKind, String)>);
        let cases: Vec<Case> = vec![
            (
                "a rule edited in place",
                |ns| {
                    let h = first_handle(ns, "filter-input");
                    format!(
                        "nft replace rule ip tideway filter-input handle {h} ct state established jump nodeport-endpoints-check"
                    )
                },
                vec![(DriftKind::ChainRules, format!("{v4} filter-input"))],
            ),
            (
                "a set element replaced by another (same count)",
                |_| {
                    "nft delete element ip tideway to-cluster-ip '{ 10.96.0.13 . tcp . 80 }'; \
                     nft add element ip tideway to-cluster-ip '{ 10.96.0.13 . tcp . 81 }'"
                        .into()
                },
                vec![(DriftKind::SetElements, format!("{v4} to-cluster-ip"))],
            ),
            (
                "a renamed chain",
                |_| "nft rename chain ip tideway cluster-lb-1 renamed".into(),
                vec![
                    (DriftKind::ChainMissing, format!("{v4} cluster-lb-1")),
                    (DriftKind::ForeignChain, format!("{v4} renamed")),
                    (DriftKind::ChainRules, format!("{v4} cluster-dispatch")),
                ],
            ),
            (
                "a foreign rule ahead of ours",
                |_| "nft insert rule ip tideway filter-input counter accept".into(),
                vec![(DriftKind::ChainRules, format!("{v4} filter-input"))],
            ),
            (
                "a base chain's policy turned to drop",
                |_| "nft add chain ip tideway filter-forward '{ policy drop; }'".into(),
                vec![(DriftKind::ChainHook, format!("{v4} filter-forward"))],
            ),
            (
                "a deleted table",
                |_| "nft delete table ip tideway".into(),
                vec![(DriftKind::TableMissing, v4.into())],
            ),
        ];
        for (what, damage, want) in cases {
            let ns = Netns::create(&format!("twdr-d-{}", std::process::id()));
            let mut dp = applied(&ns, &p);
            let before = listing(&ns);
            ns.sh(&damage(&ns));
            let found = kinds(&mut dp, &p);
            assert_eq!(found, want.into_iter().collect(), "{what}");
            dp.repair(&p.desired(), &[]).unwrap_or_else(|e| panic!("{what}: repair: {e}"));
            touch(&ns);
            assert_eq!(kinds(&mut dp, &p), BTreeSet::new(), "{what}: still differs after the repair");
            let after = listing(&ns);
            assert!(
                before == after,
                "{what}: listing differs after the repair\n{}",
                first_difference(&before, &after)
            );
        }
        // A flushed table: every chain with rules is refilled, nothing else is touched.
        let ns = Netns::create(&format!("twdr-flush-{}", std::process::id()));
        let mut dp = applied(&ns, &p);
        let before = listing(&ns);
        ns.sh("nft flush table ip tideway");
        let found = kinds(&mut dp, &p);
        assert!(
            !found.is_empty()
                && found.iter().all(|(k, _)| matches!(k, DriftKind::ChainRules | DriftKind::SetElements)),
            "{found:?}"
        );
        dp.repair(&p.desired(), &[]).expect("repair");
        touch(&ns);
        assert_eq!(kinds(&mut dp, &p), BTreeSet::new());
        assert!(before == listing(&ns), "flushed table: listing differs after the repair");
    }
}

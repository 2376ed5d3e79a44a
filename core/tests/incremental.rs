//! Incremental syncs reach exactly the state of a full sync.
//!
//! A deterministic random walk mutates a cluster (Services appear, disappear, change type and
//! policy; endpoints come, go, turn unready or terminating; frontends collide). After every step
//! the incrementally updated ruleset must equal a fresh compile, and the change set computed
//! from the changed fragments, applied to a model of the kernel with the kernel's strictness,
//! must produce the state a full sync of the fresh program would.

use std::collections::BTreeSet;

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::{NodeContext, Tally, compile};
use tideway_core::program::{ChangeSet, Element, Fragment, KernelState, Program, ProgramState, diff};
use tideway_core::render;
use tideway_core::testing::*;

use tideway_core::testing::random::{Rng, mutate};

fn walk(mode: ProxyMode, seed: u64, steps: usize) {
    let node: NodeContext = mk_node_context();
    let mut rng = Rng(seed);
    let mut cluster = ClusterState::new();
    for _ in 0..30 {
        mutate(&mut rng, &mut cluster, 24);
    }
    cluster.take_changes();
    let mut ruleset = compile(&cluster, &node);
    let mut states: Vec<(ProgramState, KernelState, Program)> = IpFamily::ALL
        .into_iter()
        .map(|f| {
            let p = render::Renderer::new(mode, &ruleset).lower(f);
            // The state a streamed full apply keeps is the one the walk goes on from.
            let (state, streamed) = render::Renderer::new(mode, &ruleset).stream(f, |skeleton, fragments| {
                assert_eq!(skeleton.base, p.base, "[{mode} seed {seed}] the streamed base differs");
                fragments.collect::<Vec<Fragment>>()
            });
            let whole: Vec<&Fragment> = p.services.values().collect();
            assert_eq!(
                streamed.iter().collect::<Vec<_>>(),
                whole,
                "[{mode} seed {seed}] streamed fragments differ"
            );
            (state, KernelState::of(&p), p)
        })
        .collect();
    for step in 0..steps {
        mutate(&mut rng, &mut cluster, 24);
        let changes = cluster.take_changes();
        let changed = ruleset.update(&cluster, &changes.services);
        let fresh = compile(&cluster, &node);
        assert_eq!(
            ruleset, fresh,
            "[{mode} seed {seed} step {step}] incremental ruleset differs from a fresh compile"
        );
        assert_eq!(
            ruleset.tally(),
            Tally::sum(ruleset.services.values()),
            "[{mode} seed {seed} step {step}] the kept figures differ from a count"
        );
        for (fi, family) in IpFamily::ALL.into_iter().enumerate() {
            let full = render::Renderer::new(mode, &fresh).lower(family);
            let (state, kernel, before) = &mut states[fi];
            let cs = match render::Renderer::new(mode, &ruleset).update(state, &changed) {
                Some(cs) => {
                    // The fragments before, re-derived from the plans before, are the ones
                    // that were rendered then: nothing of the old program needed keeping.
                    for ((f, key), plan) in changed.iter().filter(|((f, _), _)| *f == family) {
                        let again = plan.as_ref().map(|p| render::Renderer::new(mode, &ruleset).fragment(p));
                        let kept = before.services.get(key).cloned();
                        assert_eq!(
                            again.filter(|f| *f != Fragment::default()),
                            kept.filter(|f| *f != Fragment::default()),
                            "[{mode} {f} seed {seed} step {step}] {key}: re-derived fragment differs"
                        );
                    }
                    cs
                }
                None => {
                    assert!(
                        full.base != before.base || full.large_cluster != before.large_cluster,
                        "[{mode} {family} seed {seed} step {step}] a full sync asked for with the base unchanged"
                    );
                    *state = ProgramState::new(&full);
                    ChangeSet { full: true, ..ChangeSet::default() }
                }
            };
            assert_eq!(
                state.skeleton(),
                &Program { services: Default::default(), base: full.base.clone(), ..full },
                "[{mode} {family} seed {seed} step {step}] the kept node-level part differs"
            );
            assert_eq!(
                state.rule_count(),
                full.rule_count(),
                "[{mode} {family} seed {seed} step {step}] rules"
            );
            for set in full.base.sets.iter().filter(|s| s.flags.interval) {
                let all: BTreeSet<&Element> = full
                    .assemble()
                    .set(set.table, &set.name)
                    .map_or_else(Default::default, |s| s.elements.iter().copied().collect());
                assert_eq!(
                    state.interval_elements(&set.name).into_iter().collect::<BTreeSet<_>>(),
                    all,
                    "[{mode} {family} seed {seed} step {step}] interval set {}",
                    set.name
                );
            }
            kernel
                .apply(&cs, &full)
                .unwrap_or_else(|e| panic!("[{mode} {family} seed {seed} step {step}] {e}"));
            let want = KernelState::of(&full);
            assert!(
                kernel.canonical() == want.canonical(),
                "[{mode} {family} seed {seed} step {step}] kernel state after the change set differs from a full sync:\n{}",
                kernel.describe_difference(&want)
            );
            // The stateless diff of the two programs agrees with the incremental one.
            let whole = diff(before, &full);
            let mut k2 = KernelState::of(before);
            k2.apply(&whole, &full).unwrap_or_else(|e| panic!("[{mode} {family}] diff(): {e}"));
            assert!(
                k2.canonical() == want.canonical(),
                "[{mode} {family}] diff(): {}",
                k2.describe_difference(&want)
            );
            *before = full;
        }
    }
}

#[test]
fn incremental_nftables() {
    for seed in [1, 2, 3, 4] {
        walk(ProxyMode::Nftables, seed * 7919, 150);
    }
}

#[test]
fn incremental_iptables() {
    for seed in [5, 6, 7, 8] {
        walk(ProxyMode::Iptables, seed * 7919, 150);
    }
}

#[test]
fn incremental_ipvs() {
    for seed in [9, 10, 11, 12] {
        walk(ProxyMode::Ipvs, seed * 7919, 150);
    }
}

/// Service `ns/s<i>` on 10.96.1.`i`, port 80, with `eps` endpoints on node-b, the first
/// `ready` of them ready.
fn put_service(c: &mut ClusterState, i: u32, eps: u32, ready: u32) {
    c.apply(
        mk_service("ns", &format!("s{i}"))
            .cluster_ip(&format!("10.96.1.{i}"))
            .port("http", Protocol::Tcp, 80)
            .build(),
    );
    let mut s = mk_slice("ns", &format!("s{i}")).port("http", Protocol::Tcp, 8080);
    for j in 0..eps {
        s = s.endpoint(&format!("10.244.{i}.{j}"), "node-b", j < ready, j < ready, false);
    }
    c.apply(s.build());
}

#[test]
fn one_endpoint_change_is_a_handful_of_operations() {
    let node = mk_node_context();
    let mut c = ClusterState::new();
    for i in 0..50u32 {
        put_service(&mut c, i, 10, 10);
    }
    c.take_changes();
    let mut rs = compile(&c, &node);
    let olds: Vec<_> =
        ProxyMode::ALL.iter().map(|m| render::Renderer::new(*m, &rs).lower(IpFamily::V4)).collect();
    // Replace one endpoint of one Service.
    let mut s = mk_slice("ns", "s7").port("http", Protocol::Tcp, 8080);
    for j in 0..10 {
        s = s.ready(&format!("10.244.7.{}", if j == 3 { 99 } else { j }), "node-b");
    }
    c.apply(s.build());
    let changed = rs.update(&c, &c.clone().take_changes().services);
    assert_eq!(changed.len(), 1);
    for (mode, old) in ProxyMode::ALL.iter().zip(olds) {
        let new = render::Renderer::new(*mode, &rs).lower(IpFamily::V4);
        let cs = diff(&old, &new);
        let ops = cs.operations();
        // nft: DNAT elements of the slots whose endpoint changed (slots follow address order,
        // so at most every slot of this one Service) plus the hairpin element swap;
        // iptables: the SVC chain refilled, one SEP chain added and one deleted = 3;
        // IPVS: one virtual server updated, loop-back entry swapped = 3.
        let max = match mode {
            ProxyMode::Nftables => 2 * 10 + 2,
            ProxyMode::Iptables => 3,
            ProxyMode::Ipvs => 3,
        };
        assert!(ops <= max, "[{mode}] {ops} operations for one endpoint change: {cs:#?}");
    }
}

/// The nftables layout's promise under churn: an endpoint turning ready or not, a pod replaced,
/// a Service added or removed, a Service left without endpoints, each writes set elements
/// without a verdict and no rule, so that the kernel does not validate the whole table on the
/// commit (it does on any rule or `goto` element); only an endpoint count no Service had before
/// rewrites the dispatch chain.
#[test]
fn churn_writes_only_data_in_nftables() {
    use tideway_core::model::{EndpointSlice, Service};
    use tideway_core::program::ElemData;

    let node = mk_node_context();
    let mut c = ClusterState::new();
    let service = put_service;
    for i in 0..20 {
        service(&mut c, i, 10, if i % 2 == 0 { 10 } else { 9 });
    }
    c.take_changes();
    let mut rs = compile(&c, &node);
    let mut program = render::Renderer::new(ProxyMode::Nftables, &rs).lower(IpFamily::V4);
    let mut step = |c: &mut ClusterState, what: &str| -> ChangeSet {
        let changes = c.take_changes();
        rs.update(c, &changes.services);
        let new = render::Renderer::new(ProxyMode::Nftables, &rs).lower(IpFamily::V4);
        let cs = diff(&program, &new);
        program = new;
        assert!(!cs.full && cs.operations() > 0, "{what}: {cs:#?}");
        cs
    };
    let data_only = |cs: &ChangeSet, what: &str| {
        let verdicts = cs.add_elements.iter().filter(|(_, e)| matches!(e.data, Some(ElemData::Verdict(_))));
        assert!(
            cs.add_chains.is_empty()
                && cs.flush_chains.is_empty()
                && cs.add_rules.is_empty()
                && cs.add_sets.is_empty()
                && verdicts.count() == 0,
            "{what} writes a rule or a verdict: {cs:#?}"
        );
    };

    service(&mut c, 2, 10, 9);
    data_only(&step(&mut c, "a ready endpoint turning unready"), "a ready endpoint turning unready");
    service(&mut c, 3, 10, 10);
    data_only(&step(&mut c, "an endpoint turning ready"), "an endpoint turning ready");
    let mut s = mk_slice("ns", "s4").port("http", Protocol::Tcp, 8080);
    for j in 0..10 {
        s = s.ready(&format!("10.244.4.{}", if j == 5 { 99 } else { j }), "node-b");
    }
    c.apply(s.build());
    data_only(&step(&mut c, "a pod replaced"), "a pod replaced");
    service(&mut c, 40, 10, 10);
    data_only(&step(&mut c, "a Service added"), "a Service added");
    c.delete::<Service>("ns", "s40");
    c.delete::<EndpointSlice>("ns", "s40-abcde");
    data_only(&step(&mut c, "a Service removed"), "a Service removed");
    service(&mut c, 6, 10, 0);
    data_only(&step(&mut c, "a Service left without endpoints"), "a Service left without endpoints");

    // A count no Service had: its chain, its set, and its way in (a rule in the dispatch chain).
    service(&mut c, 8, 17, 17);
    let cs = step(&mut c, "a new endpoint count");
    let names = |chains: &[tideway_core::program::Chain]| {
        chains.iter().map(|c| c.name.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names(&cs.add_chains), ["cluster-lb-17"], "{cs:#?}");
    assert_eq!(names(&cs.flush_chains), ["cluster-dispatch"], "{cs:#?}");
    assert_eq!(
        cs.add_sets.iter().map(|s| s.name.to_string()).collect::<Vec<_>>(),
        ["cluster-lb-17-frontends"]
    );
    // And its last user gone, all three go.
    service(&mut c, 8, 10, 10);
    let cs = step(&mut c, "the last of a count gone");
    assert_eq!(cs.delete_chains.iter().map(|c| c.name.to_string()).collect::<Vec<_>>(), ["cluster-lb-17"]);
    assert_eq!(names(&cs.flush_chains), ["cluster-dispatch"], "{cs:#?}");
    assert_eq!(
        cs.delete_sets.iter().map(|s| s.name.to_string()).collect::<Vec<_>>(),
        ["cluster-lb-17-frontends"]
    );
}

//! Replayed replies are the replies the full path would send: same bytes apart from what
//! belongs to the client (ID, the question's case, the order of shuffled addresses).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::view::ClusterView;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};

use super::addresses::read_name;
use super::{Decided, HEAD, Head, NO_SHUFFLE, Replay, ReplayBudget, SWEEP_EVERY, hash};
use crate::forward::cache::{Cache, CacheSettings};
use crate::forward::{ForwardSettings, Forwarder};
use crate::handler::wire::{Handled, handle_bytes};
use crate::handler::{Core, Options};
use crate::metrics::{Metrics, Proto};
use crate::records::{IndexSettings, RecordIndex};

fn core_with(state: &ClusterView, settings: &IndexSettings, options: Options) -> Core {
    let metrics = Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut Registry::default()));
    Core::new(
        RecordIndex::build(state, settings, 1),
        Forwarder::new(ForwardSettings::default(), Arc::clone(&metrics)),
        Cache::new(CacheSettings::default(), Arc::clone(&metrics)),
        options,
        metrics,
    )
}

fn settings() -> IndexSettings {
    IndexSettings::new("cluster.local").unwrap()
}

fn core() -> Core {
    core_with(&crate::answer::tests::fixture(), &settings(), Options::default())
}

fn src() -> SocketAddr {
    "192.0.2.7:5353".parse().unwrap()
}

fn query(id: u16, name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

fn bytes(handled: Handled) -> Vec<u8> {
    match handled {
        Handled::Respond(b) => b,
        Handled::Later(_) | Handled::Drop => panic!("no immediate reply"),
    }
}

#[test]
fn a_replayed_reply_is_the_full_paths_with_the_new_id() {
    let core = core();
    let mut replay = Replay::default();
    let cases = [
        ("svc1.testns.svc.cluster.local.", RecordType::A, None),
        ("SVC1.TestNS.svc.Cluster.LOCAL.", RecordType::A, None),
        ("sVc1.testns.svc.cluster.local.", RecordType::A, Some(1232)),
        ("_HTTP._tcp.svc1.testns.SVC.cluster.local.", RecordType::SRV, None),
        ("nosuch.testns.svc.CLUSTER.local.", RecordType::A, None),
        ("svc1.testns.svc.cluster.local.", RecordType::AAAA, None),
        ("svc6.testns.svc.cluster.local.", RecordType::AAAA, Some(4096)),
        ("1.0.0.10.in-addr.arpa.", RecordType::PTR, None),
    ];
    for (name, qtype, edns) in cases {
        let first = bytes(replay.handle(&core, &query(7, name, qtype, edns), src()));
        assert_eq!(first, bytes(handle_bytes(&core, &query(7, name, qtype, edns), src(), Proto::Udp)));
        let again = query(0xbeef, name, qtype, edns);
        let full = bytes(handle_bytes(&core, &again, src(), Proto::Udp));
        assert_eq!(bytes(replay.handle(&core, &again, src())), full, "{name} {qtype}");
        assert_eq!(Message::from_vec(&full).unwrap().metadata.id, 0xbeef);
    }
    assert_eq!(replay.len(), cases.len(), "each query kept once; another case is another query");
    assert_eq!(replay.hits(), cases.len() as u64, "each asked again was answered with its copy");
}

#[test]
fn replayed_addresses_are_reshuffled_and_all_there() {
    let core = core();
    let mut replay = Replay::default();
    let q = query(1, "hdls1.testns.svc.cluster.local.", RecordType::A, None);
    let addresses = |b: &[u8]| -> Vec<String> {
        Message::from_vec(b).unwrap().answers.iter().map(|r| r.data.to_string()).collect()
    };
    let full = addresses(&bytes(handle_bytes(&core, &q, src(), Proto::Udp)));
    assert_eq!(full.len(), 4, "the fixture's four IPv4 endpoints");
    let mut orders = BTreeSet::new();
    for _ in 0..40 {
        let replayed = addresses(&bytes(replay.handle(&core, &q, src())));
        let (mut a, mut b) = (replayed.clone(), full.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "the same records");
        orders.insert(replayed);
    }
    assert_eq!((replay.len(), replay.hits()), (1, 39), "the headless reply is replayed, not rebuilt");
    assert!(orders.len() > 3, "40 copies came in {} orders", orders.len());
    // Without shuffling, the order is the full path's.
    let core = core_with(
        &crate::answer::tests::fixture(),
        &settings(),
        Options { shuffle: false, refuse_any: true },
    );
    let mut replay = Replay::default();
    let full = bytes(handle_bytes(&core, &q, src(), Proto::Udp));
    bytes(replay.handle(&core, &q, src()));
    assert_eq!(bytes(replay.handle(&core, &q, src())), full);
}

#[test]
fn a_new_index_or_options_drops_every_copy() {
    let core = core();
    let mut replay = Replay::default();
    let q = query(1, "svc1.testns.svc.cluster.local.", RecordType::A, None);
    let address = |b: Vec<u8>| Message::from_vec(&b).unwrap().answers[0].data.clone();
    assert_eq!(address(bytes(replay.handle(&core, &q, src()))).to_string(), "10.0.0.1");
    let moved = ClusterView::from_snapshot(Snapshot {
        services: vec![mk_service("testns", "svc1").cluster_ip("10.0.0.99").port("http", Tcp, 80).build()],
        ..Default::default()
    });
    core.set_index(RecordIndex::build(&moved, &settings(), 2));
    assert!(
        matches!(address(bytes(replay.handle(&core, &q, src()))), RData::A(a) if a.to_string() == "10.0.0.99")
    );
    assert_eq!(replay.len(), 1);
    core.set_options(Options { shuffle: false, refuse_any: false });
    bytes(replay.handle(&core, &query(2, "svc1.testns.svc.cluster.local.", RecordType::AAAA, None), src()));
    assert_eq!(replay.len(), 1, "the earlier copy went with the options");
}

#[test]
fn what_is_not_the_zones_alone_is_never_kept() {
    // --require-programmed: the answer depends on the asking pod's node.
    let mut gated = settings();
    gated.require_programmed = true;
    let core_gated = core_with(&crate::answer::tests::fixture(), &gated, Options::default());
    let mut replay = Replay::default();
    bytes(replay.handle(
        &core_gated,
        &query(1, "svc1.testns.svc.cluster.local.", RecordType::A, None),
        src(),
    ));
    assert!(replay.is_empty(), "no copy when answers depend on the client");

    // A truncated reply: 60 endpoints do not fit 512 bytes.
    let mut slice = mk_slice("testns", "big").port("http", Tcp, 80);
    for i in 0..60 {
        slice = slice.ready(&format!("172.16.0.{i}"), "node-a");
    }
    let big = ClusterView::from_snapshot(Snapshot {
        services: vec![mk_service("testns", "big").headless().port("http", Tcp, 80).build()],
        endpoint_slices: vec![slice.build()],
        ..Default::default()
    });
    let big_core = core_with(&big, &settings(), Options::default());
    let q = query(1, "big.testns.svc.cluster.local.", RecordType::A, None);
    let reply = bytes(replay.handle(&big_core, &q, src()));
    assert!(Message::from_vec(&reply).unwrap().metadata.truncation);
    assert!(replay.is_empty(), "a truncated reply is not kept");
    // The same with room for all of it is kept.
    bytes(replay.handle(
        &big_core,
        &query(1, "big.testns.svc.cluster.local.", RecordType::A, Some(4096)),
        src(),
    ));
    assert_eq!(replay.len(), 1);

    // Errors of the server's own (REFUSED for ANY) and names outside the zone (forwarded).
    let core = core();
    let mut replay = Replay::default();
    bytes(replay.handle(&core, &query(1, "cluster.local.", RecordType::ANY, None), src()));
    assert!(matches!(
        replay.handle(&core, &query(1, "example.com.", RecordType::A, None), src()),
        Handled::Later(_)
    ));
    assert!(replay.is_empty());
}

#[test]
fn a_replayed_reply_is_counted_like_any_other() {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut registry));
    let core = Core::new(
        RecordIndex::build(&crate::answer::tests::fixture(), &settings(), 1),
        Forwarder::new(ForwardSettings::default(), Arc::clone(&metrics)),
        Cache::new(CacheSettings::default(), Arc::clone(&metrics)),
        Options::default(),
        Arc::clone(&metrics),
    );
    let mut replay = Replay::default();
    let q = query(1, "svc1.testns.svc.cluster.local.", RecordType::A, None);
    for _ in 0..3 {
        bytes(replay.handle(&core, &q, src()));
    }
    assert_eq!(replay.len(), 1);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for metric in ["coredns_dns_responses_total{", "coredns_dns_requests_total{"] {
        let line = text.lines().find(|l| l.starts_with(metric)).expect("a counter line");
        assert!(line.ends_with(" 3"), "{line}");
    }
}

#[test]
fn names_are_read_through_backward_pointers_only() {
    // "a.b." at 12, then "c" + a pointer to it.
    let mut msg = vec![0; 12];
    msg.extend_from_slice(&[1, b'a', 1, b'b', 0, 1, b'c', 0xc0, 12]);
    assert_eq!(read_name(&msg, 12), Some((17, b"\x01a\x01b\x00".to_vec())));
    assert_eq!(read_name(&msg, 17), Some((21, b"\x01c\x01a\x01b\x00".to_vec())));
    let mut looped = msg.clone();
    looped.extend_from_slice(&[0xc0, 21]);
    assert_eq!(read_name(&looped, 21), None, "a pointer to itself");
    assert_eq!(read_name(&msg[..16], 12), None, "cut short");
    assert_eq!(read_name(&[0x80], 0), None, "a reserved label type");
}

#[test]
fn the_store_starts_over_when_full_and_keeps_answering() {
    let core = core();
    let mut replay = Replay::with_budget(4096);
    let mut most = 0;
    for i in 0..200u16 {
        let name =
            if i % 2 == 0 { "svc1.testns.svc.cluster.local." } else { "nosuch.testns.svc.cluster.local." };
        // Another ID each time, another EDNS size every round: 100 distinct keys.
        let q = query(i, name, RecordType::A, Some(1232 + i / 2));
        let full = bytes(handle_bytes(&core, &q, src(), Proto::Udp));
        assert_eq!(bytes(replay.handle(&core, &q, src())), full, "kept");
        assert_eq!(bytes(replay.handle(&core, &q, src())), full, "replayed");
        most = most.max(replay.len());
    }
    assert!(most > 5 && most < 40, "about 4 KiB of copies at most: {most}");
}

#[test]
fn queries_whose_hashes_collide_never_share_a_reply() {
    let core = core();
    let mut replay = Replay::default();
    let a = query(1, "svc1.testns.svc.cluster.local.", RecordType::A, None);
    let b = query(2, "nosuch.testns.svc.cluster.local.", RecordType::A, None);
    bytes(replay.handle(&core, &a, src()));
    // Make b's hash find a's copy, as a collision would.
    let place = replay.places.remove(&hash(&a[2..])).expect("a kept");
    replay.places.insert(hash(&b[2..]), place);
    let full = bytes(handle_bytes(&core, &b, src(), Proto::Udp));
    assert_eq!(bytes(replay.handle(&core, &b, src())), full, "b answered for itself");
    assert_eq!((replay.hits(), replay.len()), (0, 1), "not a hit; b's copy took a's place");
    assert_eq!(bytes(replay.handle(&core, &b, src())), full, "b replayed");
    assert_eq!(replay.hits(), 1);
}

#[test]
fn a_copys_head_reads_back_as_written() {
    let heads = [
        Head {
            query_len: 45,
            reply_len: 1232,
            decided: Decided { qtype: RecordType::SRV, rcode: ResponseCode::NXDomain, dnssec_ok: false },
            shuffle: NO_SHUFFLE,
            replayed: false,
        },
        Head {
            query_len: 512,
            reply_len: u16::MAX,
            // An extended code uses the top bits of the 12.
            decided: Decided { qtype: RecordType::AAAA, rcode: ResponseCode::BADCOOKIE, dnssec_ok: true },
            shuffle: 7,
            replayed: true,
        },
    ];
    for head in heads {
        let mut arena = vec![0xff];
        head.write(&mut arena);
        assert_eq!(arena.len(), 1 + HEAD);
        assert_eq!(Head::read(&arena[1..]), head);
    }
}

#[test]
fn a_random_walk_of_bursts_gets_the_full_paths_replies() {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    // Without shuffling, so that a copy must equal the full path's reply byte for byte.
    let no_shuffle = Options { shuffle: false, refuse_any: true };
    let core = core_with(&crate::answer::tests::fixture(), &settings(), no_shuffle.clone());
    let names = [
        "svc1.testns.svc.cluster.local.",
        "SVC1.testns.svc.cluster.local.",
        "svc6.testns.svc.cluster.local.",
        "svc-dual-stack.testns.svc.cluster.local.",
        "hdls1.testns.svc.cluster.local.",
        "_http._tcp.multiport.testns.svc.cluster.local.",
        "nosuch.testns.svc.cluster.local.",
        "svcempty.testns.svc.cluster.local.",
        "cluster.local.",
        "example.com.",
    ];
    let types = [RecordType::A, RecordType::AAAA, RecordType::SRV, RecordType::ANY];
    let edns = [None, Some(1232)];
    let mut rng = StdRng::seed_from_u64(27);
    // A small store, so that it sweeps and starts over many times along the walk.
    let mut replay = Replay::with_budget(10000);
    let mut starts_over = 0;
    for step in 0..3000 {
        let burst: Vec<Vec<u8>> = (0..rng.random_range(1..9))
            .map(|_| {
                let name = names[rng.random_range(0..names.len())];
                let qtype = types[rng.random_range(0..types.len())];
                query(rng.random(), name, qtype, edns[rng.random_range(0..edns.len())])
            })
            .collect();
        replay.arrived(burst.iter().map(Vec::as_slice));
        for q in &burst {
            let before = replay.len();
            let got = replay.handle(&core, q, src());
            starts_over += usize::from(replay.len() < before);
            match (got, handle_bytes(&core, q, src(), Proto::Udp)) {
                (Handled::Respond(got), Handled::Respond(want)) => assert_eq!(got, want, "step {step}"),
                (Handled::Later(_), Handled::Later(_)) => {}
                _ => panic!("step {step}: replayed and full path disagree on whether to answer now"),
            }
        }
        if step % 1000 == 999 {
            // New options (the same values): every copy goes.
            core.set_options(no_shuffle.clone());
            bytes(replay.handle(&core, &query(1, names[0], RecordType::A, None), src()));
            assert_eq!(replay.len(), 1, "step {step}: the copies went with the options");
        }
    }
    assert!(replay.hits() > 2000, "a good part replayed: {}", replay.hits());
    assert!(starts_over > 10, "the store swept or started over {starts_over} times");
}

/// A query for a name nobody asked before: NXDOMAIN, kept like any zone answer.
fn random_name_query(i: u32) -> Vec<u8> {
    query(1, &format!("n{i:08x}-{}.testns.svc.cluster.local.", "x".repeat(40)), RecordType::A, None)
}

#[test]
fn workers_share_one_budget() {
    let core = core();
    let budget = ReplayBudget::new(64 << 10, 2);
    let (mut a, mut b) = (Replay::new(Arc::clone(&budget)), Replay::new(Arc::clone(&budget)));
    for i in 0..2000 {
        let replay = if i % 2 == 0 { &mut a } else { &mut b };
        bytes(replay.handle(&core, &random_name_query(i), src()));
        assert_eq!(budget.used(), a.held() + b.held(), "what the stores hold is what they took");
        assert!(budget.used() <= budget.limit(), "{} of {}", budget.used(), budget.limit());
    }
    assert!(a.held() > 0 && b.held() > 0);
    drop(a);
    assert_eq!(budget.used(), b.held(), "a store gives back what it held when it goes");
}

#[test]
fn a_sweep_keeps_the_copies_replayed_since_the_last_and_gives_the_rest_back() {
    let core = core();
    let mut replay = Replay::default();
    let hot = query(7, "svc1.testns.svc.cluster.local.", RecordType::A, None);
    bytes(replay.handle(&core, &hot, src()));
    for i in 0..3000 {
        bytes(replay.handle(&core, &random_name_query(i), src()));
    }
    bytes(replay.handle(&core, &hot, src()));
    let flooded = replay.held();
    assert_eq!(replay.len(), 3001);
    // Nothing happens before SWEEP_EVERY has passed.
    replay.tick(Instant::now());
    assert_eq!(replay.len(), 3001);
    replay.tick(Instant::now() + SWEEP_EVERY);
    assert_eq!(replay.len(), 1, "only the copy that was replayed");
    assert!(replay.held() < flooded / 20, "{} bytes held after the sweep, {flooded} before", replay.held());
    let full = bytes(handle_bytes(&core, &hot, src(), Proto::Udp));
    let hits = replay.hits();
    assert_eq!(bytes(replay.handle(&core, &hot, src())), full, "the kept copy still answers");
    assert_eq!(replay.hits(), hits + 1);
    // Its mark went with the sweep: not replayed since, it goes with the next.
    replay.tick(Instant::now() + SWEEP_EVERY * 3);
    assert_eq!(replay.len(), 1, "replayed once more since");
    replay.tick(Instant::now() + SWEEP_EVERY * 5);
    assert!(replay.is_empty());
    assert_eq!(replay.held(), 0, "an empty store holds nothing");
}

#[test]
fn a_flood_of_random_names_leaves_the_copies_asked_for_again() {
    let core = core();
    // About 40 copies' worth.
    let mut replay = Replay::with_budget(12 << 10);
    let hot = query(7, "svc1.testns.svc.cluster.local.", RecordType::A, None);
    bytes(replay.handle(&core, &hot, src()));
    for i in 0..5000 {
        bytes(replay.handle(&core, &random_name_query(i), src()));
        if i % 10 == 0 {
            bytes(replay.handle(&core, &hot, src()));
        }
        assert!(replay.held() <= 12 << 10, "{} bytes at step {i}", replay.held());
    }
    // Asked every tenth query, it survived every sweep the full store made.
    assert!(replay.hits() >= 495, "{} of 500 asked again were replayed", replay.hits());
}

//! The agent's BGP speaker over a stand-in FRR: the configuration it hands FRR follows the
//! cluster (an ETP Local Service's last local endpoint leaving withdraws its address; a change
//! to the BGP objects alone is applied), an unchanged decision is not applied again, a refused
//! one is reported and tried again, what was applied is in the status and the metrics, a node
//! that peers with nobody leaves FRR alone until it does, and an FRR that restarted empty is
//! given its configuration again. On its own task beside the proxy's loop, the speaker's
//! withdrawals wait for no `minSyncPeriod`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::bgp::{BgpAdvertisement, BgpPeer, Community, CommunityRef};
use tideway_core::cluster::{BgpKind, BgpObject, BgpSpec};
use tideway_core::config::ProxySettings;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{ip, mk_service, mk_slice};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus};
use tideway_node_agent::bgp_speaker::BgpSpeaker;
use tideway_node_agent::dataplane::memory::SharedKernel;
use tideway_node_agent::effects::MemoryEffects;
use tideway_node_agent::frr::{FrrError, PeerState, Routing};
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_node_agent::report::node_state;
use tideway_sources::SharedCluster;
use tideway_tests::frr::bgp_snapshot;

/// FRR as the agent sees it: records each configuration, refusing them while told to, and
/// says of its sessions what it is told to.
#[derive(Clone, Default)]
struct FakeFrr {
    applied: Arc<Mutex<Vec<String>>>,
    refuse: Arc<Mutex<bool>>,
    peers: Arc<Mutex<BTreeMap<IpAddr, PeerState>>>,
}

impl Routing for FakeFrr {
    fn apply(&self, config: &str) -> Result<(), FrrError> {
        if *self.refuse.lock().unwrap() {
            return Err(FrrError::Write {
                path: "frr.conf".into(),
                source: std::io::Error::other("refused"),
            });
        }
        self.applied.lock().unwrap().push(config.to_string());
        Ok(())
    }

    fn sessions(&self) -> Result<BTreeMap<IpAddr, PeerState>, FrrError> {
        Ok(self.peers.lock().unwrap().clone())
    }
}

impl FakeFrr {
    fn count(&self) -> usize {
        self.applied.lock().unwrap().len()
    }

    fn last(&self) -> String {
        self.applied.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

fn cluster() -> SharedCluster {
    let snapshot = bgp_snapshot(
        &[("node-a", "172.30.0.11"), ("node-b", "172.30.0.12")],
        vec![
            mk_service("demo", "web")
                .cluster_ip("10.96.0.10")
                .port("http", Tcp, 80)
                .lb_ip("203.0.113.10")
                .build(),
            mk_service("demo", "api")
                .cluster_ip("10.96.0.20")
                .port("http", Tcp, 80)
                .lb_ip("203.0.113.20")
                .etp_local()
                .build(),
        ],
        vec![
            mk_slice("demo", "web").port("http", Tcp, 8080).ready("10.244.2.5", "node-b").build(),
            mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.1.5", "node-a").build(),
        ],
    );
    let cluster = SharedCluster::new();
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

struct Rig {
    speaker: BgpSpeaker,
    frr: FakeFrr,
    status: Arc<RwLock<AgentStatus>>,
    registry: Registry,
    metrics: Arc<Metrics>,
    fence: Arc<AtomicBool>,
}

fn rig(cluster: &SharedCluster) -> Rig {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let frr = FakeFrr::default();
    let fence = Arc::new(AtomicBool::new(false));
    let speaker = BgpSpeaker::new(
        "node-a",
        cluster.clone(),
        status.clone(),
        metrics.clone(),
        fence.clone(),
        Arc::new(frr.clone()),
    );
    Rig { speaker, frr, status, registry, metrics, fence }
}

fn metric(registry: &Registry, name: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}_total ")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in\n{text}"))
}

#[tokio::test]
async fn frr_is_given_the_nodes_decision_when_it_changes_and_only_then() {
    let cluster = cluster();
    let mut r = rig(&cluster);
    r.speaker.speak();
    assert_eq!(r.frr.count(), 1);
    let conf = r.frr.last();
    for line in [
        "router bgp 64512",
        " bgp router-id 172.30.0.11",
        " neighbor 172.30.0.1 remote-as 64513",
        " neighbor 172.30.0.1 bfd profile fast",
        "  network 203.0.113.10/32",
        "  network 203.0.113.20/32",
    ] {
        assert!(conf.lines().any(|l| l == line), "{line:?} in\n{conf}");
    }
    let status = r.status.read().unwrap().bgp.clone().expect("BGP status");
    assert_eq!((status.asn, status.applied, status.last_error.as_deref()), (Some(64512), 1, None));
    assert_eq!(status.sessions[0].prefixes, ["203.0.113.10/32", "203.0.113.20/32"]);
    assert_eq!(metric(&r.registry, "tideway_bgp_prefixes_advertised"), 2.0);
    assert_eq!(metric(&r.registry, "tideway_bgp_sessions"), 1.0);

    // Nothing of BGP's changed: FRR is not asked again.
    r.speaker.speak();
    assert_eq!(r.frr.count(), 1);

    // The Local Service's last endpoint on node-a leaves: its address is withdrawn here.
    cluster.update(|s| {
        s.apply(mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.2.6", "node-b").build())
    });
    r.speaker.speak();
    assert_eq!(r.frr.count(), 2);
    assert!(!r.frr.last().contains("203.0.113.20/32"), "{}", r.frr.last());
    assert!(r.frr.last().contains("network 203.0.113.10/32"));

    // A change to the BGP objects alone: a community on the advertisement.
    let with_community = BgpAdvertisement {
        communities: vec![CommunityRef::Value(Community::Standard(64512, 7))],
        ..BgpAdvertisement::new("all")
    };
    cluster.update(|s| s.apply(BgpObject::tideway("all", BgpSpec::Advertisement(with_community))));
    assert!(cluster.lock().changes().bgp);
    r.speaker.speak();
    assert_eq!(r.frr.count(), 3);
    assert!(r.frr.last().contains("64512:7"), "{}", r.frr.last());
}

#[tokio::test]
async fn a_node_no_peer_selects_leaves_frr_alone_until_one_does() {
    let cluster = cluster();
    let peer = cluster.lock().bgp_object(BgpKind::Peer, "", "tor").cloned().expect("the peer");
    cluster.update(|s| s.delete_bgp(BgpKind::Peer, "", "tor"));
    let mut r = rig(&cluster);
    r.speaker.speak();
    assert_eq!(r.frr.count(), 0, "FRR may not run on a node that peers with nobody");
    let status = r.status.read().unwrap().bgp.clone().expect("BGP status");
    assert!(status.sessions.is_empty() && status.last_error.is_none(), "{status:?}");
    cluster.update(|s| s.apply(peer));
    r.speaker.speak();
    assert_eq!(r.frr.count(), 1);
    assert!(r.frr.last().contains("neighbor 172.30.0.1 remote-as 64513"), "{}", r.frr.last());
    // Once it has peered, losing its last peer is applied: its routes are withdrawn.
    cluster.update(|s| s.delete_bgp(BgpKind::Peer, "", "tor"));
    r.speaker.speak();
    assert_eq!(r.frr.count(), 2);
    assert!(!r.frr.last().contains("neighbor"), "{}", r.frr.last());
}

#[tokio::test]
async fn a_refused_configuration_is_reported_and_tried_again() {
    let cluster = cluster();
    let mut r = rig(&cluster);
    *r.frr.refuse.lock().unwrap() = true;
    r.speaker.speak();
    let status = r.status.read().unwrap().bgp.clone().expect("BGP status");
    assert!(status.last_error.as_deref().is_some_and(|e| e.contains("refused")), "{status:?}");
    assert_eq!(status.applied, 0);
    assert_eq!(metric(&r.registry, "tideway_bgp_apply_failures"), 1.0);

    *r.frr.refuse.lock().unwrap() = false;
    r.speaker.speak();
    assert_eq!(r.frr.count(), 1, "the same decision, tried again");
    let status = r.status.read().unwrap().bgp.clone().expect("BGP status");
    assert_eq!((status.applied, status.last_error), (1, None));
}

/// A peer whose password is in a Secret the agent has not read is left out, and said so.
#[tokio::test]
async fn a_peer_with_an_unread_password_secret_is_left_out_and_named() {
    let cluster = cluster();
    let secret = BgpPeer {
        password_secret: Some("bgp-auth".into()),
        ..BgpPeer::new("tor", 64512, 64513, ip("172.30.0.1"))
    };
    cluster.update(|s| s.apply(BgpObject::tideway("tor", BgpSpec::Peer(secret))));
    let mut r = rig(&cluster);
    r.speaker.speak();
    assert!(!r.frr.last().contains("neighbor 172.30.0.1"), "{}", r.frr.last());
    let status = r.status.read().unwrap().bgp.clone().expect("BGP status");
    assert!(status.conflicts.iter().any(|c| c.contains("Secret bgp-auth")), "{status:?}");
}

/// FRR's sessions, read back while the agent runs, reach the status, the metrics and the
/// node's report; a new decision keeps what was read until the next read.
#[tokio::test(start_paused = true)]
async fn sessions_read_back_from_frr_reach_the_status_metrics_and_report() {
    let cluster = cluster();
    let mut r = rig(&cluster);
    r.speaker.speak();
    let router = ip("172.30.0.1");
    r.frr.peers.lock().unwrap().insert(router, PeerState { established: true, bfd: Some("up".into()) });
    let watch = tokio::spawn(r.speaker.session_watch(Duration::from_millis(100)));
    tokio_sleep_until(|| r.status.read().unwrap().bgp.as_ref().is_some_and(|b| b.sessions[0].established))
        .await;
    let session = r.status.read().unwrap().bgp.clone().unwrap().sessions[0].clone();
    assert_eq!(session.bfd.as_deref(), Some("up"));
    assert_eq!(metric(&r.registry, "tideway_bgp_sessions_established"), 1.0);
    assert_eq!(metric(&r.registry, "tideway_bfd_sessions_up"), 1.0);
    let report = node_state(&r.status.read().unwrap()).bgp.expect("a BGP report");
    assert_eq!((report.sessions, report.established, report.prefixes), (1, 1, 2));

    // A new decision (an endpoint leaves) keeps the session's state as last read.
    cluster.update(|s| {
        s.apply(mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.2.6", "node-b").build())
    });
    r.speaker.speak();
    assert!(r.status.read().unwrap().bgp.as_ref().unwrap().sessions[0].established);

    // The session drops: the next read says so.
    r.frr.peers.lock().unwrap().insert(router, PeerState { established: false, bfd: Some("down".into()) });
    tokio_sleep_until(|| r.status.read().unwrap().bgp.as_ref().is_some_and(|b| !b.sessions[0].established))
        .await;
    assert_eq!(metric(&r.registry, "tideway_bfd_sessions_up"), 0.0);

    // FRR restarts empty (its pod replaced): it knows none of the sessions, and the next sync
    // gives it its configuration again though the decision is the same.
    let applied = r.frr.count();
    r.frr.peers.lock().unwrap().clear();
    tokio_sleep_until(|| r.status.read().unwrap().bgp.as_ref().is_some_and(|b| b.sessions[0].bfd.is_none()))
        .await;
    r.speaker.speak();
    assert_eq!(r.frr.count(), applied + 1, "the same configuration, given again");
    r.speaker.speak();
    assert_eq!(r.frr.count(), applied + 1, "and only once");
    watch.abort();
}

/// The speaker on its own task beside the proxy's loop, whose `minSyncPeriod` (30 s) holds a
/// Service change back: an ETP Local Service's last local endpoint leaving is withdrawn at
/// once, a raised fence withdraws every route at once, and a refused configuration is tried
/// again after its pause with nothing changed in the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawals_wait_for_no_min_sync_period() {
    let cluster = cluster();
    let Rig { speaker, frr, status, metrics, fence, .. } = rig(&cluster);
    let opts =
        AgentOptions { min_sync_period: Some(Duration::from_secs(30)), ..AgentOptions::for_node("node-a") };
    let kernel = SharedKernel::default();
    let agent = Agent::new(
        opts,
        cluster.clone(),
        status.clone(),
        metrics,
        Arc::new(ProxyHealth::new(Duration::from_secs(30))),
    )
    .with_dataplanes(Box::new(move |s: &ProxySettings| kernel.dataplane(s)))
    .with_effects(Box::new(MemoryEffects::default()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    let speaking = tokio::spawn(speaker.run(std::future::pending()));
    let ports = || status.read().unwrap().service_ports;
    wait_for("the first sync and configuration", Duration::from_secs(10), || {
        ports() == 2 && frr.count() == 1
    })
    .await;

    // A Service the loop may program only 30 s after its first sync, then the move.
    cluster.update(|s| {
        s.apply(mk_service("demo", "late").cluster_ip("10.96.0.30").port("http", Tcp, 80).build())
    });
    cluster.update(|s| {
        s.apply(mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.2.6", "node-b").build())
    });
    wait_for("the Local address withdrawn", Duration::from_secs(5), || {
        !frr.last().contains("203.0.113.20/32")
    })
    .await;
    assert!(frr.last().contains("network 203.0.113.10/32"), "{}", frr.last());
    assert_eq!(ports(), 2, "the loop still waits out minSyncPeriod");

    // The fence withdraws everything at once too.
    fence.store(true, Ordering::Relaxed);
    cluster.poke();
    wait_for("fenced: no route advertised", Duration::from_secs(2), || {
        !frr.last().lines().any(|l| l.starts_with("  network "))
    })
    .await;
    assert!(frr.last().contains("neighbor 172.30.0.1 remote-as 64513"), "the session stays: {}", frr.last());

    // Refused as the fence lifts, then taken after the pause, though nothing changed since.
    *frr.refuse.lock().unwrap() = true;
    let applied = frr.count();
    fence.store(false, Ordering::Relaxed);
    cluster.poke();
    wait_for("the refusal reported", Duration::from_secs(2), || {
        status.read().unwrap().bgp.as_ref().is_some_and(|b| b.last_error.is_some())
    })
    .await;
    *frr.refuse.lock().unwrap() = false;
    wait_for("tried again", Duration::from_secs(6), || frr.count() > applied).await;
    assert!(frr.last().contains("network 203.0.113.10/32"), "{}", frr.last());
    assert_eq!(ports(), 2, "all of it before the loop's next sync");
    drop(stop);
    proxy.await.expect("the loop stops");
    speaking.abort();
}

/// Waits in real time, in steps of 20 ms, at most `within`, until `f` holds.
async fn wait_for(what: &str, within: Duration, f: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "timed out after {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits on the paused clock, in steps of 50 ms, at most 5 s, until `f` holds.
async fn tokio_sleep_until(f: impl Fn() -> bool) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within 5 s");
}

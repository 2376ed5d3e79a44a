//! The node's `NodeProxyState`: built from the agent's status and written through a
//! [`NodeStateSink`] when what its readers see changes — coalesced to at most one write per
//! `min_interval`, each change first waiting this node's jitter — and every `refresh`
//! otherwise, which carries the counts and the last sync time (see
//! [`tideway_core::model::report_due`]).

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, UNIX_EPOCH};

use tideway_core::model::{BgpReport, NodeProxyState, ReportPolicy, report_due, report_jitter};
use tideway_sources::SharedCluster;
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::NodeStateSink;
use tideway_sources::supervise::{Restart, supervise};

use crate::agent::{AgentStatus, BgpStatus};

/// How often and how much the agent reports.
#[derive(Debug, Clone)]
pub struct ReportSettings {
    /// A changed report waits at least this long after the previous write.
    pub min_interval: Duration,
    /// A change waits up to this long first (each node its own share, by its name).
    pub jitter: Duration,
    /// A report with nothing new for its readers is rewritten this often.
    pub refresh: Duration,
}

/// At most this many refused objects in `invalidObjects`, each cut to [`INVALID_TEXT_LIMIT`]
/// bytes: a flood of bad objects must not make the report too large to write.
pub const INVALID_LIMIT: usize = 20;
/// See [`INVALID_LIMIT`].
pub const INVALID_TEXT_LIMIT: usize = 512;

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            min_interval: Duration::from_secs(10),
            jitter: Duration::from_secs(2),
            refresh: Duration::from_secs(60),
        }
    }
}

/// The report for `status`.
pub fn node_state(status: &AgentStatus) -> NodeProxyState {
    NodeProxyState {
        node: status.node.clone(),
        mode: status.mode,
        proxy_config: status.proxy_config.as_ref().map(|(name, _)| name.clone()),
        proxy_config_generation: status.proxy_config.as_ref().map(|(_, g)| *g),
        ready: status.synced && status.last_error.is_none(),
        last_sync: status.last_sync.map(|t| UNIX_EPOCH + Duration::from_secs_f64(t)),
        last_sync_duration: status.last_sync_duration,
        service_ports: status.service_ports as u64,
        endpoints: status.endpoints as u64,
        rules: status.rules as u64,
        drift_repairs: status.drift_repairs,
        last_error: status.last_error.clone(),
        programmed_version: status.programmed_version,
        announcing: status.announcing.clone(),
        invalid_objects: status.invalid_objects.iter().take(INVALID_LIMIT).map(|e| cut(e)).collect(),
        missing_interfaces: status.missing_interfaces.iter().take(INVALID_LIMIT).map(|e| cut(e)).collect(),
        bgp: status.bgp.as_ref().map(bgp_report),
        unset_sysctls: status.unset_sysctls.iter().take(INVALID_LIMIT).map(|e| cut(e)).collect(),
        listener_conflicts: status.listener_conflicts.iter().take(INVALID_LIMIT).map(|e| cut(e)).collect(),
        stopped_at: status.joining_since,
        cleaned_up: status.cleaned_up.clone(),
        agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
    }
}

/// The BGP part of the report: counts, the error, the conflicts (bounded as the invalid objects).
fn bgp_report(bgp: &BgpStatus) -> BgpReport {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let prefixes: BTreeSet<&String> = bgp.sessions.iter().flat_map(|s| &s.prefixes).collect();
    BgpReport {
        sessions: count(bgp.sessions.len()),
        established: count(bgp.sessions.iter().filter(|s| s.established).count()),
        prefixes: count(prefixes.len()),
        last_error: bgp.last_error.as_deref().map(cut),
        conflicts: bgp.conflicts.iter().take(INVALID_LIMIT).map(|e| cut(e)).collect(),
    }
}

/// `text` cut to [`INVALID_TEXT_LIMIT`] bytes at a character boundary, marked `…` when cut.
fn cut(text: &str) -> String {
    if text.len() <= INVALID_TEXT_LIMIT {
        return text.to_string();
    }
    let end =
        (0..=INVALID_TEXT_LIMIT - '…'.len_utf8()).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}…", &text[..end])
}

/// Writes the report until `shutdown` resolves. Failed writes are logged once per error and
/// retried on the next tick.
pub async fn run(
    status: Arc<RwLock<AgentStatus>>,
    sink: Arc<dyn NodeStateSink>,
    settings: ReportSettings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_secs(1).min(settings.min_interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(NodeProxyState, tokio::time::Instant)> = None;
    // Since when the current report differs from the last one written, for its readers.
    let mut differs_since: Option<tokio::time::Instant> = None;
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut shutdown => return,
        }
        let current = {
            let s = status.read().unwrap_or_else(|e| e.into_inner());
            if !s.synced && s.last_error.is_none() {
                continue; // nothing to say before the first sync
            }
            node_state(&s)
        };
        let now = tokio::time::Instant::now();
        if last.as_ref().is_some_and(|(p, _)| !p.same_for_readers(&current)) {
            differs_since.get_or_insert(now);
        } else {
            differs_since = None;
        }
        let policy = ReportPolicy {
            min_interval: settings.min_interval,
            settle: report_jitter(&current.node, settings.jitter),
            refresh: settings.refresh,
        };
        let prev = last.as_ref().map(|(p, at)| (p, now - *at));
        let pending = differs_since.map_or(Duration::ZERO, |t| now - t);
        if !report_due(prev, &current, pending, &policy) {
            continue;
        }
        match sink.publish(&current).await {
            Ok(()) => {
                if last_error.take().is_some() {
                    tracing::info!("NodeProxyState written again");
                }
                last = Some((current, tokio::time::Instant::now()));
                differs_since = None;
            }
            Err(e) => {
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(error = %msg, "cannot write the NodeProxyState; retrying");
                }
                last_error = Some(msg);
            }
        }
    }
}

/// The last report, as the agent stops gracefully: what it programmed, and `stoppedAt`, so that
/// the operator keeps the node's addresses for its hand-over time while the next agent starts
/// (see [`tideway_core::liveness::agent_liveness`]). Nothing is written before the first sync;
/// a write not done `within` is dropped (the addresses then move as after a crash). True when
/// written.
pub async fn farewell(status: &RwLock<AgentStatus>, sink: &dyn NodeStateSink, within: Duration) -> bool {
    let mut state = {
        let s = status.read().unwrap_or_else(|e| e.into_inner());
        if !s.synced {
            return false;
        }
        node_state(&s)
    };
    state.stopped_at = Some(std::time::SystemTime::now());
    match tokio::time::timeout(within, sink.publish(&state)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot say in the NodeProxyState that the agent stops; its addresses will move");
            false
        }
        Err(_) => {
            tracing::warn!(?within, "the NodeProxyState's last write took too long; the addresses will move");
            false
        }
    }
}

/// Keeps the agent's report saying its predecessor's `stoppedAt` (set in `joining_since` at
/// start) until its gossip member is seen by another node's (`members` lists one besides
/// `node`) and `spread` more has passed, or `within` has: a restarted agent's first report
/// would otherwise clear it before the gossip knows the agent is back, and an operator that
/// did not see the hand-over begin (a leader that changed meanwhile, as in an upgrade) would
/// take the node for dead and move its addresses. The member that let it in knows it first;
/// the others, the operators among them, learn it as the news spreads, so the stop stays
/// reported for `spread` (a detection time) after that. A first agent (no predecessor's stop)
/// reports none: its crash still moves the addresses at once.
pub async fn joined(
    status: Arc<RwLock<AgentStatus>>,
    mut members: tokio::sync::watch::Receiver<tideway_sources::gossip::Members>,
    node: String,
    within: Duration,
    spread: Duration,
) {
    let deadline = tokio::time::sleep(within);
    tokio::pin!(deadline);
    loop {
        if tideway_core::liveness::joined(&members.borrow_and_update().active, &node) {
            tokio::select! {
                _ = tokio::time::sleep(spread) => {},
                _ = &mut deadline => {},
            }
            break;
        }
        tokio::select! {
            changed = members.changed() => if changed.is_err() { break },
            _ = &mut deadline => break,
        }
    }
    status.write().unwrap_or_else(|e| e.into_inner()).joining_since = None;
}

/// [`run`], never stopped, started again after a panic: the restart is logged, counted
/// (`tideway_source_task_restarts_total{task="report"}`) and shown as a fault of the source
/// (readiness) until the writer runs again.
pub async fn run_supervised(
    status: Arc<RwLock<AgentStatus>>,
    sink: Arc<dyn NodeStateSink>,
    settings: ReportSettings,
    cluster: SharedCluster,
    metrics: SourceMetrics,
) {
    const TASK: &str = "report";
    let faulty = cluster.clone();
    let make = move || {
        cluster.clear_fault(TASK);
        run(status.clone(), sink.clone(), settings.clone(), std::future::pending())
    };
    let report = move |panic: &str| {
        metrics.restarted(TASK);
        faulty.set_fault(TASK, format!("the NodeProxyState writer panicked ({panic}) and starts again"));
    };
    supervise(TASK, Restart::default(), make, report).await;
}

#[cfg(test)]
mod tests {
    use tideway_sources::status::{MemorySink, WriteError};

    use super::*;

    fn synced(ports: usize) -> AgentStatus {
        let mut s =
            AgentStatus { node: "node-a".into(), synced: true, service_ports: ports, ..Default::default() };
        s.programmed_version = Some(100);
        s
    }

    #[test]
    fn the_report_carries_the_version_programmed_whatever_the_number_of_services() {
        let r = node_state(&synced(5_000));
        assert_eq!(r.programmed_version, Some(100));
        assert!(r.ready);
        let json = serde_json::to_vec(&tideway_api::crd::node_proxy_state(&r, Some("uid"))).unwrap();
        assert!(json.len() < 1_024, "{} bytes", json.len());
    }

    /// Sleeps `secs` seconds of paused time, changing the counts every 100 ms (endpoint churn).
    async fn churn(status: &RwLock<AgentStatus>, secs: u64) {
        for _ in 0..secs * 10 {
            {
                let mut s = status.write().unwrap();
                s.endpoints += 1;
                s.rules += 3;
                s.last_sync = Some(s.last_sync.unwrap_or(0.0) + 0.1);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn program(status: &RwLock<AgentStatus>, version: u64) {
        status.write().unwrap().programmed_version = Some(version);
    }

    #[tokio::test]
    async fn a_graceful_stop_says_when_in_a_last_report_once_synced() {
        let sink = MemorySink::default();
        let status = RwLock::new(AgentStatus { node: "node-a".into(), ..Default::default() });
        assert!(!farewell(&status, &sink, Duration::from_secs(1)).await, "nothing before the first sync");
        assert!(sink.published().is_empty());
        *status.write().unwrap() = synced(3);
        let before = std::time::SystemTime::now();
        assert!(farewell(&status, &sink, Duration::from_secs(1)).await);
        let last = sink.published().pop().unwrap();
        assert!(last.stopped_at.is_some_and(|t| t >= before), "{last:?}");
        assert_eq!((last.service_ports, last.ready), (3, true), "what it had programmed, as before");
        assert_eq!(node_state(&synced(3)).stopped_at, None, "a running agent's reports clear it");
    }

    #[test]
    fn refused_objects_are_reported_within_bounds() {
        let mut s = synced(2);
        s.invalid_objects = vec!["ProxyConfig default: spec.syncPeriod: must be more than 0".into()];
        assert_eq!(node_state(&s).invalid_objects, s.invalid_objects);
        s.invalid_objects = (0..50).map(|i| format!("Service ns/s{i}: {}", "é".repeat(400))).collect();
        let r = node_state(&s);
        assert_eq!(r.invalid_objects.len(), INVALID_LIMIT);
        for (i, e) in r.invalid_objects.iter().enumerate() {
            assert!(e.len() <= INVALID_TEXT_LIMIT && e.ends_with('…'), "{}: {e}", e.len());
            assert!(e.starts_with(&format!("Service ns/s{i}: é")), "{e}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn counts_wait_for_the_refresh_and_changes_coalesce_after_the_jitter() {
        let status = Arc::new(RwLock::new(AgentStatus { node: "node-a".into(), ..Default::default() }));
        let sink = MemorySink::default();
        let settings = ReportSettings::default();
        let jitter = report_jitter("node-a", settings.jitter);
        assert!(
            jitter >= Duration::from_millis(500),
            "this test reads a change before the jitter: {jitter:?}"
        );
        let task =
            tokio::spawn(run(status.clone(), Arc::new(sink.clone()), settings, std::future::pending()));
        churn(&status, 3).await;
        assert!(sink.published().is_empty(), "nothing before the first sync");
        *status.write().unwrap() = synced(2);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(sink.published().len(), 1, "the first report at once");

        // Endpoint churn for 55 s: counts only, no write; the refresh carries the latest counts.
        churn(&status, 55).await;
        assert_eq!(sink.published().len(), 1, "counts alone are no reason to write");
        churn(&status, 6).await;
        assert_eq!(sink.published().len(), 2, "the refresh");
        let refreshed = sink.published()[1].clone();
        assert!(refreshed.endpoints > 300, "with the counts of the moment: {refreshed:?}");
        churn(&status, 10).await;
        assert_eq!(sink.published().len(), 2);

        // A Service change programmed, seen by every node at once: this node waits
        // its jitter, then writes.
        program(&status, 7);
        tokio::time::sleep(jitter - Duration::from_millis(300)).await;
        assert_eq!(sink.published().len(), 2, "still within this node's jitter");
        // Seen at the next tick (1 s at most), written at the first tick after the jitter.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert_eq!(sink.published().len(), 3);
        assert_eq!(sink.published()[2].programmed_version, Some(7));

        // Changes every second for a minute, under churn: coalesced to one write per 10 s.
        let before = sink.published().len();
        for g in 8..68 {
            program(&status, g);
            churn(&status, 1).await;
        }
        let writes = sink.published().len() - before;
        assert!((5..=6).contains(&writes), "{writes} writes in 60 s");
        churn(&status, 12).await;
        let last = sink.published().last().cloned().unwrap();
        assert_eq!(last.programmed_version, Some(67), "the last change is not lost");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn failed_writes_are_retried_without_waiting_for_the_interval_again() {
        let status = Arc::new(RwLock::new(synced(2)));
        let sink = MemorySink::default();
        let task = tokio::spawn(run(
            status.clone(),
            Arc::new(sink.clone()),
            ReportSettings::default(),
            std::future::pending(),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sink.published().len(), 1);
        sink.fail_with(Some(WriteError::Transport("down".into())));
        program(&status, 9);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(sink.published().len(), 1, "failed writes are not recorded");
        sink.fail_with(None);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(sink.published().len(), 2, "retried on the next tick");
        assert_eq!(sink.published()[1].programmed_version, Some(9));
        task.abort();
    }

    /// Panics on its first `panics` writes, then records them.
    struct PanickingSink {
        panics: std::sync::atomic::AtomicUsize,
        inner: MemorySink,
    }

    #[async_trait::async_trait]
    impl NodeStateSink for PanickingSink {
        async fn publish(&self, state: &NodeProxyState) -> Result<(), WriteError> {
            let left = self.panics.load(std::sync::atomic::Ordering::SeqCst);
            if left > 0 {
                self.panics.store(left - 1, std::sync::atomic::Ordering::SeqCst);
                panic!("the sink broke");
            }
            self.inner.publish(state).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_that_panics_starts_again_and_is_reported_meanwhile() {
        let status = Arc::new(RwLock::new(synced(2)));
        let inner = MemorySink::default();
        let sink = Arc::new(PanickingSink { panics: 2.into(), inner: inner.clone() });
        let cluster = SharedCluster::new();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = SourceMetrics::new(&mut registry);
        let task = tokio::spawn(run_supervised(
            status.clone(),
            sink,
            ReportSettings::default(),
            cluster.clone(),
            metrics.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let faults = cluster.faults();
        assert!(faults.len() == 1 && faults[0].contains("the sink broke"), "{faults:?}");
        assert!(inner.published().is_empty());
        // Started again after 1 s, panics again; then after 2 s more it writes.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(inner.published().len(), 1, "the report is written by the restarted writer");
        assert!(cluster.faults().is_empty(), "recovered");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("tideway_source_task_restarts_total{task=\"report\"} 2"), "{text}");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_restarted_agent_says_stopped_until_another_node_sees_it() {
        use tideway_sources::gossip::Members;
        let status = Arc::new(RwLock::new(synced(3)));
        let started = std::time::SystemTime::now();
        status.write().unwrap().joining_since = Some(started);
        assert_eq!(node_state(&status.read().unwrap()).stopped_at, Some(started));
        let alone = Members { active: ["node-a".to_string()].into(), down: Default::default() };
        let (tx, rx) = tokio::sync::watch::channel(alone);
        let spread = Duration::from_millis(1350);
        let task = tokio::spawn(joined(status.clone(), rx, "node-a".into(), Duration::from_secs(30), spread));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(node_state(&status.read().unwrap()).stopped_at, Some(started), "alone: not joined yet");
        tx.send_modify(|m| {
            m.active.insert("node-b".into());
        });
        tokio::time::sleep(Duration::from_millis(1300)).await;
        assert_eq!(node_state(&status.read().unwrap()).stopped_at, Some(started), "the others learn it yet");
        task.await.unwrap();
        assert_eq!(
            node_state(&status.read().unwrap()).stopped_at,
            None,
            "seen by node-b, and the news spread"
        );

        // Nobody else ever seen (a one-node cluster): cleared at the bound.
        status.write().unwrap().joining_since = Some(started);
        let (_tx, rx) = tokio::sync::watch::channel(Members::default());
        let task = tokio::spawn(joined(status.clone(), rx, "node-a".into(), Duration::from_secs(30), spread));
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(status.read().unwrap().joining_since.is_some());
        tokio::time::sleep(Duration::from_secs(2)).await;
        task.await.unwrap();
        assert_eq!(status.read().unwrap().joining_since, None);
    }
}

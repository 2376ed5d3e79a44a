//! The reconcile loop: while this replica leads, take what changed in the source, let the core
//! [`Reconciler`] decide, and perform its writes (bounded concurrency, retries for conflicts
//! and outages; a failed write makes the next pass compare everything again).
//!
//! Writes are fenced by leadership: each attempt is sent only while the term has room for it
//! ([`Lead::write_budget`]) and is dropped when its time is up, and a pass in flight is dropped
//! when the term ends. So no write leaves after the renew deadline minus the write timeout,
//! and none is still waiting when a standby may take over. A follower drops the changes it is
//! told of: a new leader decides from the whole cluster anyway.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tideway_core::operator::{Action, Reconciler, Refused};
use tideway_sources::SharedCluster;
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::{ClusterWriter, WriteError};
use tideway_sources::supervise::{Restart, supervise};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::election::Lead;
use crate::metrics::{Metrics, PoolLabel, ReasonLabel, WriteLabel};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// LoadBalancer class handled (None: Services without a class).
    pub class: Option<String>,
    /// Everything is compared again this often.
    pub resync_period: Duration,
    /// Changes arriving within this window are decided together.
    pub batch: Duration,
    /// Writes in flight at once.
    pub concurrency: usize,
    /// Each write attempt is dropped after this long (and sent only while the leadership term
    /// has this long left).
    pub write_timeout: Duration,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            class: None,
            resync_period: Duration::from_secs(300),
            batch: Duration::from_millis(20),
            concurrency: 16,
            write_timeout: Duration::from_secs(3),
        }
    }
}

/// What the operator reports about itself (`/api/v1/status`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OperatorStatus {
    /// This replica leads and writes.
    pub leader: bool,
    /// The source delivered its first complete view.
    pub synced: bool,
    /// Reconciles run while leading.
    pub reconciles: u64,
    /// Writes performed.
    pub writes: u64,
    /// Writes that failed after their retries.
    pub write_errors: u64,
    /// The last write error.
    pub last_error: Option<String>,
    /// LoadBalancer Services holding addresses.
    pub assigned_services: usize,
}

fn kind(a: &Action) -> &'static str {
    match a {
        Action::SetIngress { .. } => "ingress",
        Action::Announce(_) => "announcement",
        Action::Withdraw(_) => "withdrawal",
        Action::ProxyConfigStatus { .. } => "proxyconfig_status",
        Action::PoolStatus { .. } => "pool_status",
        Action::Event(_) => "event",
    }
}

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
enum WriteFailure {
    /// The API server refused it or did not answer.
    #[error(transparent)]
    Api(#[from] WriteError),
    /// The leadership term had no room left for it: it was not sent.
    #[error("not sent: this replica's leadership ends before the write could time out")]
    Fenced,
}

/// One write, retried while the error says trying again may help (3 attempts), each attempt
/// sent only while `lead` has room for it and dropped after its budget.
async fn write(
    writer: &dyn ClusterWriter,
    action: &Action,
    lead: &watch::Receiver<Lead>,
    write_timeout: Duration,
) -> Result<(), WriteFailure> {
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let budget = lead.borrow().write_budget(Instant::now(), write_timeout).ok_or(WriteFailure::Fenced)?;
        let sent = tokio::time::timeout(budget, writer.write(action)).await.unwrap_or_else(|_| {
            Err(WriteError::Transport(format!("no answer within {budget:?}; the request was dropped")))
        });
        match sent {
            Err(e) if e.is_retryable() && attempt < 3 => {
                tracing::debug!(error = %e, attempt, "write failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 4;
                attempt += 1;
            }
            other => return Ok(other?),
        }
    }
}

/// The loop's state while it leads.
struct Leading {
    rec: Reconciler,
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// Runs until `shutdown` resolves: waits for the source and for leadership, then reconciles on
/// every change, on resync, and after failures.
pub async fn run(
    cluster: SharedCluster,
    writer: Arc<dyn ClusterWriter>,
    mut leader: watch::Receiver<Lead>,
    opts: LoopOptions,
    metrics: Arc<Metrics>,
    status: Arc<RwLock<OperatorStatus>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let set = |f: &dyn Fn(&mut OperatorStatus)| f(&mut status.write().unwrap_or_else(|e| e.into_inner()));
    tokio::select! {
        _ = cluster.wait_synced() => {}
        _ = &mut shutdown => return,
    }
    set(&|s| s.synced = true);
    let mut leading: Option<Leading> = None;
    let mut resync = tokio::time::interval(opts.resync_period);
    resync.tick().await;
    let mut due = false;
    loop {
        let lead = *leader.borrow_and_update();
        let is_leader = lead.leads_at(Instant::now());
        metrics.leader.set(i64::from(is_leader));
        set(&|s| s.leader = is_leader);
        match (&mut leading, is_leader) {
            (None, true) => {
                tracing::info!(
                    "leading: deciding from the whole cluster (addresses restored from Service status)"
                );
                cluster.lock().take_changes();
                leading = Some(Leading {
                    rec: Reconciler::new(opts.class.clone()),
                    retry_at: None,
                    backoff: Duration::from_millis(500),
                });
                due = true;
            }
            (Some(_), false) => {
                tracing::info!("no longer leading: writes stop");
                leading = None;
            }
            // A follower keeps no changes: they would grow with every update while it waits.
            (None, false) => drop(cluster.lock().take_changes()),
            (Some(_), true) => {}
        }
        if let Some(l) = leading.as_mut().filter(|_| std::mem::take(&mut due)) {
            use tracing::field::Empty;
            let span =
                tracing::info_span!("reconcile", changes = Empty, actions = Empty, write_errors = Empty);
            let passing = pass(&cluster, &writer, l, &leader, &opts, &metrics, &status).instrument(span);
            let cut = tokio::select! {
                _ = passing => false,
                _ = lost(leader.clone()) => true,
            };
            if cut {
                tracing::warn!("leadership lost during a reconcile: its remaining writes are dropped");
                leading = None;
                continue;
            }
        }
        let retry = leading.as_ref().and_then(|l| l.retry_at);
        let term_ends = leading.as_ref().and(lead.until());
        due = tokio::select! {
            _ = cluster.changed() => {
                if leading.is_some() {
                    tokio::time::sleep(opts.batch).await;
                }
                true
            }
            // Leadership changed (handled above); a renewal alone changes nothing else.
            _ = leader.changed() => false,
            _ = sleep_until(term_ends) => false,
            _ = resync.tick() => {
                if let Some(l) = leading.as_mut() {
                    l.rec.resync();
                }
                true
            }
            _ = sleep_until(retry) => true,
            _ = &mut shutdown => return,
        };
    }
}

/// [`run`], started again after a panic (a new loop decides from the whole cluster, as a new
/// leader does): the restart is logged, counted in
/// `tideway_source_task_restarts_total{task="reconcile"}` and named by `/readyz` until the
/// loop runs again. `stopped` makes the shutdown future of each run.
#[allow(clippy::too_many_arguments)]
pub async fn run_supervised<S, F>(
    cluster: SharedCluster,
    writer: Arc<dyn ClusterWriter>,
    leader: watch::Receiver<Lead>,
    opts: LoopOptions,
    metrics: Arc<Metrics>,
    status: Arc<RwLock<OperatorStatus>>,
    restarts: SourceMetrics,
    stopped: S,
) where
    S: Fn() -> F + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    const TASK: &str = "reconcile";
    let faulty = cluster.clone();
    let make = move || {
        cluster.clear_fault(TASK);
        let (c, w, l, o, m, s) =
            (cluster.clone(), writer.clone(), leader.clone(), opts.clone(), metrics.clone(), status.clone());
        run(c, w, l, o, m, s, stopped())
    };
    let report = move |panic: &str| {
        restarts.restarted(TASK);
        faulty.set_fault(TASK, format!("the reconcile loop panicked ({panic}) and starts again"));
    };
    supervise(TASK, Restart::default(), make, report).await;
}

/// Resolves when the leadership `leader` announces ends: it says so, or its term runs out.
async fn lost(mut leader: watch::Receiver<Lead>) {
    loop {
        let lead = *leader.borrow_and_update();
        if !lead.leads_at(Instant::now()) {
            return;
        }
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    // No more news: the last word holds until its term ends.
                    sleep_until(lead.until()).await;
                    return;
                }
            }
            _ = sleep_until(lead.until()) => return,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The ProxyConfigs and LoadBalancerPools the source refused (name -> why), whose statuses
/// say so.
pub(crate) fn refused(cluster: &SharedCluster) -> Refused {
    let mut refused = Refused::default();
    for (key, why) in cluster.invalid_objects() {
        match key.kind.as_str() {
            "ProxyConfig" => refused.proxy_configs.insert(key.name, why),
            "LoadBalancerPool" => refused.pools.insert(key.name, why),
            _ => None,
        };
    }
    refused
}

/// One reconcile and its writes (in the `reconcile` span: a `decide` child, then one `write`
/// child per action).
async fn pass(
    cluster: &SharedCluster,
    writer: &Arc<dyn ClusterWriter>,
    l: &mut Leading,
    leader: &watch::Receiver<Lead>,
    opts: &LoopOptions,
    metrics: &Metrics,
    status: &RwLock<OperatorStatus>,
) {
    let invalid = refused(cluster);
    let started = Instant::now();
    let actions = {
        let mut state = cluster.lock();
        let changes = state.take_changes();
        let count = changes.services.len() + changes.nodes.len();
        tracing::Span::current().record("changes", count);
        tracing::info_span!("decide").in_scope(|| l.rec.reconcile(&state, &changes, &invalid))
    };
    tracing::Span::current().record("actions", actions.len());
    metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    for a in &actions {
        observe(a, metrics);
    }
    // Owned futures (an iterator borrowing `actions` would not be Send for every lifetime).
    let write_timeout = opts.write_timeout;
    let writes: Vec<_> = actions
        .iter()
        .cloned()
        .map(|a| {
            let w = Arc::clone(writer);
            let lead = leader.clone();
            let span = tracing::info_span!("write", kind = kind(&a));
            async move { (kind(&a), write(w.as_ref(), &a, &lead, write_timeout).await) }.instrument(span)
        })
        .collect();
    let results: Vec<(&'static str, Result<(), WriteFailure>)> =
        futures::stream::iter(writes).buffer_unordered(opts.concurrency.max(1)).collect().await;
    let mut failed = 0;
    let mut last_error = None;
    for (k, r) in results {
        let label = WriteLabel { kind: k.into() };
        match r {
            Ok(()) => {
                metrics.writes.get_or_create(&label).inc();
            }
            Err(e) => {
                tracing::warn!(write = k, error = %e, "write failed; the cluster is compared again after a backoff");
                metrics.write_errors.get_or_create(&label).inc();
                failed += 1;
                last_error = Some(e.to_string());
            }
        };
    }
    tracing::Span::current().record("write_errors", failed);
    if failed > 0 {
        l.rec.resync();
        l.retry_at = Some(Instant::now() + l.backoff);
        l.backoff = (l.backoff * 2).min(Duration::from_secs(30));
    } else {
        l.retry_at = None;
        l.backoff = Duration::from_millis(500);
    }
    for p in l.rec.allocator().pool_status() {
        let s = p.stats;
        for (family, state, n) in [
            ("ipv4", "assigned", u128::from(s.assigned_ipv4)),
            ("ipv4", "available", u128::from(s.available_ipv4)),
            ("ipv6", "assigned", s.assigned_ipv6),
            ("ipv6", "available", s.available_ipv6),
        ] {
            let label = PoolLabel { pool: p.name.clone(), family: family.into(), state: state.into() };
            metrics.pool_addresses.get_or_create(&label).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
    let mut s = status.write().unwrap_or_else(|e| e.into_inner());
    s.reconciles += 1;
    s.writes += (actions.len() - failed) as u64;
    s.write_errors += failed as u64;
    if last_error.is_some() {
        s.last_error = last_error;
    }
    s.assigned_services = l.rec.allocator().services().count();
}

fn observe(a: &Action, metrics: &Metrics) {
    if let Action::Event(e) = a {
        metrics.events.get_or_create(&ReasonLabel { reason: e.reason.into() }).inc();
        match e.reason {
            "AllocationFailed" => {
                metrics.allocation_failures.inc();
            }
            "AnnouncerChanged" | "NoAnnouncer" => {
                metrics.announcer_changes.inc();
            }
            _ => {}
        }
        let level = if e.warning { "warning" } else { "normal" };
        tracing::info!(object = %format!("{} {}{}", e.object.kind, e.object.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default(), e.object.name),
            reason = e.reason, level, "{}", e.message);
    }
}

//! The sync loop: changes in, one dataplane update out.
//!
//! ```text
//!   SharedCluster --changed--> plan (Ruleset::update, or compile when node/settings changed)
//!        --> lower changed fragments --> ChangeSet per family --> Dataplane::apply (one call)
//!        --> conntrack cleanup, health-check servers, status, metrics
//! ```
//! Syncs run at most every `minSyncPeriod` (start to start) and the kernel is compared with
//! what was applied every `syncPeriod`; the dataplane repairs what differs (nftables: only the
//! chains and sets that differ; the others rewrite everything). A failed apply leaves the kernel as it was and is retried with
//! backoff as a full sync. Switching mode programs the new backend first, then removes the
//! old one's objects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tideway_core::config::{ProxyMode, ProxySettings, resolve_proxy_config};
use tideway_core::model::ServiceName;
use tideway_core::net::IpFamily;
use tideway_core::plan::NodeContext;
use tideway_sources::SharedCluster;
use tokio::time::Instant;
use tracing::Instrument;

mod cleanup;
mod plan;
mod publish;
pub mod query;
mod record;
mod round;
mod run;
mod status;
mod unprogrammed;

pub use status::{AgentStatus, BgpSessionStatus, BgpStatus};

use crate::dataplane::{self, Dataplane, DataplaneError, Desired, Keep, Retired, Update};
use crate::effects::{KernelEffects, NodeEffects};
use crate::health::ProxyHealth;
use crate::metrics::{KindLabel, Metrics};
use crate::node_dns::NodeLocalDns;
use round::{Planned, Planning, Synced};

/// Why a sync or a drift check did not complete.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The source has no Node of this name.
    #[error("Node {0:?} not found in the source")]
    NodeNotFound(String),
    /// The dataplane refused the update; the kernel keeps its previous rules.
    #[error("applying the rules: {0}")]
    Apply(#[source] DataplaneError),
    /// The kernel could not be read back.
    #[error("reading the kernel back: {0}")]
    Verify(#[source] DataplaneError),
    /// A new mode's rules, just applied, do not read back as applied: the old mode stays.
    #[error("the {mode} rules just applied do not read back: {drift:?}")]
    Unverified {
        /// The new mode.
        mode: ProxyMode,
        /// What differs.
        drift: Vec<String>,
    },
}

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// This node's name.
    pub node: String,
    /// Overrides the ProxyConfig's mode.
    pub mode: Option<ProxyMode>,
    /// Overrides the ProxyConfig's sync period.
    pub sync_period: Option<Duration>,
    /// Overrides the ProxyConfig's minimum sync period.
    pub min_sync_period: Option<Duration>,
    /// A full resync happens at least this often.
    pub full_sync_period: Duration,
}

impl AgentOptions {
    /// Options for `node` that follow its ProxyConfig, with a full resync every hour.
    pub fn for_node(node: impl Into<String>) -> AgentOptions {
        AgentOptions {
            node: node.into(),
            mode: None,
            sync_period: None,
            min_sync_period: None,
            full_sync_period: Duration::from_secs(3600),
        }
    }
}

/// The node agent.
pub struct Agent {
    opts: AgentOptions,
    cluster: SharedCluster,
    factory: dataplane::Factory,
    dataplane: Option<Box<dyn Dataplane>>,
    planned: Option<Planned>,
    needs_full: bool,
    pending: BTreeSet<ServiceName>,
    last_full: Option<Instant>,
    leftovers_checked: bool,
    retiring: Vec<(Box<dyn Dataplane>, Keep)>,
    status: Arc<RwLock<AgentStatus>>,
    metrics: Arc<Metrics>,
    health: Arc<ProxyHealth>,
    /// Conntrack clean-up, health-check listeners, `route_localnet`.
    effects: Box<dyn NodeEffects>,
    /// Where each programmed plan is published for the REST API.
    publisher: Option<query::Publisher>,
    unprogrammed: unprogrammed::Unprogrammed,
    /// The node-local DNS listener, when it runs.
    node_dns: Option<NodeLocalDns>,
}

/// A cluster this large gets progress lines on its first sync.
const LARGE: usize = 10_000;

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Runs blocking kernel work without stalling the runtime's other tasks (on a single-threaded
/// runtime, as in tests with a paused clock, there are none to stall).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Agent {
    /// Says, once per wait, that this node's Node object is missing: nothing can be programmed
    /// without its addresses and labels.
    fn wait_for_node(&self) {
        let what = format!("Node {:?} (not in the source: is --node its name?)", self.opts.node);
        self.set_waiting_for(vec![what]);
    }

    /// Records what the agent waits for, logging it when it changes.
    pub(crate) fn set_waiting_for(&self, what: Vec<String>) {
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        if status.waiting_for != what {
            if !what.is_empty() {
                tracing::warn!(node = %self.opts.node, waiting_for = ?what, "waiting before programming this node");
            }
            status.waiting_for = what;
        }
    }

    /// An agent for `opts.node`, reading `cluster`.
    pub fn new(
        opts: AgentOptions,
        cluster: SharedCluster,
        status: Arc<RwLock<AgentStatus>>,
        metrics: Arc<Metrics>,
        health: Arc<ProxyHealth>,
    ) -> Agent {
        status.write().unwrap_or_else(|e| e.into_inner()).node = opts.node.clone();
        Agent {
            opts,
            cluster,
            factory: Box::new(dataplane::for_settings),
            dataplane: None,
            planned: None,
            needs_full: true,
            pending: BTreeSet::new(),
            last_full: None,
            leftovers_checked: false,
            retiring: Vec::new(),
            publisher: None,
            status,
            effects: Box::new(KernelEffects::new(health.clone())),
            metrics,
            health,
            unprogrammed: unprogrammed::Unprogrammed::new(SystemTime::now()),
            node_dns: None,
        }
    }

    /// The same agent, answering cluster DNS on the node too.
    pub fn with_node_dns(mut self, node_dns: Option<NodeLocalDns>) -> Agent {
        self.node_dns = node_dns;
        self
    }

    /// The same agent, its dataplanes made by `factory` (tests use an in-memory kernel).
    pub fn with_dataplanes(mut self, factory: dataplane::Factory) -> Agent {
        self.factory = factory;
        self
    }

    /// The same agent, its node-side effects done by `effects` (tests use a node in memory).
    pub fn with_effects(mut self, effects: Box<dyn NodeEffects>) -> Agent {
        self.effects = effects;
        self
    }

    fn set_status(&self, f: impl FnOnce(&mut AgentStatus)) {
        f(&mut self.status.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// The settings that apply to this node now, and the config they come from.
    fn settings_for(&self, labels: &BTreeMap<String, String>) -> (ProxySettings, Option<(String, i64)>) {
        let state = self.cluster.lock();
        let config = resolve_proxy_config(state.proxy_configs(), labels);
        let from = config.map(|c| (c.name.clone(), c.generation));
        let mut s = config.map(|c| c.settings.clone()).unwrap_or_default();
        if let Some(m) = self.opts.mode {
            s.mode = m;
        }
        if let Some(p) = self.opts.sync_period {
            s.sync_period = p;
        }
        if let Some(p) = self.opts.min_sync_period {
            s.min_sync_period = p;
        }
        (s, from)
    }

    /// Sync and verification periods currently in force.
    pub fn periods(&self) -> (Duration, Duration) {
        let s = self.planned.as_ref().map(|p| p.node.settings.clone()).unwrap_or_else(|| {
            let mut d = ProxySettings::default();
            d.sync_period = self.opts.sync_period.unwrap_or(d.sync_period);
            d.min_sync_period = self.opts.min_sync_period.unwrap_or(d.min_sync_period);
            d
        });
        (s.min_sync_period, s.sync_period)
    }

    /// Plans and programs what changed; a full sync when asked, after errors, when the node
    /// or its settings changed, and every `full_sync_period`. Traced as span `sync` (mode,
    /// full, Services changed, ports and rules programmed, error) with children `plan`,
    /// `render` and `apply`.
    pub async fn sync(&mut self, force_full: bool) -> Result<(), SyncError> {
        use tracing::field::Empty;
        let span = tracing::info_span!(
            "sync",
            node = %self.opts.node,
            mode = Empty,
            full = Empty,
            changed_services = Empty,
            service_ports = Empty,
            rules = Empty,
            error = Empty
        );
        let result = self.sync_once(force_full).instrument(span.clone()).await;
        if let Err(e) = &result {
            span.record("error", e.to_string());
        }
        result
    }

    async fn sync_once(&mut self, force_full: bool) -> Result<(), SyncError> {
        let started = Instant::now();
        let (node, changes, version, eligible, config) = {
            let mut state = self.cluster.lock();
            let changes = state.take_changes();
            // Every Service change up to this version is in `changes` or was programmed before:
            // a sync that succeeds has programmed up to it.
            let version = state.services_version();
            let node = state.node(&self.opts.node).cloned();
            let service_cidrs = state.service_cidrs();
            let node_dns = self.node_dns.as_mut().map(|d| d.follow(&state, &changes));
            drop(state);
            let Some(node) = node else {
                let e = SyncError::NodeNotFound(self.opts.node.clone());
                self.wait_for_node();
                self.set_status(|s| s.last_error = Some(e.to_string()));
                return Err(e);
            };
            // kube-proxy's rule (KEP-3836): a node being deleted, or one the cluster
            // autoscaler tainted for removal, fails /healthz so load balancers drain it first.
            let eligible = !node.deleting && !node.to_be_deleted();
            let (settings, config) = self.settings_for(&node.labels);
            (
                NodeContext::from_node(&node, settings)
                    .with_service_cidrs(service_cidrs)
                    .with_node_dns(node_dns),
                changes,
                version,
                eligible,
                config,
            )
        };
        self.health.set_node_eligible(eligible);
        self.health.set_sync_period(node.settings.sync_period);
        self.metrics.service_changes.inc_by(changes.service_events);
        self.metrics.endpoint_changes.inc_by(changes.endpoint_events);
        self.unprogrammed.take(&changes);
        self.pending.extend(changes.services);
        let mode = node.settings.mode;
        let periodic = self.last_full.is_none_or(|t| t.elapsed() >= self.opts.full_sync_period);
        let full_wanted =
            force_full || self.needs_full || periodic || self.planned.as_ref().is_none_or(|p| p.node != node);
        let span = tracing::Span::current();
        span.record("mode", mode.to_string());
        span.record("changed_services", self.pending.len());

        // Plan (on a copy of the plan the REST API holds, sharing what it does not change).
        let Planning { mut planned, full, whole, changes: change_sets } = self.plan(&node, full_wanted);

        // Apply.
        let switching = self.dataplane.as_ref().is_some_and(|d| d.mode() != mode);
        let mut new_dataplane =
            if self.dataplane.is_none() || switching { Some((self.factory)(&node.settings)) } else { None };
        let dp: &mut Box<dyn Dataplane> = match new_dataplane.as_mut() {
            Some(d) => d,
            None => self.dataplane.as_mut().expect("dataplane exists"),
        };
        let kept = planned.programs.each_ref();
        let desired = match whole {
            Some(programs) => Desired::rendered(mode, &planned.ruleset, kept, programs),
            None => Desired::new(mode, &planned.ruleset, kept),
        };
        let update = if full { Update::Full } else { Update::Changes([&change_sets[0], &change_sets[1]]) };
        tracing::Span::current().record("full", full);
        let apply_span = tracing::info_span!("apply", backend = %dp.mode(), full, switching);
        let mut applied =
            apply_span.in_scope(|| blocking(|| dp.apply(&desired, update))).map_err(SyncError::Apply);
        if applied.is_ok() && switching {
            // The old mode goes only once the new one reads back as applied.
            applied = match apply_span.in_scope(|| blocking(|| dp.verify(&desired, true))) {
                Ok(drift) if drift.is_empty() => Ok(()),
                Ok(drift) => Err(SyncError::Unverified {
                    mode,
                    drift: drift.iter().map(ToString::to_string).collect(),
                }),
                Err(e) => Err(SyncError::Verify(e)),
            };
        }
        if let Err(e) = applied {
            drop(desired);
            return Err(self.failed(e, mode, full, planned));
        }
        if let Some(new) = new_dataplane
            && let Some(old) = self.dataplane.replace(new)
        {
            tracing::info!(from = %old.mode(), to = %mode, "proxy mode switched; removing the old mode's rules");
            // A backend being retired in the new mode is adopted, not removed.
            self.retiring.retain(|(d, _)| d.mode() != mode);
            self.retiring.push((old, desired.keep()));
            self.metrics.mode_switches.inc();
            self.set_status(|s| s.mode_switches += 1);
        }
        if !self.leftovers_checked {
            self.leftovers_checked = true;
            self.find_leftovers(&node.settings, desired.keep());
        }
        if full {
            planned.programs = desired.into_kept();
        } else {
            drop(desired);
        }
        self.retire();

        // Side effects of a successful sync.
        let udp_changed = full || !self.pending.is_empty();
        self.pending.clear();
        self.needs_full = false;
        if full {
            self.last_full = Some(Instant::now());
        }
        let mut unset = self.dataplane.as_ref().map(|d| d.unset_sysctls()).unwrap_or_default();
        if planned.ruleset.families.get(&IpFamily::V4).is_some_and(|f| f.localhost_node_ports) {
            unset.extend(self.effects.enable_route_localnet());
        }
        self.set_status(|s| s.unset_sysctls = unset);
        let mut deleted = 0;
        if udp_changed && planned.ruleset.tally().udp > 0 {
            match blocking(|| self.effects.clean_udp_flows(&planned.ruleset)) {
                Ok(n) => deleted = n,
                Err(e) => tracing::warn!(error = %e, "conntrack cleanup failed"),
            }
        }
        self.metrics.conntrack_deleted.inc_by(deleted as u64);
        let addresses = planned.ruleset.health_check_addresses();
        let hc_errors = self.effects.sync_health_checks(&planned.ruleset.health_checks, &addresses).await;
        for e in &hc_errors {
            tracing::warn!(error = %e, "health check server");
        }
        self.health.updated();
        if let (Some(listener), Some(dns)) = (self.node_dns.as_mut(), node.node_dns.as_ref()) {
            listener.programmed(dns).await;
        }
        let synced = Synced { mode, full, elapsed: started.elapsed(), deleted, hc_errors, config, version };
        self.record_success(&planned, synced);
        self.publish(mode, &planned.ruleset);
        self.planned = Some(planned);
        Ok(())
    }

    /// Queues for removal the rules a previous run left in another mode (kept objects are
    /// shared names the current mode uses).
    fn find_leftovers(&mut self, settings: &ProxySettings, keep: Keep) {
        for other in ProxyMode::ALL.into_iter().filter(|m| *m != settings.mode) {
            let mut s = settings.clone();
            s.mode = other;
            let mut dp = (self.factory)(&s);
            if blocking(|| dp.present()).unwrap_or(false) {
                tracing::info!(mode = %other, "removing rules left by an earlier run");
                self.retiring.push((dp, keep.clone()));
            }
        }
    }

    /// Moves the removal of retired backends forward; some wait for connections to drain.
    pub fn retire(&mut self) {
        if self.retiring.is_empty() {
            return;
        }
        let mut waiting = Vec::new();
        self.retiring.retain_mut(|(dp, keep)| match blocking(|| dp.cleanup(keep)) {
            Ok(Retired::Done) => {
                tracing::info!(mode = %dp.mode(), "old rules removed");
                false
            }
            Ok(Retired::Draining(what)) => {
                waiting.push(format!("{}: {what}", dp.mode()));
                true
            }
            Err(e) => {
                tracing::warn!(mode = %dp.mode(), error = %e, "removing old rules failed; will retry");
                waiting.push(format!("{}: {e}", dp.mode()));
                true
            }
        });
        self.set_status(|s| s.retiring = waiting);
    }

    /// Compares the kernel with what was applied; on a difference, has the dataplane repair
    /// what differs and counts each object by what differed. A failed repair leaves the next
    /// sync to rewrite everything.
    pub async fn check_drift(&mut self, deep: bool) -> Result<bool, SyncError> {
        let (Some(planned), Some(dp)) = (self.planned.as_ref(), self.dataplane.as_mut()) else {
            return Ok(false);
        };
        if self.needs_full {
            return Ok(false);
        }
        self.metrics.drift_checks.inc();
        let desired = planned.desired();
        let drift = blocking(|| dp.verify(&desired, deep)).map_err(SyncError::Verify)?;
        if drift.is_empty() {
            return Ok(false);
        }
        let found: Vec<String> = drift.iter().map(ToString::to_string).collect();
        tracing::warn!(drift = ?found, "kernel rules differ from the applied ones; repairing what differs");
        let repaired = blocking(|| dp.repair(&desired, &drift));
        drop(desired);
        self.set_status(|s| s.last_drift = found);
        if let Err(e) = repaired {
            // The next sync rewrites everything.
            self.needs_full = true;
            return Err(SyncError::Apply(e));
        }
        for d in &drift {
            self.metrics.drift_repairs.get_or_create(&KindLabel { kind: d.kind.label().to_string() }).inc();
        }
        self.set_status(|s| s.drift_repairs += 1);
        Ok(true)
    }
}

//! The sync loop: changes in, one dataplane update out.
//!
//! ```text
//!   SharedCluster --changed--> plan (Ruleset::update, or compile when node/settings changed)
//!        --> lower changed fragments --> ChangeSet per family --> Dataplane::apply (one call)
//!        --> conntrack cleanup, health-check servers, status, metrics
//! ```
//! Syncs run at most every `minSyncPeriod` (start to start) and the kernel is compared with
//! what was applied every `syncPeriod` (deep) and after each sync (cheap, nftables); drift
//! triggers a full sync. A failed apply leaves the kernel as it was and is retried with
//! backoff as a full sync. Switching mode programs the new backend first, then removes the
//! old one's objects.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tideway_api::source::SharedCluster;
use tideway_core::config::{ProxyMode, ProxySettings, resolve_proxy_config};
use tideway_core::model::ServiceName;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::{NodeContext, NodePortDestinations, Ruleset, Target, compile};
use tideway_core::program::{ChangeSet, Program, ProgramState};
use tideway_core::render;

use crate::dataplane::{self, Dataplane, Keep, Retired, Update};
use crate::health::{HealthServers, ProxyHealth};
use crate::metrics::{Metrics, PolicyLabel};

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

/// What the agent reports about itself (`/api/v1/status`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStatus {
    /// Node name.
    pub node: String,
    /// Mode programmed.
    pub mode: Option<ProxyMode>,
    /// The first sync completed.
    pub synced: bool,
    /// Unix time of the last successful sync.
    pub last_sync: Option<f64>,
    /// Unix time of the last full sync.
    pub last_full_sync: Option<f64>,
    /// Duration of the last sync, milliseconds.
    pub last_sync_ms: f64,
    /// Successful syncs.
    pub syncs: u64,
    /// Of which full.
    pub full_syncs: u64,
    /// Failed syncs.
    pub failures: u64,
    /// Times the kernel differed from what was applied and a full sync repaired it.
    pub drift_repairs: u64,
    /// What differed the last time.
    pub last_drift: Vec<String>,
    /// Mode switches performed.
    pub mode_switches: u64,
    /// Backends of earlier modes still being removed, and what they wait for.
    pub retiring: Vec<String>,
    /// The last error, if the last sync failed.
    pub last_error: Option<String>,
    /// Service ports programmed.
    pub service_ports: usize,
    /// Planner warnings (frontend conflicts).
    pub warnings: Vec<String>,
    /// Objects the source skipped as invalid.
    pub invalid_objects: Vec<String>,
    /// Health-check NodePorts served.
    pub health_check_ports: Vec<u16>,
    /// Stale UDP conntrack entries deleted.
    pub conntrack_deleted: u64,
}

struct Planned {
    node: NodeContext,
    ruleset: Ruleset,
    programs: [ProgramState; 2],
}

impl Planned {
    fn programs(&self) -> [&Program; 2] {
        [self.programs[0].program(), self.programs[1].program()]
    }
}

/// The node agent.
pub struct Agent {
    opts: AgentOptions,
    cluster: SharedCluster,
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
    hc_servers: HealthServers,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Runs blocking kernel work without stalling the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl Agent {
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
            dataplane: None,
            planned: None,
            needs_full: true,
            pending: BTreeSet::new(),
            last_full: None,
            leftovers_checked: false,
            retiring: Vec::new(),
            status,
            hc_servers: HealthServers::new(health.clone()),
            metrics,
            health,
        }
    }

    fn set_status(&self, f: impl FnOnce(&mut AgentStatus)) {
        f(&mut self.status.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// The settings that apply to this node now.
    fn settings_for(&self, labels: &std::collections::BTreeMap<String, String>) -> ProxySettings {
        let state = self.cluster.lock();
        let mut s = resolve_proxy_config(state.proxy_configs(), labels)
            .map(|c| c.settings.clone())
            .unwrap_or_default();
        if let Some(m) = self.opts.mode {
            s.mode = m;
        }
        if let Some(p) = self.opts.sync_period {
            s.sync_period = p;
        }
        if let Some(p) = self.opts.min_sync_period {
            s.min_sync_period = p;
        }
        s
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
    /// or its settings changed, and every `full_sync_period`.
    pub async fn sync(&mut self, force_full: bool) -> Result<(), String> {
        let started = Instant::now();
        let (node, changes, eligible) = {
            let mut state = self.cluster.lock();
            let changes = state.take_changes();
            let node = state.node(&self.opts.node).cloned();
            drop(state);
            let Some(node) = node else {
                let e = format!("Node {:?} not found in the source", self.opts.node);
                self.set_status(|s| s.last_error = Some(e.clone()));
                return Err(e);
            };
            let eligible = !node.deleting;
            (NodeContext::from_node(&node, self.settings_for(&node.labels)), changes, eligible)
        };
        self.health.set_node_eligible(eligible);
        self.health.set_sync_period(node.settings.sync_period);
        self.metrics.service_changes.inc_by(changes.services.len() as u64);
        self.pending.extend(changes.services);
        let mode = node.settings.mode;
        let periodic = self.last_full.is_none_or(|t| t.elapsed() >= self.opts.full_sync_period);
        let mut full =
            force_full || self.needs_full || periodic || self.planned.as_ref().is_none_or(|p| p.node != node);

        // Plan.
        let mut planned = match self.planned.take() {
            Some(p) if !full => p,
            _ => {
                let ruleset = compile(&self.cluster.lock(), &node);
                let programs = IpFamily::ALL.map(|f| ProgramState::new(render::lower(mode, &ruleset, f)));
                full = true;
                Planned { node: node.clone(), ruleset, programs }
            }
        };
        let mut change_sets: Vec<ChangeSet> = Vec::new();
        if !full {
            let changed = planned.ruleset.update(&self.cluster.lock(), &self.pending);
            for (i, family) in IpFamily::ALL.into_iter().enumerate() {
                if render::needs_full(mode, &planned.ruleset, planned.programs[i].program()) {
                    full = true;
                    break;
                }
                let frags = changed.iter().filter(|k| k.0 == family).map(|(_, spn)| {
                    let plan = planned.ruleset.services.get(&(family, spn.clone()));
                    (spn.clone(), plan.map(|p| render::lower_fragment(mode, &planned.ruleset, p)))
                });
                let frags: Vec<_> = frags.collect();
                change_sets.push(planned.programs[i].replace_all(frags));
            }
            if full {
                planned.programs =
                    IpFamily::ALL.map(|f| ProgramState::new(render::lower(mode, &planned.ruleset, f)));
            }
        }

        // Apply.
        let switching = self.dataplane.as_ref().is_some_and(|d| d.mode() != mode);
        let mut new_dataplane = if self.dataplane.is_none() || switching {
            Some(dataplane::for_settings(&node.settings))
        } else {
            None
        };
        let dp: &mut Box<dyn Dataplane> = match new_dataplane.as_mut() {
            Some(d) => d,
            None => self.dataplane.as_mut().expect("dataplane exists"),
        };
        let programs = planned.programs();
        let update = if full { Update::Full } else { Update::Changes([&change_sets[0], &change_sets[1]]) };
        let applied = blocking(|| dp.apply(programs, update));
        if let Err(e) = applied {
            let msg = e.to_string();
            tracing::error!(error = %msg, %mode, full, "sync failed; the kernel keeps its previous rules");
            match mode {
                ProxyMode::Nftables => self.metrics.nftables_failures.inc(),
                _ => self.metrics.iptables_failures.inc(),
            };
            self.needs_full = true;
            self.planned = Some(planned);
            self.set_status(|s| {
                s.failures += 1;
                s.last_error = Some(msg.clone());
            });
            return Err(msg);
        }
        if let Some(new) = new_dataplane
            && let Some(old) = self.dataplane.replace(new)
        {
            tracing::info!(from = %old.mode(), to = %mode, "proxy mode switched; removing the old mode's rules");
            // A backend being retired in the new mode is adopted, not removed.
            self.retiring.retain(|(d, _)| d.mode() != mode);
            self.retiring.push((old, Keep::of(programs)));
            self.metrics.mode_switches.inc();
            self.set_status(|s| s.mode_switches += 1);
        }
        if !self.leftovers_checked {
            self.leftovers_checked = true;
            self.find_leftovers(&node.settings, programs);
        }
        self.retire();

        // Side effects of a successful sync.
        let udp_changed = full || !self.pending.is_empty();
        self.pending.clear();
        self.needs_full = false;
        if full {
            self.last_full = Some(Instant::now());
        }
        let mut deleted = 0;
        if udp_changed && planned.ruleset.services.values().any(|p| p.name.protocol == Protocol::Udp) {
            match blocking(|| crate::conntrack::clean(&planned.ruleset)) {
                Ok(n) => deleted = n,
                Err(e) => tracing::warn!(error = %e, "conntrack cleanup failed"),
            }
        }
        self.metrics.conntrack_deleted.inc_by(deleted as u64);
        let addresses = health_addresses(&planned.ruleset);
        let hc_errors = self.hc_servers.sync(&planned.ruleset.health_checks, &addresses).await;
        for e in &hc_errors {
            tracing::warn!(error = %e, "health check server");
        }
        self.health.updated();
        let elapsed = started.elapsed();
        self.metrics.sync_duration.observe(elapsed.as_secs_f64());
        if full {
            self.metrics.full_sync_duration.observe(elapsed.as_secs_f64());
        } else {
            self.metrics.partial_sync_duration.observe(elapsed.as_secs_f64());
        }
        self.metrics.last_sync.set(unix_now());
        let (mut internal, mut external) = (0, 0);
        for p in planned.ruleset.services.values() {
            internal += i64::from(p.internal_target() == Target::Drop);
            external += i64::from(p.external_target() == Target::Drop);
        }
        self.metrics
            .no_local_endpoints
            .get_or_create(&PolicyLabel { traffic_policy: "internal".into() })
            .set(internal);
        self.metrics
            .no_local_endpoints
            .get_or_create(&PolicyLabel { traffic_policy: "external".into() })
            .set(external);
        let warnings: Vec<String> =
            planned.ruleset.warnings().iter().map(|w| format!("{}: {}", w.service_port, w.message)).collect();
        let invalid: Vec<String> = self.cluster.errors().iter().map(ToString::to_string).collect();
        let ports = self.hc_servers.ports();
        self.set_status(|s| {
            s.mode = Some(mode);
            s.synced = true;
            s.last_sync = Some(unix_now());
            if full {
                s.last_full_sync = s.last_sync;
                s.full_syncs += 1;
            }
            s.last_sync_ms = elapsed.as_secs_f64() * 1000.0;
            s.syncs += 1;
            s.last_error = hc_errors.first().cloned();
            s.service_ports = planned.ruleset.services.len();
            s.warnings = warnings;
            s.invalid_objects = invalid;
            s.health_check_ports = ports;
            s.conntrack_deleted += deleted as u64;
        });
        tracing::debug!(%mode, full, ms = elapsed.as_millis() as u64, "synced");
        self.planned = Some(planned);
        Ok(())
    }

    /// Queues for removal the rules a previous run left in another mode (kept objects are
    /// shared names the current mode uses).
    fn find_leftovers(&mut self, settings: &ProxySettings, programs: [&Program; 2]) {
        for other in ProxyMode::ALL.into_iter().filter(|m| *m != settings.mode) {
            let mut s = settings.clone();
            s.mode = other;
            let mut dp = dataplane::for_settings(&s);
            if blocking(|| dp.present()).unwrap_or(false) {
                tracing::info!(mode = %other, "removing rules left by an earlier run");
                self.retiring.push((dp, Keep::of(programs)));
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

    /// Compares the kernel with what was applied; on a difference, counts it and resyncs.
    pub async fn check_drift(&mut self, deep: bool) -> Result<bool, String> {
        let (Some(planned), Some(dp)) = (self.planned.as_ref(), self.dataplane.as_mut()) else {
            return Ok(false);
        };
        if self.needs_full {
            return Ok(false);
        }
        self.metrics.drift_checks.inc();
        let programs = planned.programs();
        let drift = blocking(|| dp.verify(programs, deep)).map_err(|e| e.to_string())?;
        if drift.is_empty() {
            return Ok(false);
        }
        let found: Vec<String> = drift.iter().map(ToString::to_string).collect();
        tracing::warn!(drift = ?found, "kernel rules differ from the applied ones; repairing");
        self.set_status(|s| s.last_drift = found);
        self.sync(true).await?;
        self.metrics.drift_repairs.inc();
        self.set_status(|s| s.drift_repairs += 1);
        Ok(true)
    }

    /// Cheap verification after each sync is worth it where reading back is cheap (nftables:
    /// a terse listing of chains and rules).
    pub fn cheap_verify(&self) -> bool {
        self.dataplane.as_ref().is_some_and(|d| d.mode() == ProxyMode::Nftables)
    }
}

/// Where health-check NodePort servers listen: the node's NodePort addresses.
fn health_addresses(ruleset: &Ruleset) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for np in ruleset.families.values() {
        match &np.node_ports {
            NodePortDestinations::Ips(ips) => out.extend(ips.iter().copied()),
            // Every address: the IPv4 wildcard (an IPv6 wildcard would also claim IPv4).
            NodePortDestinations::AllLocal if np.family == IpFamily::V4 => {
                out.push(std::net::IpAddr::from([0u8, 0, 0, 0]));
            }
            NodePortDestinations::AllLocal => {}
        }
    }
    out
}

impl Agent {
    /// Runs until `shutdown` resolves: waits for the source's first complete view, then syncs
    /// on every change (at most every `minSyncPeriod`), retries failures with backoff, and
    /// checks for drift every `syncPeriod`.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        tokio::select! {
            _ = self.cluster.wait_synced() => {}
            _ = &mut shutdown => return,
        }
        let mut dirty = true;
        let mut force_full = false;
        let mut last_start: Option<Instant> = None;
        let mut retry_at: Option<Instant> = None;
        let mut backoff = Duration::from_millis(500);
        let mut next_verify = Instant::now();
        loop {
            let (min_period, sync_period) = self.periods();
            if !dirty && retry_at.is_none() {
                let wake = tokio::time::Instant::from_std(next_verify);
                tokio::select! {
                    _ = self.cluster.changed() => {
                        dirty = true;
                        self.health.queued();
                    }
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = &mut shutdown => return,
                }
            }
            if let Some(at) = retry_at
                && !dirty
                && Instant::now() < at
            {
                tokio::select! {
                    _ = self.cluster.changed() => {
                        dirty = true;
                        self.health.queued();
                    }
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    _ = &mut shutdown => return,
                }
            }
            let retry_due = retry_at.is_some_and(|t| Instant::now() >= t);
            if dirty || retry_due {
                if let Some(t) = last_start {
                    let earliest = tokio::time::Instant::from_std(t + min_period);
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest) => {}
                        _ = &mut shutdown => return,
                    }
                }
                last_start = Some(Instant::now());
                dirty = false;
                match self.sync(force_full).await {
                    Ok(()) => {
                        retry_at = None;
                        force_full = false;
                        backoff = Duration::from_millis(500);
                        if self.cheap_verify()
                            && let Err(e) = self.check_drift(false).await
                        {
                            tracing::warn!(error = %e, "drift check failed");
                        }
                    }
                    Err(_) => {
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(sync_period);
                    }
                }
            }
            if Instant::now() >= next_verify {
                next_verify = Instant::now() + sync_period;
                self.retire();
                if let Err(e) = self.check_drift(true).await {
                    tracing::warn!(error = %e, "drift check failed");
                    force_full = true;
                    dirty = true;
                }
            }
        }
    }
}

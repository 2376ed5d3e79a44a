//! What a sync leaves behind: metrics, the status the API and the node report read, the
//! trace span's figures and, for a failed sync, what makes the next one full.

use std::time::{Duration, SystemTime};

use tideway_core::config::ProxyMode;

use super::round::{Planned, Synced};
use super::{Agent, SyncError, unix_now};
use crate::metrics::PolicyLabel;

/// Full syncs longer than this are logged at info level (a large first sync is news).
const LONG_SYNC: Duration = Duration::from_secs(1);

impl Agent {
    /// Records a sync that programmed `planned`.
    pub(super) fn record_success(&mut self, planned: &Planned, synced: Synced) {
        let Synced { mode, full, elapsed, deleted, hc_errors, config, version } = synced;
        for took in self.unprogrammed.programmed(SystemTime::now()) {
            self.metrics.network_programming.observe(took.as_secs_f64());
            self.metrics.network_programming_fine.observe(took.as_secs_f64());
        }
        self.set_pending_gauges();
        self.metrics.sync_duration.observe(elapsed.as_secs_f64());
        if full {
            self.metrics.full_sync_duration.observe(elapsed.as_secs_f64());
        } else {
            self.metrics.partial_sync_duration.observe(elapsed.as_secs_f64());
        }
        self.metrics.last_sync.set(unix_now());
        // Figures kept current by the planner: nothing here walks every plan.
        let tally = planned.ruleset.tally();
        for (policy, n) in [("internal", tally.internal_no_local), ("external", tally.external_no_local)] {
            let label = PolicyLabel { traffic_policy: policy.into() };
            self.metrics.no_local_endpoints.get_or_create(&label).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let warnings: Vec<String> = if tally.shadowed == 0 && tally.balancing_fallbacks == 0 {
            Vec::new()
        } else {
            planned.ruleset.warnings().iter().map(|w| format!("{}: {}", w.service_port, w.message)).collect()
        };
        let invalid: Vec<String> = self.cluster.errors().iter().map(ToString::to_string).collect();
        let ports = self.effects.health_check_ports();
        let rules = planned.rule_count();
        self.set_status(|s| {
            s.mode = Some(mode);
            s.synced = true;
            s.waiting_for = Vec::new();
            s.last_sync = Some(unix_now());
            if full {
                s.last_full_sync = s.last_sync;
                s.full_syncs += 1;
            }
            s.last_sync_ms = elapsed.as_secs_f64() * 1000.0;
            s.syncs += 1;
            s.last_error = hc_errors.first().cloned();
            s.service_ports = tally.service_ports;
            s.warnings = warnings;
            s.invalid_objects = invalid;
            s.health_check_ports = ports;
            s.conntrack_deleted += deleted as u64;
            s.proxy_config = config;
            s.endpoints = tally.cluster_endpoints;
            s.rules = rules;
            s.last_sync_duration = Some(elapsed);
            s.programmed_version = version;
        });
        let span = tracing::Span::current();
        span.record("service_ports", tally.service_ports);
        span.record("rules", rules);
        if full && elapsed >= LONG_SYNC {
            tracing::info!(%mode, service_ports = tally.service_ports, rules,
                seconds = elapsed.as_secs_f64(), "full sync programmed");
        } else {
            tracing::debug!(%mode, full, ms = elapsed.as_millis() as u64, "synced");
        }
    }

    /// Sets the `*_changes_pending` gauges: what syncs took and did not program, and what is
    /// queued.
    pub(super) fn set_pending_gauges(&self) {
        let (services, endpoints) = self.unprogrammed.pending(self.cluster.lock().changes());
        self.metrics.service_changes_pending.set(i64::try_from(services).unwrap_or(i64::MAX));
        self.metrics.endpoint_changes_pending.set(i64::try_from(endpoints).unwrap_or(i64::MAX));
    }

    /// Records a failed sync: the kernel keeps its previous rules, the next attempt is full.
    pub(super) fn failed(
        &mut self,
        e: SyncError,
        mode: ProxyMode,
        full: bool,
        planned: Planned,
    ) -> SyncError {
        let msg = e.to_string();
        tracing::error!(error = %msg, %mode, full, "sync failed; the kernel keeps its previous rules");
        match mode {
            ProxyMode::Nftables => self.metrics.nftables_failures.inc(),
            _ => self.metrics.iptables_failures.inc(),
        };
        self.set_pending_gauges();
        self.needs_full = true;
        self.planned = Some(planned);
        self.set_status(|s| {
            s.failures += 1;
            s.last_error = Some(msg);
        });
        e
    }
}

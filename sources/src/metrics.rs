//! Source metrics: watch errors by kind and cause, relists and events by kind, restarts of
//! supervised tasks.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// `kind`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The watched kind.
    pub kind: String,
}

/// `task`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabel {
    /// The supervised task (`watch Service`, `report`).
    pub task: String,
}

/// `kind`, `reason`, `code`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchErrorLabels {
    /// The watched kind.
    pub kind: String,
    /// The cause ([`crate::kube::ErrorCause::reason`]).
    pub reason: String,
    /// The HTTP status, `0` when there was none (connection errors).
    pub code: String,
}

/// Counters every source-backed component exposes.
#[derive(Debug, Default, Clone)]
pub struct SourceMetrics {
    /// `tideway_source_watch_errors_total`.
    pub watch_errors: Family<WatchErrorLabels, Counter>,
    /// `tideway_source_relists_total`: complete lists after the first.
    pub relists: Family<KindLabel, Counter>,
    /// `tideway_source_events_total`: objects applied or deleted after the first list.
    pub events: Family<KindLabel, Counter>,
    /// `tideway_source_invalid_objects_total`: objects skipped as invalid.
    pub invalid: Family<KindLabel, Counter>,
    /// `tideway_source_task_restarts_total`: supervised tasks started again after a panic.
    pub task_restarts: Family<TaskLabel, Counter>,
}

impl SourceMetrics {
    /// Counters registered in `registry` under `tideway_source_*`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = SourceMetrics::default();
        m.register(registry);
        m
    }

    /// Registers these counters in `registry` under `tideway_source_*`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tideway_source");
        r.register(
            "watch_errors",
            "Watch and list errors, by kind, cause and HTTP status",
            self.watch_errors.clone(),
        );
        r.register("relists", "Complete lists after the first (410 Gone, reconnects)", self.relists.clone());
        r.register("events", "Objects applied or deleted after the first list", self.events.clone());
        r.register(
            "invalid_objects",
            "Objects skipped as invalid (last valid version kept)",
            self.invalid.clone(),
        );
        r.register(
            "task_restarts",
            "Watch and writer tasks started again after a panic, by task",
            self.task_restarts.clone(),
        );
    }

    /// Counts one restart of `task`.
    pub fn restarted(&self, task: &str) {
        self.task_restarts.get_or_create(&TaskLabel { task: task.to_string() }).inc();
    }

    pub(crate) fn kind(kind: &str) -> KindLabel {
        KindLabel { kind: kind.to_string() }
    }
}

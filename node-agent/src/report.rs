//! The node's `NodeProxyState`: built from the agent's status, written through a
//! [`NodeStateSink`] when its content changes (at most every `min_interval`) and every
//! `refresh` otherwise, so the sync time shown stays current.

use std::sync::{Arc, RwLock};
use std::time::{Duration, UNIX_EPOCH};

use tideway_core::model::{NodeProxyState, report_due};
use tideway_sources::status::NodeStateSink;

use crate::agent::AgentStatus;

/// How often and how much the agent reports.
#[derive(Debug, Clone)]
pub struct ReportSettings {
    /// A changed report waits at least this long after the previous write.
    pub min_interval: Duration,
    /// An unchanged report is rewritten this often.
    pub refresh: Duration,
    /// At most this many Services in `programmedServices` (an object has a size limit).
    pub services_limit: usize,
}

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            min_interval: Duration::from_secs(5),
            refresh: Duration::from_secs(60),
            services_limit: 5_000,
        }
    }
}

/// The report for `status`.
pub fn node_state(status: &AgentStatus, services_limit: usize) -> NodeProxyState {
    let truncated = status.programmed.len() > services_limit;
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
        programmed: status.programmed.iter().take(services_limit).map(|(k, v)| (k.clone(), *v)).collect(),
        programmed_truncated: truncated,
        announcing: status.announcing.clone(),
    }
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
            node_state(&s, settings.services_limit)
        };
        let prev = last.as_ref().map(|(p, at)| (p, at.elapsed()));
        if !report_due(prev, &current, settings.min_interval, settings.refresh) {
            continue;
        }
        match sink.publish(&current).await {
            Ok(()) => {
                if last_error.take().is_some() {
                    tracing::info!("NodeProxyState written again");
                }
                last = Some((current, tokio::time::Instant::now()));
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

#[cfg(test)]
mod tests {
    use tideway_core::model::ServiceName;
    use tideway_sources::status::{MemorySink, WriteError};

    use super::*;

    fn synced(ports: usize) -> AgentStatus {
        let mut s =
            AgentStatus { node: "node-a".into(), synced: true, service_ports: ports, ..Default::default() };
        s.programmed.insert(ServiceName::new("ns", "a"), 1);
        s.programmed.insert(ServiceName::new("ns", "b"), 4);
        s
    }

    #[test]
    fn the_report_is_cut_to_its_limit_and_says_so() {
        let r = node_state(&synced(2), 1);
        assert_eq!(r.programmed.len(), 1);
        assert!(r.programmed_truncated && r.ready);
    }

    #[tokio::test(start_paused = true)]
    async fn writes_on_change_rate_limited_and_retries_failures() {
        let status = Arc::new(RwLock::new(AgentStatus { node: "node-a".into(), ..Default::default() }));
        let sink = MemorySink::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task =
            tokio::spawn(run(status.clone(), Arc::new(sink.clone()), ReportSettings::default(), async {
                let _ = stopped.await;
            }));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(sink.published().is_empty(), "nothing before the first sync");
        *status.write().unwrap() = synced(2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sink.published().len(), 1);
        *status.write().unwrap() = synced(3);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sink.published().len(), 1, "a change waits for the minimum interval");
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(sink.published().last().unwrap().service_ports, 3);
        sink.fail_with(Some(WriteError::Transport("down".into())));
        *status.write().unwrap() = synced(4);
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(sink.published().len(), 2, "failed writes are not recorded");
        sink.fail_with(None);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sink.published().last().unwrap().service_ports, 4, "retried after the failure");
        let writes = sink.published().len();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(sink.published().len(), writes, "no rewrite of an unchanged report before the refresh");
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(sink.published().len(), writes + 1, "refreshed");
        let _ = stop.send(());
        task.await.unwrap();
    }
}

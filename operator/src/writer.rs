//! A writer for sources that take no writes (a YAML file): every decision is logged instead,
//! so `tideway operator --source file:CLUSTER.yaml` shows what it would do.

use tideway_core::operator::Action;
use tideway_sources::status::{ClusterWriter, WriteError};

/// Logs each write.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogWriter;

#[async_trait::async_trait]
impl ClusterWriter for LogWriter {
    async fn write(&self, action: &Action) -> Result<(), WriteError> {
        match action {
            Action::SetIngress { service, ips } => {
                tracing::info!(%service, ?ips, "would set status.loadBalancer.ingress")
            }
            Action::Announce(a) => {
                tracing::info!(service = %a.service, node = ?a.node, eligible = ?a.eligible, "would announce")
            }
            Action::Withdraw(s) => tracing::info!(service = %s, "would withdraw the announcement"),
            Action::ProxyConfigStatus { name, status } => tracing::info!(
                proxyconfig = %name, selected = status.selected, programmed = status.programmed,
                failing = status.failing, "would write status"
            ),
            Action::PoolStatus { name, status } => {
                tracing::info!(pool = %name, stats = ?status.stats, valid = status.valid.status, "would write status")
            }
            Action::Event(_) => {}
        }
        Ok(())
    }
}

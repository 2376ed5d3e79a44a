//! What a sync changes on the node beside the dataplane's rules, behind one narrow trait
//! ([`NodeEffects`]): the UDP conntrack entries of endpoints gone ([`crate::conntrack`]), the
//! health-check listeners of `externalTrafficPolicy: Local` Services ([`crate::health`]) and
//! the `route_localnet` setting localhost NodePorts need ([`crate::sysctl`]). A real agent has
//! [`KernelEffects`]; the sync-loop tests give it [`MemoryEffects`], a conntrack table and a
//! listener list in memory that core's same decisions act on.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tideway_core::conntrack::{Flow, stale_udp_flows};
use tideway_core::model::ServiceName;
use tideway_core::plan::{HealthCheck, Ruleset};

use crate::dataplane::DataplaneError;
use crate::health::{HealthServers, ProxyHealth};

/// The node-side effects of a successful sync.
#[async_trait::async_trait]
pub trait NodeEffects: Send {
    /// Deletes the conntrack entries of UDP flows to endpoints `ruleset` no longer serves;
    /// how many were deleted.
    fn clean_udp_flows(&mut self, ruleset: &Ruleset) -> Result<usize, DataplaneError>;

    /// Sets `route_localnet=1` (kube-proxy sets it once, and never back); why it could not be
    /// set.
    fn enable_route_localnet(&mut self) -> Option<String>;

    /// Serves exactly `checks` on `addresses`; the listeners that could not be started.
    async fn sync_health_checks(
        &mut self,
        checks: &BTreeMap<ServiceName, HealthCheck>,
        addresses: &[IpAddr],
    ) -> Vec<String>;

    /// The health-check ports served now, sorted.
    fn health_check_ports(&self) -> Vec<u16>;
}

/// The effects on this node's kernel: ctnetlink, TCP listeners, `/proc/sys`.
pub struct KernelEffects {
    servers: HealthServers,
}

impl KernelEffects {
    /// Health-check listeners answering from `proxy`'s health.
    pub fn new(proxy: Arc<ProxyHealth>) -> KernelEffects {
        KernelEffects { servers: HealthServers::new(proxy) }
    }
}

#[async_trait::async_trait]
impl NodeEffects for KernelEffects {
    fn clean_udp_flows(&mut self, ruleset: &Ruleset) -> Result<usize, DataplaneError> {
        crate::conntrack::clean(ruleset)
    }

    fn enable_route_localnet(&mut self) -> Option<String> {
        match crate::sysctl::ensure(crate::sysctl::ROUTE_LOCALNET, "1") {
            Ok(true) => tracing::info!("set route_localnet=1 to serve NodePorts on 127.0.0.1"),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "cannot set route_localnet; NodePorts on 127.0.0.1 will not answer");
                return Some(e.to_string());
            }
        }
        None
    }

    async fn sync_health_checks(
        &mut self,
        checks: &BTreeMap<ServiceName, HealthCheck>,
        addresses: &[IpAddr],
    ) -> Vec<String> {
        self.servers.sync(checks, addresses).await
    }

    fn health_check_ports(&self) -> Vec<u16> {
        self.servers.ports()
    }
}

/// What [`MemoryEffects`] holds and was asked.
#[derive(Debug, Default)]
pub struct MemoryNode {
    /// The UDP conntrack table.
    pub udp_flows: Vec<Flow>,
    /// Every flow a clean-up deleted, in order.
    pub deleted: Vec<Flow>,
    /// How many clean-ups were asked for.
    pub cleanups: usize,
    /// `route_localnet` is 1.
    pub route_localnet: bool,
    /// The health checks served, by port: the Service and its local endpoints.
    pub health_checks: BTreeMap<u16, (ServiceName, usize)>,
}

/// A node in memory: clean-ups act on its UDP flow table with core's decision
/// ([`stale_udp_flows`]), as [`crate::conntrack::clean`] does on the kernel's.
#[derive(Clone, Default)]
pub struct MemoryEffects(Arc<Mutex<MemoryNode>>);

impl MemoryEffects {
    /// The node, to seed flows or read what was done.
    pub fn lock(&self) -> MutexGuard<'_, MemoryNode> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait::async_trait]
impl NodeEffects for MemoryEffects {
    fn clean_udp_flows(&mut self, ruleset: &Ruleset) -> Result<usize, DataplaneError> {
        let mut node = self.lock();
        node.cleanups += 1;
        let stale = stale_udp_flows(ruleset, &node.udp_flows);
        node.udp_flows.retain(|f| !stale.contains(f));
        node.deleted.extend(&stale);
        Ok(stale.len())
    }

    fn enable_route_localnet(&mut self) -> Option<String> {
        self.lock().route_localnet = true;
        None
    }

    async fn sync_health_checks(
        &mut self,
        checks: &BTreeMap<ServiceName, HealthCheck>,
        _addresses: &[IpAddr],
    ) -> Vec<String> {
        self.lock().health_checks =
            checks.values().map(|c| (c.port, (c.service.clone(), c.local_endpoints))).collect();
        Vec::new()
    }

    fn health_check_ports(&self) -> Vec<u16> {
        self.lock().health_checks.keys().copied().collect()
    }
}

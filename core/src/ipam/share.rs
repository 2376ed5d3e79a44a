//! When two Services may hold one address (MetalLB's sharing key and backend key).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{AllocError, LbRequest};
use crate::model::{ServiceName, TrafficPolicy};
use crate::net::Protocol;

/// What keeps two Services with the same sharing key off one address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SharingConflict {
    /// Both use the same protocol and port.
    #[error("both use port {protocol}/{port}")]
    Port {
        /// Protocol.
        protocol: Protocol,
        /// Port.
        port: u16,
    },
    /// One is `externalTrafficPolicy: Local`, the other `Cluster`, and their pod selectors
    /// differ, so no single node can serve both.
    #[error("externalTrafficPolicy is {ours:?} here and {theirs:?} there, with different pod selectors")]
    Policy {
        /// This Service's policy.
        ours: TrafficPolicy,
        /// The other's.
        theirs: TrafficPolicy,
    },
    /// Both are `Local` with different pod selectors.
    #[error("both have externalTrafficPolicy Local with different pod selectors")]
    Selector,
}

/// The parts of a request that decide sharing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) key: Option<String>,
    ports: Vec<(Protocol, u16)>,
    policy: TrafficPolicy,
    selector: BTreeMap<String, String>,
}

impl Terms {
    pub(crate) fn of(req: &LbRequest) -> Terms {
        Terms {
            key: req.sharing_key.clone(),
            ports: req.ports.clone(),
            policy: req.external_traffic_policy,
            selector: req.selector.clone(),
        }
    }

    /// Whether a Service with these terms may join `other` (named `by`) on `ip`.
    pub(crate) fn may_join(&self, other: &Terms, ip: IpAddr, by: &ServiceName) -> Result<(), AllocError> {
        if self.key.is_none() || self.key != other.key {
            return Err(AllocError::InUse {
                ip,
                by: by.clone(),
                ours: self.key.clone(),
                theirs: other.key.clone(),
            });
        }
        let conflict = |conflict| AllocError::SharingConflict { ip, with: by.clone(), conflict };
        if let Some(&(protocol, port)) = self.ports.iter().find(|p| other.ports.contains(p)) {
            return Err(conflict(SharingConflict::Port { protocol, port }));
        }
        let all_cluster = self.policy == TrafficPolicy::Cluster && other.policy == TrafficPolicy::Cluster;
        if all_cluster || self.selector == other.selector {
            Ok(())
        } else if self.policy != other.policy {
            Err(conflict(SharingConflict::Policy { ours: self.policy, theirs: other.policy }))
        } else {
            Err(conflict(SharingConflict::Selector))
        }
    }
}

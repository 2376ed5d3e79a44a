//! When two Services may hold one address (MetalLB's sharing key and backend key).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::error::{AllocError, SharingConflict};
use super::request::LbRequest;
use crate::model::{ServiceName, TrafficPolicy};
use crate::net::Protocol;

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

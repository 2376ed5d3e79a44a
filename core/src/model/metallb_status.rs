//! MetalLB's record of who announces a Service over layer 2 (`metallb.io/v1beta1`
//! `ServiceL2Status`, MetalLB v0.14 and later), as read: each of its speakers keeps one per
//! Service it announces, in MetalLB's namespace, under a generated name (`l2-c54z5`).
//!
//! The operator reads them with `--metallb-compat` to keep each address on the node MetalLB
//! announces it from when it takes over, while that node is eligible: clients' ARP caches and
//! held connections then stay where they are.

use super::service::ServiceName;

/// A `ServiceL2Status`: MetalLB announces [`Self::service`] from [`Self::node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceL2Status {
    /// The object's namespace (MetalLB's own, usually `metallb-system`).
    pub namespace: String,
    /// The object's name (generated: `l2-…`).
    pub name: String,
    /// `status.serviceNamespace` / `status.serviceName`: the Service announced.
    pub service: ServiceName,
    /// `status.node`: the node whose speaker announces it.
    pub node: String,
}

//! The Tideway operator: the cluster-wide decisions, made by one leader-elected replica.
//!
//! ```text
//!  source (Kubernetes watchers / file) --> SharedCluster
//!      | reconcile::run (while leading): take changes -> tideway_core::operator::Reconciler
//!      |     addresses (ipam), announcers (announce), ProxyConfig rollout, pool status, Events
//!      v
//!  ClusterWriter: server-side apply of Service status, L2Announcements, CRD status; Events
//!  election::run: a coordination.k8s.io Lease decides who leads (tideway_core::operator::lease)
//!  at start (--manage-crds): the cluster's CRDs brought to this release (tideway_sources::kube::crds)
//!  http: /healthz /readyz /metrics /api/v1/status; api: proxyconfigs, nodes, services
//! ```
//! Every decision is in `tideway_core::operator`; this crate moves data between the source,
//! the decisions and the writer, and says who may write.

#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod election;
pub mod http;
pub mod metrics;
pub mod reconcile;
pub mod writer;

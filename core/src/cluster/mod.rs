//! The cluster state every component reads from, with kube-proxy-style change tracking.
//!
//! Sources (a YAML file, kube-runtime watchers, the lab) call the event-shaped methods, one
//! set for every kind ([`ClusterState::apply`], [`ClusterState::delete`],
//! [`ClusterState::replace`] for one kind after a relist, [`ClusterState::reset`] for
//! everything); no-op updates are dropped, so `take_changes` reports only what can actually
//! differ. Each kind is defined once ([`StateKind`]) and listed once ([`for_each_kind`]); a kind
//! defined elsewhere (a test's) is kept by type ([`extra`], [`extra_kind!`](crate::extra_kind)).
//!
//! Files: `state` holds the shape and the readers; `registry` the kind trait and the list;
//! each kind's landing is in its own file (`services`, `kinds`, `written`, `pools`,
//! `metallb_status`, `service_cidrs`, `bgp_state`), over stores that know nothing of the state
//! (`store`, `slices`, `names`, `bgp`, `status_index`). No file imports one that imports it.
//!
//! Beside the Kubernetes kinds it keeps each node's agent liveness
//! ([`ClusterState::set_agent_liveness`]), which the operator learns from the agents' failure
//! detector rather than the API: a Node stays Ready when only its agent died. A liveness
//! change marks the node in [`Changes::nodes`]; a relist (`reset`) leaves liveness alone.

mod bgp;
mod bgp_state;
pub mod extra;
mod extra_store;
mod kinds;
mod liveness;
mod metallb_status;
mod names;
mod pools;
mod registry;
mod service_cidrs;
mod services;
mod slices;
mod state;
mod status_index;
mod store;
mod written;

pub use bgp::{BgpConflict, BgpKind, BgpObject, BgpSecret, BgpSet, BgpSpec};
pub use registry::{Keyed, KindVisitor, StateKind, for_each_kind};
pub use services::spec_version;
pub use slices::ServiceSlices;
pub use state::{Changes, ClusterState, Snapshot};

#[cfg(test)]
mod tests;

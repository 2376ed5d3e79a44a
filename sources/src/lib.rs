//! Where Tideway components get cluster objects from, and where they write back.
//!
//! ```text
//!   file:PATH  --FileSource--.
//!   kubernetes --KubeSource--+--> SharedCluster (a Store: the ClusterState, or the DNS
//!                            |     server's own view; synced, invalid objects)
//!   lab:DIR    --FileSource--'         |   (lab::LabDir: the lab's cluster file)
//!                                      v  take_changes()
//!                         agent / DNS / operator (decisions in tideway-core)
//!                                      |
//!                                      v  NodeStateSink: NodeProxyState (agent); ClusterWriter: decisions,
//!                                      |  LeaseStore: the leader election (operator)
//!                         Kubernetes (server-side apply) / lab files / memory (tests)
//! ```
//! Every source converts objects once, at the edge (`tideway_api::convert`, `tideway_api::crd`),
//! keeps the last valid version of an object whose update is invalid (and lists it in
//! [`SharedCluster::invalid_objects`]), and marks the state synced only after its first
//! complete view. The components above the [`Source`] trait do not know which source feeds
//! them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod file;
pub mod gossip;
pub mod kube;
pub mod lab;
pub mod lease;
pub mod metrics;
mod shared;
mod spec;
pub mod status;
pub mod supervise;

pub use file::FileSource;
pub use shared::{InvalidObjects, ObjectKey, SharedCluster, Store, kept_by};
pub use spec::{SourceSpec, SpecError};

/// Where a component's objects come from. A source writes into the [`SharedCluster`], marks it
/// synced once it delivered a complete view, and keeps it current until the returned future is
/// dropped.
pub trait Source: Send + 'static {
    /// Feeds `cluster` until cancelled.
    fn run(self, cluster: SharedCluster) -> impl Future<Output = ()> + Send;
}

impl Source for FileSource {
    fn run(self, cluster: SharedCluster) -> impl Future<Output = ()> + Send {
        FileSource::run(self, cluster)
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: how every long-running component is asked to stop.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

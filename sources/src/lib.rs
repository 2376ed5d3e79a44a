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
//! complete view. The components do not know which source feeds them: [`connect`] wires it
//! for all three.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod connect;
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

pub use connect::{Connect, Connected, connect};
pub use file::FileSource;
pub use shared::{InvalidObjects, ObjectKey, SharedCluster, Signals, Store, kept_by};
pub use spec::{SourceArgs, SourceSpec, SpecError};

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

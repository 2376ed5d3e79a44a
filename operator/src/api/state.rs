//! What the API answers from and writes through.

use std::sync::Arc;

use tideway_serve::auth::Authorizer;
use tideway_sources::SharedCluster;
use tideway_sources::status::ClusterWriter;

/// What the API answers from and writes through.
#[derive(Clone)]
pub struct ApiState {
    /// The operator's cluster view.
    pub cluster: SharedCluster,
    /// Where changes go.
    pub writer: Arc<dyn ClusterWriter>,
    /// Who may change (and, when reads are not open, read).
    pub auth: Arc<dyn Authorizer>,
    /// Reads need no token (the API listens on loopback only, or it was asked for).
    pub open_reads: bool,
}

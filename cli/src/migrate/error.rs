//! Why an input could not be read.

use std::path::PathBuf;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MigrateError {
    /// A file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// An input is not what it should be.
    #[error("{0}: {1}")]
    Input(String, String),
    /// No client for the cluster could be made.
    #[error("{0}")]
    Client(#[from] tideway_sources::kube::ClientError),
}

//! Why the control plane did not start or answer: the error of the control plane, its PKI and
//! the standalone one.

use std::time::Duration;

use super::apply::ApplyError;

/// Why the control plane did not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// `tideway-kube` is not where it was looked for.
    #[error(
        "the control plane binary tideway-kube was not found at {0} (build it with `make kube`, or set TIDEWAY_KUBE)"
    )]
    NoBinary(String),
    /// A command (kubeadm, ip) failed.
    #[error("`{command}`: {message}")]
    Command {
        /// The command line.
        command: String,
        /// What went wrong.
        message: String,
    },
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A component exited before the API server was ready.
    #[error("{component} exited before the API server was ready; the end of its log ({log}):\n{tail}")]
    Exited {
        /// Which.
        component: String,
        /// Its log.
        log: String,
        /// The log's last lines.
        tail: String,
    },
    /// The API server did not become ready in time.
    #[error("the API server was not ready after {0:?}")]
    NotReady(Duration),
    /// A kubeconfig could not be used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The API server refused a request.
    #[error("the API server: {0}")]
    Api(#[from] kube::Error),
    /// An object could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// A manifest that is not YAML.
    #[error("{path}: {message}")]
    Manifest {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

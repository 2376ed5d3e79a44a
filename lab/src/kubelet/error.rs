//! Why the kubelet stopped.

/// Why the kubelet stopped.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// The configuration is wrong.
    #[error("kubelet configuration: {0}")]
    Config(String),
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The kubeconfig or the API server.
    #[error("the API server: {0}")]
    Api(String),
}

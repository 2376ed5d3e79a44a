//! Why a query could not be forwarded.

/// Why a query could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No upstream is configured.
    #[error("no upstream servers configured")]
    NoUpstreams,
    /// Too many queries are already in flight, in all or from this client.
    #[error("too many concurrent upstream queries")]
    Overloaded,
    /// Every upstream failed or timed out.
    #[error("no upstream answered: {0}")]
    Failed(String),
}

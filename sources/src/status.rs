//! Where components write: the agent's `NodeProxyState` ([`NodeStateSink`]) and the
//! operator's decisions ([`ClusterWriter`]).
//!
//! Each is a narrow edge: the Kubernetes implementations use server-side apply
//! ([`crate::kube::KubeNodeStateSink`], [`crate::kube::KubeWriter`]); the memory twins record
//! what they were given and fail on demand, for tests of the loops around them.

use std::sync::{Arc, Mutex};

use tideway_api::crd::SpecChange;
use tideway_core::model::NodeProxyState;
use tideway_core::operator::Action;

/// Why a report could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The API server refused it.
    #[error("API server answered {code}: {message}")]
    Refused {
        /// HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The API server could not be reached or answered something unreadable.
    #[error("cannot reach the API server: {0}")]
    Transport(String),
    /// This source takes no writes of this kind (a YAML file).
    #[error("{0}")]
    ReadOnly(&'static str),
}

impl WriteError {
    /// True when trying again may succeed: a conflict (409), throttling (429), a server error
    /// (5xx) or no answer at all.
    pub fn is_retryable(&self) -> bool {
        match self {
            WriteError::Refused { code, .. } => matches!(code, 409 | 429 | 500..=599),
            WriteError::Transport(_) => true,
            WriteError::ReadOnly(_) => false,
        }
    }
}

/// Where the operator's decisions go.
#[async_trait::async_trait]
pub trait ClusterWriter: Send + Sync {
    /// Performs one write.
    async fn write(&self, action: &Action) -> Result<(), WriteError>;

    /// Changes ProxyConfig `name`'s spec as `change` says (REST control of the proxy mode; the
    /// change was checked against the spec the operator sees).
    async fn patch_proxy_config(&self, name: &str, change: &SpecChange) -> Result<(), WriteError> {
        let _ = (name, change);
        Err(WriteError::ReadOnly("this source takes no writes: the operator reads a file"))
    }
}

/// Records every write; fails the next writes as told.
#[derive(Debug, Clone, Default)]
pub struct MemoryWriter {
    written: Arc<Mutex<Vec<Action>>>,
    patches: Arc<Mutex<Vec<(String, SpecChange)>>>,
    failures: Arc<Mutex<Vec<WriteError>>>,
}

impl MemoryWriter {
    /// Every write that succeeded.
    pub fn written(&self) -> Vec<Action> {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every ProxyConfig change that succeeded: (name, change).
    pub fn patches(&self) -> Vec<(String, SpecChange)> {
        self.patches.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The next writes fail with these errors, in order.
    pub fn fail_next(&self, errors: Vec<WriteError>) {
        *self.failures.lock().unwrap_or_else(|e| e.into_inner()) = errors;
    }
}

#[async_trait::async_trait]
impl ClusterWriter for MemoryWriter {
    async fn write(&self, action: &Action) -> Result<(), WriteError> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if !failures.is_empty() {
            return Err(failures.remove(0));
        }
        drop(failures);
        self.written.lock().unwrap_or_else(|e| e.into_inner()).push(action.clone());
        Ok(())
    }

    async fn patch_proxy_config(&self, name: &str, change: &SpecChange) -> Result<(), WriteError> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if !failures.is_empty() {
            return Err(failures.remove(0));
        }
        drop(failures);
        self.patches.lock().unwrap_or_else(|e| e.into_inner()).push((name.to_string(), change.clone()));
        Ok(())
    }
}

/// Where an agent publishes its node's report.
#[async_trait::async_trait]
pub trait NodeStateSink: Send + Sync {
    /// Writes `state` (creating the object if needed).
    async fn publish(&self, state: &NodeProxyState) -> Result<(), WriteError>;

    /// The last report of the agent before this one on `node`, if it can be read (what
    /// [`tideway_core::liveness::inherited_stop`] reads its stop from).
    async fn last_report(&self, _node: &str) -> Option<NodeProxyState> {
        None
    }
}

/// Records every report; fails while a failure is set.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    published: Arc<Mutex<Vec<NodeProxyState>>>,
    failure: Arc<Mutex<Option<WriteError>>>,
}

impl MemorySink {
    /// Every report written so far.
    pub fn published(&self) -> Vec<NodeProxyState> {
        self.published.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes the next writes fail with `e` (None: succeed again).
    pub fn fail_with(&self, e: Option<WriteError>) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = e;
    }
}

#[async_trait::async_trait]
impl NodeStateSink for MemorySink {
    async fn publish(&self, state: &NodeProxyState) -> Result<(), WriteError> {
        if let Some(e) = self.failure.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(e);
        }
        self.published.lock().unwrap_or_else(|e| e.into_inner()).push(state.clone());
        Ok(())
    }
}

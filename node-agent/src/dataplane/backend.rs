//! What every backend is to the agent: the [`Dataplane`] trait, what it applies ([`Update`]),
//! what it finds ([`Drift`]) and how it fails ([`DataplaneError`]).

use tideway_core::config::ProxyMode;
use tideway_core::drift::DriftKind;
use tideway_core::program::ChangeSet;

use super::desired::Desired;
use super::keep::Keep;
use super::peer;
use crate::exec::CommandError;

/// What to apply.
#[derive(Debug, Clone, Copy)]
pub enum Update<'a> {
    /// Replace everything this backend owns with the desired programs.
    Full,
    /// Apply these change sets (IPv4, IPv6) on top of the last applied programs.
    Changes([&'a ChangeSet; 2]),
}

/// A difference between the kernel and the last applied programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// What kind of difference (the metric label).
    pub kind: DriftKind,
    /// The object (`chain ip tideway services`, `set KUBE-CLUSTER-IP`, ...).
    pub object: String,
    /// What differs.
    pub detail: String,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.object, self.kind, self.detail)
    }
}

/// Why a kernel call failed.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A tool exited with an error.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A tool's output could not be understood.
    #[error("unexpected output from {tool}: {message}")]
    Parse {
        /// The tool.
        tool: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A netlink request failed.
    #[error("netlink: {0}")]
    Netlink(#[from] NetlinkError),
    /// kube-proxy programs the names this mode would write: nothing was written.
    #[error(transparent)]
    KubeProxy(#[from] peer::KubeProxySeen),
}

/// Why a netlink exchange failed; errnos are kept, not folded into text.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The socket failed (open, send, receive).
    #[error("{context}: {source}")]
    Socket {
        /// What was being done.
        context: &'static str,
        /// The OS error (its `raw_os_error` is the errno).
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused messages.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<Refusal>),
    /// The kernel's answer did not parse or did not add up.
    #[error("{0}")]
    Protocol(String),
}

/// One message the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {}{}", std::io::Error::from_raw_os_error(*.errno), .message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
pub struct Refusal {
    /// What the message asked.
    pub what: String,
    /// The errno the kernel answered (positive).
    pub errno: i32,
    /// The kernel's extended message, if any.
    pub message: Option<String>,
}

impl NetlinkError {
    /// The socket error of `context`.
    pub fn socket(context: &'static str) -> impl FnOnce(std::io::Error) -> DataplaneError {
        move |source| DataplaneError::Netlink(NetlinkError::Socket { context, source })
    }
}

/// How far a [`Dataplane::cleanup`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retired {
    /// Nothing of the backend is left.
    Done,
    /// Objects stay for established connections (what is waiting, for the status).
    Draining(String),
}

/// A kernel backend.
pub trait Dataplane: Send {
    /// The mode it implements.
    fn mode(&self) -> ProxyMode;

    /// Programs `desired` ([IPv4, IPv6]) wholesale, or applies `update` on top of the last
    /// programs (asking `desired` for whole programs only where a change set is not enough).
    /// On error the kernel keeps what it had (one transaction where the kernel offers one)
    /// and the caller must follow up with a full update.
    fn apply(&mut self, desired: &Desired<'_>, update: Update<'_>) -> Result<(), DataplaneError>;

    /// Compares the kernel with `desired`; `deep` also compares set and map members, which is
    /// slower at scale.
    fn verify(&mut self, desired: &Desired<'_>, deep: bool) -> Result<Vec<Drift>, DataplaneError>;

    /// Repairs what `verify` found. Backends that can rewrite single objects do only that;
    /// the others rewrite everything.
    fn repair(&mut self, desired: &Desired<'_>, _drift: &[Drift]) -> Result<(), DataplaneError> {
        self.apply(desired, Update::Full)
    }

    /// Removes this backend's objects except those in `keep` (after a mode switch, or when an
    /// earlier run left them). Objects still carrying established connections may stay until
    /// they drain: the caller repeats the call while it returns [`Retired::Draining`].
    fn cleanup(&mut self, keep: &Keep) -> Result<Retired, DataplaneError>;

    /// True when objects of this backend exist in the kernel (leftovers of an earlier run).
    fn present(&mut self) -> Result<bool, DataplaneError>;

    /// Removes every object of this backend at once, established connections or not (an
    /// uninstall's clean-up).
    fn remove_all(&mut self) -> Result<(), DataplaneError> {
        self.cleanup(&Keep::default()).map(|_| ())
    }

    /// The kernel settings this backend needs and could not set (`name=value: why`).
    fn unset_sysctls(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What [`cleanup_node`] did for one backend.
#[derive(Debug)]
pub enum Cleaned {
    /// The backend had objects; they are gone.
    Removed,
    /// The backend had no object.
    NothingThere,
    /// The objects of Tideway's names are kube-proxy's: left alone.
    LeftToKubeProxy(peer::KubeProxySeen),
}

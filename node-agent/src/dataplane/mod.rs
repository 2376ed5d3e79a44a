//! Dataplanes: one backend per proxy mode, applying what core rendered.
//!
//! A dataplane makes no decisions about Services: it receives the [`Desired`] programs of both
//! families (rendered whole only when a backend asks) and, for incremental syncs, the
//! [`ChangeSet`]s, turns them into kernel calls with the core printers, reads back what the kernel holds to detect drift, and removes its objects when
//! the mode changes.

mod desired;
mod iptables;
mod ipvs;
mod ipvs_netlink;
pub mod memory;
pub(crate) mod netlink;
pub mod nft_netlink;
mod nftables;
mod observe;
pub mod peer;

use std::collections::BTreeSet;

use tideway_core::config::{ProxyMode, ProxySettings};
pub use tideway_core::drift::DriftKind;
use tideway_core::program::{ChangeSet, Program};

pub use desired::Desired;
pub use iptables::{BACKEND_ENV as IPTABLES_BACKEND_ENV, Iptables, IptablesBackend};
pub use ipvs::Ipvs;
pub use nftables::Nftables;

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

/// Objects a cleanup must leave alone because the new mode uses them too (iptables and IPVS
/// share chain names such as `KUBE-SERVICES`).
#[derive(Debug, Clone, Default)]
pub struct Keep {
    /// `(table, chain)` of iptables chains to keep.
    pub chains: BTreeSet<(String, String)>,
    /// `(table, chain, rule arguments)` of built-in chain jumps to keep.
    pub jumps: BTreeSet<(String, String, String)>,
}

impl Keep {
    /// Everything `programs` uses in iptables tables.
    pub fn of(programs: [&Program; 2]) -> Keep {
        let mut keep = Keep::default();
        for p in programs {
            if !p.mode.writes_iptables() {
                continue;
            }
            for c in p.assemble().chains {
                keep.chains.insert((c.def.table.to_string(), c.def.name.to_string()));
            }
            keep.chains.insert(("filter".to_string(), iptables::OWNER_MARK.to_string()));
            for (t, c, a) in tideway_core::render::iptables::text::builtin_jumps(p) {
                keep.jumps.insert((t.to_string(), c, a));
            }
        }
        keep
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

/// Removes every kernel object any mode of the agent programs on this node, as `kube-proxy
/// --cleanup` does (`tideway agent --cleanup`): the nftables tables, the iptables chains and
/// jumps in both iptables backends (legacy and nft), IPVS's virtual servers, `kube-ipvs0` and
/// `KUBE-*` ipsets, without waiting for connections to drain. Kernel settings stay. Returns,
/// for each backend, what it did, or why it could not be cleaned.
/// Objects of Tideway's names count whoever wrote them, except where kube-proxy is seen
/// ([`peer::kube_proxy`]): iptables and IPVS modes then leave the `KUBE-*` names to it.
pub fn cleanup_node() -> Vec<(&'static str, Result<Cleaned, DataplaneError>)> {
    fn clean(
        mut backend: impl Dataplane,
        found: Result<bool, DataplaneError>,
    ) -> Result<Cleaned, DataplaneError> {
        if !found? {
            return Ok(Cleaned::NothingThere);
        }
        backend.cleanup(&Keep::default())?;
        Ok(Cleaned::Removed)
    }
    let kube_proxy = peer::kube_proxy();
    let shared_names = |found: Result<bool, DataplaneError>| match (&kube_proxy, found) {
        (Some(seen), Ok(true)) => Err(seen.clone()),
        (_, found) => Ok(found),
    };
    let mut nft = Nftables::new();
    let nft_found = nft.present();
    let mut ipvs = Ipvs::new(Iptables::detect(), Default::default()).without_drain();
    let ipvs_found = ipvs.has_objects();
    let iptables = |backend| {
        let ipt = Iptables::new(backend);
        match shared_names(ipt.has_chains()) {
            Err(seen) => Ok(Cleaned::LeftToKubeProxy(seen)),
            Ok(found) => clean(ipt, found),
        }
    };
    vec![
        ("nftables", clean(nft, nft_found)),
        (
            "ipvs",
            match shared_names(ipvs_found) {
                Err(seen) => Ok(Cleaned::LeftToKubeProxy(seen)),
                Ok(found) => clean(ipvs, found),
            },
        ),
        ("iptables-nft", iptables(IptablesBackend::Nft)),
        ("iptables-legacy", iptables(IptablesBackend::Legacy)),
    ]
}

/// Makes the dataplane for a mode's settings: [`for_settings`] in a real agent, a
/// [`memory::SharedKernel`] in tests of the sync loop.
pub type Factory = Box<dyn Fn(&ProxySettings) -> Box<dyn Dataplane> + Send + Sync>;

/// The dataplane for `settings.mode`.
pub fn for_settings(settings: &ProxySettings) -> Box<dyn Dataplane> {
    match settings.mode {
        ProxyMode::Nftables => Box::new(Nftables::new()),
        ProxyMode::Iptables => Box::new(Iptables::detect()),
        ProxyMode::Ipvs => Box::new(Ipvs::new(Iptables::detect(), settings.ipvs.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_refusals_keep_their_errno() {
        let refusal =
            Refusal { what: "add element".into(), errno: 17, message: Some("Set element exists".into()) };
        let e = DataplaneError::from(NetlinkError::Refused(vec![refusal.clone()]));
        assert_eq!(e.to_string(), "netlink: add element: File exists (os error 17) (Set element exists)");
        let DataplaneError::Netlink(NetlinkError::Refused(r)) = e else { panic!("typed") };
        assert_eq!(r[0].errno, 17);
        let socket = NetlinkError::socket("netlink bind")(std::io::Error::from_raw_os_error(1));
        let DataplaneError::Netlink(NetlinkError::Socket { source, .. }) = socket else { panic!("typed") };
        assert_eq!(source.raw_os_error(), Some(1));
    }
}

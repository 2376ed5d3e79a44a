//! Dataplanes: one backend per proxy mode, applying what core rendered.
//!
//! A dataplane makes no decisions about Services: it receives the [`Desired`] programs of both
//! families (rendered whole only when a backend asks) and, for incremental syncs, the
//! [`ChangeSet`]s, turns them into kernel calls with the core printers, reads back what the kernel holds to detect drift, and removes its objects when
//! the mode changes.

pub(crate) mod backend;
mod desired;
mod iptables;
mod ipvs;
mod keep;
pub mod memory;
mod nftables;
mod observe;
pub mod peer;

use tideway_core::config::{ProxyMode, ProxySettings};
pub use tideway_core::drift::DriftKind;

pub use backend::{Cleaned, Dataplane, DataplaneError, Drift, NetlinkError, Refusal, Retired, Update};
pub use desired::Desired;
pub use iptables::{BACKEND_ENV as IPTABLES_BACKEND_ENV, Iptables, IptablesBackend};
pub use ipvs::Ipvs;
pub use keep::Keep;
pub use nftables::Nftables;

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

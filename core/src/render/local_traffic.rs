//! kube-proxy's local-traffic detector (`--detect-local-mode`), as one match every backend's
//! lowering uses.

use crate::plan::{LocalTraffic, NodePlan};
use crate::program::Match;

/// kube-proxy's local-traffic detector as one condition: the packet is pod traffic (`local`)
/// or it is not. `None` without a detector. Source networks are tested by the family's first,
/// as kube-proxy's iptables detector does.
pub(crate) fn detector(np: &NodePlan, local: bool) -> Option<Match> {
    match &np.local {
        LocalTraffic::Undetected => None,
        LocalTraffic::Sources(nets) => nets.first().map(|n| Match::Src(*n, !local)),
        LocalTraffic::Interface { name, prefix } => {
            Some(Match::InInterface { name: name.as_str().into(), prefix: *prefix, neg: !local })
        }
    }
}

//! UDP conntrack cleanup: list the UDP flows over ctnetlink, let core decide which are stale,
//! delete exactly those over the same socket.

use tideway_core::conntrack::stale_udp_flows;
use tideway_core::net::IpFamily;
use tideway_core::plan::Ruleset;

use crate::dataplane::{DataplaneError, NetlinkError};
use crate::netlink::conntrack::Conntrack;

/// Deletes stale UDP flows; returns how many were deleted.
pub fn clean(ruleset: &Ruleset) -> Result<usize, DataplaneError> {
    let mut ct = Conntrack::open()?;
    let mut flows = Vec::new();
    for family in IpFamily::ALL {
        match ct.udp_flows(family) {
            Ok(f) => flows.extend(f),
            // A family whose conntrack is not loaded has no flows to clean.
            Err(DataplaneError::Netlink(NetlinkError::Refused(r))) => {
                tracing::debug!(family = family.label(), refused = ?r, "no conntrack table to read");
            }
            Err(e) => return Err(e),
        }
    }
    let stale = stale_udp_flows(ruleset, &flows);
    if stale.is_empty() {
        return Ok(0);
    }
    ct.delete(&stale)
}

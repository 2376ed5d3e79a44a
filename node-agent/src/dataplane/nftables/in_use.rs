//! Connections first: when our table is gone (deleted, or flushed with the rest of the
//! ruleset) while conntrack still tracks connections through Services, those connections are
//! dark until a NAT chain is hooked again. A full sync (or the repair that rewrites the table
//! the drift check found gone) then programs the Services that conntrack shows in use first,
//! in a transaction of their own, and the full transaction follows at once and replaces it:
//! those connections come back within one small commit instead of after the whole program.
//! (A TCP connection that carried a segment meanwhile is lost anyway: the endpoint's segment
//! reached the node untranslated and was answered with a reset.)

use std::collections::BTreeSet;

use tideway_core::conntrack::{Flow, plans_in_use};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::{PlanKey, Ruleset};

use crate::conntrack_netlink::Conntrack;
use crate::dataplane::nft_netlink::NftNetlink;
use crate::dataplane::{DataplaneError, Desired};

/// The first transaction is left out when the ports in use are more than one in this many
/// of all: it would then cost nearly as much as the full one it delays.
const AT_MOST_ONE_IN: usize = 4;

/// What goes first: the families whose table is gone, and the service ports of theirs that
/// conntrack shows in use.
#[derive(Debug, Default)]
pub(super) struct First {
    pub(super) families: Vec<IpFamily>,
    pub(super) ports: BTreeSet<PlanKey>,
}

/// The service ports to program first: in each family whose table is gone, those conntrack
/// shows in use. Nothing where the table is there (a full transaction replaces it atomically,
/// and established connections keep being translated meanwhile), nor when conntrack cannot be
/// read.
pub(super) fn first(nl: &mut NftNetlink, desired: &Desired<'_>) -> Result<First, DataplaneError> {
    let ruleset = desired.ruleset();
    let mut families = Vec::new();
    for family in IpFamily::ALL {
        if ruleset.plans(family).next().is_some() && !nl.has_table(family)? {
            families.push(family);
        }
    }
    if families.is_empty() {
        return Ok(First::default());
    }
    let in_use = match ports_in_use(ruleset, &families) {
        Ok(ports) => ports,
        Err(e) => {
            tracing::warn!(error = %e, "conntrack could not be read: the full program goes in at once");
            return Ok(First::default());
        }
    };
    if in_use.is_empty() || in_use.len() * AT_MOST_ONE_IN > ruleset.services.len() {
        return Ok(First::default());
    }
    Ok(First { families, ports: in_use })
}

/// Every service port a conntrack entry of `families` was sent to.
fn ports_in_use(ruleset: &Ruleset, families: &[IpFamily]) -> Result<BTreeSet<PlanKey>, DataplaneError> {
    let mut conntrack = Conntrack::open()?;
    let mut ports = BTreeSet::new();
    if conntrack.count()? == 0 {
        return Ok(ports);
    }
    for &family in families {
        let flows = conntrack.every_flow(family)?;
        for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            let of: Vec<Flow> = flows.iter().filter(|(p, _)| *p == protocol).map(|(_, f)| *f).collect();
            ports.extend(plans_in_use(ruleset, protocol, &of));
        }
    }
    Ok(ports)
}

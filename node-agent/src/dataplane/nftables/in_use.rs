//! Connections first: when our table is gone (deleted, or flushed with the rest of the
//! ruleset) while conntrack still tracks connections through Services, those connections are
//! dark until a NAT chain is hooked again. A full sync (or the repair that rewrites the table
//! the drift check found gone) then programs the Services that conntrack shows in use first,
//! in a transaction of their own, and the full transaction follows at once and replaces it:
//! those connections come back within one small commit instead of after the whole program.
//! (A TCP connection that carried a segment meanwhile is lost anyway: the endpoint's segment
//! reached the node untranslated and was answered with a reset.)

use std::collections::BTreeSet;

use tideway_core::conntrack::{Flow, ports_first};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::PlanKey;

use crate::dataplane::backend::DataplaneError;
use crate::dataplane::desired::Desired;
use crate::netlink::conntrack::Conntrack;
use crate::netlink::nft::NftNetlink;

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
    let flows = match tracked(&families) {
        Ok(flows) => flows,
        Err(e) => {
            tracing::warn!(error = %e, "conntrack could not be read: the full program goes in at once");
            return Ok(First::default());
        }
    };
    Ok(First { ports: ports_first(ruleset, &flows), families })
}

/// Every flow conntrack tracks in `families` (none read when it tracks nothing at all).
fn tracked(families: &[IpFamily]) -> Result<Vec<(Protocol, Flow)>, DataplaneError> {
    let mut conntrack = Conntrack::open()?;
    if conntrack.count()? == 0 {
        return Ok(Vec::new());
    }
    let mut flows = Vec::new();
    for &family in families {
        flows.extend(conntrack.every_flow(family)?);
    }
    Ok(flows)
}

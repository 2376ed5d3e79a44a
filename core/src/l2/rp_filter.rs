//! Reverse-path filtering on the interfaces a node announces on, the decision half: which of
//! them drop what clients send to the addresses announced there.
//!
//! The kernel validates the source of every packet it receives while `rp_filter` is on
//! (`fib_validate_source`). On an interface holding no IPv4 address, a packet whose route
//! back leaves by another interface is dropped, in strict (1) and loose (2) mode alike. A
//! pool's `l2.interfaces` often names a VLAN or macvlan interface made only to carry
//! LoadBalancer traffic; without an address of its own, ARP is answered there (the announcer
//! reads frames below IP) but the connections that follow die in silence. The agent reports
//! such interfaces so the operator of the node sees why.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// An interface answering for IPv4 addresses whose kernel drops the packets sent to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppingInterface {
    /// The interface.
    pub interface: String,
    /// Its effective `rp_filter` mode ([`effective_rp_filter`]).
    pub rp_filter: u8,
}

impl std::fmt::Display for DroppingInterface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} has no IPv4 address while reverse-path filtering is on (rp_filter {}): the kernel \
             drops packets sent to the addresses announced there; give it an address",
            self.interface, self.rp_filter
        )
    }
}

/// The mode the kernel applies on an interface: the larger of `net.ipv4.conf.all.rp_filter`
/// and the interface's own (`IN_DEV_MAXCONF`).
pub fn effective_rp_filter(all: u8, own: u8) -> u8 {
    all.max(own)
}

/// Of the interfaces in `on` (addresses to answer for, per interface: [`super::announced_on`]),
/// those answering for an IPv4 address that hold no IPv4 address themselves (`has_ipv4` asks
/// the node) while their effective `rp_filter` is on, in name order.
pub fn dropping_interfaces(
    on: &BTreeMap<String, BTreeSet<IpAddr>>,
    has_ipv4: impl Fn(&str) -> bool,
    rp_filter: impl Fn(&str) -> u8,
) -> Vec<DroppingInterface> {
    on.iter()
        .filter(|(_, ips)| ips.iter().any(IpAddr::is_ipv4))
        .filter(|(name, _)| !has_ipv4(name))
        .filter_map(|(name, _)| {
            let mode = rp_filter(name);
            (mode != 0).then(|| DroppingInterface { interface: name.clone(), rp_filter: mode })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(rows: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<IpAddr>> {
        rows.iter()
            .map(|(i, ips)| (i.to_string(), ips.iter().map(|ip| ip.parse().unwrap()).collect()))
            .collect()
    }

    #[test]
    fn only_an_unaddressed_interface_with_filtering_on_and_ipv4_to_answer_for_drops() {
        let on = on(&[
            ("eth0", &["172.18.255.200"]),
            ("lb0", &["172.18.255.201"]),
            ("lb1", &["172.18.255.202", "fc00::1"]),
            ("lb6", &["fc00::2"]),
            ("open", &["172.18.255.203"]),
        ]);
        let has_ipv4 = |i: &str| i == "eth0";
        let mode = |i: &str| if i == "open" { 0 } else { effective_rp_filter(2, u8::from(i == "lb1")) };
        let found = dropping_interfaces(&on, has_ipv4, mode);
        assert_eq!(
            found,
            [
                DroppingInterface { interface: "lb0".into(), rp_filter: 2 },
                DroppingInterface { interface: "lb1".into(), rp_filter: 2 },
            ]
        );
        assert!(found[0].to_string().starts_with("lb0 has no IPv4 address"), "{}", found[0]);
    }

    #[test]
    fn the_kernel_applies_the_larger_of_all_and_the_interfaces_own_mode() {
        assert_eq!(effective_rp_filter(0, 0), 0);
        assert_eq!(effective_rp_filter(0, 1), 1);
        assert_eq!(effective_rp_filter(2, 1), 2);
        assert_eq!(effective_rp_filter(1, 0), 1);
    }

    #[test]
    fn nothing_drops_with_filtering_off_everywhere() {
        let on = on(&[("lb0", &["172.18.255.201"])]);
        assert!(dropping_interfaces(&on, |_| false, |_| 0).is_empty());
    }
}

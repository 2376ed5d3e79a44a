//! A lab pod's key (namespace and name) and the ports its server listens on.

use std::collections::BTreeSet;

use crate::control::PodState;

/// A pod's namespace and name.
pub(super) fn pod_key(p: &PodState) -> (String, String) {
    (p.namespace.clone(), p.name.clone())
}

/// The ports pod `p` serves on: those declared, or 80.
pub(super) fn server_ports(p: &PodState) -> BTreeSet<i32> {
    let ports: BTreeSet<i32> = p.ports.iter().map(|c| c.port).collect();
    if ports.is_empty() { BTreeSet::from([80]) } else { ports }
}

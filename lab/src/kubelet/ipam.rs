//! Pod addresses from the node's pod CIDR, as a CNI's host-local IPAM hands them out: the
//! lowest free address after the gateway (the CIDR's first address, on the node's side of every
//! pod's veth), kept per pod UID in the node's state directory (`ipam.json`) so a restarted
//! kubelet gives its running pods the addresses they have.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The node's pod addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipam {
    net: (Ipv4Addr, u8),
    /// Pod UID -> address.
    assigned: BTreeMap<String, Ipv4Addr>,
    file: Option<PathBuf>,
}

/// The pod CIDR is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no address left in the pod CIDR {0}/{1}")]
pub struct Exhausted(pub Ipv4Addr, pub u8);

impl Ipam {
    /// An allocator for `net` holding nothing, kept in memory only.
    pub fn new(net: (Ipv4Addr, u8)) -> Ipam {
        Ipam { net, assigned: BTreeMap::new(), file: None }
    }

    /// The allocator kept in `file` (what it held, if it exists).
    pub fn load(net: (Ipv4Addr, u8), file: &Path) -> Ipam {
        let assigned = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| serde_json::from_str::<BTreeMap<String, Ipv4Addr>>(&t).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, ip)| crate::control::in_net(*ip, net))
            .collect();
        Ipam { net, assigned, file: Some(file.to_path_buf()) }
    }

    /// The gateway: the CIDR's first usable address.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.net.0) + 1)
    }

    /// The address of pod `uid`, allocating the lowest free one if it has none.
    pub fn assign(&mut self, uid: &str) -> Result<Ipv4Addr, Exhausted> {
        if let Some(ip) = self.assigned.get(uid) {
            return Ok(*ip);
        }
        let base = u32::from(self.net.0);
        let size = 1u32.checked_shl(32 - u32::from(self.net.1)).unwrap_or(0);
        let taken: std::collections::BTreeSet<Ipv4Addr> = self.assigned.values().copied().collect();
        // Skip the network address, the gateway and the broadcast address.
        let free =
            (2..size.saturating_sub(1)).map(|i| Ipv4Addr::from(base + i)).find(|ip| !taken.contains(ip));
        let ip = free.ok_or(Exhausted(self.net.0, self.net.1))?;
        self.assigned.insert(uid.to_string(), ip);
        self.save();
        Ok(ip)
    }

    /// The address pod `uid` holds.
    pub fn get(&self, uid: &str) -> Option<Ipv4Addr> {
        self.assigned.get(uid).copied()
    }

    /// Gives pod `uid`'s address back.
    pub fn release(&mut self, uid: &str) {
        if self.assigned.remove(uid).is_some() {
            self.save();
        }
    }

    /// Gives back every address whose pod is not in `live`.
    pub fn retain(&mut self, live: &std::collections::BTreeSet<String>) {
        let before = self.assigned.len();
        self.assigned.retain(|uid, _| live.contains(uid));
        if self.assigned.len() != before {
            self.save();
        }
    }

    fn save(&self) {
        let Some(file) = &self.file else { return };
        let text = serde_json::to_string_pretty(&self.assigned).expect("addresses serialize");
        if let Err(e) = tideway_sources::lab::write_atomically(file, text.as_bytes()) {
            tracing::warn!(file = %file.display(), error = %e, "could not keep the pod addresses");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_start_after_the_gateway_are_reused_and_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("tideway-ipam-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ipam.json");
        let net = (Ipv4Addr::new(10, 10, 1, 0), 24);
        let mut ipam = Ipam::load(net, &file);
        assert_eq!(ipam.gateway(), Ipv4Addr::new(10, 10, 1, 1));
        assert_eq!(ipam.assign("a").unwrap(), Ipv4Addr::new(10, 10, 1, 2));
        assert_eq!(ipam.assign("b").unwrap(), Ipv4Addr::new(10, 10, 1, 3));
        assert_eq!(ipam.assign("a").unwrap(), Ipv4Addr::new(10, 10, 1, 2), "the same pod, the same address");
        ipam.release("a");
        assert_eq!(ipam.assign("c").unwrap(), Ipv4Addr::new(10, 10, 1, 2), "the lowest free one");
        let again = Ipam::load(net, &file);
        assert_eq!(again.get("b"), Some(Ipv4Addr::new(10, 10, 1, 3)));
        assert_eq!(again.get("c"), Some(Ipv4Addr::new(10, 10, 1, 2)));
        let mut small = Ipam::new((Ipv4Addr::new(10, 10, 2, 0), 30));
        assert_eq!(small.assign("x").unwrap(), Ipv4Addr::new(10, 10, 2, 2));
        assert_eq!(small.assign("y"), Err(Exhausted(Ipv4Addr::new(10, 10, 2, 0), 30)));
        let mut live = std::collections::BTreeSet::new();
        live.insert("c".to_string());
        let mut ipam = Ipam::load(net, &file);
        ipam.retain(&live);
        assert_eq!(Ipam::load(net, &file).get("b"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

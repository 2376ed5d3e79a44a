//! The capability the agent cannot work without: `CAP_NET_ADMIN`, read from the effective set
//! in `/proc/self/status`, so that an agent started without it stops at once and says so
//! instead of failing every sync.

/// `CAP_NET_ADMIN`'s bit in a capability set.
const CAP_NET_ADMIN: u32 = 12;

/// The effective capability set in a `/proc/<pid>/status` text.
pub fn effective(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// True when `caps` holds `CAP_NET_ADMIN`.
pub fn net_admin_in(caps: u64) -> bool {
    caps & (1 << CAP_NET_ADMIN) != 0
}

/// True unless this process is known to lack `CAP_NET_ADMIN` (an unreadable status file
/// stops nothing).
pub fn has_net_admin() -> bool {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| effective(&s)).is_none_or(net_admin_in)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_set() {
        let root = "Name:\ttideway\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n";
        let nobody = "Name:\ttideway\nCapEff:\t0000000000000000\n";
        let only_net_admin = "CapEff:\t0000000000001000\n";
        assert!(net_admin_in(effective(root).unwrap()));
        assert!(!net_admin_in(effective(nobody).unwrap()));
        assert!(net_admin_in(effective(only_net_admin).unwrap()));
        assert_eq!(effective("Name: x\n"), None);
    }
}

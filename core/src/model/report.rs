//! When an agent writes its `NodeProxyState`.
//!
//! Every write lands in etcd and in every watcher of the kind, on every node: a report is
//! rewritten only when what its readers see changes ([`NodeProxyState::same_for_readers`]),
//! never more often than `min_interval` (the changes of that window coalesce into one write),
//! and a change waits this node's share of the jitter first ([`report_jitter`]), so a change
//! every node sees at once (a ProxyConfig, a Service edit) does not make them all write in the
//! same second. Counts and the last sync time ride along with the next write, at the latest
//! after `refresh`.

use std::time::Duration;

use super::status::NodeProxyState;

/// How often an agent may write its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportPolicy {
    /// A changed report waits at least this long after the previous write.
    pub min_interval: Duration,
    /// A changed report waits at least this long after the change was first seen (this node's
    /// jitter, see [`report_jitter`]).
    pub settle: Duration,
    /// A report whose readers would see nothing new is rewritten this often (counts, sync time).
    pub refresh: Duration,
}

/// Whether the report is due now. `last`: the report last written and how long ago; `pending`:
/// how long `current` has differed from it for its readers (zero if it does not).
pub fn report_due(
    last: Option<(&NodeProxyState, Duration)>,
    current: &NodeProxyState,
    pending: Duration,
    policy: &ReportPolicy,
) -> bool {
    match last {
        None => true,
        Some((prev, age)) if !prev.same_for_readers(current) => {
            age >= policy.min_interval && pending >= policy.settle
        }
        Some((_, age)) => age >= policy.refresh,
    }
}

/// This node's delay before writing a change: spread evenly over `[0, max)` by its name
/// (FNV-1a), the same on every restart, different between nodes.
pub fn report_jitter(node: &str, max: Duration) -> Duration {
    let millis = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if millis == 0 {
        return Duration::ZERO;
    }
    let hash = node
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    Duration::from_millis(hash % millis)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn policy() -> ReportPolicy {
        ReportPolicy { min_interval: S(10), settle: S(2), refresh: S(60) }
    }

    fn report() -> NodeProxyState {
        NodeProxyState { node: "n".into(), ready: true, service_ports: 1, ..Default::default() }
    }

    #[test]
    fn what_readers_see_decides_and_counts_wait_for_the_refresh() {
        let a = report();
        let churned = NodeProxyState {
            service_ports: 2,
            endpoints: 40,
            rules: 300,
            last_sync: Some(SystemTime::UNIX_EPOCH + S(9)),
            last_sync_duration: Some(S(1)),
            ..a.clone()
        };
        assert!(report_due(None, &a, Duration::ZERO, &policy()), "first report at once");
        assert!(!report_due(Some((&a, S(59))), &churned, S(59), &policy()), "counts and times only");
        assert!(report_due(Some((&a, S(60))), &churned, Duration::ZERO, &policy()), "refreshed");

        let changes = [
            NodeProxyState { ready: false, ..a.clone() },
            NodeProxyState { last_error: Some("nft: exit 1".into()), ..a.clone() },
            NodeProxyState { proxy_config_generation: Some(3), ..a.clone() },
            NodeProxyState { drift_repairs: 1, ..a.clone() },
            NodeProxyState { announcing: vec!["192.0.2.1".parse().unwrap()], ..a.clone() },
            NodeProxyState { programmed_version: Some(2), ..a.clone() },
            NodeProxyState { missing_interfaces: vec!["vlan100".into()], ..a.clone() },
        ];
        for c in &changes {
            assert!(!a.same_for_readers(c), "{c:?}");
            assert!(report_due(Some((&a, S(10))), c, S(2), &policy()), "{c:?}");
            assert!(!report_due(Some((&a, S(9))), c, S(9), &policy()), "coalesced: {c:?}");
            assert!(!report_due(Some((&a, S(30))), c, S(1), &policy()), "settling: {c:?}");
        }
    }

    #[test]
    fn jitter_is_stable_bounded_and_spread_over_nodes() {
        let max = S(2);
        assert_eq!(report_jitter("node-7", max), report_jitter("node-7", max));
        assert_eq!(report_jitter("node-7", Duration::ZERO), Duration::ZERO);
        let delays: Vec<Duration> = (0..1_000).map(|i| report_jitter(&format!("node-{i}"), max)).collect();
        assert!(delays.iter().all(|d| *d < max));
        // Each quarter of the window holds between a sixth and a third of the nodes.
        for q in 0..4u32 {
            let (lo, hi) = (max * q / 4, max * (q + 1) / 4);
            let n = delays.iter().filter(|d| **d >= lo && **d < hi).count();
            assert!((166..=333).contains(&n), "quarter {q}: {n}");
        }
    }
}

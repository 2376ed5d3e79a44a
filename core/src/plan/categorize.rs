//! Endpoint selection, after kube-proxy's `CategorizeEndpoints` (pkg/proxy/topology.go).

use super::ruleset::Backend;

/// An endpoint candidate with its topology hints.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// The endpoint.
    pub backend: Backend,
    /// `hints.forZones`.
    pub zone_hints: &'a [String],
    /// `hints.forNodes`.
    pub node_hints: &'a [String],
}

/// The result of endpoint selection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized {
    /// Endpoints for Cluster traffic policy.
    pub cluster: Vec<Backend>,
    /// Endpoints for Local traffic policy.
    pub local: Vec<Backend>,
    /// Some usable (ready, or serving and terminating) endpoint exists anywhere.
    pub has_any: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    None,
    SameZone,
    SameNode,
}

/// Topology mode from hints: only when every ready endpoint carries hints, and at least one
/// hint names this node (PreferSameNode) or this zone (PreferSameZone).
fn topology_mode(cands: &[Candidate<'_>], node: &str, zone: Option<&str>) -> Topology {
    let ready = cands.iter().filter(|c| c.backend.ready);
    let (mut all_node, mut for_node, mut all_zone, mut for_zone) = (true, false, true, false);
    let mut any = false;
    for c in ready {
        any = true;
        if c.node_hints.is_empty() {
            all_node = false;
        } else if c.node_hints.iter().any(|n| n == node) {
            for_node = true;
        }
        if c.zone_hints.is_empty() {
            all_zone = false;
        } else if zone.is_some_and(|z| c.zone_hints.iter().any(|h| h == z)) {
            for_zone = true;
        }
    }
    if !any {
        Topology::None
    } else if all_node && for_node {
        Topology::SameNode
    } else if all_zone && for_zone {
        Topology::SameZone
    } else {
        Topology::None
    }
}

/// Splits `cands` into the cluster and local endpoint sets.
///
/// * Cluster set (when `uses_cluster`): ready endpoints allowed by the topology mode; if none,
///   every serving-and-terminating endpoint (KEP-1669).
/// * Local set (when `uses_local`): local ready endpoints; else local serving+terminating.
pub fn categorize_endpoints(
    cands: &[Candidate<'_>],
    uses_cluster: bool,
    uses_local: bool,
    node: &str,
    zone: Option<&str>,
) -> Categorized {
    let mut out = Categorized::default();
    let serving_terminating = |b: &Backend| b.serving && b.terminating;
    if uses_cluster {
        let mode = topology_mode(cands, node, zone);
        out.cluster = cands
            .iter()
            .filter(|c| c.backend.ready)
            .filter(|c| match mode {
                Topology::None => true,
                Topology::SameNode => c.node_hints.iter().any(|n| n == node),
                Topology::SameZone => zone.is_some_and(|z| c.zone_hints.iter().any(|h| h == z)),
            })
            .map(|c| c.backend)
            .collect();
        if out.cluster.is_empty() {
            out.cluster = cands.iter().map(|c| c.backend).filter(serving_terminating).collect();
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !uses_local {
        return out;
    }
    let mut local_ready = false;
    let mut local_serving_terminating = false;
    for b in cands.iter().map(|c| c.backend) {
        if b.ready {
            out.has_any = true;
            local_ready |= b.local;
        } else if serving_terminating(&b) {
            out.has_any = true;
            local_serving_terminating |= b.local;
        }
    }
    if local_ready {
        out.local = cands.iter().map(|c| c.backend).filter(|b| b.local && b.ready).collect();
    } else if local_serving_terminating {
        out.local = cands.iter().map(|c| c.backend).filter(|b| b.local && serving_terminating(b)).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(last: u8, local: bool, ready: bool, serving: bool, terminating: bool) -> Backend {
        Backend { ip: [10, 180, 0, last].into(), port: 80, local, ready, serving, terminating }
    }

    fn cand(backend: Backend) -> Candidate<'static> {
        Candidate { backend, zone_hints: &[], node_hints: &[] }
    }

    fn ips(v: &[Backend]) -> Vec<u8> {
        v.iter()
            .map(|b| match b.ip {
                std::net::IpAddr::V4(v4) => v4.octets()[3],
                std::net::IpAddr::V6(_) => 0,
            })
            .collect()
    }

    #[test]
    fn ready_endpoints_win_over_terminating() {
        let c = [cand(b(1, false, true, true, false)), cand(b(2, true, false, true, true))];
        let r = categorize_endpoints(&c, true, true, "node1", None);
        assert_eq!(ips(&r.cluster), vec![1]);
        // The only local endpoint is terminating but serving: Local falls back to it.
        assert_eq!(ips(&r.local), vec![2]);
        assert!(r.has_any);
    }

    #[test]
    fn terminating_fallback_when_nothing_is_ready() {
        let c = [
            cand(b(1, false, false, true, true)),
            cand(b(2, false, false, false, true)),
            cand(b(3, false, false, false, false)),
        ];
        let r = categorize_endpoints(&c, true, false, "node1", None);
        assert_eq!(ips(&r.cluster), vec![1]);
        let none = categorize_endpoints(&c[1..], true, true, "node1", None);
        assert!(none.cluster.is_empty() && none.local.is_empty() && !none.has_any);
    }

    #[test]
    fn zone_hints_filter_only_when_complete() {
        let a = vec!["zone-a".to_string()];
        let bz = vec!["zone-b".to_string()];
        let c = [
            Candidate { backend: b(1, false, true, true, false), zone_hints: &a, node_hints: &[] },
            Candidate { backend: b(2, false, true, true, false), zone_hints: &bz, node_hints: &[] },
        ];
        assert_eq!(ips(&categorize_endpoints(&c, true, false, "n", Some("zone-a")).cluster), vec![1]);
        // Unknown zone: no hint matches, topology is ignored.
        assert_eq!(ips(&categorize_endpoints(&c, true, false, "n", Some("zone-c")).cluster), vec![1, 2]);
        // One endpoint without hints disables topology.
        let partial = [c[0].clone(), cand(b(3, false, true, true, false))];
        assert_eq!(
            ips(&categorize_endpoints(&partial, true, false, "n", Some("zone-a")).cluster),
            vec![1, 3]
        );
    }

    #[test]
    fn node_hints_prefer_same_node() {
        let n1 = vec!["n1".to_string()];
        let n2 = vec!["n2".to_string()];
        let c = [
            Candidate { backend: b(1, true, true, true, false), zone_hints: &[], node_hints: &n1 },
            Candidate { backend: b(2, false, true, true, false), zone_hints: &[], node_hints: &n2 },
        ];
        assert_eq!(ips(&categorize_endpoints(&c, true, false, "n1", None).cluster), vec![1]);
        assert_eq!(ips(&categorize_endpoints(&c, true, false, "n3", None).cluster), vec![1, 2]);
    }
}

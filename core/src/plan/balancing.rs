//! Which algorithm spreads a Service port's connections, given what the node's mode can do.
//!
//! ```text
//! annotation tideway.io/load-balancing, else ProxyConfig loadBalancing, else the mode's own
//!   nftables: random | maglev (mh = maglev); anything else -> random + a warning
//!   iptables: random;                       anything else -> random + a warning
//!   IPVS:     any scheduler (maglev = mh);   random -> ipvs.scheduler + a warning
//! ```

use serde::{Deserialize, Serialize};

use crate::config::{LoadBalancing, ProxyMode, ProxySettings, Scheduler};
use crate::maglev;

/// The algorithm a plan programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Balancing {
    /// A random endpoint per connection (in IPVS mode: the node's `ipvs.scheduler`).
    #[default]
    Random,
    /// Maglev lookup table of `table_size` buckets (a prime), the same on every node.
    Maglev {
        /// Buckets.
        table_size: u32,
    },
    /// An IPVS scheduler for this Service's virtual servers.
    Scheduler(Scheduler),
}

/// What a plan asked for and got.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BalancingChoice {
    /// What is programmed.
    pub balancing: Balancing,
    /// Why it differs from what was asked (None when it does not).
    pub fallback: Option<String>,
}

/// Decides the algorithm for a Service port with the given annotation value and endpoint
/// count (the larger of its cluster and local sets) on a node running `settings`.
pub fn choose(annotation: Option<&str>, backends: usize, settings: &ProxySettings) -> BalancingChoice {
    let (wanted, mut fallback) = match annotation.map(str::parse::<LoadBalancing>) {
        None => (settings.load_balancing, None),
        Some(Ok(lb)) => (Some(lb), None),
        Some(Err(e)) => (settings.load_balancing, Some(format!("{e}; using the node's default"))),
    };
    let maglev =
        || Balancing::Maglev { table_size: maglev::table_size(settings.maglev_table_size, backends) };
    let mode = settings.mode;
    let balancing = match (mode, wanted) {
        (_, None) | (ProxyMode::Nftables | ProxyMode::Iptables, Some(LoadBalancing::Random)) => {
            Balancing::Random
        }
        (ProxyMode::Nftables, Some(LoadBalancing::Maglev | LoadBalancing::Scheduler(Scheduler::Mh))) => {
            maglev()
        }
        (ProxyMode::Nftables | ProxyMode::Iptables, Some(other)) => {
            fallback.get_or_insert_with(|| {
                format!("load-balancing {other} is not available in {mode} mode; using random")
            });
            Balancing::Random
        }
        (ProxyMode::Ipvs, Some(LoadBalancing::Maglev)) => Balancing::Scheduler(Scheduler::Mh),
        (ProxyMode::Ipvs, Some(LoadBalancing::Scheduler(s))) => Balancing::Scheduler(s),
        (ProxyMode::Ipvs, Some(LoadBalancing::Random)) => {
            let s = settings.ipvs.scheduler;
            fallback.get_or_insert_with(|| {
                format!("load-balancing random is not an IPVS scheduler; using {}", s.as_str())
            });
            Balancing::Random
        }
    };
    BalancingChoice { balancing, fallback }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(mode: ProxyMode, default: Option<LoadBalancing>, annotation: Option<&str>) -> BalancingChoice {
        let settings = ProxySettings { mode, load_balancing: default, ..Default::default() };
        choose(annotation, 3, &settings)
    }

    fn table() -> Balancing {
        Balancing::Maglev { table_size: maglev::DEFAULT_TABLE_SIZE }
    }

    #[test]
    fn each_mode_programs_what_it_can_and_says_what_it_cannot() {
        use ProxyMode::{Iptables, Ipvs, Nftables};
        let ok = |b| BalancingChoice { balancing: b, fallback: None };
        assert_eq!(pick(Nftables, None, None), ok(Balancing::Random));
        assert_eq!(pick(Nftables, None, Some("maglev")), ok(table()));
        assert_eq!(pick(Nftables, None, Some("mh")), ok(table()));
        assert_eq!(pick(Nftables, Some(LoadBalancing::Maglev), None), ok(table()));
        assert_eq!(pick(Nftables, Some(LoadBalancing::Maglev), Some("random")), ok(Balancing::Random));
        let lc = pick(Nftables, None, Some("lc"));
        assert_eq!(lc.balancing, Balancing::Random);
        assert_eq!(
            lc.fallback.as_deref(),
            Some("load-balancing lc is not available in nftables mode; using random")
        );
        let ipt = pick(Iptables, None, Some("maglev"));
        assert_eq!(ipt.balancing, Balancing::Random);
        assert!(ipt.fallback.unwrap().contains("iptables mode"));
        assert_eq!(pick(Ipvs, None, Some("maglev")), ok(Balancing::Scheduler(Scheduler::Mh)));
        assert_eq!(pick(Ipvs, None, Some("lc")), ok(Balancing::Scheduler(Scheduler::Lc)));
        assert_eq!(pick(Ipvs, None, None), ok(Balancing::Random));
        assert!(pick(Ipvs, None, Some("random")).fallback.is_some());
        let bad = pick(Nftables, Some(LoadBalancing::Maglev), Some("fastest"));
        assert_eq!(bad.balancing, table());
        assert!(bad.fallback.unwrap().contains("\"fastest\""));
    }

    #[test]
    fn the_table_grows_with_the_endpoints() {
        let settings = ProxySettings { load_balancing: Some(LoadBalancing::Maglev), ..Default::default() };
        assert_eq!(choose(None, 409, &settings).balancing, table());
        assert_ne!(choose(None, 410, &settings).balancing, table());
    }
}

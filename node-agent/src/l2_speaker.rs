//! The agent's layer-2 speaker, on a task of its own: which interfaces answer ARP and
//! neighbour solicitations for which LoadBalancer IPs, and what it reports about them
//! (interfaces missing, interfaces whose kernel drops the traffic, the fence).
//!
//! It is not part of the proxy's sync loop: an address that moves to this node, or a fence
//! that goes up, is followed as soon as the source or the fence says so, never after
//! `minSyncPeriod` nor behind an apply in progress. It reads the cluster beside the loop
//! ([`SharedCluster::subscribe`]) and looks again only when the announcements, the node's
//! addresses, the fence or an uninstall's clean-up changed. The decisions are
//! `tideway_core::l2`'s; this starts announcers and reads the node.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tideway_core::config::cleanup_requested;
use tideway_core::l2::rp_filter::dropping_interfaces;
use tideway_core::l2::{announced_by, announced_on, missing_interfaces};
use tideway_core::model::L2Announcement;
use tideway_sources::SharedCluster;

use crate::agent::AgentStatus;
use crate::announcer::{self, Announcer};
use crate::metrics::Metrics;

/// How often everything is looked at again: interfaces a pool lists that appeared since, and
/// the interfaces answering whose kernel drops what follows (an address given to one later
/// clears its warning).
const INTERFACE_CHECK: Duration = Duration::from_secs(30);

/// What the speaker followed last: when none of it changed, nothing is looked at again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Followed {
    announcements: u64,
    node_ips: Vec<IpAddr>,
    fenced: bool,
    cleanup: bool,
}

/// The layer-2 speaker of one node.
pub struct L2Speaker {
    node: String,
    cluster: SharedCluster,
    status: Arc<RwLock<AgentStatus>>,
    metrics: Arc<Metrics>,
    /// Set while the agent reaches neither a majority of the nodes nor the API server
    /// (`tideway_core::liveness::fencing`): it then answers for no address.
    fence: Arc<AtomicBool>,
    /// One announcer per interface answering for this node's addresses.
    announcers: BTreeMap<String, Announcer>,
    /// Listed L2 interfaces this node lacks ([`tideway_core::l2::missing_interfaces`]).
    missing_interfaces: Vec<String>,
    /// The addresses answered for, per interface, at the last announcement.
    announced_on: BTreeMap<String, BTreeSet<IpAddr>>,
    followed: Option<Followed>,
}

impl L2Speaker {
    /// The speaker of `node`, reading `cluster` and `fence`, reporting into the agent's status
    /// and metrics.
    pub fn new(
        node: &str,
        cluster: SharedCluster,
        status: Arc<RwLock<AgentStatus>>,
        metrics: Arc<Metrics>,
        fence: Arc<AtomicBool>,
    ) -> L2Speaker {
        L2Speaker {
            node: node.to_string(),
            cluster,
            status,
            metrics,
            fence,
            announcers: BTreeMap::new(),
            missing_interfaces: Vec::new(),
            announced_on: BTreeMap::new(),
            followed: None,
        }
    }

    /// Runs until `shutdown` resolves: waits for the source's first complete view, then
    /// follows every change of what it answers for.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut changed = tokio::select! {
            changed = self.cluster.subscribe_synced() => changed,
            _ = &mut shutdown => return,
        };
        let mut check = tokio::time::interval(INTERFACE_CHECK);
        loop {
            self.follow();
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                // Looked at again whatever changed: an interface a pool lists may have
                // appeared, and the kernel's filters are read again.
                _ = check.tick() => self.followed = None,
                _ = &mut shutdown => return,
            }
        }
    }

    /// Answers for what the cluster says this node announces now, if anything it follows
    /// changed.
    pub fn follow(&mut self) {
        let fenced = self.fence.load(Ordering::Relaxed);
        let (followed, announcements) = {
            let state = self.cluster.lock();
            let followed = Followed {
                announcements: state.announcements_version(),
                node_ips: state.node(&self.node).map(|n| n.ips.clone()).unwrap_or_default(),
                fenced,
                cleanup: cleanup_requested(state.proxy_configs()).is_some(),
            };
            if self.followed.as_ref() == Some(&followed) {
                return;
            }
            let silent = followed.fenced || followed.cleanup;
            let announcements: Vec<L2Announcement> =
                if silent { Vec::new() } else { state.announcements().cloned().collect() };
            (followed, announcements)
        };
        self.set_status(|s| s.fenced = fenced);
        self.metrics.fenced.set(i64::from(fenced));
        self.announce(&followed.node_ips, &announcements);
        self.followed = Some(followed);
    }

    /// Answers ARP / neighbour solicitations for the addresses this node announces, on the
    /// interfaces their pools list (else the node-network interface): one announcer per
    /// interface, started when first needed.
    fn announce(&mut self, node_ips: &[IpAddr], announcements: &[L2Announcement]) {
        let missing = missing_interfaces(
            &self.node,
            announcements,
            &self.missing_interfaces,
            announcer::interface_exists,
        );
        if missing != self.missing_interfaces {
            tracing::warn!(interfaces = ?missing, "listed L2 interfaces missing on this node: not announcing on them");
            self.set_status(|s| s.missing_interfaces = missing.clone());
            self.missing_interfaces = missing;
        }
        if self.announcers.is_empty() && announced_by(&self.node, announcements).is_empty() {
            self.announced_on.clear();
            self.set_status(|s| s.announcing.clear());
            self.check_interfaces();
            return;
        }
        let Some(ip) = node_ips.iter().copied().find(IpAddr::is_ipv4).or_else(|| node_ips.first().copied())
        else {
            return;
        };
        let home = match announcer::node_interface(ip) {
            Ok(home) => home,
            Err(e) => return self.announcer_failed(e.to_string()),
        };
        let mut wanted = announced_on(&self.node, announcements, &home);
        wanted.retain(|interface, _| !self.missing_interfaces.contains(interface));
        let mut errors = Vec::new();
        for interface in
            wanted.keys().filter(|i| !self.announcers.contains_key(*i)).cloned().collect::<Vec<_>>()
        {
            match Announcer::start_on(&interface) {
                Ok(a) => {
                    self.announcers.insert(interface, a);
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let mut announcing = BTreeSet::new();
        for (interface, a) in &self.announcers {
            let ips = wanted.get(interface).cloned().unwrap_or_default();
            announcing.extend(ips.iter().copied());
            a.set(ips);
        }
        if !errors.is_empty() {
            self.announcer_failed(errors.join("; "));
        }
        self.set_status(|s| {
            s.announcing = announcing.into_iter().collect();
            if errors.is_empty() {
                s.announcer_error = None;
            }
        });
        self.announced_on = wanted;
        self.check_interfaces();
    }

    /// Reports the interfaces answering for IPv4 addresses whose kernel drops what follows
    /// (no IPv4 address while reverse-path filtering is on), logging when that changes.
    fn check_interfaces(&mut self) {
        let dropping =
            dropping_interfaces(&self.announced_on, announcer::has_ipv4_address, announcer::rp_filter);
        let warnings: Vec<String> = dropping.iter().map(ToString::to_string).collect();
        let status = self.status.read().unwrap_or_else(|e| e.into_inner()).interface_warnings.clone();
        if status != warnings {
            for w in &warnings {
                tracing::warn!("{w}");
            }
            self.set_status(|s| s.interface_warnings = warnings);
        }
    }

    /// Says (once per distinct message) why some addresses cannot be announced.
    fn announcer_failed(&mut self, msg: String) {
        if self.status.read().unwrap_or_else(|e| e.into_inner()).announcer_error.as_deref() != Some(&msg) {
            tracing::error!(error = %msg, "cannot announce LoadBalancer IPs");
        }
        self.set_status(|s| s.announcer_error = Some(msg));
    }

    fn set_status(&self, f: impl FnOnce(&mut AgentStatus)) {
        f(&mut self.status.write().unwrap_or_else(|e| e.into_inner()));
    }
}

//! The agent's layer-2 half: which interfaces answer for which LoadBalancer IPs, and what it
//! reports about them (interfaces missing, interfaces whose kernel drops the traffic, the
//! fence). The decisions are `tideway_core::l2`'s; this starts announcers and reads the node.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tideway_core::l2::rp_filter::dropping_interfaces;
use tideway_core::l2::{announced_by, announced_on, missing_interfaces};
use tideway_core::plan::NodeContext;

use super::Agent;
use crate::announcer::{self, Announcer};

impl Agent {
    /// Answers ARP / neighbour solicitations for the addresses this node announces, on the
    /// interfaces their pools list (else the node-network interface): one announcer per
    /// interface, started when first needed.
    pub(super) fn announce(&mut self, node: &NodeContext) {
        self.fenced = self.fence.load(Ordering::Relaxed);
        let fenced = self.fenced;
        self.set_status(|s| s.fenced = fenced);
        self.metrics.fenced.set(i64::from(fenced));
        let announcements: Vec<_> =
            if fenced { Vec::new() } else { self.cluster.lock().announcements().cloned().collect() };
        let missing = missing_interfaces(
            &self.opts.node,
            &announcements,
            &self.missing_interfaces,
            announcer::interface_exists,
        );
        if missing != self.missing_interfaces {
            tracing::warn!(interfaces = ?missing, "listed L2 interfaces missing on this node: not announcing on them");
            self.set_status(|s| s.missing_interfaces = missing.clone());
            self.missing_interfaces = missing;
        }
        if self.announcers.is_empty() && announced_by(&self.opts.node, &announcements).is_empty() {
            self.announced_on.clear();
            self.check_interfaces();
            return;
        }
        let Some(ip) = node.ips.iter().copied().find(|ip| ip.is_ipv4()).or_else(|| node.ips.first().copied())
        else {
            return;
        };
        let home = match announcer::node_interface(ip) {
            Ok(home) => home,
            Err(e) => return self.announcer_failed(e.to_string()),
        };
        let mut wanted = announced_on(&self.opts.node, &announcements, &home);
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
        let mut announcing = std::collections::BTreeSet::new();
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
    /// (no IPv4 address while reverse-path filtering is on), logging when that changes. Run
    /// at each announcement and each drift check, so an address given later clears it.
    pub(super) fn check_interfaces(&mut self) {
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

    /// Answers for no address while `fence` is set (see [`crate::fencing`]).
    pub fn fenced_by(mut self, fence: Arc<AtomicBool>) -> Agent {
        self.fence = fence;
        self
    }

    /// True when the fence changed since the announcers last followed it.
    pub(crate) fn fence_changed(&self) -> bool {
        self.fence.load(Ordering::Relaxed) != self.fenced
    }

    /// Says (once per distinct message) why some addresses cannot be announced.
    fn announcer_failed(&mut self, msg: String) {
        if self.status.read().unwrap_or_else(|e| e.into_inner()).announcer_error.as_deref() != Some(&msg) {
            tracing::error!(error = %msg, "cannot announce LoadBalancer IPs");
        }
        self.set_status(|s| s.announcer_error = Some(msg));
    }
}

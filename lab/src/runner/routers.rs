//! The running lab's routers and FRR: their namespaces, every node's and router's FRR daemons,
//! the routers' configuration (applied again when the nodes change or a router's FRR
//! restarts), and what `lab status` shows of their routes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::error::LabError;
use super::lab::Lab;
use crate::control::World;
use crate::frr;
use crate::netns;
use crate::router;
use crate::spec::LabRouter;

/// How long after a failed router configuration it is tried again.
const RETRY: Duration = Duration::from_secs(1);

impl Lab {
    /// Builds the routers `self.world` has and `old` had not, and readies FRR's run directory
    /// in every node and router namespace when the lab has a router.
    pub(super) fn grow_routers(&mut self, old: &World) -> Result<(), LabError> {
        let new = self.world.routers.clone();
        for r in new.iter().filter(|r| !old.routers.contains(r)) {
            netns::run(&router::router_up(&self.names, &self.plan, r))?;
        }
        if !new.is_empty() {
            for (ns, _) in self.frr_namespaces() {
                frr::prepare(&ns)?;
            }
        }
        Ok(())
    }

    /// Every namespace that runs FRR, with its label prefix: the nodes' (`n-NODE`, for their
    /// agents) and the routers' (`r-ROUTER`), when the lab has a router.
    fn frr_namespaces(&self) -> Vec<(String, String)> {
        if self.world.routers.is_empty() {
            return Vec::new();
        }
        let nodes = self.world.nodes.iter().map(|n| (self.names.node(&n.name), format!("n-{}", n.name)));
        let routers =
            self.world.routers.iter().map(|r| (self.names.router(&r.name), format!("r-{}", r.name)));
        nodes.chain(routers).collect()
    }

    /// Adds FRR's daemons (`frr/<n-NODE|r-ROUTER>/<daemon>`) to the processes wanted.
    pub(super) fn want_frr(&self, wanted: &mut BTreeMap<String, Vec<String>>) {
        for (ns, label) in self.frr_namespaces() {
            for daemon in frr::DAEMONS {
                wanted.insert(format!("frr/{label}/{daemon}"), frr::daemon_argv(&ns, daemon));
            }
        }
    }

    /// Where node `node`'s agent writes its rendered FRR configuration.
    pub(super) fn agent_frr_dir(&self, node: &str) -> String {
        self.dir.path().join("frr").join(format!("n-{node}")).display().to_string()
    }

    /// A router whose FRR restarted has lost its configuration: it is given it again.
    pub(super) fn forget_router_config(&mut self, label: &str) {
        if let Some(rest) = label.strip_prefix("frr/r-")
            && let Some((router, _)) = rest.split_once('/')
        {
            self.routers_applied.remove(router);
        }
    }

    /// Applies each router's configuration when it changed (the nodes it peers with); a failure
    /// (FRR still starting) is tried again after [`RETRY`].
    pub(super) fn configure_routers(&mut self) {
        if self.routers_retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.routers_retry_at = None;
        for r in self.world.routers.clone() {
            let text = router::frr_config(&r, &self.world.nodes);
            if self.routers_applied.get(&r.name) == Some(&text) {
                continue;
            }
            let dir = self.dir.path().join("frr").join(format!("r-{}", r.name));
            match frr::apply(&self.names.router(&r.name), &dir, &text) {
                Ok(()) => {
                    tracing::info!(router = %r.name, peers = self.world.nodes.len(), "router configured");
                    self.routers_applied.insert(r.name.clone(), text);
                }
                Err(e) => {
                    tracing::info!(router = %r.name, error = %e, "router not configured yet; trying again");
                    self.routers_retry_at = Some(Instant::now() + RETRY);
                }
            }
        }
    }

    /// Router `r`'s daemons, namespace, LAN port and route, and run directory.
    pub(super) fn remove_router(&mut self, r: &LabRouter) {
        self.procs.remove_prefixed(&format!("frr/r-{}/", r.name));
        let _ = netns::run(&router::router_down(&self.names, r));
        let ns = self.names.router(&r.name);
        netns::remove(&ns);
        let _ = std::fs::remove_dir_all(frr::run_dir(&ns));
        self.routers_applied.remove(&r.name);
    }

    /// The routers as `lab status` shows them (name, addresses, ASN, BGP routes), and the
    /// next hops of every routed address over all routers.
    pub(super) fn routers_status(&self) -> (Vec<Value>, BTreeMap<String, Vec<String>>) {
        let mut hops: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let routers = self.world.routers.iter().map(|r| {
            let ns = self.names.router(&r.name);
            let routes = frr::bgp_routes(&ns);
            for (dst, via) in &routes {
                hops.entry(dst.clone()).or_default().extend(via.iter().cloned());
            }
            json!({"name": r.name, "ip": r.ip.to_string(), "asn": r.asn,
                "outside": format!("{}/{}", r.outside.0, r.outside.1), "netns": ns,
                "configured": self.routers_applied.contains_key(&r.name), "routes": routes})
        });
        let routers = routers.collect();
        (routers, hops)
    }
}

//! A running lab: the control plane's state, the network it built, the processes it runs, and
//! the cluster file it publishes. `apply` moves all of it to a new lab file; `tick` folds in
//! what components wrote and which processes died.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tideway_sources::lab::{LabDir, write_atomically};

use crate::control::{self, Allocations, Health, NodeState, Plan, PodState, ResourceVersions, World, Writes};
use crate::faults::{self, Fault, Faults};
use crate::netns;
use crate::procs::{Exit, Procs};
use crate::spec::{Change, LabHost, LabSpec};
use crate::topology::{self, Names};

mod error;
mod kube;
mod kube_side;
mod lab;
mod pods;
mod processes;
mod routers;
mod status;

pub use error::{KubeLabError, LabError};
use lab::Departure;
pub use lab::Lab;
use pods::{pod_key, server_ports};

/// Whether `world` has a pod named as `p`.
fn has_pod(world: &World, p: &PodState) -> bool {
    world.pods.iter().any(|q| pod_key(q) == pod_key(p))
}

/// Whether `world` runs pod `p` as it is (same name, address and node).
fn same_pod_in(world: &World, p: &PodState) -> bool {
    world.pods.iter().any(|q| pod_key(q) == pod_key(p) && q.ip == p.ip && q.node == p.node)
}

/// How long a removed pod, node or host keeps running after the cluster file stops naming it.
pub const GRACE: Duration = Duration::from_secs(2);

impl Lab {
    /// A lab called `name` with its directory `dir`, running `bin` for its components, every
    /// ProxyConfig's mode forced to `mode` when given. Nothing is built yet.
    pub fn new(name: &str, dir: PathBuf, bin: PathBuf, mode: Option<String>) -> Lab {
        Lab {
            names: Names::new(name),
            plan: Plan::default(),
            dir: LabDir::new(dir),
            bin,
            mode,
            spec: LabSpec::default(),
            alloc: Allocations::default(),
            world: World::default(),
            health: Health::default(),
            procs: Procs::default(),
            writes: Writes::default(),
            seen_writes: BTreeMap::new(),
            published: String::new(),
            versions: ResourceVersions::default(),
            departure: None,
            faults: Faults::default(),
            apis: BTreeMap::new(),
            routers_applied: BTreeMap::new(),
            routers_retry_at: None,
            kube_mode: false,
            kube: None,
            token_rotation: None,
            no_components: false,
            peers: Vec::new(),
        }
    }

    /// Runs `peers` in this kube lab from their own images (`lab up --kube --peers`; the images
    /// are loaded into the lab's store before it starts).
    pub fn set_peers(&mut self, peers: Vec<crate::kube::peers::Peer>) {
        self.peers = peers;
    }

    /// Runs this lab on a real Kubernetes control plane (`lab up --kube`), its kubelets
    /// rewriting projected tokens every `token_rotation` when given.
    pub fn set_kube(&mut self, token_rotation: Option<Duration>) {
        self.kube_mode = true;
        self.token_rotation = token_rotation;
    }

    /// Leaves Tideway out of this kube lab (`lab up --kube --no-components`), for `helm install`
    /// to bring: kubeadm's Service CIDR and DNS address (the chart's defaults), no chart applied,
    /// the file's ProxyConfigs left to the chart and its other tideway.io objects held back
    /// until their CRDs are served.
    pub fn set_no_components(&mut self) {
        self.no_components = true;
        self.plan.service_net = (std::net::Ipv4Addr::new(10, 96, 0, 0), 12);
        self.plan.dns_ip = std::net::Ipv4Addr::new(10, 96, 0, 10);
    }

    /// True for a kube lab.
    pub fn is_kube(&self) -> bool {
        self.kube_mode
    }

    /// How long a node cut off from the control plane stays Ready (`node-monitor-grace-period`).
    pub fn set_node_grace(&mut self, grace: Duration) {
        self.faults.grace = grace;
    }

    /// Makes or undoes a fault (see [`crate::faults`]); what it did.
    pub fn fault(&mut self, fault: &Fault) -> Result<Value, LabError> {
        if let Some(node) = fault.node()
            && !self.world.nodes.iter().any(|n| n.name == node)
        {
            return Err(LabError::NoSuchNode(node.to_string()));
        }
        match fault {
            Fault::KillAgent { node } if self.kube_mode => self.kube_kill(node, "agent")?,
            Fault::KillSpeaker { node } if self.kube_mode => self.kube_kill(node, "speaker")?,
            Fault::KillSpeaker { .. } => return Err(LabError::NoSpeaker),
            Fault::StartAgent { .. } if self.kube_mode => return Err(LabError::KubeletRestarts),
            Fault::Api { up } if self.kube_mode => self.kube_api(*up)?,
            Fault::KillAgent { node } => {
                self.procs.hold(&format!("agent/{node}"));
            }
            Fault::StartAgent { node } => {
                self.procs.release(&format!("agent/{node}"))?;
            }
            Fault::NodeLink { node, up } => netns::run(&[topology::node_link(&self.names, node, *up)])?,
            Fault::Partition { .. } | Fault::Api { .. } => {}
        }
        tracing::info!(?fault, "fault");
        self.faults.apply(fault, Instant::now());
        self.program_partitions()?;
        self.flag_cutoffs()?;
        Ok(json!({"fault": fault}))
    }

    /// The LAN's bridge filter for the partitioned nodes.
    fn program_partitions(&self) -> Result<(), LabError> {
        let ports: Vec<String> = self.faults.partitioned.keys().map(|n| topology::lan_port('n', n)).collect();
        let hosts: Vec<String> = self.world.hosts.iter().map(|h| topology::lan_port('h', &h.name)).collect();
        let file = self.dir.path().join("partition.nft");
        std::fs::write(&file, faults::partition_ruleset(&ports, &hosts))?;
        let lan = self.names.lan();
        netns::run(&[vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            lan,
            "nft".into(),
            "-f".into(),
            file.display().to_string(),
        ]])?;
        Ok(())
    }

    /// The flags the lab source reads (`<dir>/cutoff`): the API, and each node cut off.
    fn flag_cutoffs(&self) -> Result<(), LabError> {
        let dir = self.dir.cutoff();
        std::fs::create_dir_all(&dir)?;
        let mut wanted: BTreeSet<String> =
            self.faults.cut_off().iter().map(|n| format!("node_{n}")).collect();
        if self.faults.api_down {
            wanted.insert("api".into());
        }
        for e in std::fs::read_dir(&dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !wanted.contains(&name) {
                std::fs::remove_file(e.path())?;
            }
        }
        for w in &wanted {
            std::fs::write(dir.join(w), b"")?;
        }
        Ok(())
    }

    fn with_mode(&self, mut spec: LabSpec) -> LabSpec {
        let Some(mode) = &self.mode else { return spec };
        if spec.proxy_configs.is_empty() {
            spec.proxy_configs.push(
                serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": {}})).expect("config"),
            );
        }
        for pc in &mut spec.proxy_configs {
            pc.spec.mode = Some(mode.clone());
        }
        spec
    }

    /// Makes the lab match `spec`: the control plane first (nothing is touched if it refuses),
    /// then the network and processes of what is new, then the cluster file. What left the file
    /// goes [`GRACE`] later, as kubelet's graceful termination does: the agents stop sending new
    /// connections to a removed pod before it stops answering. The mode given at start
    /// overrides the first file's ProxyConfigs; later files are taken as they are (that is how
    /// the mode is switched live).
    pub fn apply(&mut self, spec: LabSpec) -> Result<(), LabError> {
        self.finish_departure();
        let spec = if self.spec.nodes.is_empty() { self.with_mode(spec) } else { spec };
        let mut alloc = self.alloc.clone();
        alloc.set_clock(SystemTime::now());
        let mut world = control::build(&spec, &self.plan, &mut alloc, &self.health)?;
        if self.kube_mode {
            // The API server and the kubelets make pods, addresses and slices.
            world.pods.clear();
        }
        let old = std::mem::replace(&mut self.world, world);
        if let Err(e) = self.grow(&old) {
            tracing::error!(error = %e, "the network could not be changed; the lab keeps running what it has");
            return Err(e);
        }
        self.spec = spec;
        self.alloc = alloc;
        if self.kube_mode {
            if self.kube.is_none() {
                self.kube_start()?;
                self.ensure_processes()?;
            }
            let spec = self.spec.clone();
            self.kube_apply(&spec)?;
        } else {
            self.publish()?;
        }
        self.departure = Some(Departure { old, due: Instant::now() + GRACE });
        Ok(())
    }

    /// The lab `file` makes of this one under `how` (checked as a whole lab).
    pub fn changed_spec(&self, file: &str, text: &str, how: Change) -> Result<LabSpec, LabError> {
        let objects = LabSpec::parse_objects(file, text)?;
        if how == Change::Replace || self.spec.nodes.is_empty() {
            return Ok(self.spec.changed(objects, Change::Replace, file)?);
        }
        Ok(self.spec.changed(objects, how, file)?)
    }

    /// Builds what `self.world` has and `old` had not: nodes (with routes both ways), pods,
    /// hosts, and their processes.
    fn grow(&mut self, old: &World) -> Result<(), LabError> {
        std::fs::create_dir_all(self.dir.writes())?;
        std::fs::create_dir_all(self.dir.path().join("logs"))?;
        std::fs::create_dir_all(self.dir.path().join("started"))?;
        if netns::namespaces(&self.names.lan()).is_empty() {
            netns::run(&topology::lan_up(&self.names, &self.plan))?;
            if !self.kube_mode {
                netns::run(&topology::operator_up(&self.names, &self.plan))?;
            }
        }
        let new = self.world.clone();
        self.remove_replaced(old, &new);
        for n in new.nodes.iter().filter(|n| !old.nodes.contains(n)) {
            netns::run(&topology::node_up(&self.names, &self.plan, n, &new.nodes))?;
            for other in new.nodes.iter().filter(|o| o.name != n.name && old.nodes.contains(o)) {
                netns::run(&[topology::route(&self.names.node(&other.name), n)])?;
            }
        }
        let kept: BTreeSet<(String, String)> =
            old.pods.iter().filter(|p| same_pod_in(&new, p)).map(pod_key).collect();
        for p in new.pods.iter().filter(|p| !kept.contains(&pod_key(p))) {
            let node = new.nodes.iter().find(|n| n.name == p.node).expect("pods run on lab nodes");
            self.forget_started(p);
            netns::run(&topology::pod_up(&self.names, node, p))?;
            netns::write_resolv_conf(
                &self.names.pod(&p.namespace, &p.name),
                &topology::resolv_conf(&self.plan, &p.namespace),
            )?;
        }
        self.grow_routers(old)?;
        let via = new.nodes.first().map(|n| n.ip);
        for h in new.hosts.iter().filter(|h| !old.hosts.contains(h)) {
            match new.routers.iter().find(|r| Some(&r.name) == h.router.as_ref()) {
                Some(r) => netns::run(&crate::router::outside_host_up(&self.names, r, h))?,
                None => netns::run(&topology::host_up(&self.names, &self.plan, h, via))?,
            }
            netns::write_resolv_conf(
                &self.names.host(&h.name),
                &topology::resolv_conf(&self.plan, "default"),
            )?;
        }
        self.ensure_processes()
    }

    /// Starts every process the lab wants that does not run (or runs with other arguments).
    fn ensure_processes(&mut self) -> Result<(), LabError> {
        let wanted = self.wanted_processes();
        for (label, argv) in wanted {
            let log = self.log(&label);
            self.procs.ensure(&label, argv, log)?;
        }
        Ok(())
    }

    /// Removes at once what `new` names but builds differently from `old` (a pod with another
    /// address or node, a node or host with another address): its namespace is needed again.
    fn remove_replaced(&mut self, old: &World, new: &World) {
        for n in old.nodes.iter().filter(|n| new.nodes.iter().any(|m| m.name == n.name && m != *n)) {
            self.remove_node(n, old, new);
        }
        for p in old.pods.iter().filter(|p| has_pod(new, p) && !same_pod_in(new, p)) {
            self.remove_pod(p);
        }
        for h in old.hosts.iter().filter(|h| new.hosts.iter().any(|g| g.name == h.name && g != *h)) {
            self.remove_host(h);
        }
        for r in old.routers.iter().filter(|r| new.routers.iter().any(|s| s.name == r.name && s != *r)) {
            self.remove_router(r);
        }
    }

    /// Removes what the last apply left out, if any: processes no longer wanted, then the
    /// namespaces and routes of removed pods, nodes and hosts.
    fn finish_departure(&mut self) {
        let Some(Departure { old, .. }) = self.departure.take() else { return };
        let wanted = self.wanted_processes();
        let stale: Vec<String> = self.procs.labels().filter(|l| !wanted.contains_key(*l)).cloned().collect();
        for l in stale {
            self.procs.remove(&l);
        }
        let new = self.world.clone();
        for p in old.pods.iter().filter(|p| !has_pod(&new, p)) {
            self.remove_pod(p);
        }
        for n in old.nodes.iter().filter(|n| !new.nodes.iter().any(|m| m.name == n.name)) {
            self.remove_node(n, &old, &new);
        }
        for h in old.hosts.iter().filter(|h| !new.hosts.iter().any(|g| g.name == h.name)) {
            self.remove_host(h);
        }
        for r in old.routers.iter().filter(|r| !new.routers.iter().any(|s| s.name == r.name)) {
            self.remove_router(r);
        }
    }

    fn remove_pod(&mut self, p: &PodState) {
        self.procs.remove_prefixed(&format!("pod/{}/{}/", p.namespace, p.name));
        self.forget_started(p);
        let _ = netns::run(&[topology::unplug_pod(&self.names, p)]);
        netns::remove(&self.names.pod(&p.namespace, &p.name));
    }

    fn remove_host(&self, h: &LabHost) {
        let unplug = match &h.router {
            Some(r) => crate::router::unplug_outside_host(&self.names, r, &h.name),
            None => topology::unplug_from_lan(&self.names, 'h', &h.name),
        };
        let _ = netns::run(&[unplug]);
        netns::remove(&self.names.host(&h.name));
    }

    /// Node `n` of `old`: its agent, its namespace, and the routes to its pods on the nodes
    /// both worlds share.
    fn remove_node(&mut self, n: &NodeState, old: &World, new: &World) {
        self.procs.remove(&format!("agent/{}", n.name));
        self.procs.remove_prefixed(&format!("frr/n-{}/", n.name));
        let _ = std::fs::remove_dir_all(crate::frr::run_dir(&self.names.node(&n.name)));
        let _ = netns::run(&[topology::unplug_from_lan(&self.names, 'n', &n.name)]);
        netns::remove(&self.names.node(&n.name));
        for other in new.nodes.iter().filter(|o| o.name != n.name && old.nodes.contains(o)) {
            let _ = netns::run(&[topology::unroute(&self.names.node(&other.name), n)]);
        }
    }

    /// The file the server of pod `p` on `port` creates once it listens.
    fn started_file(&self, p: &PodState, port: i32) -> PathBuf {
        self.dir.path().join("started").join(format!("{}_{}_{port}", p.namespace, p.name))
    }

    fn forget_started(&self, p: &PodState) {
        for port in server_ports(p) {
            let _ = std::fs::remove_file(self.started_file(p, port));
        }
    }

    /// Pods whose every server listens (the DNS pod is ready from the start).
    fn started_pods(&self) -> BTreeSet<(String, String)> {
        let listening =
            |p: &PodState| server_ports(p).into_iter().all(|port| self.started_file(p, port).exists());
        self.world.pods.iter().filter(|p| !p.is_dns() && listening(p)).map(pod_key).collect()
    }

    /// Writes the cluster file if its content changed.
    fn publish(&mut self) -> Result<bool, LabError> {
        let mut objects = self.writes.publish(self.world.objects.clone());
        self.versions.stamp(&mut objects);
        let text = render(&objects);
        if text == self.published {
            return Ok(false);
        }
        write_atomically(&self.dir.cluster_file(), text.as_bytes())?;
        self.published = text;
        Ok(true)
    }

    /// Reads new writes, notices dead or restarted processes, republishes when needed.
    pub fn tick(&mut self) -> Result<(), LabError> {
        if self.kube_mode {
            return self.kube_tick();
        }
        if self.departure.as_ref().is_some_and(|d| Instant::now() >= d.due) {
            self.finish_departure();
        }
        let mut changed = self.read_writes();
        for e in self.procs.supervise() {
            match e {
                Exit::Exited { label, status } => {
                    tracing::warn!(%label, %status, "process exited; restarting it after a backoff");
                    if let Some(server) = label.strip_prefix("pod/") {
                        let _ = std::fs::remove_file(
                            self.dir.path().join("started").join(server.replace('/', "_")),
                        );
                    }
                }
                Exit::Restarted { label } => {
                    tracing::info!(%label, "process restarted");
                    self.forget_router_config(&label);
                }
            }
        }
        self.configure_routers();
        // Node Ready is kubelet's, not the agent's: only a node cut off from the control
        // plane for the grace period turns NotReady.
        let down = self.faults.not_ready(Instant::now());
        let started = self.started_pods();
        if down != self.health.nodes_down || started != self.health.pods_started {
            tracing::info!(nodes_down = ?down, pods_started = started.len(), "readiness changed");
            self.health.nodes_down = down;
            self.health.pods_started = started;
            self.rebuild()?;
            changed = true;
        }
        if changed {
            self.publish()?;
        }
        Ok(())
    }

    fn read_writes(&mut self) -> bool {
        let Ok(dir) = std::fs::read_dir(self.dir.writes()) else { return false };
        let mut fps = BTreeMap::new();
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Ok(md) = e.metadata()
                && name.ends_with(".json")
                && !name.starts_with('.')
            {
                fps.insert(name, (md.modified().unwrap_or(SystemTime::UNIX_EPOCH), md.len()));
            }
        }
        if fps == self.seen_writes {
            return false;
        }
        let texts: Vec<(String, String)> = fps
            .keys()
            .filter_map(|f| std::fs::read_to_string(self.dir.writes().join(f)).ok().map(|t| (f.clone(), t)))
            .collect();
        self.writes = Writes::from_files(texts.iter().map(|(f, t)| (f.as_str(), t.as_str())));
        self.seen_writes = fps;
        self.adopt_config_specs();
        true
    }

    /// ProxyConfig specs changed over the operator's REST API become the lab's own (the next
    /// `lab apply` of a file replaces them, as `kubectl apply` would).
    fn adopt_config_specs(&mut self) {
        for name in self.writes.config_specs.keys() {
            let _ = std::fs::remove_file(self.dir.write_file("pxcspec", name));
        }
        let changed = self.writes.adopt_config_specs(&mut self.spec.proxy_configs);
        if changed.is_empty() {
            return;
        }
        tracing::info!(proxyconfigs = ?changed, "ProxyConfig spec changed over the REST API");
        if let Err(e) = self.rebuild() {
            tracing::warn!(error = %e, "the changed ProxyConfig could not be built");
        }
    }

    /// Builds the cluster of the current spec and health again, now (allocations kept).
    fn rebuild(&mut self) -> Result<(), control::ControlError> {
        let mut alloc = self.alloc.clone();
        alloc.set_clock(SystemTime::now());
        self.world = control::build(&self.spec, &self.plan, &mut alloc, &self.health)?;
        self.alloc = alloc;
        Ok(())
    }

    /// The pid of a process (`agent/<node>`, `operator`, ...).
    pub fn pid(&self, label: &str) -> Option<u32> {
        self.procs.pid(label)
    }

    /// Stops every process and removes every namespace.
    pub fn teardown(&mut self) {
        self.procs.stop_all();
        if let Some(mut side) = self.kube.take() {
            side.control_plane.stop();
        }
        crate::kubelet::runc::remove_all(self.dir.path());
        netns::remove_all(&self.names.prefix());
        crate::frr::remove_run_dirs(&self.names.prefix());
    }
}

/// The cluster file: one JSON document per object (YAML reads JSON).
pub fn render(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&o.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_file_reads_back_through_the_manifest_loader() {
        let spec = LabSpec::parse("demo.yaml", include_str!("../../../examples/demo.yaml")).unwrap();
        let mut alloc = Allocations::default();
        let world = control::build(&spec, &Plan::default(), &mut alloc, &Health::default()).unwrap();
        let text = render(&world.objects);
        let m = tideway_api::manifest::load_str("cluster.yaml", &text);
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        assert_eq!(m.snapshot.nodes.len(), 4);
        assert_eq!(m.snapshot.services.len(), 4, "three from the file and kube-dns");
        assert_eq!(m.snapshot.pods.len(), 3);
        assert_eq!(m.snapshot.proxy_configs[0].settings.mode, tideway_core::config::ProxyMode::Iptables);
        assert_eq!(m.snapshot.endpoint_slices.len(), 4);
    }
}

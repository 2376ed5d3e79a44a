//! The kube lab's parts of a running lab (`lab up --kube`): the same network of nodes, hosts
//! and routers, with a real control plane where the file-fed lab has its own.
//!
//! ```text
//!  first apply: ControlPlane::start in the first node's namespace (kubeadm's PKI; etcd,
//!               kube-apiserver, kube-controller-manager, kube-scheduler), the admin
//!               kubeconfig at DIR/kubeconfig (through a 127.0.0.1 forward), the chart
//!  every apply: one lab kubelet per node (its namespace, its credentials), the file's
//!               objects server-side applied as `tideway-lab` (`replace` prunes the rest)
//!  status:      KubeView's reflectors, plus the lab's own columns (network, faults, hosts)
//! ```
//! Pods, ClusterIPs, NodePorts, EndpointSlices and Node readiness are the API server's and its
//! controllers', not the lab's: the file-mode control plane's allocations are not used here.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::error::{KubeLabError, LabError};
use super::kube_side::KubeSide;
use super::lab::Lab;
use crate::kube::apply::{Applier, ApplyError};
use crate::kube::peers::{self, PEERS_LABEL};
use crate::kube::view::KubeView;
use crate::kube::{ControlPlane, ControlPlaneConfig, KubeError, chart, objects};
use crate::kubelet::config::{KubeletConfig, NodeAddress, TIDEWAY_IMAGE, WHOAMI_IMAGES, heartbeat};
use crate::spec::LabSpec;

/// How often held objects are tried again.
const HELD_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `fut` to its end from the lab's synchronous code (the lab runs on a multi-threaded
/// runtime).
fn wait<T>(fut: impl Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(fut))
}

/// The chart in the repository the running `tideway` was built from (`TIDEWAY_CHART` names
/// another).
fn chart_dir() -> PathBuf {
    if let Some(c) = std::env::var_os("TIDEWAY_CHART") {
        return PathBuf::from(c);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway")
}

impl Lab {
    /// The control plane's configuration for this lab: in the first node's namespace, at its
    /// address.
    fn control_plane_config(&self) -> Result<ControlPlaneConfig, KubeError> {
        let first = &self.world.nodes[0];
        let mut config = ControlPlaneConfig::new(
            self.dir.path().to_path_buf(),
            Some(self.names.node(&first.name)),
            first.ip,
        )?;
        config.node_name = first.name.clone();
        config.service_cidr = format!("{}/{}", self.plan.service_net.0, self.plan.service_net.1);
        config.pod_cidr = format!("{}/{}", self.plan.pod_net.0, self.plan.pod_net.1);
        config.grace = self.faults.grace;
        config.nodes = self.world.nodes.iter().map(|n| n.name.clone()).collect();
        config.cluster_name = format!("tideway-lab-{}", self.names.lab());
        Ok(config)
    }

    /// Starts the control plane and the lab's view of it (the first apply of a kube lab).
    pub(super) fn kube_start(&mut self) -> Result<(), LabError> {
        let config = self.control_plane_config().map_err(KubeLabError::from)?;
        tracing::info!(address = %config.address, "starting the control plane");
        let control_plane = wait(ControlPlane::start(config)).map_err(KubeLabError::from)?;
        control_plane
            .write_host_kubeconfig(&self.dir.path().join("kubeconfig"))
            .map_err(KubeLabError::from)?;
        let client =
            wait(control_plane.client(&control_plane.admin_kubeconfig())).map_err(KubeLabError::from)?;
        let view = wait(async { KubeView::start(&client) });
        tracing::info!(after = ?control_plane.ready_after, "the control plane is ready");
        // Without components the chart is helm's to install: the lab never applies it.
        let chart_applied = self.no_components;
        let held_retry_at = std::time::Instant::now();
        self.kube =
            Some(KubeSide { control_plane, client, view, chart_applied, held: Vec::new(), held_retry_at });
        self.install_peers()
    }

    /// The nodes a lab file labels [`PEERS_LABEL`]` = "true"`.
    fn peer_nodes(&self) -> Vec<String> {
        let labelled = |m: &&k8s_openapi::api::core::v1::Node| {
            m.metadata.labels.as_ref().and_then(|l| l.get(PEERS_LABEL)).map(String::as_str) == Some("true")
        };
        self.spec.nodes.iter().filter(labelled).filter_map(|m| m.metadata.name.clone()).collect()
    }

    /// Beside Tideway, the peers run on the nodes labelled for them and Tideway's agents on
    /// the others.
    fn peers_beside_tideway(&self) -> bool {
        !self.peers.is_empty() && !self.no_components
    }

    /// Installs the peers (`--peers`) from their own manifests ([`crate::kube::peers`]).
    fn install_peers(&mut self) -> Result<(), LabError> {
        if self.peers.is_empty() {
            return Ok(());
        }
        let beside_tideway = self.peers_beside_tideway();
        if beside_tideway && self.peer_nodes().is_empty() {
            return Err(KubeLabError::Peers(format!(
                "beside Tideway the peers run on the nodes labelled {PEERS_LABEL}: \"true\" (kube-proxy and MetalLB's speaker take ports Tideway's agent uses); the file labels none"
            ))
            .into());
        }
        let side = self.kube.as_ref().expect("started");
        let dir = peers::images_dir().map_err(KubeLabError::from)?;
        let install = peers::Install {
            kubeadm_config: &side.control_plane.layout().kubeadm_config(),
            client: &side.client,
            kubeconfig: &self.dir.path().join("kubeconfig"),
            dir: &dir,
            images: &crate::images::Store::new(self.dir.path().join("images")).names(),
            beside_tideway,
        };
        wait(install.run(&self.peers)).map_err(KubeLabError::from)?;
        for change in peers::CHANGES {
            tracing::info!(change, "the peers' manifests as the lab changes them");
        }
        Ok(())
    }

    /// `lab kill agent|speaker NODE` in a kube lab: the container on the node SIGKILLed; its
    /// kubelet restarts it, as a crashed one is in a cluster.
    pub(super) fn kube_kill(&self, node: &str, container: &str) -> Result<(), LabError> {
        let state_dir = self.dir.path().join("nodes").join(node);
        match (crate::kubelet::runtime::kill_running(&state_dir, container), container) {
            (0, "agent") => Err(LabError::NoAgent(node.to_string())),
            (0, _) => Err(LabError::NoContainer { node: node.to_string(), container: container.to_string() }),
            _ => Ok(()),
        }
    }

    /// `lab api down|up` in a kube lab: the API server refuses every connection but its
    /// namespace's loopback ([`crate::faults::api_block_ruleset`]).
    pub(super) fn kube_api(&self, up: bool) -> Result<(), LabError> {
        let first = &self.world.nodes[0];
        let file = self.dir.path().join("api.nft");
        std::fs::write(&file, crate::faults::api_block_ruleset(first.ip, crate::kube::API_PORT, !up))?;
        let ns = self.names.node(&first.name);
        let nft = ["ip", "netns", "exec", ns.as_str(), "nft", "-f"].map(String::from);
        crate::netns::run(&[nft.into_iter().chain([file.display().to_string()]).collect()])?;
        Ok(())
    }

    /// The API server's address as nodes and pods reach it (`HOST:PORT`).
    fn api_server(&self) -> String {
        format!("{}:{}", self.world.nodes[0].ip, crate::kube::API_PORT)
    }

    /// Applies the chart once, then the objects of `spec` (the whole lab after a `lab apply`,
    /// `delete` or `replace`), and deletes what the lab applied before that `spec` no longer
    /// names.
    pub(super) fn kube_apply(&mut self, spec: &LabSpec) -> Result<(), LabError> {
        let api_server = self.api_server();
        let key = std::fs::read_to_string(crate::token::gossip_key_path(self.dir.path())).unwrap_or_default();
        let mut values = chart::values(&self.plan, &api_server, key.trim());
        if self.peers_beside_tideway() {
            // The nodes the peers do not run on (the kubelets label them "no": `--set` would
            // read "false" as a boolean, which no node label is).
            values.push((format!("agent.nodeSelector.{}", PEERS_LABEL.replace('.', "\\.")), "no".into()));
        }
        let no_components = self.no_components;
        let Some(side) = self.kube.as_mut() else { return Ok(()) };
        let client = side.client.clone();
        if !side.chart_applied {
            let rendered = chart::render(&chart_dir(), &values).map_err(KubeLabError::from)?;
            let mut objs = vec![chart::namespace()];
            objs.extend(rendered);
            let mut applier = Applier::new(client.clone(), chart::MANAGER).in_namespace(chart::NAMESPACE);
            wait(applier.apply_all(objs)).map_err(KubeLabError::from)?;
            side.chart_applied = true;
            tracing::info!("the chart is applied");
        }
        let mut objs = objects::api_objects(spec);
        if no_components {
            // The chart makes the ProxyConfig; the rest waits for the chart's CRDs.
            objs.retain(|o| o["kind"] != "ProxyConfig");
        }
        let keep: BTreeSet<_> = objs.iter().filter_map(|o| crate::kube::apply::key_of(o).ok()).collect();
        let mut applier = Applier::new(client, crate::kube::MANAGER);
        let held = wait(async {
            let held = applier.apply_served(objs).await?;
            let pruned = applier.prune(&objects::applied_kinds(), &keep).await?;
            if !pruned.is_empty() {
                tracing::info!(?pruned, "deleted what the lab no longer names");
            }
            Ok::<_, ApplyError>(held)
        })
        .map_err(KubeLabError::from)?;
        if !held.is_empty() {
            tracing::info!(
                held = held.len(),
                "objects held back until their CustomResourceDefinitions are served"
            );
        }
        side.held = held;
        Ok(())
    }

    /// Applies the held objects whose kinds are now served.
    fn apply_held(&mut self) {
        let Some(side) = self.kube.as_mut() else { return };
        if side.held.is_empty() || std::time::Instant::now() < side.held_retry_at {
            return;
        }
        side.held_retry_at = std::time::Instant::now() + HELD_RETRY;
        let mut applier = Applier::new(side.client.clone(), crate::kube::MANAGER);
        // On a refusal every held object stays held, to be tried again.
        match wait(applier.apply_served(side.held.clone())) {
            Ok(held) => {
                if held.is_empty() {
                    tracing::info!("the held objects are applied");
                }
                side.held = held;
            }
            Err(e) => tracing::warn!(error = %e, "applying the held objects"),
        }
    }

    /// The kubelet configuration of node `index` of the world.
    fn kubelet_config(&self, index: usize) -> KubeletConfig {
        let n = &self.world.nodes[index];
        let spec_node = self.spec.nodes.iter().find(|m| m.metadata.name.as_deref() == Some(n.name.as_str()));
        let mut labels = spec_node.and_then(|m| m.metadata.labels.clone()).unwrap_or_default();
        if self.peers_beside_tideway() {
            labels.entry(PEERS_LABEL.to_string()).or_insert_with(|| "no".into());
        }
        let (lease_duration_seconds, renew) = heartbeat(self.faults.grace);
        let state_dir = self.dir.path().join("nodes").join(&n.name);
        KubeletConfig {
            lab: self.names.lab().to_string(),
            node_name: n.name.clone(),
            kubeconfig: self
                .kube
                .as_ref()
                .map(|k| k.control_plane.node_kubeconfig(&n.name))
                .unwrap_or_default(),
            labels,
            addresses: vec![NodeAddress { kind: "InternalIP".into(), address: n.ip.to_string() }],
            pod_cidr: format!("{}/{}", n.pod_cidr.0, n.pod_cidr.1),
            cluster_dns: vec![self.plan.dns_ip],
            cluster_domain: "cluster.local".into(),
            lease_duration_seconds,
            renew_interval_ms: renew.as_millis() as u64,
            token_rotation_seconds: self.token_rotation.map(|d| d.as_secs()),
            tideway_binary: self.bin.clone(),
            tideway_images: vec![TIDEWAY_IMAGE.to_string()],
            whoami_images: WHOAMI_IMAGES.iter().map(|s| s.to_string()).collect(),
            images_dir: Some(self.dir.path().join("images")),
            state_dir,
        }
    }

    /// One kubelet per node, in the node's namespace: label -> command line (their
    /// configuration files are written here).
    pub(super) fn wanted_kubelets(&self) -> BTreeMap<String, Vec<String>> {
        let mut wanted = BTreeMap::new();
        for (i, n) in self.world.nodes.iter().enumerate() {
            let config = self.kubelet_config(i);
            let path = config.state_dir.join("kubelet.json");
            let written = std::fs::create_dir_all(&config.state_dir)
                .and_then(|()| std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap_or_default()));
            if let Err(e) = written {
                tracing::warn!(node = %n.name, error = %e, "cannot write the kubelet's configuration");
                continue;
            }
            let argv = self.exec_in_net(
                &self.names.node(&n.name),
                &["lab", "kubelet", "--config", &path.display().to_string()],
            );
            wanted.insert(format!("kubelet/{}", n.name), argv);
        }
        wanted
    }

    /// What `lab status` shows of a kube lab.
    pub(super) fn kube_status(&self, side: &KubeSide) -> Value {
        let (routers, _) = self.routers_status();
        let mut nodes = side.view.nodes();
        for n in &mut nodes {
            let name = n["name"].as_str().unwrap_or("").to_string();
            n["network"] = json!(self.faults.network(&name));
            n["namespace"] = json!(self.names.node(&name));
            n["kubelet"] =
                json!(if self.procs.running(&format!("kubelet/{name}")) { "running" } else { "restarting" });
        }
        // Nodes the file names that have not registered yet.
        for w in &self.world.nodes {
            if !nodes.iter().any(|n| n["name"] == w.name.as_str()) {
                nodes.push(json!({"name": w.name, "ip": w.ip.to_string(), "ready": false, "synced": false,
                    "registered": false, "network": self.faults.network(&w.name), "namespace": self.names.node(&w.name)}));
            }
        }
        let mut pods = side.view.pods();
        for p in &mut pods {
            let (ns, name) = (p["namespace"].as_str().unwrap_or(""), p["name"].as_str().unwrap_or(""));
            let netns = if p["hostNetwork"] == true {
                self.names.node(p["node"].as_str().unwrap_or(""))
            } else {
                self.names.pod(ns, name)
            };
            p["netns"] = json!(netns);
        }
        let hosts: Vec<Value> = self.world.hosts.iter().map(|h| json!({"name": h.name, "ip": h.ip.to_string(), "router": h.router, "netns": self.names.host(&h.name)})).collect();
        let kubeconfig = self.dir.path().join("kubeconfig");
        json!({
            "name": self.names.lab(), "dir": self.dir.path(), "kube": true,
            "kubeconfig": kubeconfig, "kubernetesVersion": side.control_plane.version,
            "proxyConfig": self.spec.proxy_configs.first().and_then(|c| c.metadata.name.clone()),
            "nodes": nodes, "services": side.view.services(), "pods": pods, "hosts": hosts,
            "routers": routers, "apis": self.apis, "api": if self.faults.api_down { "down" } else { "up" },
            "nodeMonitorGracePeriod": format!("{}s", self.faults.grace.as_secs_f64()),
            "components": !self.no_components,
            "podCIDR": format!("{}/{}", self.plan.pod_net.0, self.plan.pod_net.1),
            "heldBack": side.held.iter().filter_map(|o| crate::kube::apply::key_of(o).ok()).map(|k| format!("{}/{}", k.1, k.3)).collect::<Vec<_>>(),
        })
    }
}

impl Lab {
    /// A kube lab's tick: processes restarted (kubelets, FRR, the control plane), routers
    /// configured. Everything else is the API server's.
    pub(super) fn kube_tick(&mut self) -> Result<(), LabError> {
        for e in self.procs.supervise() {
            tracing::warn!(event = ?e, "lab process");
        }
        if let Some(side) = self.kube.as_mut() {
            for e in side.control_plane.supervise() {
                tracing::warn!(event = ?e, "control plane process");
            }
        }
        self.apply_held();
        self.configure_routers();
        Ok(())
    }
}

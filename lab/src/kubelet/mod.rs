//! The lab's kubelet (`tideway lab kubelet --config FILE`, hidden): the one imitation in a kube
//! lab. One runs per node, inside the node's network namespace, with the node's client
//! certificate (`system:node:NODE`, group `system:nodes`), so the Node authorizer and
//! NodeRestriction treat it as they treat a kubelet, and `lab node down` or `lab partition` cut
//! its heartbeat by the network.
//!
//! ```text
//!  node::heartbeat   registers the Node (labels, podCIDR, addresses, capacity, nodeInfo,
//!                    Ready), renews its Lease every renew interval (a quarter of the
//!                    controller-manager's grace), rewrites its status when it differs
//!  watch pods (fieldSelector spec.nodeName=NODE)
//!     v
//!  Kubelet::sync -> pods::Worker per pod:
//!     sandbox    netns tw-LAB-p-NS-POD, veth, an address from the pod CIDR (ipam, kept in the
//!                node's state dir), routes; resolv.conf by dnsPolicy
//!     volumes    emptyDir, hostPath, configMap, secret, downwardAPI, projected (the
//!                ServiceAccount token from TokenRequest, bound to the Pod, with the node's
//!                credentials; kube-root-ca.crt; namespace), written as kubelet writes them
//!     containers an image loaded by `tideway lab load image` runs under runc, with the OCI
//!                spec a CRI runtime writes (oci, runc: securityContext, read-only /proc/sys,
//!                seccomp, a fresh overlay per start); otherwise through `tideway lab
//!                container` (a private mount namespace with the volumes at their
//!                mountPaths): whoami for the lab's images, `tideway` for Tideway's,
//!                ErrImagePull for the rest; env with $(VAR), fieldRef and the Service links;
//!                probes; restartPolicy with kubelet's back-off
//!     status     phase, podIP(s), hostIP(s), conditions, containerStatuses, as kubelet writes
//!                them (transition times from its own last write, as kubelet's status manager)
//!     deletion   SIGTERM once deletionTimestamp is set, SIGKILL at it (the grace period's
//!                end), readiness still probed and written meanwhile (kubelet v1.25+), then
//!                deletes the Pod with grace 0, its container logs kept under gone/; a pod
//!                that vanished is torn down at once
//! ```
//!
//! Why an imitation: the real kubelet needs a CRI runtime, refuses cgroup v1, and four of them
//! on one kernel fight over the same cgroups, iptables chains and ports.
//!
//! What it does not do: no eviction (no pressure is ever reported), no resource accounting,
//! requests or limits, no cgroups, no image pulls (only the images above run), no CRI, no
//! static or mirror pods, no Events, `securityContext` only for containers from loaded images
//! (the others run as root with the host's capabilities), no user namespaces, no pause
//! container (each runc container has PID and IPC namespaces of its own), no `/etc/hosts`, no
//! envFrom or configMapKeyRef/secretKeyRef, no CSI or persistent volumes, and no kubelet API on 10250:
//! `kubectl logs`, `exec`, `attach` and `port-forward` fail against it (the container's output
//! is in `<state>/pods/NS_POD/containers/NAME.log`). Pods on a node with its own network share
//! the host's filesystem but for their volumes.
//!
//! Restarts: the kubelet owns its containers but does not take them down with it; a restarted
//! kubelet adopts the processes still running (by pid and kernel start time) and the sandboxes
//! and addresses they have, and restarts only what ended.
//!
//! A pod's readiness can be failed by hand: while `<state>/pods/NS_POD/unready` exists its
//! readiness probe fails (a container without one is unready at once); `tideway lab pod
//! NS/POD unready|ready` makes and removes it.

pub mod config;
pub mod containers;
mod desired;
pub mod env;
mod error;
pub mod from_image;
pub mod ipam;
pub mod launch;
pub mod mounts;
pub mod node;
pub mod oci;
pub mod pods;
pub mod probe;
pub mod projection;
pub mod runc;
pub mod runtime;
pub mod sandbox;
pub mod status;
mod timestamp;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;

pub use config::KubeletConfig;
use containers::ProbeMsg;
use desired::Desired;
pub use error::KubeletError;
use ipam::Ipam;
pub use node::KUBELET_VERSION;
pub use pods::unready_flag;
use pods::{Ctx, Worker};
pub use timestamp::now;

/// A client with the node's credentials; `timeout` bounds each read (heartbeats must not hang
/// on a partition).
async fn client(cfg: &KubeletConfig, timeout: Option<Duration>) -> Result<kube::Client, KubeletError> {
    let err = |e: String| KubeletError::Api(format!("{}: {e}", cfg.kubeconfig.display()));
    let kc = kube::config::Kubeconfig::read_from(&cfg.kubeconfig).map_err(|e| err(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    if let Some(t) = timeout {
        config.read_timeout = Some(t);
        config.write_timeout = Some(t);
    }
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// Runs the kubelet until the process ends.
pub async fn run(cfg: KubeletConfig) -> Result<(), KubeletError> {
    std::fs::create_dir_all(cfg.state_dir.join("pods"))?;
    let beat = client(&cfg, Some(cfg.renew_interval().max(Duration::from_secs(2)))).await?;
    tokio::spawn(node::heartbeat(beat, cfg.clone(), node::Machine::read()));
    let main = client(&cfg, None).await?;
    let net = cfg.pod_net().ok_or_else(|| KubeletError::Config("no pod CIDR".into()))?;
    let ipam = Ipam::load(net, &cfg.state_dir.join("ipam.json"));
    let (probes, mut probe_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut k = Kubelet {
        cfg,
        client: main,
        ipam,
        workers: BTreeMap::new(),
        desired: Desired::default(),
        synced: false,
        probes,
    };
    let api: Api<Pod> = Api::all(k.client.clone());
    let selector = format!("spec.nodeName={}", k.cfg.node_name);
    let mut stream = watcher::watcher(api, watcher::Config::default().fields(&selector)).boxed();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(event)) => {
                    if k.desired.on_event(event) && !k.synced {
                        k.synced = true;
                        k.clean_leftovers();
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watching pods");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => return Err(KubeletError::Api("the pod watch ended".into())),
            },
            Some(msg) = probe_rx.recv() => k.on_probe(&msg),
            _ = tick.tick() => {}
        }
        if k.synced {
            k.sync().await;
        }
    }
}

struct Kubelet {
    cfg: KubeletConfig,
    client: kube::Client,
    ipam: Ipam,
    workers: BTreeMap<String, Worker>,
    desired: Desired,
    synced: bool,
    probes: tokio::sync::mpsc::UnboundedSender<ProbeMsg>,
}

impl Kubelet {
    fn ctx(&self) -> Ctx<'_> {
        Ctx { cfg: &self.cfg, client: &self.client, probes: &self.probes }
    }

    fn on_probe(&mut self, msg: &ProbeMsg) {
        let Some(mut w) = self.workers.remove(&msg.uid) else { return };
        w.on_probe(msg, &self.ctx());
        self.workers.insert(msg.uid.clone(), w);
    }

    async fn sync(&mut self) {
        let gone: Vec<String> =
            self.workers.keys().filter(|u| !self.desired.pods.contains_key(*u)).cloned().collect();
        for uid in gone {
            if let Some(w) = self.workers.remove(&uid) {
                self.teardown(w).await;
            }
        }
        for (uid, pod) in &self.desired.pods {
            if let Some(w) = self.workers.get_mut(uid) {
                w.pod = pod.clone();
                continue;
            }
            let (ns, name) = (
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            // A pod of the same name still leaving: its sandbox goes first.
            if self.workers.values().any(|w| w.namespace == ns && w.name == name) {
                continue;
            }
            let terminal = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|p| p == "Succeeded" || p == "Failed");
            if terminal {
                continue;
            }
            let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
            let ip = if host_network {
                self.cfg.node_ip().expect("checked at start")
            } else {
                match self.ipam.assign(uid) {
                    Ok(ip) => ip,
                    Err(e) => {
                        tracing::warn!(pod = %name, error = %e, "no address for the pod");
                        continue;
                    }
                }
            };
            tracing::info!(pod = %format!("{ns}/{name}"), %ip, "pod bound to this node");
            self.workers.insert(uid.clone(), Worker::new(&self.cfg, pod.clone(), ip));
        }
        let uids: Vec<String> = self.workers.keys().cloned().collect();
        for uid in uids {
            let Some(mut w) = self.workers.remove(&uid) else { continue };
            w.step(&self.ctx()).await;
            if w.finished {
                self.teardown(w).await;
                self.desired.deleted_here(&uid);
            } else {
                self.workers.insert(uid, w);
            }
        }
    }

    /// Stops a pod's processes and removes its sandbox, address and directory.
    async fn teardown(&mut self, mut w: Worker) {
        w.stop_all().await;
        if !w.host_network() {
            let _ = crate::netns::run(&[sandbox::unplug(&self.cfg, &w.namespace, &w.name)]);
            crate::netns::remove(&sandbox::netns(&self.cfg, &w.namespace, &w.name));
        }
        self.ipam.release(&w.uid);
        let dir = volumes::pod_dir(&self.cfg.state_dir, &w.namespace, &w.name);
        let gone = volumes::gone_dir(&self.cfg.state_dir, &w.namespace, &w.name, &w.uid);
        if let Err(e) = volumes::keep_logs(&dir, &gone) {
            tracing::warn!(pod = %format!("{}/{}", w.namespace, w.name), error = %e, "logs not kept");
        }
        let _ = std::fs::remove_dir_all(dir);
        tracing::info!(pod = %format!("{}/{}", w.namespace, w.name), "pod torn down");
    }

    /// After the first list: what a previous kubelet left for pods no longer bound here.
    fn clean_leftovers(&mut self) {
        let live: BTreeSet<String> = self.desired.pods.keys().cloned().collect();
        self.ipam.retain(&live);
        let Ok(dir) = std::fs::read_dir(self.cfg.state_dir.join("pods")) else { return };
        for e in dir.flatten() {
            let uid = std::fs::read_to_string(e.path().join("uid")).unwrap_or_default();
            if live.contains(&uid) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((ns, pod)) = name.split_once('_') else { continue };
            kill_recorded(&e.path());
            let _ = crate::netns::run(&[sandbox::unplug(&self.cfg, ns, pod)]);
            crate::netns::remove(&sandbox::netns(&self.cfg, ns, pod));
            let _ = std::fs::remove_dir_all(e.path());
            tracing::info!(pod = %format!("{ns}/{pod}"), "leftovers of a pod no longer here removed");
        }
    }
}

/// Kills the processes recorded in pod directory `dir` that still run.
fn kill_recorded(dir: &Path) {
    let Ok(files) = std::fs::read_dir(dir.join("containers")) else { return };
    for f in files.flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.ends_with(".spec.json") {
            continue;
        }
        let record = std::fs::read_to_string(f.path()).ok().and_then(|t| serde_json::from_str(&t).ok());
        if let Some(p) = record.and_then(runtime::Process::adopt) {
            p.signal(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// `tideway lab kubelet --config FILE`.
pub fn main(config: &Path) -> anyhow::Result<i32> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let cfg = KubeletConfig::read(config)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run(cfg))?;
    Ok(0)
}

/// `tideway lab pod NS/POD unready|ready` for the lab in `lab_dir`: makes or removes the pod's
/// flag on whichever node runs it; the nodes it was found on.
pub fn flag_unready(
    lab_dir: &Path,
    namespace: &str,
    pod: &str,
    unready: bool,
) -> std::io::Result<Vec<String>> {
    let mut found = Vec::new();
    for node in std::fs::read_dir(lab_dir.join("nodes"))?.flatten() {
        let state = node.path();
        let dir = volumes::pod_dir(&state, namespace, pod);
        if !dir.exists() {
            continue;
        }
        let flag = unready_flag(&state, namespace, pod);
        if unready {
            std::fs::write(&flag, b"")?;
        } else {
            let _ = std::fs::remove_file(&flag);
        }
        found.push(node.file_name().to_string_lossy().into_owned());
    }
    Ok(found)
}

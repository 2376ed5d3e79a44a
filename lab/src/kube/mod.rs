//! A real Kubernetes control plane for the lab: etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler from `tideway-kube` (the repository's `kube/` module, `make kube`), with
//! a PKI and kubeconfigs made by the real kubeadm.
//!
//! ```text
//!  ControlPlaneConfig { dir, netns, address, service_cidr, pod_cidr, grace, nodes, ... }
//!     | pki::make: kubeadm's certificate and kubeconfig phases (dir/pki, dir/kube/*.conf,
//!     |            dir/kube/nodes/NODE.conf)
//!     | control_plane::Flags: argv of the four, run through `ip netns exec NETNS`
//!     v
//!  etcd -> kube-apiserver -> controller-manager, scheduler   (Procs: logs in dir/kube/logs)
//!     | /readyz, then as `kubeadm init` would: kubeadm:cluster-admins bound to cluster-admin,
//!     | and kubeadm's bootstrap-token phase (kube-public/cluster-info, read anonymously)
//!     v
//!  ControlPlane: host_endpoint() (127.0.0.1, forwarded into the namespace), client(), stop()
//! ```
//! The API server listens on `address:6443` inside `netns` (the control-plane node's namespace
//! in a lab; any namespace a test makes, see [`standalone_namespace`]); the host reaches it
//! through a forward from its 127.0.0.1 to the namespace's, which the serving certificate names. One control plane costs
//! about 700 MiB and 6 s to ready: tests share one per test binary.

pub mod apply;
pub mod chart;
pub mod control_plane;
mod error;
pub mod objects;
pub mod peers;
pub mod pki;
pub mod rest;
pub mod standalone;
pub mod view;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};

use crate::procs::Procs;

/// The field manager of the lab file's objects (`lab apply` is its server-side apply).
pub const MANAGER: &str = "tideway-lab";
use crate::topology::{Cmd, cmd};
pub use error::KubeError;
pub use pki::{API_PORT, ClusterShape, Layout};

/// How to run a control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// The lab's directory: the PKI goes to `dir/pki`, the rest to `dir/kube`.
    pub dir: PathBuf,
    /// The network namespace to run in (none: the caller's own).
    pub netns: Option<String>,
    /// The API server's address: an address of an interface in `netns`, not a loopback one
    /// (kubeadm and the API server's endpoint reconciler refuse those).
    pub address: Ipv4Addr,
    /// The control-plane node's name.
    pub node_name: String,
    /// The Service CIDR.
    pub service_cidr: String,
    /// The pod network.
    pub pod_cidr: String,
    /// The node lifecycle controller's `--node-monitor-grace-period`.
    pub grace: Duration,
    /// The nodes to make kubeconfigs for (`dir/kube/nodes/NODE.conf`).
    pub nodes: Vec<String>,
    /// The `tideway-kube` binary (see [`binary`]).
    pub binary: PathBuf,
    /// The cluster's name in kubeconfigs.
    pub cluster_name: String,
    /// Flags the API server gets after its own (a test's `--watch-cache-sizes`, say).
    pub apiserver_flags: Vec<String>,
    /// An etcd data directory to start from (a snapshot: a copy of one taken after
    /// [`ControlPlane::stop`], see [`ControlPlane::snapshot_etcd`]) instead of an empty store.
    pub etcd_seed: Option<PathBuf>,
}

impl ControlPlaneConfig {
    /// A configuration with the lab's defaults for the rest: node `cp`, the demo's networks,
    /// the 50 s grace, the binary found by [`binary`].
    pub fn new(
        dir: PathBuf,
        netns: Option<String>,
        address: Ipv4Addr,
    ) -> Result<ControlPlaneConfig, KubeError> {
        Ok(ControlPlaneConfig {
            dir,
            netns,
            address,
            node_name: "cp".into(),
            service_cidr: "10.200.1.0/24".into(),
            pod_cidr: "10.10.0.0/16".into(),
            grace: crate::faults::NODE_MONITOR_GRACE,
            nodes: Vec::new(),
            binary: binary()?,
            cluster_name: "tideway-lab".into(),
            apiserver_flags: Vec::new(),
            etcd_seed: None,
        })
    }
}

/// Where `tideway-kube` is: `$TIDEWAY_KUBE`, else `target/kube/tideway-kube` of the build
/// that holds this executable (`make kube` links it there).
pub fn binary() -> Result<PathBuf, KubeError> {
    if let Some(p) = std::env::var_os("TIDEWAY_KUBE") {
        let p = PathBuf::from(p);
        return if p.exists() { Ok(p) } else { Err(KubeError::NoBinary(p.display().to_string())) };
    }
    found_beside_build(&Path::new("kube").join("tideway-kube"), "make kube")
}

/// Where peer `name` is (`coredns`, `kube-proxy`, `metallb-controller`, `metallb-speaker`):
/// `target/peers/NAME` of the build that holds this executable (`make peers` links it there).
pub fn peer_binary(name: &str) -> Result<PathBuf, KubeError> {
    found_beside_build(&Path::new("peers").join(name), "make peers")
}

/// `relative` in a directory above this executable (the build's target directory, where the
/// make targets link their binaries), else in the repository's `target/`.
fn found_beside_build(relative: &Path, made_by: &str) -> Result<PathBuf, KubeError> {
    let exe = std::env::current_exe()?;
    let repository = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    let mut candidates = exe.ancestors().skip(1).chain([repository.as_path()]).map(|d| d.join(relative));
    let found = candidates.find(|p| p.exists());
    let missing = || format!("target/{} above {} ({made_by})", relative.display(), exe.display());
    found.ok_or_else(|| KubeError::NoBinary(missing()))
}

/// Commands that make namespace `ns` with `address` on a veth pair of its own (both ends
/// inside), for a control plane that needs no lab topology: the host reaches it through
/// [`ControlPlane::host_endpoint`].
pub fn standalone_namespace(ns: &str, address: Ipv4Addr) -> Vec<Cmd> {
    vec![
        cmd(&format!("ip netns add {ns}")),
        cmd(&format!("ip -n {ns} link set lo up")),
        cmd(&format!("ip -n {ns} link add cp0 type veth peer name cp1")),
        cmd(&format!("ip -n {ns} addr add {address}/32 dev cp0")),
        cmd(&format!("ip -n {ns} link set cp0 up")),
        cmd(&format!("ip -n {ns} link set cp1 up")),
    ]
}

/// A running control plane; stopped on drop.
pub struct ControlPlane {
    config: ControlPlaneConfig,
    layout: Layout,
    procs: Procs,
    host: SocketAddr,
    /// How long it took from start to `/readyz` answering ok.
    pub ready_after: Duration,
    /// The Kubernetes version it runs (`v1.37.2`).
    pub version: String,
}

impl ControlPlane {
    /// Makes the PKI, starts the four processes, waits for `/readyz`, binds
    /// `kubeadm:cluster-admins` and publishes `kube-public/cluster-info` as `kubeadm init` does.
    pub async fn start(config: ControlPlaneConfig) -> Result<ControlPlane, KubeError> {
        let started = Instant::now();
        let layout = Layout { dir: config.dir.clone() };
        let version = version(&config.binary)?;
        let shape = ClusterShape {
            cluster_name: config.cluster_name.clone(),
            kubernetes_version: version.clone(),
            node_name: config.node_name.clone(),
            address: config.address,
            service_cidr: config.service_cidr.clone(),
            pod_cidr: config.pod_cidr.clone(),
            dns_domain: "cluster.local".into(),
        };
        let kubeadm = config.binary.clone();
        let (l, n) = (layout.clone(), config.nodes.clone());
        tokio::task::spawn_blocking(move || pki::make(&pki::kubeadm(&kubeadm), &shape, &l, &n))
            .await
            .map_err(|e| KubeError::Io(std::io::Error::other(e)))??;
        control_plane::write_files(&layout)?;
        std::fs::create_dir_all(layout.kube().join("logs"))?;
        if let Some(seed) = &config.etcd_seed {
            copy_dir(seed, &layout.kube().join("etcd"))?;
        }
        let host = match &config.netns {
            Some(ns) => {
                // Into the namespace's loopback, as the controller-manager and the scheduler
                // reach it: the kube lab's `api down` leaves that way open.
                crate::proxy::forward(ns.clone(), SocketAddr::from((Ipv4Addr::LOCALHOST, API_PORT))).await?
            }
            None => SocketAddr::from((config.address, API_PORT)),
        };
        let mut cp = ControlPlane {
            config,
            layout,
            procs: Procs::default(),
            host,
            ready_after: Duration::ZERO,
            version,
        };
        // The controller-manager exits when the API server is not healthy within about 30 s
        // (under a kubelet it would be restarted until it is): an API server starting on a
        // large etcd (its ClusterIP repair runs over every Service first) is ready later.
        let (store, controllers) = control_plane::COMPONENTS.split_at(2);
        cp.spawn(store)?;
        let patience = if cp.config.etcd_seed.is_some() { 600 } else { 120 };
        cp.wait_ready(Duration::from_secs(patience)).await?;
        cp.ready_after = started.elapsed();
        cp.spawn(controllers)?;
        cp.bootstrap().await?;
        Ok(cp)
    }

    fn flags(&self) -> control_plane::Flags {
        control_plane::Flags {
            binary: self.config.binary.display().to_string(),
            layout: self.layout.clone(),
            node_name: self.config.node_name.clone(),
            address: self.config.address,
            service_cidr: self.config.service_cidr.clone(),
            cluster_name: self.config.cluster_name.clone(),
            grace: self.config.grace,
            apiserver_extra: self.config.apiserver_flags.clone(),
        }
    }

    fn log(&self, component: &str) -> PathBuf {
        self.layout.kube().join("logs").join(format!("{component}.log"))
    }

    /// Starts `components` (of [`control_plane::COMPONENTS`]).
    fn spawn(&mut self, components: &[&str]) -> Result<(), KubeError> {
        let flags = self.flags();
        for c in components {
            let argv = control_plane::in_netns(self.config.netns.as_deref(), flags.of(c));
            let log = self.log(c);
            self.procs.ensure(&format!("kube/{c}"), argv, log)?;
        }
        Ok(())
    }

    async fn wait_ready(&mut self, within: Duration) -> Result<(), KubeError> {
        let deadline = Instant::now() + within;
        let client = self.client(&self.layout.kubeconfig("super-admin")).await?;
        loop {
            let req = http::Request::get("/readyz").body(Vec::new()).expect("a request");
            if let Ok(body) = client.request_text(req).await
                && body.trim() == "ok"
            {
                return Ok(());
            }
            self.check_running()?;
            if Instant::now() >= deadline {
                return Err(KubeError::NotReady(within));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// An error naming the first component that exited, with the end of its log.
    fn check_running(&mut self) -> Result<(), KubeError> {
        for e in self.procs.supervise() {
            if let crate::procs::Exit::Exited { label, .. } = e {
                let component = label.trim_start_matches("kube/").to_string();
                let log = self.log(&component);
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                return Err(KubeError::Exited { component, log: log.display().to_string(), tail });
            }
        }
        Ok(())
    }

    /// What `kubeadm init` does once the API answers: `admin.conf`'s group
    /// (`kubeadm:cluster-admins`) bound to cluster-admin, then the bootstrap-token phase.
    async fn bootstrap(&self) -> Result<(), KubeError> {
        let client = self.client(&self.layout.kubeconfig("super-admin")).await?;
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubeadm:cluster-admins"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"}],
        }))
        .expect("a ClusterRoleBinding");
        match Api::<ClusterRoleBinding>::all(client).create(&PostParams::default(), &binding).await {
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            other => {
                other?;
            }
        }
        let argv = pki::bootstrap_token_argv(
            &pki::kubeadm(&self.config.binary),
            &self.layout.kubeadm_config(),
            &self.layout.kubeconfig("admin"),
        );
        let argv = control_plane::in_netns(self.config.netns.as_deref(), argv);
        tokio::task::spawn_blocking(move || pki::run(&argv))
            .await
            .map_err(|e| KubeError::Io(std::io::Error::other(e)))??;
        Ok(())
    }

    /// The address on the host's 127.0.0.1 that reaches the API server.
    pub fn host_endpoint(&self) -> SocketAddr {
        self.host
    }

    /// The API server's URL for clients on the host.
    pub fn host_url(&self) -> String {
        format!("https://{}", self.host)
    }

    /// The files' layout (PKI, kubeconfigs, audit log).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The admin kubeconfig (group `kubeadm:cluster-admins`; server: the control-plane
    /// endpoint, as nodes and pods reach it).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.layout.kubeconfig("admin")
    }

    /// Node `node`'s kubeconfig (made for each of the configuration's nodes).
    pub fn node_kubeconfig(&self, node: &str) -> PathBuf {
        self.layout.node_kubeconfig(node)
    }

    /// Writes the admin kubeconfig pointed at the host's forward to `path` (what `kubectl` on
    /// the host uses).
    pub fn write_host_kubeconfig(&self, path: &Path) -> Result<(), KubeError> {
        let text = std::fs::read_to_string(self.admin_kubeconfig())?;
        pki::write_private(path, &pki::rewrite_server(&text, &self.host_url()))?;
        Ok(())
    }

    /// A client with the credentials of `kubeconfig`, reaching the API server through the
    /// host's forward.
    pub async fn client(&self, kubeconfig: &Path) -> Result<kube::Client, KubeError> {
        client_at(kubeconfig, &self.host_url()).await
    }

    /// Restarts components that exited (after kubelet's backoff); what happened.
    pub fn supervise(&mut self) -> Vec<crate::procs::Exit> {
        self.procs.supervise()
    }

    /// The pid of a component (`etcd`, `kube-apiserver`, ...).
    pub fn pid(&self, component: &str) -> Option<u32> {
        self.procs.pid(&format!("kube/{component}"))
    }

    /// Each component's resident memory (KiB).
    pub fn rss(&self) -> Vec<(String, u64)> {
        control_plane::COMPONENTS
            .iter()
            .filter_map(|c| Some((c.to_string(), rss_kib(self.pid(c)?)?)))
            .collect()
    }

    /// Stops the scheduler, the controller-manager, the API server, then etcd (etcd last: the
    /// API server's graceful shutdown waits on it).
    pub fn stop(&mut self) {
        for c in control_plane::COMPONENTS.iter().rev() {
            self.procs.terminate(&format!("kube/{c}"), Duration::from_secs(10));
        }
    }

    /// Stops the control plane and copies etcd's data directory, closed cleanly, to `to`: a
    /// snapshot that [`ControlPlaneConfig::etcd_seed`] starts a later control plane from (same
    /// member name and peer address; the PKI is made anew, which the stored objects do not
    /// depend on).
    pub fn snapshot_etcd(&mut self, to: &Path) -> Result<(), KubeError> {
        self.stop();
        copy_dir(&self.layout.kube().join("etcd"), to)
    }
}

/// Copies directory `from` to `to` (made, or emptied first), keeping modes (etcd wants 0700).
fn copy_dir(from: &Path, to: &Path) -> Result<(), KubeError> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let status = std::process::Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !status.success() {
        return Err(KubeError::Command {
            command: format!("cp -a {} {}", from.display(), to.display()),
            message: status.to_string(),
        });
    }
    Ok(())
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client with the credentials of `kubeconfig`, talking to `server` (its certificate must
/// name that address).
pub async fn client_at(kubeconfig: &Path, server: &str) -> Result<kube::Client, KubeError> {
    let bad = |message: String| KubeError::Kubeconfig { path: kubeconfig.display().to_string(), message };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    config.cluster_url = server.parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
    kube::Client::try_from(config).map_err(KubeError::Api)
}

/// A client with the credentials and server of `kubeconfig` (its current context).
pub async fn client_from(kubeconfig: &Path) -> Result<kube::Client, KubeError> {
    let bad = |message: String| KubeError::Kubeconfig { path: kubeconfig.display().to_string(), message };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    kube::Client::try_from(config).map_err(KubeError::Api)
}

/// The version `binary` runs.
fn version(binary: &Path) -> Result<String, KubeError> {
    let out = pki::run(&[binary.display().to_string(), "kube-apiserver".into(), "--version".into()])?;
    pki::parse_version(&out).ok_or_else(|| KubeError::Command {
        command: format!("{} kube-apiserver --version", binary.display()),
        message: format!("no version in {out:?}"),
    })
}

/// A process's resident memory (KiB).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_namespace_holds_its_address_on_a_veth_of_its_own() {
        let cmds: Vec<String> = standalone_namespace("tw-t-n-cp", Ipv4Addr::new(10, 99, 0, 2))
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert!(
            cmds.iter().all(|c| c.starts_with("ip netns add tw-t-n-cp") || c.starts_with("ip -n tw-t-n-cp "))
        );
        assert!(cmds.contains(&"ip -n tw-t-n-cp addr add 10.99.0.2/32 dev cp0".to_string()));
        assert!(rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }
}

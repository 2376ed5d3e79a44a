//! One pod on the node, from sandbox to deletion: the sandbox and resolv.conf, the volumes,
//! the init containers one after another, then the containers; the status written when it
//! changes; once a deletion is asked (`deletionTimestamp` set) its processes get SIGTERM at
//! once and SIGKILL at the grace period's end, as kubelet does, their readiness still probed
//! and written; once they are gone its status is written and the Pod deleted with grace 0; its
//! sandbox removed when it leaves the node.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::config::ImageKind;
use super::config::KubeletConfig;
use super::containers::{Ctr, ProbeMsg, ProbeSite, restarts};
use super::env::{Runtime, environment};
use super::from_image::{self, Placement};
use super::launch::{Launch, launch};
use super::mounts::{ContainerSpec, Mount};
use super::probe::Kind;
use super::projection::Volumes;
use super::runtime::{self, Process, Record};
use super::sandbox;
use super::status::{PodView, State, pod_status};
use super::timestamp::now;
use super::volumes::{container_mounts, make_nested_mountpoints, pod_dir};

/// How often volumes are read again (ConfigMaps and Secrets change; tokens have their own time).
const VOLUME_RESYNC: Duration = Duration::from_secs(30);

/// What every pod's step needs.
pub struct Ctx<'a> {
    /// The kubelet's configuration.
    pub cfg: &'a KubeletConfig,
    /// Its client (the node's credentials).
    pub client: &'a kube::Client,
    /// Where probes report.
    pub probes: &'a UnboundedSender<ProbeMsg>,
}

/// A pod this kubelet runs.
pub struct Worker {
    /// Its UID.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The Pod as last seen.
    pub pod: Pod,
    dir: PathBuf,
    host_network: bool,
    /// Its address (the node's on the host network).
    pub ip: Ipv4Addr,
    sandbox_ready: bool,
    start_time: String,
    volumes: Volumes,
    volume_error: Option<String>,
    next_volume_sync: Instant,
    init: Vec<Ctr>,
    containers: Vec<Ctr>,
    /// Deleted from the API by this kubelet: nothing more to do but remove the sandbox.
    pub finished: bool,
    last_status: Option<Value>,
}

fn spec_of(pod: &Pod) -> k8s_openapi::api::core::v1::PodSpec {
    pod.spec.clone().unwrap_or_default()
}

/// The flag file that makes pod `namespace/name`'s readiness fail on node `state`.
pub fn unready_flag(state: &std::path::Path, namespace: &str, name: &str) -> PathBuf {
    pod_dir(state, namespace, name).join("unready")
}

impl Worker {
    /// A worker for `pod` at `ip`, adopting the processes a previous kubelet left running.
    pub fn new(cfg: &KubeletConfig, pod: Pod, ip: Ipv4Addr) -> Worker {
        let (namespace, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = spec_of(&pod);
        let dir = pod_dir(&cfg.state_dir, &namespace, &name);
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(now);
        let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
        let init = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| Ctr::new(c, "PodInitializing"))
            .collect();
        let waiting = if has_init { "PodInitializing" } else { "ContainerCreating" };
        let mut containers: Vec<Ctr> = spec.containers.into_iter().map(|c| Ctr::new(c, waiting)).collect();
        for c in &mut containers {
            let file = runtime::files(&dir, &c.spec.name).record;
            let record: Option<Record> =
                std::fs::read_to_string(&file).ok().and_then(|t| serde_json::from_str(&t).ok());
            if let Some(p) = record.filter(|r| r.pod_uid == uid).and_then(Process::adopt) {
                tracing::info!(pod = %name, container = %c.spec.name, pid = p.record.pid, "container adopted");
                c.adopt(p);
            }
        }
        let adopted = containers.iter().any(|c| c.process.is_some());
        let mut init: Vec<Ctr> = init;
        if adopted {
            // The containers run, so the init containers finished before.
            for c in &mut init {
                c.done = true;
                c.state = State::Terminated(super::status::Terminated {
                    exit_code: 0,
                    signal: None,
                    reason: "Completed".into(),
                    started_at: start_time.clone(),
                    finished_at: start_time.clone(),
                    container_id: Ctr::container_id(&uid, &c.spec.name, 0),
                });
            }
        }
        Worker {
            uid,
            namespace,
            name,
            host_network: spec.host_network == Some(true),
            pod,
            dir,
            ip,
            sandbox_ready: false,
            start_time,
            volumes: Volumes::default(),
            volume_error: None,
            next_volume_sync: Instant::now(),
            init,
            containers,
            finished: false,
            last_status: None,
        }
    }

    fn netns(&self, cfg: &KubeletConfig) -> String {
        if self.host_network {
            sandbox::node_netns(cfg)
        } else {
            sandbox::netns(cfg, &self.namespace, &self.name)
        }
    }

    fn flagged(&self) -> bool {
        self.dir.join("unready").exists()
    }

    fn runtime_info(&self, cfg: &KubeletConfig) -> Runtime {
        Runtime { pod_ip: Some(self.ip.to_string()), host_ip: cfg.node_ip().map(|i| i.to_string()) }
    }

    /// Makes the sandbox (or finds the one a previous kubelet made) and its resolv.conf.
    fn sandbox(&mut self, cfg: &KubeletConfig) -> Result<(), String> {
        std::fs::create_dir_all(self.dir.join("containers")).map_err(|e| e.to_string())?;
        std::fs::write(self.dir.join("uid"), &self.uid).map_err(|e| e.to_string())?;
        let spec = spec_of(&self.pod);
        let ns = sandbox::netns(cfg, &self.namespace, &self.name);
        if !self.host_network && !std::path::Path::new("/run/netns").join(&ns).exists() {
            crate::netns::run(&sandbox::up(cfg, &self.namespace, &self.name, self.ip))
                .map_err(|e| e.to_string())?;
        }
        let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
        let resolv = sandbox::resolv_conf(cfg, &self.namespace, policy, self.host_network);
        match &resolv {
            Some(text) => {
                std::fs::write(self.dir.join("resolv.conf"), text).map_err(|e| e.to_string())?;
                if !self.host_network {
                    crate::netns::write_resolv_conf(&ns, text).map_err(|e| e.to_string())?;
                }
            }
            // The node's own, as kubelet copies its --resolv-conf for a container runtime to
            // mount (this kubelet runs in the node's namespace: `ip netns exec` shows it the
            // node's file).
            None => {
                let node = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
                std::fs::write(self.dir.join("resolv.conf"), node).map_err(|e| e.to_string())?;
            }
        }
        self.sandbox_ready = true;
        Ok(())
    }

    /// One step: whatever is due now. Returns whether the pod was deleted.
    pub async fn step(&mut self, ctx: &Ctx<'_>) {
        if self.finished {
            return;
        }
        if !self.sandbox_ready
            && let Err(e) = self.sandbox(ctx.cfg)
        {
            tracing::warn!(pod = %self.name, error = %e, "could not make the pod's sandbox");
        }
        if self.sandbox_ready && self.volumes_due() {
            let rt = self.runtime_info(ctx.cfg);
            let rotation = ctx.cfg.token_rotation_seconds.map(Duration::from_secs);
            match self.volumes.sync(ctx.client, &self.pod, &self.dir, &ctx.cfg.state_dir, &rt, rotation).await
            {
                Ok(()) => {
                    self.volume_error = None;
                    let next = Instant::now() + VOLUME_RESYNC;
                    self.next_volume_sync = self.volumes.next_token_refresh().map_or(next, |t| t.min(next));
                }
                Err(e) => {
                    if self.volume_error.as_deref() != Some(&e.to_string()) {
                        tracing::warn!(pod = %self.name, error = %e, "volumes not ready");
                    }
                    self.volume_error = Some(e.to_string());
                    self.next_volume_sync = Instant::now() + Duration::from_secs(2);
                }
            }
        }
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.terminate(ctx).await;
            return;
        }
        if self.sandbox_ready && self.volume_error.is_none() {
            self.run_containers(ctx).await;
        }
        self.write_status(ctx).await;
    }

    fn volumes_due(&self) -> bool {
        Instant::now() >= self.next_volume_sync
    }

    async fn services(&self, ctx: &Ctx<'_>) -> Vec<Service> {
        let spec = spec_of(&self.pod);
        let mut out = Vec::new();
        if let Ok(Some(k)) =
            Api::<Service>::namespaced(ctx.client.clone(), "default").get_opt("kubernetes").await
        {
            out.push(k);
        }
        if spec.enable_service_links != Some(false)
            && let Ok(list) = Api::<Service>::namespaced(ctx.client.clone(), &self.namespace)
                .list(&ListParams::default())
                .await
        {
            out.extend(list.items.into_iter().filter(|s| {
                !(self.namespace == "default" && s.metadata.name.as_deref() == Some("kubernetes"))
            }));
        }
        // kubelet lets the pod's namespace's Services come first and the master ones win.
        out.reverse();
        out
    }

    async fn run_containers(&mut self, ctx: &Ctx<'_>) {
        let policy = spec_of(&self.pod).restart_policy.unwrap_or_else(|| "Always".into());
        let (uid, stamp) = (self.uid.clone(), now());
        for (init, list) in [(true, &mut self.init), (false, &mut self.containers)] {
            for c in list.iter_mut() {
                if c.poll(&uid, |code| restarts(&policy, code, init), &stamp).is_some() {
                    tracing::info!(pod = %self.name, container = %c.spec.name, state = ?c.state, "container ended");
                }
            }
        }
        // Init containers one at a time, in order.
        if let Some(i) = self.init.iter().position(|c| !c.done) {
            if self.init[i].process.is_none() && self.init[i].due() {
                self.start(ctx, true, i).await;
            }
            return;
        }
        for i in 0..self.containers.len() {
            if self.containers[i].due() {
                self.start(ctx, false, i).await;
            }
        }
    }

    /// Starts container `i` (of the init containers when `init`).
    async fn start(&mut self, ctx: &Ctx<'_>, init: bool, i: usize) {
        let services = self.services(ctx).await;
        let rt = self.runtime_info(ctx.cfg);
        let (pod, dir, uid) = (self.pod.clone(), self.dir.clone(), self.uid.clone());
        let netns = self.netns(ctx.cfg);
        let hostname =
            (!self.host_network).then(|| spec_of(&pod).hostname.unwrap_or_else(|| self.name.clone()));
        let resolv = dir.join("resolv.conf");
        let site = self.probe_site(ctx.cfg);
        let c = if init { &mut self.init[i] } else { &mut self.containers[i] };
        let env = match environment(&pod, &c.spec, &services, &rt) {
            Ok(e) => e,
            Err(e) => {
                c.state =
                    State::Waiting { reason: "CreateContainerConfigError".into(), message: e.to_string() };
                return;
            }
        };
        let refuse = |c: &mut Ctr, reason: String, message: String| {
            let since = *c.refused_since.get_or_insert_with(Instant::now);
            let reason = if reason == "ErrImagePull" && since.elapsed() >= Duration::from_secs(10) {
                "ImagePullBackOff".to_string()
            } else {
                reason
            };
            c.state = State::Waiting { reason, message };
        };
        let image = match ctx.cfg.image_kind(c.spec.image.as_deref().unwrap_or_default()) {
            ImageKind::Whoami => None,
            _ => from_image::loaded(ctx.cfg, &c.spec),
        };
        let processes = match (&image, launch(ctx.cfg, &self.name, &c.spec, &env)) {
            (Some(_), _) => Vec::new(),
            (None, Launch::Run(p)) => p,
            (None, Launch::Refused { reason, message }) => return refuse(c, reason, message),
        };
        let mut mounts = match container_mounts(&pod, &c.spec, &dir, &ctx.cfg.state_dir) {
            Ok(m) => m,
            Err(e) => {
                c.state =
                    State::Waiting { reason: "CreateContainerConfigError".into(), message: e.to_string() };
                return;
            }
        };
        if let Err(e) = make_nested_mountpoints(&mounts) {
            let message = format!("nested mount points: {e}");
            c.state = State::Waiting { reason: "CreateContainerConfigError".into(), message };
            return;
        }
        if resolv.exists() {
            mounts.push(Mount { source: resolv, target: "/etc/resolv.conf".into(), read_only: true });
        }
        let runc = match &image {
            None => None,
            Some(img) => {
                let netns_path = (!self.host_network).then(|| Path::new("/run/netns").join(&netns));
                let at = Placement {
                    pod_dir: &dir,
                    uid: &uid,
                    netns: netns_path.as_deref(),
                    hostname: hostname.as_deref(),
                };
                match from_image::bundle(ctx.cfg, &pod, &c.spec, img, &env, &mounts, &at) {
                    Ok(r) => Some(r),
                    Err((reason, message)) => return refuse(c, reason, message),
                }
            }
        };
        let files = runtime::files(&dir, &c.spec.name);
        let spec = ContainerSpec {
            processes,
            env,
            mounts,
            working_dir: c.spec.working_dir.clone(),
            hostname,
            scratch: files.scratch.clone(),
        };
        let started = (|| -> std::io::Result<Process> {
            let argv = match &runc {
                Some(r) => r.run_argv(),
                None => {
                    std::fs::create_dir_all(&files.scratch)?;
                    let text = serde_json::to_vec_pretty(&spec).map_err(std::io::Error::other)?;
                    std::fs::write(&files.spec, text)?;
                    runtime::helper_argv(&netns, &ctx.cfg.tideway_binary, &files.spec)
                }
            };
            let n = c.restart_count + i32::from(c.last.is_some());
            let mut p = Process::spawn(&argv, &files.log, &uid, now(), n)?;
            p.record.runc = runc.clone();
            std::fs::write(&files.record, serde_json::to_vec(&p.record).map_err(std::io::Error::other)?)?;
            Ok(p)
        })();
        match started {
            Ok(p) => {
                tracing::info!(pod = %self.name, container = %c.spec.name, pid = p.record.pid, "container started");
                c.running(p, &now());
                c.start_probes(&site, ctx.probes);
            }
            Err(e) => {
                c.state = State::Waiting { reason: "RunContainerError".into(), message: e.to_string() };
                c.restart_at = Some(Instant::now() + Duration::from_secs(10));
            }
        }
    }

    /// A probe's verdict.
    pub fn on_probe(&mut self, msg: &ProbeMsg, ctx: &Ctx<'_>) {
        let site = self.probe_site(ctx.cfg);
        let Some(c) = self.containers.iter_mut().find(|c| c.spec.name == msg.container) else { return };
        if c.restart_count != msg.generation || c.process.is_none() {
            return;
        }
        match (msg.kind, msg.ok) {
            (Kind::Readiness, ok) => c.probe_ready = ok,
            (Kind::Startup, true) => {
                c.started = true;
                c.start_probes(&site, ctx.probes);
            }
            (Kind::Liveness | Kind::Startup, false) => {
                tracing::info!(pod = %self.name, container = %c.spec.name, kind = ?msg.kind, "probe failed; restarting the container");
                c.stop();
            }
            (Kind::Liveness, true) => {}
        }
    }

    /// Where this pod's probes look: its address (the node's on the host network), the flag
    /// file `lab pod unready` writes.
    fn probe_site(&self, cfg: &KubeletConfig) -> ProbeSite {
        let ip = if self.host_network { cfg.node_ip().unwrap_or(self.ip) } else { self.ip };
        ProbeSite {
            uid: self.uid.clone(),
            ip: IpAddr::V4(ip),
            tideway: cfg.tideway_binary.display().to_string(),
            flag: self.dir.join("unready"),
        }
    }

    fn view(&self, cfg: &KubeletConfig) -> PodView {
        let flagged = self.flagged();
        let mut containers: Vec<_> = self.containers.iter().map(|c| c.view(&self.uid, flagged)).collect();
        if let Some(e) = &self.volume_error {
            for c in containers.iter_mut().filter(|c| matches!(c.state, State::Waiting { .. })) {
                c.state = State::Waiting { reason: "ContainerCreating".into(), message: e.clone() };
            }
        }
        PodView {
            restart_policy: spec_of(&self.pod).restart_policy.unwrap_or_else(|| "Always".into()),
            sandbox_ready: self.sandbox_ready,
            init: self.init.iter().map(|c| c.view(&self.uid, false)).collect(),
            containers,
            pod_ip: Some(self.ip.to_string()),
            host_ip: cfg.node_ip().map(|i| i.to_string()).unwrap_or_default(),
            start_time: self.start_time.clone(),
        }
    }

    async fn write_status(&mut self, ctx: &Ctx<'_>) {
        let current = serde_json::to_value(&self.pod.status).unwrap_or(Value::Null);
        let status = pod_status(&self.view(ctx.cfg), &current, self.last_status.as_ref(), &now());
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await
        {
            Ok(p) => {
                self.pod.status = p.status;
                self.last_status = Some(status);
            }
            Err(e) => tracing::warn!(pod = %self.name, error = %e, "could not write the pod's status"),
        }
    }

    /// Graceful deletion, as kubelet: SIGTERM at once, SIGKILL at `deletionTimestamp` (the
    /// grace period's end) to what still runs, readiness probed and written meanwhile; once
    /// every process is gone, the final status and the deletion with grace 0.
    async fn terminate(&mut self, ctx: &Ctx<'_>) {
        let Some(deadline) = self.pod.metadata.deletion_timestamp.as_ref() else {
            self.write_status(ctx).await;
            return;
        };
        let grace_left = Duration::try_from(deadline.0.duration_since(k8s_openapi::jiff::Timestamp::now()))
            .unwrap_or_default();
        let (uid, stamp) = (self.uid.clone(), now());
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            c.terminate_within(grace_left);
            c.poll(&uid, |_| false, &stamp);
        }
        if self.init.iter().chain(&self.containers).any(|c| c.process.is_some()) {
            // Its readiness, still probed, as it drains.
            self.write_status(ctx).await;
            return;
        }
        self.write_status(ctx).await;
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &params).await {
            Ok(_) => {
                tracing::info!(pod = %self.name, "pod stopped and deleted");
                self.finished = true;
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => self.finished = true,
            Err(e) => tracing::warn!(pod = %self.name, error = %e, "could not delete the pod"),
        }
    }

    /// Stops every process now (SIGTERM, SIGKILL after a short wait), for a pod that left.
    pub async fn stop_all(&mut self) {
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            c.stop();
        }
        let deadline = Instant::now() + super::containers::STOP_WAIT + Duration::from_secs(1);
        loop {
            let mut running = false;
            for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
                if let Some(p) = &mut c.process {
                    if p.poll().is_some() {
                        c.process = None;
                    } else {
                        running = true;
                    }
                }
            }
            if !running || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether it runs on the node's network.
    pub fn host_network(&self) -> bool {
        self.host_network
    }
}

//! The peers as Pods in a kube lab (`lab up --kube --peers kube-proxy,coredns,metallb`): each
//! from its own image (`make peers` builds them into `target/peers/images`, named as their
//! manifests name them) and installed by its own manifests, as a cluster's operator installs
//! them:
//!
//! ```text
//!  kube-proxy  kubeadm init phase addon kube-proxy   (its ConfigMap, RBAC, DaemonSet)
//!  coredns     kubeadm init phase addon coredns      (its ConfigMap, RBAC, Deployment, kube-dns)
//!  metallb     metallb-native.yaml from MetalLB's module (CRDs, controller, speaker, webhook)
//! ```
//!
//! What the lab changes, each because a lab differs from the clusters the manifests are
//! written for ([`CHANGES`] lists them for the log; nothing else differs):
//! * `kube-system` is labelled Pod Security `privileged`: the lab's API server enforces
//!   `baseline` by default, a kubeadm cluster enforces nothing, and kube-proxy is privileged.
//! * kube-proxy's `config.conf`: `conntrack.maxPerCore: 0` (leave the limit alone): the lab's
//!   nodes share one kernel, whose conntrack table size is the host's, not a node's.
//! * kubeadm's `dns.imageTag` names the CoreDNS built here (v1.15.0 where kubeadm defaults to
//!   its own pin): a kubeadm setting, not a manifest change.
//! * Beside Tideway (a lab with its components): kube-proxy's and MetalLB's speaker's
//!   DaemonSets select the nodes labelled [`PEERS_LABEL`] (both want ports Tideway's agent
//!   uses: 10256, 10249, 7946), the chart's agents the others; MetalLB's controller and speaker
//!   get `--lb-class=`[`METALLB_CLASS`], so Tideway's operator and MetalLB each serve their own
//!   Services. CoreDNS is not run beside Tideway: both are `kube-system/kube-dns`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::apply::Applier;
use super::{KubeError, pki};
use crate::images::Store;

/// The label (value `"true"`) of the nodes that run kube-proxy and MetalLB's speaker in a lab
/// that runs Tideway too.
pub const PEERS_LABEL: &str = "lab.tideway.io/peers";

/// MetalLB's `--lb-class` beside Tideway: the `loadBalancerClass` of the Services it serves.
pub const METALLB_CLASS: &str = "metallb.io/lab";

/// The field manager MetalLB's manifest is applied as (what `kubectl apply --server-side` is).
const MANAGER: &str = "kubectl";

/// What the lab changes of the peers' manifests, and why (the module's overview says more).
pub const CHANGES: [&str; 4] = [
    "kube-system labelled pod-security.kubernetes.io/enforce=privileged (the lab enforces baseline by default)",
    "kube-proxy config.conf conntrack.maxPerCore: 0 (the nodes share the host's conntrack table)",
    "kubeadm dns.imageTag: the CoreDNS built here",
    "beside Tideway: kube-proxy and MetalLB's speaker on the nodes labelled lab.tideway.io/peers=true, MetalLB with --lb-class=metallb.io/lab",
];

/// A peer the lab can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// kube-proxy, by kubeadm's addon phase.
    KubeProxy,
    /// CoreDNS, by kubeadm's addon phase.
    CoreDns,
    /// MetalLB (L2), by its `metallb-native.yaml`.
    MetalLb,
}

impl Peer {
    /// The peer `name` names (`kube-proxy`, `coredns`, `metallb`).
    pub fn parse(name: &str) -> Result<Peer, String> {
        match name {
            "kube-proxy" => Ok(Peer::KubeProxy),
            "coredns" => Ok(Peer::CoreDns),
            "metallb" => Ok(Peer::MetalLb),
            other => Err(format!("no peer {other:?} (kube-proxy, coredns, metallb)")),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Peer::KubeProxy => "kube-proxy",
            Peer::CoreDns => "coredns",
            Peer::MetalLb => "metallb",
        }
    }

    /// Its images' archive names in the peers' directory.
    fn archives(self) -> &'static [&'static str] {
        match self {
            Peer::KubeProxy => &["kube-proxy"],
            Peer::CoreDns => &["coredns"],
            Peer::MetalLb => &["metallb-controller", "metallb-speaker"],
        }
    }
}

/// Where `make peers` leaves the images and MetalLB's manifest: `TIDEWAY_PEER_IMAGES`, else
/// `target/peers/images` of the build that holds this executable.
pub fn images_dir() -> Result<PathBuf, KubeError> {
    if let Some(d) = std::env::var_os("TIDEWAY_PEER_IMAGES") {
        return Ok(PathBuf::from(d));
    }
    super::found_beside_build(&Path::new("peers").join("images"), "make peers")
}

/// Loads the images of `peers` from `dir` into `store`; the names loaded.
pub fn load_images(store: &Store, dir: &Path, peers: &[Peer]) -> Result<Vec<String>, KubeError> {
    let mut names = Vec::new();
    for archive in peers.iter().flat_map(|p| p.archives()) {
        let path = dir.join(format!("{archive}.oci.tar"));
        let loaded = store.load(&path, &[]).map_err(|e| KubeError::Command {
            command: format!("loading {} (make peers builds it)", path.display()),
            message: e.to_string(),
        })?;
        names.extend(loaded);
    }
    Ok(names)
}

/// How the peers are installed in one lab.
pub struct Install<'a> {
    /// The lab's kubeadm configuration ([`super::Layout::kubeadm_config`]).
    pub kubeadm_config: &'a Path,
    /// An admin client.
    pub client: &'a kube::Client,
    /// An admin kubeconfig the host can use (kubeadm's).
    pub kubeconfig: &'a Path,
    /// The peers' directory (MetalLB's manifest).
    pub dir: &'a Path,
    /// The lab's image names (CoreDNS's tag is read from them).
    pub images: &'a [String],
    /// Tideway runs too: the node-bound peers go to the nodes labelled [`PEERS_LABEL`].
    pub beside_tideway: bool,
}

impl Install<'_> {
    /// Installs `peers`, in kube-proxy, CoreDNS, MetalLB order.
    pub async fn run(&self, peers: &[Peer]) -> Result<(), KubeError> {
        if self.beside_tideway && peers.contains(&Peer::CoreDns) {
            return Err(KubeError::Manifest {
                path: "--peers".into(),
                message: "CoreDNS beside Tideway: both are kube-system/kube-dns (use --no-components)".into(),
            });
        }
        let privileged =
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces.patch("kube-system", &PatchParams::default(), &Patch::Merge(&privileged)).await?;
        let mut sorted = peers.to_vec();
        sorted.sort();
        sorted.dedup();
        for peer in sorted {
            match peer {
                Peer::KubeProxy => self.kube_proxy().await?,
                Peer::CoreDns => self.coredns()?,
                Peer::MetalLb => self.metallb().await?,
            }
            tracing::info!(?peer, "installed from its own manifests");
        }
        Ok(())
    }

    /// `kubeadm init phase addon ADDON` with the control plane's kubeadm configuration, and
    /// `config` changed in it.
    fn kubeadm_addon(&self, addon: &str, change: impl FnOnce(&mut Value)) -> Result<String, KubeError> {
        let path = self.kubeadm_config;
        let text = std::fs::read_to_string(path)?;
        let mut docs: Vec<Value> = text
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .map_err(|e| KubeError::Manifest { path: path.display().to_string(), message: e.to_string() })?;
        if let Some(cluster) = docs.iter_mut().find(|d| d["kind"] == "ClusterConfiguration") {
            change(cluster);
        }
        let config = path.with_file_name(format!("kubeadm-{addon}.yaml"));
        std::fs::write(&config, docs.iter().map(|d| format!("---\n{d}\n")).collect::<String>())?;
        let mut argv = pki::kubeadm(&super::binary()?);
        argv.extend(["init", "phase", "addon", addon, "--config"].map(String::from));
        argv.push(config.display().to_string());
        argv.extend(["--kubeconfig".to_string(), self.kubeconfig.display().to_string()]);
        pki::run(&argv)
    }

    async fn kube_proxy(&self) -> Result<(), KubeError> {
        self.kubeadm_addon("kube-proxy", |_| {})?;
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let held = maps.get("kube-proxy").await?;
        let conf = held.data.as_ref().and_then(|d| d.get("config.conf")).cloned().unwrap_or_default();
        let changed = conntrack_left_alone(&conf).ok_or_else(|| KubeError::Manifest {
            path: "kube-system/kube-proxy config.conf".into(),
            message: "no conntrack maxPerCore line to change".into(),
        })?;
        let patch = json!({"data": {"config.conf": changed}});
        maps.patch("kube-proxy", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        if self.beside_tideway {
            let sets: Api<DaemonSet> = Api::namespaced(self.client.clone(), "kube-system");
            sets.patch("kube-proxy", &PatchParams::default(), &Patch::Strategic(on_peer_nodes())).await?;
        }
        Ok(())
    }

    fn coredns(&self) -> Result<(), KubeError> {
        let tag = self.images.iter().find_map(|n| n.strip_prefix("registry.k8s.io/coredns/coredns:"));
        let tag = tag.ok_or_else(|| KubeError::NoBinary("CoreDNS's image (make peers)".into()))?.to_string();
        self.kubeadm_addon("coredns", |cluster| cluster["dns"] = json!({"imageTag": tag}))?;
        Ok(())
    }

    async fn metallb(&self) -> Result<(), KubeError> {
        let path = self.dir.join("metallb-native.yaml");
        let bad = |message: String| KubeError::Manifest { path: path.display().to_string(), message };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("{e} (make peers copies it)")))?;
        let mut objects = Vec::new();
        for doc in text.split("\n---\n").filter(|d| !d.trim().is_empty()) {
            let mut obj: Value = serde_saphyr::from_str(doc).map_err(|e| bad(e.to_string()))?;
            if self.beside_tideway {
                beside_tideway(&mut obj);
            }
            objects.push(obj);
        }
        Applier::new(self.client.clone(), MANAGER).apply_all(objects).await?;
        Ok(())
    }
}

/// kubeadm's `config.conf` with `conntrack.maxPerCore: 0`, or `None` if it has no such line.
fn conntrack_left_alone(conf: &str) -> Option<String> {
    let line = conf.lines().find(|l| l.trim_start().starts_with("maxPerCore:"))?;
    let indent = &line[..line.len() - line.trim_start().len()];
    Some(conf.replacen(line, &format!("{indent}maxPerCore: 0"), 1))
}

/// A strategic-merge patch that puts a workload's Pods on the nodes labelled [`PEERS_LABEL`].
fn on_peer_nodes() -> Value {
    json!({"spec": {"template": {"spec": {"nodeSelector": {PEERS_LABEL: "true"}}}}})
}

/// One of MetalLB's objects as the lab runs it beside Tideway: the speaker on the peers'
/// nodes, the controller and speaker serving [`METALLB_CLASS`] only.
fn beside_tideway(obj: &mut Value) {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if !matches!((kind.as_str(), name.as_str()), ("DaemonSet", "speaker") | ("Deployment", "controller")) {
        return;
    }
    let spec = &mut obj["spec"]["template"]["spec"];
    if kind == "DaemonSet" {
        spec["nodeSelector"][PEERS_LABEL] = json!("true");
    }
    if let Some(args) = spec["containers"][0]["args"].as_array_mut() {
        args.push(json!(format!("--lb-class={METALLB_CLASS}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_proxys_conntrack_limit_is_left_alone() {
        let conf = "conntrack:\n  maxPerCore: null\n  min: null\nmode: \"\"\n";
        assert_eq!(
            conntrack_left_alone(conf).unwrap(),
            "conntrack:\n  maxPerCore: 0\n  min: null\nmode: \"\"\n"
        );
        assert_eq!(conntrack_left_alone("mode: iptables\n"), None);
    }

    #[test]
    fn beside_tideway_metallb_serves_its_class_on_the_peers_nodes() {
        let mut speaker = json!({"kind": "DaemonSet", "metadata": {"name": "speaker"},
            "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                "containers": [{"args": ["--port=9120"]}]}}}});
        beside_tideway(&mut speaker);
        let spec = &speaker["spec"]["template"]["spec"];
        assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux", PEERS_LABEL: "true"}));
        assert_eq!(spec["containers"][0]["args"], json!(["--port=9120", "--lb-class=metallb.io/lab"]));
        let mut controller = json!({"kind": "Deployment", "metadata": {"name": "controller"},
            "spec": {"template": {"spec": {"containers": [{"args": []}]}}}});
        beside_tideway(&mut controller);
        assert_eq!(
            controller["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["--lb-class=metallb.io/lab"])
        );
        assert_eq!(controller["spec"]["template"]["spec"]["nodeSelector"], Value::Null);
        let mut other = json!({"kind": "Service", "metadata": {"name": "speaker"}});
        beside_tideway(&mut other);
        assert_eq!(other, json!({"kind": "Service", "metadata": {"name": "speaker"}}));
    }
}

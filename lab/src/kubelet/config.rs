//! The lab kubelet's configuration file (JSON): who the node is, how it reaches the API server,
//! its heartbeat's rhythm, and which images it can run.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::KubeletError;

/// The image the chart's Pods run (`tideway` is its entrypoint).
pub const TIDEWAY_IMAGE: &str = "ghcr.io/tideway-net/tideway";
/// The images that mean the lab's built-in whoami server (as the file-fed lab runs every pod).
pub const WHOAMI_IMAGES: [&str; 3] = ["traefik/whoami", "containous/whoami", "whoami"];

/// One address of the Node (`status.addresses`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The address.
    pub address: String,
}

/// What `tideway lab kubelet --config FILE` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfig {
    /// The lab's name (its namespaces are `tw-LAB-...`).
    pub lab: String,
    /// The node's name.
    pub node_name: String,
    /// The node's kubeconfig (client certificate `system:node:NODE`, group `system:nodes`).
    pub kubeconfig: PathBuf,
    /// The Node's labels from the lab file (`kubernetes.io/hostname`, `kubernetes.io/os` and
    /// `kubernetes.io/arch` are added).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The Node's addresses; the first InternalIP is the node's address.
    pub addresses: Vec<NodeAddress>,
    /// The node's pod CIDR (`10.10.1.0/24`).
    #[serde(rename = "podCIDR")]
    pub pod_cidr: String,
    /// The cluster DNS Service's addresses.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<Ipv4Addr>,
    /// The cluster's DNS domain.
    #[serde(default = "default_domain")]
    pub cluster_domain: String,
    /// The node Lease's `leaseDurationSeconds`.
    pub lease_duration_seconds: u32,
    /// How often the Lease is renewed (milliseconds).
    pub renew_interval_ms: u64,
    /// Rewrite projected ServiceAccount tokens this often (seconds) instead of at 80 % of their
    /// lifetime (tests).
    #[serde(default)]
    pub token_rotation_seconds: Option<u64>,
    /// The build's `tideway` binary: what the Tideway image's containers run.
    pub tideway_binary: PathBuf,
    /// Image repositories that mean Tideway.
    #[serde(default = "default_tideway_images")]
    pub tideway_images: Vec<String>,
    /// Image repositories that mean the built-in whoami server.
    #[serde(default = "default_whoami_images")]
    pub whoami_images: Vec<String>,
    /// The lab's image store (`tideway lab load image`): a container whose image was loaded
    /// there runs from it under runc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_dir: Option<PathBuf>,
    /// The node's state directory (`/run/tideway-lab/LAB/nodes/NODE`): pods, volumes, IPAM,
    /// and the node's own `hostPath`s.
    pub state_dir: PathBuf,
}

fn default_domain() -> String {
    "cluster.local".into()
}

fn default_tideway_images() -> Vec<String> {
    vec![TIDEWAY_IMAGE.into()]
}

fn default_whoami_images() -> Vec<String> {
    WHOAMI_IMAGES.iter().map(|s| s.to_string()).collect()
}

/// How often a kubelet renews its Lease for a node lifecycle controller with `grace`: a
/// quarter of it (kubelet renews every 10 s against a 40 s grace); the Lease's duration is the
/// grace itself (at least a second).
pub fn heartbeat(grace: Duration) -> (u32, Duration) {
    let duration = grace.as_secs().max(1) as u32;
    (duration, grace / 4)
}

/// What kind of image a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageKind {
    /// Tideway's: the build's `tideway` binary runs.
    Tideway,
    /// The lab's whoami server.
    Whoami,
    /// Anything else: the lab cannot pull it.
    Other,
}

/// `image`'s repository: without its tag or digest, and without Docker Hub's implicit prefixes.
pub fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    let image = match image[slash..].rfind(':') {
        Some(colon) => &image[..slash + colon],
        None => image,
    };
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    image.strip_prefix("library/").unwrap_or(image)
}

impl KubeletConfig {
    /// What `image` is for this kubelet.
    pub fn image_kind(&self, image: &str) -> ImageKind {
        let repo = repository(image);
        if self.tideway_images.iter().any(|r| repository(r) == repo) {
            ImageKind::Tideway
        } else if self.whoami_images.iter().any(|r| repository(r) == repo) {
            ImageKind::Whoami
        } else {
            ImageKind::Other
        }
    }

    /// The node's address: its first InternalIP.
    pub fn node_ip(&self) -> Option<Ipv4Addr> {
        self.addresses.iter().find(|a| a.kind == "InternalIP").and_then(|a| a.address.parse().ok())
    }

    /// The pod CIDR as address and prefix length.
    pub fn pod_net(&self) -> Option<(Ipv4Addr, u8)> {
        let (ip, len) = self.pod_cidr.split_once('/')?;
        Some((ip.parse().ok()?, len.parse().ok().filter(|l| *l <= 32)?))
    }

    /// The Lease renewal interval.
    pub fn renew_interval(&self) -> Duration {
        Duration::from_millis(self.renew_interval_ms.max(100))
    }

    /// Reads a configuration file.
    pub fn read(path: &Path) -> Result<KubeletConfig, KubeletError> {
        let text = std::fs::read_to_string(path)?;
        let cfg: KubeletConfig = serde_json::from_str(&text)
            .map_err(|e| KubeletError::Config(format!("{}: {e}", path.display())))?;
        if cfg.node_ip().is_none() || cfg.pod_net().is_none() {
            return Err(KubeletError::Config(format!(
                "{}: the node needs an InternalIP and a pod CIDR",
                path.display()
            )));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn config() -> KubeletConfig {
        serde_json::from_value(serde_json::json!({
            "lab": "demo",
            "nodeName": "w1",
            "kubeconfig": "/run/tideway-lab/demo/kube/nodes/w1.conf",
            "labels": {"mynode": "worker1"},
            "addresses": [{"type": "InternalIP", "address": "172.18.0.4"}],
            "podCIDR": "10.10.1.0/24",
            "clusterDNS": ["10.200.1.10"],
            "leaseDurationSeconds": 50,
            "renewIntervalMs": 12500,
            "tidewayBinary": "/usr/bin/tideway",
            "stateDir": "/run/tideway-lab/demo/nodes/w1",
        }))
        .unwrap()
    }

    #[test]
    fn images_are_known_by_repository_whatever_their_tag_or_registry_prefix() {
        let c = config();
        assert_eq!(c.image_kind("ghcr.io/tideway-net/tideway:0.1.0"), ImageKind::Tideway);
        assert_eq!(c.image_kind("ghcr.io/tideway-net/tideway@sha256:abc"), ImageKind::Tideway);
        assert_eq!(c.image_kind("traefik/whoami"), ImageKind::Whoami);
        assert_eq!(c.image_kind("docker.io/traefik/whoami:v1.10"), ImageKind::Whoami);
        assert_eq!(c.image_kind("docker.io/library/whoami"), ImageKind::Whoami);
        assert_eq!(c.image_kind("localhost:5000/whoami"), ImageKind::Other, "a port is no tag");
        assert_eq!(c.image_kind("nginx:1.27"), ImageKind::Other);
        assert_eq!(repository("localhost:5000/a/b:tag"), "localhost:5000/a/b");
    }

    #[test]
    fn the_heartbeat_follows_the_grace_period_and_the_file_reads_back() {
        assert_eq!(heartbeat(Duration::from_secs(40)), (40, Duration::from_secs(10)));
        assert_eq!(heartbeat(Duration::from_secs(8)), (8, Duration::from_secs(2)));
        let c = config();
        assert_eq!(c.node_ip(), Some(Ipv4Addr::new(172, 18, 0, 4)));
        assert_eq!(c.pod_net(), Some((Ipv4Addr::new(10, 10, 1, 0), 24)));
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.whoami_images[0], "traefik/whoami");
        let back: KubeletConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}

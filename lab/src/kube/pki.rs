//! The control plane's PKI and kubeconfigs, made by the real kubeadm from a configuration
//! built here (pure: [`kubeadm_config`]) and run as kubeadm's own phases:
//!
//! ```text
//!  kubeadm init phase certs all --config F          CA, API server serving cert, etcd, front proxy,
//!                                                   the service-account key pair (sa.key, sa.pub)
//!  kubeadm init phase kubeconfig admin|super-admin|controller-manager|scheduler --config F
//!  kubeadm kubeconfig user --client-name system:node:NODE --org system:nodes --config F
//! ```
//! kubeadm puts the serving certificate's SANs together itself: the `kubernetes` ClusterIP
//! (the Service CIDR's first address), `kubernetes`, `kubernetes.default`,
//! `kubernetes.default.svc[.cluster.local]`, the advertise address and the control-plane
//! endpoint; `certSANs` adds 127.0.0.1 and `localhost`, the host's way in through a forward.
//! Each kubeconfig then names the server its user reaches ([`rewrite_server`]): the
//! controller-manager and scheduler run beside the API server and use 127.0.0.1; nodes, the
//! admin and `kube-public/cluster-info` name the control-plane endpoint.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::error::KubeError;

/// The API server's port.
pub const API_PORT: u16 = 6443;

/// What kubeadm needs to know of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterShape {
    /// The cluster's name in kubeconfigs.
    pub cluster_name: String,
    /// `v1.37.2`.
    pub kubernetes_version: String,
    /// The control-plane node's name.
    pub node_name: String,
    /// The API server's address (advertised; on an interface of its namespace).
    pub address: Ipv4Addr,
    /// The Service CIDR (`10.200.1.0/24`).
    pub service_cidr: String,
    /// The pod network (`10.10.0.0/16`).
    pub pod_cidr: String,
    /// The DNS domain (`cluster.local`).
    pub dns_domain: String,
}

/// The kubeadm configuration (InitConfiguration and ClusterConfiguration, as JSON documents:
/// kubeadm reads YAML, and JSON is YAML) with certificates under `pki`.
pub fn kubeadm_config(shape: &ClusterShape, pki: &Path) -> String {
    let endpoint = format!("{}:{API_PORT}", shape.address);
    let init = json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": shape.address.to_string(), "bindPort": API_PORT},
        // Named so kubeadm detects no container runtime: the lab has none.
        "nodeRegistration": {
            "name": shape.node_name,
            "criSocket": "unix:///var/run/containerd/containerd.sock",
        },
    });
    let cluster = json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": shape.kubernetes_version,
        "clusterName": shape.cluster_name,
        "certificatesDir": pki.display().to_string(),
        "controlPlaneEndpoint": endpoint,
        "networking": {
            "serviceSubnet": shape.service_cidr,
            "podSubnet": shape.pod_cidr,
            "dnsDomain": shape.dns_domain,
        },
        "apiServer": {"certSANs": ["127.0.0.1", "localhost"]},
    });
    render_documents(&[init, cluster])
}

fn render_documents(docs: &[Value]) -> String {
    docs.iter().map(|d| format!("---\n{d}\n")).collect()
}

/// kubeadm's argv prefix in `tideway-kube` (it dispatches on its first argument).
pub fn kubeadm(binary: &Path) -> Vec<String> {
    vec![binary.display().to_string(), "kubeadm".into()]
}

/// The argv of kubeadm's certificate phase.
pub fn certs_argv(kubeadm: &[String], config: &Path) -> Vec<String> {
    words(kubeadm, &["init", "phase", "certs", "all", "--config"], config)
}

/// The kubeconfigs kubeadm's kubeconfig phase makes for the control plane: `admin.conf`
/// (group `kubeadm:cluster-admins`), `super-admin.conf` (`system:masters`), and the
/// controller-manager's and scheduler's.
pub const CONTROL_PLANE_KUBECONFIGS: [&str; 4] = ["admin", "super-admin", "controller-manager", "scheduler"];

/// The argv of kubeadm's kubeconfig phase for `which`, writing into `dir`.
pub fn kubeconfig_argv(kubeadm: &[String], config: &Path, which: &str, dir: &Path) -> Vec<String> {
    let mut v = words(kubeadm, &["init", "phase", "kubeconfig", which, "--config"], config);
    v.extend(["--kubeconfig-dir".into(), dir.display().to_string()]);
    v
}

/// The argv that prints node `node`'s kubeconfig (client certificate `system:node:NODE`, group
/// `system:nodes`, as the Node authorizer and NodeRestriction expect).
pub fn node_kubeconfig_argv(kubeadm: &[String], config: &Path, node: &str) -> Vec<String> {
    let mut v = words(kubeadm, &["kubeconfig", "user", "--config"], config);
    v.extend(["--client-name".into(), format!("system:node:{node}"), "--org".into(), "system:nodes".into()]);
    v
}

/// The argv of kubeadm's bootstrap-token phase (bootstrap-token RBAC and the
/// `kube-public/cluster-info` ConfigMap, readable anonymously; the ConfigMap names the server
/// of `admin`).
pub fn bootstrap_token_argv(kubeadm: &[String], config: &Path, admin: &Path) -> Vec<String> {
    let mut v = words(kubeadm, &["init", "phase", "bootstrap-token", "--config"], config);
    v.extend(["--kubeconfig".into(), admin.display().to_string(), "--skip-token-print".into()]);
    v
}

fn words(program: &[String], args: &[&str], last: &Path) -> Vec<String> {
    let mut v = program.to_vec();
    v.extend(args.iter().map(|a| a.to_string()));
    v.push(last.display().to_string());
    v
}

/// `text` (a kubeconfig) with every cluster's server set to `server`.
pub fn rewrite_server(text: &str, server: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match line.find("server: ") {
            Some(i) if line[..i].trim().is_empty() => {
                out.push_str(&line[..i]);
                out.push_str("server: ");
                out.push_str(server);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The Kubernetes version a `kube-apiserver --version` printed (`Kubernetes v1.37.2`).
pub fn parse_version(output: &str) -> Option<String> {
    output
        .split_whitespace()
        .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

/// Where the files go: `<dir>/pki` for certificates, `<dir>/kube` for the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The lab's directory.
    pub dir: PathBuf,
}

impl Layout {
    /// The certificate directory.
    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// The control plane's own files (kubeconfigs, etcd's data, logs, the audit log).
    pub fn kube(&self) -> PathBuf {
        self.dir.join("kube")
    }

    /// The kubeadm configuration.
    pub fn kubeadm_config(&self) -> PathBuf {
        self.kube().join("kubeadm.yaml")
    }

    /// `admin`, `super-admin`, `controller-manager` or `scheduler`'s kubeconfig.
    pub fn kubeconfig(&self, which: &str) -> PathBuf {
        self.kube().join(format!("{which}.conf"))
    }

    /// Node `node`'s kubeconfig.
    pub fn node_kubeconfig(&self, node: &str) -> PathBuf {
        self.kube().join("nodes").join(format!("{node}.conf"))
    }

    /// The API server's audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.kube().join("audit.log")
    }

    /// The cluster CA's certificate.
    pub fn ca(&self) -> PathBuf {
        self.pki().join("ca.crt")
    }
}

/// Runs `argv`; its standard output.
pub(super) fn run(argv: &[String]) -> Result<String, KubeError> {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| KubeError::Command { command: argv.join(" "), message: e.to_string() })?;
    if !out.status.success() {
        return Err(KubeError::Command {
            command: argv.join(" "),
            message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes the PKI and every kubeconfig (the control plane's and one per node in `nodes`) with
/// the real kubeadm.
pub fn make(
    kubeadm: &[String],
    shape: &ClusterShape,
    layout: &Layout,
    nodes: &[String],
) -> Result<(), KubeError> {
    std::fs::create_dir_all(layout.kube().join("nodes"))?;
    let config = layout.kubeadm_config();
    std::fs::write(&config, kubeadm_config(shape, &layout.pki()))?;
    run(&certs_argv(kubeadm, &config))?;
    let local = format!("https://127.0.0.1:{API_PORT}");
    for which in CONTROL_PLANE_KUBECONFIGS {
        run(&kubeconfig_argv(kubeadm, &config, which, &layout.kube()))?;
        if matches!(which, "controller-manager" | "scheduler") {
            let path = layout.kubeconfig(which);
            let text = std::fs::read_to_string(&path)?;
            write_private(&path, &rewrite_server(&text, &local))?;
        }
    }
    for node in nodes {
        let text = run(&node_kubeconfig_argv(kubeadm, &config, node))?;
        write_private(&layout.node_kubeconfig(node), &text)?;
    }
    Ok(())
}

/// Writes a file holding keys, readable by root only.
pub(crate) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> ClusterShape {
        ClusterShape {
            cluster_name: "tideway-lab".into(),
            kubernetes_version: "v1.37.2".into(),
            node_name: "myk8s-control-plane".into(),
            address: Ipv4Addr::new(172, 18, 0, 2),
            service_cidr: "10.200.1.0/24".into(),
            pod_cidr: "10.10.0.0/16".into(),
            dns_domain: "cluster.local".into(),
        }
    }

    #[test]
    fn the_kubeadm_configuration_names_the_endpoint_the_networks_and_the_extra_names() {
        let text = kubeadm_config(&shape(), Path::new("/run/tideway-lab/demo/pki"));
        let docs: Vec<Value> = text
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 2);
        let (init, cluster) = (&docs[0], &docs[1]);
        assert_eq!(init["kind"], "InitConfiguration");
        assert_eq!(init["localAPIEndpoint"]["advertiseAddress"], "172.18.0.2");
        assert_eq!(cluster["kind"], "ClusterConfiguration");
        assert_eq!(cluster["kubernetesVersion"], "v1.37.2");
        assert_eq!(cluster["controlPlaneEndpoint"], "172.18.0.2:6443");
        assert_eq!(cluster["certificatesDir"], "/run/tideway-lab/demo/pki");
        assert_eq!(cluster["networking"]["serviceSubnet"], "10.200.1.0/24");
        assert_eq!(cluster["networking"]["podSubnet"], "10.10.0.0/16");
        assert_eq!(cluster["networking"]["dnsDomain"], "cluster.local");
        assert_eq!(cluster["apiServer"]["certSANs"], json!(["127.0.0.1", "localhost"]));
    }

    #[test]
    fn kubeadm_is_asked_for_each_kubeconfig_and_each_node_identity() {
        let (k, c) = (&["/k/tideway-kube".to_string(), "kubeadm".to_string()], Path::new("/d/kubeadm.yaml"));
        assert_eq!(
            certs_argv(k, c).join(" "),
            "/k/tideway-kube kubeadm init phase certs all --config /d/kubeadm.yaml"
        );
        assert_eq!(
            kubeconfig_argv(k, c, "scheduler", Path::new("/d")).join(" "),
            "/k/tideway-kube kubeadm init phase kubeconfig scheduler --config /d/kubeadm.yaml --kubeconfig-dir /d"
        );
        assert_eq!(
            node_kubeconfig_argv(k, c, "w1").join(" "),
            "/k/tideway-kube kubeadm kubeconfig user --config /d/kubeadm.yaml --client-name system:node:w1 --org system:nodes"
        );
        assert_eq!(
            bootstrap_token_argv(k, c, Path::new("/d/admin.conf")).join(" "),
            "/k/tideway-kube kubeadm init phase bootstrap-token --config /d/kubeadm.yaml --kubeconfig /d/admin.conf --skip-token-print"
        );
    }

    #[test]
    fn a_kubeconfig_is_pointed_at_another_server_and_nothing_else_changes() {
        let text = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: QUJD\n    server: https://172.18.0.2:6443\n  name: tideway-lab\nusers:\n- name: x\n  user: {}\n";
        let out = rewrite_server(text, "https://127.0.0.1:6443");
        assert_eq!(out, text.replace("https://172.18.0.2:6443", "https://127.0.0.1:6443"));
        assert_eq!(parse_version("Kubernetes v1.37.2\n").as_deref(), Some("v1.37.2"));
        assert_eq!(parse_version("nothing"), None);
    }
}

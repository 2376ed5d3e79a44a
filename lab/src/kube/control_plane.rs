//! The command lines of etcd, kube-apiserver, kube-controller-manager and kube-scheduler
//! (pure), and the files the API server reads (the PodSecurity admission configuration and
//! the audit policy). They run inside the control-plane node's network namespace, where etcd,
//! the controller-manager and the scheduler listen on 127.0.0.1 and the API server on every
//! address at 6443, advertising the node's own.
//!
//! The flags are kubeadm's static-pod manifests' (v1.37) with the lab's networks, except:
//! the API server enforces PodSecurity `baseline` by default through an AdmissionConfiguration
//! (hardened clusters do; kubeadm leaves the default, `privileged`) and writes an audit log at
//! Metadata level; the controller-manager allocates no pod CIDRs (the lab file gives each node
//! its own, and the lab's kubelet registers it) and follows the lab's
//! `--node-monitor-grace-period`.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;

use super::pki::{API_PORT, Layout};

/// What the control plane's commands depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// The `tideway-kube` binary.
    pub binary: String,
    /// Where the files are.
    pub layout: Layout,
    /// The control-plane node's name (etcd's member name).
    pub node_name: String,
    /// The API server's address.
    pub address: Ipv4Addr,
    /// The Service CIDR.
    pub service_cidr: String,
    /// The cluster's name.
    pub cluster_name: String,
    /// `--node-monitor-grace-period`.
    pub grace: Duration,
    /// More API server flags, after its own.
    pub apiserver_extra: Vec<String>,
}

/// The four processes in start order (stop in the reverse).
pub const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

impl Flags {
    fn p(&self, file: &str) -> String {
        self.layout.pki().join(file).display().to_string()
    }

    fn k(&self, file: &str) -> String {
        self.layout.kube().join(file).display().to_string()
    }

    fn argv(&self, command: &str, flags: Vec<String>) -> Vec<String> {
        let mut v = vec![self.binary.clone(), command.to_string()];
        v.extend(flags);
        v
    }

    /// The argv of component `name` (one of [`COMPONENTS`]).
    pub fn of(&self, name: &str) -> Vec<String> {
        match name {
            "etcd" => self.etcd(),
            "kube-apiserver" => self.apiserver(),
            "kube-controller-manager" => self.controller_manager(),
            _ => self.scheduler(),
        }
    }

    /// etcd on 127.0.0.1, with mutual TLS as kubeadm sets it up.
    pub fn etcd(&self) -> Vec<String> {
        let n = &self.node_name;
        self.argv(
            "etcd",
            vec![
                format!("--name={n}"),
                format!("--data-dir={}", self.k("etcd")),
                "--listen-client-urls=https://127.0.0.1:2379".into(),
                "--advertise-client-urls=https://127.0.0.1:2379".into(),
                "--listen-peer-urls=https://127.0.0.1:2380".into(),
                "--initial-advertise-peer-urls=https://127.0.0.1:2380".into(),
                format!("--initial-cluster={n}=https://127.0.0.1:2380"),
                "--listen-metrics-urls=http://127.0.0.1:2381".into(),
                format!("--cert-file={}", self.p("etcd/server.crt")),
                format!("--key-file={}", self.p("etcd/server.key")),
                "--client-cert-auth=true".into(),
                format!("--trusted-ca-file={}", self.p("etcd/ca.crt")),
                format!("--peer-cert-file={}", self.p("etcd/peer.crt")),
                format!("--peer-key-file={}", self.p("etcd/peer.key")),
                "--peer-client-cert-auth=true".into(),
                format!("--peer-trusted-ca-file={}", self.p("etcd/ca.crt")),
                "--snapshot-count=10000".into(),
            ],
        )
    }

    /// kube-apiserver on every address of its namespace at 6443, advertising the node's
    /// address (the default endpoint reconciler then makes it the `kubernetes` Service's
    /// endpoint).
    pub fn apiserver(&self) -> Vec<String> {
        let mut argv = self.argv(
            "kube-apiserver",
            vec![
                format!("--advertise-address={}", self.address),
                "--bind-address=0.0.0.0".into(),
                format!("--secure-port={API_PORT}"),
                "--etcd-servers=https://127.0.0.1:2379".into(),
                format!("--etcd-cafile={}", self.p("etcd/ca.crt")),
                format!("--etcd-certfile={}", self.p("apiserver-etcd-client.crt")),
                format!("--etcd-keyfile={}", self.p("apiserver-etcd-client.key")),
                format!("--client-ca-file={}", self.p("ca.crt")),
                format!("--tls-cert-file={}", self.p("apiserver.crt")),
                format!("--tls-private-key-file={}", self.p("apiserver.key")),
                format!("--kubelet-client-certificate={}", self.p("apiserver-kubelet-client.crt")),
                format!("--kubelet-client-key={}", self.p("apiserver-kubelet-client.key")),
                "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname".into(),
                format!("--proxy-client-cert-file={}", self.p("front-proxy-client.crt")),
                format!("--proxy-client-key-file={}", self.p("front-proxy-client.key")),
                format!("--requestheader-client-ca-file={}", self.p("front-proxy-ca.crt")),
                "--requestheader-allowed-names=front-proxy-client".into(),
                "--requestheader-username-headers=X-Remote-User".into(),
                "--requestheader-group-headers=X-Remote-Group".into(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", self.p("sa.pub")),
                format!("--service-account-signing-key-file={}", self.p("sa.key")),
                format!("--service-cluster-ip-range={}", self.service_cidr),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                format!("--admission-control-config-file={}", self.k("admission.json")),
                format!("--audit-policy-file={}", self.k("audit-policy.json")),
                format!("--audit-log-path={}", self.layout.audit_log().display()),
                "--audit-log-maxsize=200".into(),
                "--audit-log-maxbackup=1".into(),
                "--allow-privileged=true".into(),
                "--enable-bootstrap-token-auth=true".into(),
            ],
        );
        argv.extend(self.apiserver_extra.iter().cloned());
        argv
    }

    /// kube-controller-manager: every controller kubeadm runs (with the bootstrap signer and
    /// token cleaner, so `cluster-info` is signed for bootstrap tokens), no pod CIDR allocation,
    /// the lab's node grace period.
    pub fn controller_manager(&self) -> Vec<String> {
        let conf = self.k("controller-manager.conf");
        self.argv(
            "kube-controller-manager",
            vec![
                format!("--kubeconfig={conf}"),
                format!("--authentication-kubeconfig={conf}"),
                format!("--authorization-kubeconfig={conf}"),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=10257".into(),
                format!("--client-ca-file={}", self.p("ca.crt")),
                format!("--requestheader-client-ca-file={}", self.p("front-proxy-ca.crt")),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", self.p("sa.key")),
                format!("--root-ca-file={}", self.p("ca.crt")),
                format!("--cluster-signing-cert-file={}", self.p("ca.crt")),
                format!("--cluster-signing-key-file={}", self.p("ca.key")),
                format!("--cluster-name={}", self.cluster_name),
                "--allocate-node-cidrs=false".into(),
                format!("--service-cluster-ip-range={}", self.service_cidr),
                "--leader-elect=true".into(),
                "--controllers=*,bootstrapsigner,tokencleaner".into(),
                format!("--node-monitor-grace-period={}", go_duration(self.grace)),
                format!("--node-monitor-period={}", go_duration(monitor_period(self.grace))),
                format!("--flex-volume-plugin-dir={}", self.k("flexvolume")),
            ],
        )
    }

    /// kube-scheduler with leader election.
    pub fn scheduler(&self) -> Vec<String> {
        let conf = self.k("scheduler.conf");
        self.argv(
            "kube-scheduler",
            vec![
                format!("--kubeconfig={conf}"),
                format!("--authentication-kubeconfig={conf}"),
                format!("--authorization-kubeconfig={conf}"),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=10259".into(),
                "--leader-elect=true".into(),
            ],
        )
    }
}

/// How often the node lifecycle controller looks at the Nodes: its default (5 s), or a fifth
/// of a shorter grace period (at least 1 s), so a short grace in tests is noticed on time.
pub fn monitor_period(grace: Duration) -> Duration {
    (grace / 5).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// A duration as Go's flags read it.
pub fn go_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

/// The API server's admission configuration: PodSecurity enforces `baseline` (latest) in every
/// namespace without labels of its own. Nothing is exempt: kubeadm exempts nothing either,
/// and the lab's pods that need more (the agents, on the host network) live in a namespace
/// labelled for it, as the chart's README says.
pub fn admission_config() -> String {
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{
            "name": "PodSecurity",
            "configuration": {
                "apiVersion": "pod-security.admission.config.k8s.io/v1",
                "kind": "PodSecurityConfiguration",
                "defaults": {
                    "enforce": "baseline", "enforce-version": "latest",
                    "audit": "privileged", "audit-version": "latest",
                    "warn": "privileged", "warn-version": "latest",
                },
                "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": []},
            },
        }],
    })
    .to_string()
}

/// The audit policy: every request at Metadata level (who, what, when, how it ended), none of
/// the bodies.
pub fn audit_policy() -> String {
    json!({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata"}],
    })
    .to_string()
}

/// Writes the admission configuration and the audit policy into the layout's directory.
pub fn write_files(layout: &Layout) -> std::io::Result<()> {
    let dir = layout.kube();
    std::fs::create_dir_all(dir.join("flexvolume"))?;
    std::fs::write(dir.join("admission.json"), admission_config())?;
    std::fs::write(dir.join("audit-policy.json"), audit_policy())
}

/// `argv` run inside network namespace `netns` (or as it is).
pub fn in_netns(netns: Option<&str>, argv: Vec<String>) -> Vec<String> {
    match netns {
        Some(ns) => ["ip", "netns", "exec", ns].iter().map(|s| s.to_string()).chain(argv).collect(),
        None => argv,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn flags() -> Flags {
        Flags {
            binary: "/k/tideway-kube".into(),
            layout: Layout { dir: PathBuf::from("/run/tideway-lab/demo") },
            node_name: "cp".into(),
            address: Ipv4Addr::new(172, 18, 0, 2),
            service_cidr: "10.200.1.0/24".into(),
            cluster_name: "tideway-lab".into(),
            grace: Duration::from_secs(8),
            apiserver_extra: Vec::new(),
        }
    }

    fn has(argv: &[String], flag: &str) -> bool {
        argv.iter().any(|a| a == flag)
    }

    #[test]
    fn the_api_server_advertises_the_node_and_enforces_what_a_hardened_cluster_does() {
        let a = flags().apiserver();
        assert_eq!(a[..2], ["/k/tideway-kube".to_string(), "kube-apiserver".to_string()]);
        for f in [
            "--advertise-address=172.18.0.2",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            "--service-cluster-ip-range=10.200.1.0/24",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--audit-log-path=/run/tideway-lab/demo/kube/audit.log",
            "--admission-control-config-file=/run/tideway-lab/demo/kube/admission.json",
            "--service-account-signing-key-file=/run/tideway-lab/demo/pki/sa.key",
        ] {
            assert!(has(&a, f), "{f} missing from {a:?}");
        }
        assert!(!a.iter().any(|f| f.starts_with("--endpoint-reconciler-type")), "the default reconciler");
        let admission: serde_json::Value = serde_json::from_str(&admission_config()).unwrap();
        let ps = &admission["plugins"][0]["configuration"];
        assert_eq!(ps["defaults"]["enforce"], "baseline");
        assert_eq!(ps["exemptions"]["namespaces"], json!([]), "nothing exempt, as kubeadm");
        let audit: serde_json::Value = serde_json::from_str(&audit_policy()).unwrap();
        assert_eq!(audit["rules"], json!([{"level": "Metadata"}]));
    }

    #[test]
    fn the_controller_manager_follows_the_labs_grace_and_leaves_pod_cidrs_to_the_nodes() {
        let c = flags().controller_manager();
        for f in [
            "--allocate-node-cidrs=false",
            "--use-service-account-credentials=true",
            "--node-monitor-grace-period=8s",
            "--node-monitor-period=1600ms",
            "--leader-elect=true",
            "--flex-volume-plugin-dir=/run/tideway-lab/demo/kube/flexvolume",
            "--kubeconfig=/run/tideway-lab/demo/kube/controller-manager.conf",
        ] {
            assert!(has(&c, f), "{f} missing from {c:?}");
        }
        assert!(has(&flags().scheduler(), "--leader-elect=true"));
        let e = flags().etcd();
        assert!(has(&e, "--listen-client-urls=https://127.0.0.1:2379"), "{e:?}");
        assert!(has(&e, "--data-dir=/run/tideway-lab/demo/kube/etcd"), "{e:?}");
        assert_eq!(monitor_period(Duration::from_secs(50)), Duration::from_secs(5));
        assert_eq!(monitor_period(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(
            in_netns(Some("tw-demo-n-cp"), vec!["x".into()]).join(" "),
            "ip netns exec tw-demo-n-cp x"
        );
    }
}

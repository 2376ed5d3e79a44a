//! A control plane in a network namespace of its own, with no lab topology: what each test of
//! Tideway's Kubernetes edge starts (one per test process). Dropped, it stops the control
//! plane, removes the namespace and its files.
//!
//!   Standalone::start("watches", |config| ...)  -> the control plane, ready
//!     .admin()                 a client with kubeadm's admin credentials (through the host's forward)
//!     .kubeconfig_for(user, groups, server)   a client certificate kubeadm signs
//!     .apply_crds(dir)         every CustomResourceDefinition in a directory, served
//!     .apply_chart_rbac(values)   the chart's namespace, ServiceAccounts and RBAC, as rendered
//!     .token_kubeconfig(ns, account)   a kubeconfig with a token the server mints for an account
//!     .withdraw(role, resource)   a ClusterRole without a resource (the role as it was, to restore)
//!     .kubeadm_addon(addon)    kubeadm's CoreDNS or kube-proxy addon, installed as `kubeadm init` does

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{AuthInfo, Kubeconfig};
use serde_json::Value;

use super::apply::Applier;
use super::error::KubeError;
use super::pki::{self, rewrite_server};
use super::{ControlPlane, ControlPlaneConfig, standalone_namespace};
use crate::netns;

/// The API server's address inside the namespace (each namespace has its own).
pub const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 2);

/// A running control plane in namespace `tw-TAG<pid>-n-cp`, files under the temporary directory.
pub struct Standalone {
    /// The control plane.
    pub cp: ControlPlane,
    /// Its directory (the test may keep files there too).
    pub dir: PathBuf,
    ns: String,
}

impl Standalone {
    /// Starts a control plane for test `tag`, its configuration changed by `configure` first.
    pub async fn start(
        tag: &str,
        configure: impl FnOnce(&mut ControlPlaneConfig),
    ) -> Result<Standalone, KubeError> {
        let id = std::process::id();
        let ns = format!("tw-{tag}{id}-n-cp");
        let dir = std::env::temp_dir().join(format!("tideway-{tag}-{id}"));
        std::fs::create_dir_all(&dir)?;
        netns::run(&standalone_namespace(&ns, ADDRESS)).map_err(|e| KubeError::Command {
            command: format!("ip netns add {ns}"),
            message: e.to_string(),
        })?;
        let mut config = ControlPlaneConfig::new(dir.join("cp"), Some(ns.clone()), ADDRESS)?;
        configure(&mut config);
        match ControlPlane::start(config).await {
            Ok(cp) => Ok(Standalone { cp, dir, ns }),
            Err(e) => {
                netns::remove(&ns);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The network namespace the control plane runs in (etcd listens on its loopback).
    pub fn netns(&self) -> &str {
        &self.ns
    }

    /// A client with kubeadm's admin credentials (`kubeadm:cluster-admins`).
    pub async fn admin(&self) -> Result<kube::Client, KubeError> {
        self.cp.client(&self.cp.admin_kubeconfig()).await
    }

    /// Writes a kubeconfig for `user` in `groups` (a client certificate kubeadm signs) that talks
    /// to `server` (the host's forward, or a proxy in front of it), as `dir/USER.conf`.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str], server: &str) -> Result<PathBuf, KubeError> {
        let mut argv = pki::kubeadm(&super::binary()?);
        argv.extend(["kubeconfig", "user", "--client-name", user].map(String::from));
        for g in groups {
            argv.extend(["--org".to_string(), g.to_string()]);
        }
        argv.extend(["--config".to_string(), self.cp.layout().kubeadm_config().display().to_string()]);
        let text = pki::run(&argv)?;
        let path = self.dir.join(format!("{user}.conf"));
        pki::write_private(&path, &rewrite_server(&text, server))?;
        Ok(path)
    }

    /// `kubeadm init phase addon ADDON` (`coredns` or `kube-proxy`) against the server, with the
    /// control plane's own kubeadm configuration, as `kubeadm init` runs it: the addon's
    /// ConfigMap, ServiceAccount, RBAC, workload and (CoreDNS) the `kube-dns` Service. What
    /// kubeadm printed.
    pub fn kubeadm_addon(&self, addon: &str) -> Result<String, KubeError> {
        let admin = self.kubeconfig_for("kubeadm-addon", &["kubeadm:cluster-admins"], &self.cp.host_url())?;
        let mut argv = pki::kubeadm(&super::binary()?);
        argv.extend(["init", "phase", "addon", addon, "--config"].map(String::from));
        argv.push(self.cp.layout().kubeadm_config().display().to_string());
        argv.extend(["--kubeconfig".to_string(), admin.display().to_string()]);
        pki::run(&argv)
    }

    /// Applies every CustomResourceDefinition in `dir` (one per YAML file) and waits until each
    /// is served; how many.
    pub async fn apply_crds(&self, dir: &Path) -> Result<usize, KubeError> {
        let mut applier = Applier::new(self.admin().await?, "tideway-test");
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(|e| Some(e.ok()?.path())).collect();
        files.sort();
        for file in &files {
            let bad = |message: String| KubeError::Manifest { path: file.display().to_string(), message };
            let crd: Value =
                serde_saphyr::from_str(&std::fs::read_to_string(file)?).map_err(|e| bad(e.to_string()))?;
            applier.apply(&crd).await?;
        }
        Ok(files.len())
    }
}

impl Standalone {
    /// Applies the chart's release namespace and what it renders of RBAC (ServiceAccounts,
    /// roles and their bindings) with `values`, as `helm install` would make them.
    pub async fn apply_chart_rbac(&self, chart: &Path, values: &[(String, String)]) -> Result<(), KubeError> {
        let mut all = vec![
            // Rendering needs these; nothing of the chart but its RBAC runs here.
            ("gossip.key".to_string(), "k".repeat(32)),
            ("apiServer.address".to_string(), format!("{ADDRESS}:6443")),
        ];
        all.extend(values.iter().cloned());
        let rendered = super::chart::render(chart, &all)
            .map_err(|e| KubeError::Manifest { path: chart.display().to_string(), message: e.to_string() })?;
        let rbac = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
        let mut objects = vec![super::chart::namespace()];
        objects
            .extend(rendered.into_iter().filter(|o| rbac.contains(&o["kind"].as_str().unwrap_or_default())));
        Applier::new(self.admin().await?, "tideway-test").apply_all(objects).await?;
        Ok(())
    }

    /// A token the API server mints for ServiceAccount `namespace/account` (its own audience,
    /// an hour's life), as `kubectl create token` asks for one.
    pub async fn token(&self, namespace: &str, account: &str) -> Result<String, KubeError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin().await?, namespace);
        let minted =
            accounts.create_token_request(account, &PostParams::default(), &TokenRequest::default()).await?;
        Ok(minted.status.map(|s| s.token).unwrap_or_default())
    }

    /// A kubeconfig at the host's forward whose credential is a token the API server mints for
    /// ServiceAccount `namespace/account` (its own audience, an hour's life), as
    /// `dir/NAMESPACE-ACCOUNT.conf`.
    pub async fn token_kubeconfig(&self, namespace: &str, account: &str) -> Result<PathBuf, KubeError> {
        let token = self.token(namespace, account).await?;
        let admin = self.cp.admin_kubeconfig();
        let bad = |message: String| KubeError::Kubeconfig { path: admin.display().to_string(), message };
        let mut config = Kubeconfig::read_from(&admin).map_err(|e| bad(e.to_string()))?;
        for cluster in config.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
            cluster.server = Some(self.cp.host_url());
        }
        for user in &mut config.auth_infos {
            user.auth_info = Some(AuthInfo { token: Some(token.clone().into()), ..AuthInfo::default() });
        }
        let path = self.dir.join(format!("{namespace}-{account}.conf"));
        let text = serde_json::to_string(&config).map_err(|e| bad(e.to_string()))?;
        pki::write_private(&path, &text)?;
        Ok(path)
    }
}

impl Standalone {
    /// ClusterRole `role` without `resource` in any of its rules (a grant withdrawn, as a
    /// cluster admin might); the role as it was, to apply again.
    pub async fn withdraw(&self, role: &str, resource: &str) -> Result<Value, KubeError> {
        let admin = self.admin().await?;
        let path = format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}");
        let held = super::rest::get(&admin, &path).await?.unwrap_or_default();
        let mut rules = Vec::new();
        for rule in held["rules"].as_array().into_iter().flatten() {
            let mut rule = rule.clone();
            let kept: Vec<Value> = rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| *r != resource)
                .cloned()
                .collect();
            if !kept.is_empty() {
                rule["resources"] = Value::from(kept);
                rules.push(rule);
            }
        }
        let mut less = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role}, "rules": rules});
        Applier::new(admin, "tideway-test").apply(&less).await?;
        less["rules"] = held["rules"].clone();
        Ok(less)
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        self.cp.stop();
        netns::remove(&self.ns);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! A twin of the battery's cluster (`support::cluster`: the same namespaces, addresses, pods and
//! routes, made afresh) with one proxy on node-a: the real kube-proxy (`make peers`) with the
//! configuration kubeadm's kube-proxy addon wrote, or `tideway agent`, each reading the real API
//! server with a token the server mints for its own ServiceAccount (kubeadm's `kube-proxy`,
//! bound to `system:node-proxier`; the chart's `tideway-agent`) through a relay on node-a's
//! loopback. Pod `c` (10.244.1.50, on node-a, no endpoint of anything) is where a pod's
//! packets come from.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tideway_tests::fault_proxy::FaultProxy;
use tideway_tests::netns::{Cluster, Netns};

use super::real_api::{Api, get, relays};
use super::{API_TOKEN, cluster};

/// Which proxy runs on node-a.
pub(crate) enum Proxy {
    /// kube-proxy, with kubeadm's `config.conf` (see [`kubeadm_addon`]).
    KubeProxy(String),
    /// `tideway agent`, its mode from the ProxyConfig, with these flags besides.
    Tideway(Vec<String>),
}

impl Proxy {
    /// Its name in reports.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Proxy::KubeProxy(_) => "kube-proxy",
            Proxy::Tideway(_) => "tideway",
        }
    }
}

/// Installs kubeadm's kube-proxy addon on the test's server as `kubeadm init` does, and removes
/// its DaemonSet, which no kubelet here runs (its binary runs as a process on a twin's node,
/// with its configuration); the addon's `config.conf`.
pub(crate) async fn kubeadm_addon(api: &mut Api) -> String {
    api.standalone.kubeadm_addon("kube-proxy").expect("kubeadm's kube-proxy addon");
    let daemonset = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"}});
    api.applier.delete(&daemonset).await.unwrap();
    let held = get(&api.admin, "/api/v1/namespaces/kube-system/configmaps/kube-proxy")
        .await
        .expect("kubeadm's kube-proxy ConfigMap");
    held["data"]["config.conf"].as_str().expect("a config.conf").to_string()
}

/// A twin cluster with its proxy started on node-a.
pub(crate) struct Twin {
    pub(crate) c: Cluster,
    /// The proxy's process.
    pub(crate) proxy: Child,
    /// When the proxy was started.
    pub(crate) started: Instant,
    /// Its log's file name in the cluster's directory.
    pub(crate) log: &'static str,
    /// The relay that carries node-a's connections to the API server (runs while kept).
    _relay: Vec<Arc<FaultProxy>>,
}

impl Twin {
    /// The battery's cluster afresh for test `test`, pod `c` on node-a, the address
    /// 192.168.0.203 routed to node-a, `shape` done to it (more pods, say), then `proxy` in
    /// `mode` started on node-a with `env`. It returns at once: the proxy may not have synced.
    pub(crate) async fn start(
        api: &Api,
        proxy: &Proxy,
        mode: &str,
        test: &str,
        shape: impl FnOnce(&mut Cluster),
        env: &[(&str, &str)],
    ) -> Twin {
        let mut c = cluster(test);
        c.add_pod(0, "c", 50, 8080);
        c.client_route("192.168.0.203/32", 0);
        shape(&mut c);
        let (port, relay) = relays(&[&c.nodes[0].ns], api.standalone.cp.host_endpoint());
        let (program, args, log) = match proxy {
            Proxy::KubeProxy(kubeadm) => {
                let kubeconfig = api.kubeconfig_via("kube-system", "kube-proxy", port).await;
                let config = c.path("kube-proxy.conf");
                std::fs::write(&config, kube_proxy_config(kubeadm, mode, &kubeconfig)).unwrap();
                let binary = tideway_lab::kube::peer_binary("kube-proxy").expect("kube-proxy (make peers)");
                (binary, vec!["--config".to_string(), config.display().to_string()], "kube-proxy.log")
            }
            Proxy::Tideway(flags) => {
                let kc = api.kubeconfig_via("tideway-system", "tideway-agent", port).await;
                let token_file = c.path("api-token");
                std::fs::write(&token_file, API_TOKEN).unwrap();
                let mut args: Vec<String> =
                    ["agent", "--node", "node-a", "--source", "kubernetes"].map(String::from).to_vec();
                args.extend(["--kubeconfig".into(), kc.display().to_string()]);
                args.extend(["--api-token-file".into(), token_file.display().to_string()]);
                args.extend(flags.iter().cloned());
                (c.bin.clone(), args, "agent.log")
            }
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = Instant::now();
        let proxy = c.nodes[0].ns.spawn(&program, &args, &c.path(log), env);
        Twin { c, proxy, started, log, _relay: relay }
    }

    /// Pod `c`'s namespace.
    pub(crate) fn pod(&self) -> &Netns {
        &self.c.nodes[0].pods.iter().find(|p| p.name == "c").expect("pod c").ns
    }

    /// The proxy's log, for a failure's message.
    pub(crate) fn logged(&self) -> String {
        self.c.log(self.log)
    }
}

/// kubeadm's `config.conf` (its KubeProxyConfiguration) with what a process on node-a must
/// have that kubeadm's DaemonSet Pod gets otherwise:
/// * `mode`: the mode under test (kubeadm leaves it empty: iptables);
/// * `clientConnection.kubeconfig`: a kubeconfig with the ServiceAccount token the server mints
///   for `kube-system/kube-proxy` and the relay's address (the Pod's is the projected token and
///   the ConfigMap's `kubeconfig.conf`, which names the API server the same way);
/// * `hostnameOverride`: `node-a` (the Pod's `--hostname-override=$(NODE_NAME)`);
/// * `clusterCIDR`: the battery's pod network (kubeadm writes the control plane's podSubnet);
/// * `conntrack.maxPerCore`: 0, leave the limit alone: the conntrack table's size is the whole
///   host's, not the node namespace's, and the tests leave the host as they found it.
fn kube_proxy_config(kubeadm: &str, mode: &str, kubeconfig: &Path) -> String {
    let mut config: Value = serde_saphyr::from_str(kubeadm).expect("kubeadm's KubeProxyConfiguration");
    config["mode"] = json!(mode);
    config["clientConnection"]["kubeconfig"] = json!(kubeconfig.display().to_string());
    config["hostnameOverride"] = json!("node-a");
    config["clusterCIDR"] = json!("10.244.0.0/16");
    config["conntrack"]["maxPerCore"] = json!(0);
    serde_json::to_string_pretty(&config).unwrap()
}

//! A client for the API server: `--kubeconfig FILE`, else `KUBECONFIG` / `~/.kube/config`, else
//! the in-cluster ServiceAccount.

use std::path::Path;

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster environment was found.
    #[error("no Kubernetes configuration: {0} (pass --kubeconfig FILE, set KUBECONFIG, or run in a pod)")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration could not make a client (TLS settings, ...).
    #[error("cannot create the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// How long [`failing_fast_client`] waits for a connection to the API server.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Builds a client from `kubeconfig` when given, else by inference.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    Client::try_from(config(kubeconfig).await?).map_err(ClientError::Client)
}

/// As [`client`], but a 429, 503 or 504 answer comes back at once instead of being retried by
/// kube's default layer (up to 15 times over minutes, unseen by the caller): the node agent's
/// self-fencing must learn of an API outage within seconds. Its watches back off on their own
/// and its report loop retries its writes. A connection not made within 5 s
/// fails too: an address nothing answers, such as the `kubernetes`
/// Service's ClusterIP on a node not programmed yet, is named in `/readyz` within seconds.
pub async fn failing_fast_client(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    let mut config = config(kubeconfig).await?;
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Client::try_from(config).map_err(ClientError::Client)
}

/// The API server's URL as [`client`] would reach it.
pub async fn server_url(kubeconfig: Option<&Path>) -> Result<String, ClientError> {
    Ok(config(kubeconfig).await?.cluster_url.to_string())
}

/// What to say while the API server at `url` does not answer a component's first lists;
/// `in_cluster`: the address came from the pod's environment (`KUBERNETES_SERVICE_HOST`), which
/// the kubelet sets to the `kubernetes` Service's ClusterIP unless the pod's spec names another.
pub fn unanswered(url: &str, in_cluster: bool) -> String {
    let url = url.trim_end_matches('/');
    if in_cluster {
        format!(
            "the API server at {url}, which does not answer: when that is the `kubernetes` Service's \
             ClusterIP, only this node's own Service rules serve it, and they are not programmed \
             before the first sync; give the agent the control plane's address (the chart's \
             apiServer.address, i.e. KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)"
        )
    } else {
        format!("the API server at {url}, which does not answer")
    }
}

async fn config(kubeconfig: Option<&Path>) -> Result<Config, ClientError> {
    match kubeconfig {
        Some(path) => {
            let err = |source| ClientError::Kubeconfig { path: path.display().to_string(), source };
            let file = Kubeconfig::read_from(path).map_err(err)?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.map_err(err)
        }
        None => Config::infer().await.map_err(ClientError::Infer),
    }
}

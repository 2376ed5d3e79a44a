//! Objects of any kind by their API path, as JSON: what the lab's checks and the tests read and
//! patch without the kind's type.
//!
//!   get(client, "/api/v1/nodes/node-a")          the object, or None when it is not there
//!   merge(client, path, patch)                   a JSON merge patch (a status through `/status`)
//!   kubelet_view(client, node)                   what kubelet keeps of a Node: Ready and addresses

use kube::Client;
use serde_json::{Value, json};

/// The object at `path`, or None when the server has none (404).
pub async fn get(client: &Client, path: &str) -> Result<Option<Value>, kube::Error> {
    let request = http::Request::get(path).body(Vec::new()).map_err(kube::Error::HttpError)?;
    match client.request::<Value>(request).await {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A JSON merge patch of the object at `path`; the object as the server then holds it.
pub async fn merge(client: &Client, path: &str, patch: &Value) -> Result<Value, kube::Error> {
    let body = serde_json::to_vec(patch).map_err(kube::Error::SerdeError)?;
    let request = http::Request::patch(path)
        .header("content-type", "application/merge-patch+json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<Value>(request).await
}

/// What kubelet keeps of Node `node` while it runs: its conditions and addresses (the
/// controller-manager's own annotations and taints come and go), or Null when there is none.
pub async fn kubelet_view(client: &Client, node: &str) -> Result<Value, kube::Error> {
    let n = get(client, &format!("/api/v1/nodes/{node}")).await?.unwrap_or_default();
    Ok(json!([n["status"]["conditions"], n["status"]["addresses"]]))
}

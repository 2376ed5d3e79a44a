//! `tideway stop-operator`: the operator's Deployment scaled to zero, and its Pods waited out,
//! before an upgrade from a release whose operator moves a restarting agent's addresses (0.1.x
//! had no hand-over). The chart's pre-upgrade hook Job runs it only then; the upgrade's own
//! apply brings the new operator back at the chart's replica count.
//!
//! ```text
//!   scale deployments/NAME to 0        no leader left to move addresses
//!   wait                               until none of its Pods is left (terminating ones too)
//!   helm upgrade goes on               new operator (hand-over); the agents roll, none moves
//! ```
//! While no operator runs nothing moves: the agents keep their addresses and kernel rules.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};

/// `tideway stop-operator`.
#[derive(Debug, clap::Args)]
pub(crate) struct StopOperatorArgs {
    /// The kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The operator's namespace.
    #[arg(long)]
    namespace: String,
    /// The operator's Deployment.
    #[arg(long)]
    deployment: String,
    /// How long to wait for its Pods to be gone.
    #[arg(long, default_value = "120s", value_parser = tideway_api::duration::parse_duration)]
    timeout: Duration,
}

/// Runs `tideway stop-operator`.
pub(crate) fn run(args: &StopOperatorArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(stop(args))
}

async fn stop(args: &StopOperatorArgs) -> anyhow::Result<i32> {
    let client = tideway_sources::kube::client(args.kubeconfig.as_deref()).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &args.namespace);
    let name = &args.deployment;
    let deployment = deployments.get(name).await.with_context(|| format!("reading deployment {name}"))?;
    let selector = match_labels(&deployment).with_context(|| format!("deployment {name}"))?;
    let zero = serde_json::json!({"spec": {"replicas": 0}});
    deployments
        .patch_scale(name, &PatchParams::default(), &Patch::Merge(&zero))
        .await
        .with_context(|| format!("scaling deployment {name} to 0"))?;
    println!("scaled deployment {name} to 0; waiting for its pods ({selector})");
    let pods: Api<Pod> = Api::namespaced(client, &args.namespace);
    let started = Instant::now();
    loop {
        let left = pods.list(&ListParams::default().labels(&selector)).await.context("listing pods")?;
        let names: Vec<String> = left.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
        if names.is_empty() {
            println!("no operator pod left after {:.1} s", started.elapsed().as_secs_f64());
            return Ok(0);
        }
        if started.elapsed() >= args.timeout {
            anyhow::bail!("operator pods still there after {:?}: {}", args.timeout, names.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The Deployment's `spec.selector.matchLabels` as a label selector (`k=v,k=v`).
fn match_labels(deployment: &Deployment) -> anyhow::Result<String> {
    let labels = deployment.spec.as_ref().and_then(|s| s.selector.match_labels.as_ref());
    let selector: Vec<String> = labels.into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    anyhow::ensure!(!selector.is_empty(), "has no spec.selector.matchLabels");
    Ok(selector.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_the_deployments_match_labels() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tideway-operator"},
            "spec": {"selector": {"matchLabels": {
                "app.kubernetes.io/name": "tideway", "app.kubernetes.io/component": "operator"}},
                "template": {}}
        }))
        .unwrap();
        assert_eq!(
            match_labels(&d).unwrap(),
            "app.kubernetes.io/component=operator,app.kubernetes.io/name=tideway"
        );
        let none: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"}, "spec": {"selector": {}, "template": {}}
        }))
        .unwrap();
        assert!(match_labels(&none).unwrap_err().to_string().contains("matchLabels"));
    }
}

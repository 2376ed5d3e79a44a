//! `tideway cleanup-nodes`: every node cleaned before an uninstall (the chart's pre-delete hook
//! Job runs it; it also works by hand with a kubeconfig).
//!
//! ```text
//!   apply ProxyConfig tideway-cleanup   annotation tideway.io/cleanup=REQUEST, a selector no
//!                                       node matches (no node's settings change)
//!   every agent sees it                 removes what it programmed, reports cleanedUp=REQUEST
//!   wait                                until every running agent's NodeProxyState says so
//!   delete ProxyConfig tideway-cleanup  the agents stay clean until they exit
//! ```
//! Nodes whose agent did not answer within `--timeout` are named, and the command still
//! succeeds, so that `helm uninstall` goes on: `tideway agent --cleanup` cleans them by hand.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use tideway_api::crd::{CLEANUP_ANNOTATION, NodeProxyState, ProxyConfig, node_state_from};
use tideway_core::liveness::HAND_OVER;
use tideway_core::liveness::cleanup_waiting_for;

/// The ProxyConfig that carries the request.
const CONFIG: &str = "tideway-cleanup";
/// The field manager of its writes.
const MANAGER: &str = "tideway-cleanup-nodes";

/// `tideway cleanup-nodes`.
#[derive(Debug, clap::Args)]
pub(crate) struct CleanupNodesArgs {
    /// The kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How long to wait for every running agent.
    #[arg(long, default_value = "90s", value_parser = tideway_api::duration::parse_duration)]
    timeout: Duration,
}

/// Runs `tideway cleanup-nodes`.
pub(crate) fn run(args: &CleanupNodesArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(clean(args))
}

async fn clean(args: &CleanupNodesArgs) -> anyhow::Result<i32> {
    let client = tideway_sources::kube::client(args.kubeconfig.as_deref()).await?;
    let request = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?.as_millis().to_string();
    let configs: Api<ProxyConfig> = Api::all(client.clone());
    let ask = serde_json::json!({
        "apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig",
        "metadata": {"name": CONFIG, "annotations": {CLEANUP_ANNOTATION: request}},
        "spec": {"nodeSelector": {"matchLabels": {CLEANUP_ANNOTATION: request}}},
    });
    configs
        .patch(CONFIG, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&ask))
        .await
        .with_context(|| format!("asking the agents: applying ProxyConfig {CONFIG}"))?;
    println!("asked every agent to clean its node (request {request})");
    let started = Instant::now();
    let states: Api<NodeProxyState> = Api::all(client);
    let waiting = loop {
        let list = states.list(&ListParams::default()).await.context("listing NodeProxyStates")?;
        let reports: Vec<_> = list.items.iter().filter_map(|s| node_state_from(s).ok()).collect();
        let waiting = cleanup_waiting_for(&reports, &request, SystemTime::now(), HAND_OVER);
        if waiting.is_empty() || started.elapsed() >= args.timeout {
            println!(
                "{} of {} nodes clean after {:.1} s",
                reports.len() - waiting.len(),
                reports.len(),
                started.elapsed().as_secs_f64()
            );
            break waiting;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    configs
        .delete(CONFIG, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting ProxyConfig {CONFIG}"))?;
    if !waiting.is_empty() {
        println!(
            "warning: no answer from the agents of {} within {:?}: run `tideway agent --cleanup` on them",
            waiting.join(", "),
            args.timeout
        );
    }
    Ok(0)
}

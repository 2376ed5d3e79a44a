//! `tideway agent`.

use clap::Args;
use tideway_core::config::ProxyMode;

/// Program this node's dataplane from a source of cluster objects.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// This node's name (a Node object in the source).
    #[arg(long)]
    pub node: String,
    /// Where objects come from: `file:CLUSTER.yaml`.
    #[arg(long)]
    pub source: String,
    /// Override the mode of the node's ProxyConfig.
    #[arg(long)]
    pub mode: Option<ProxyMode>,
}

/// Runs the agent until interrupted.
pub fn run(_args: &AgentArgs) -> anyhow::Result<i32> {
    anyhow::bail!("the node agent is not built yet")
}

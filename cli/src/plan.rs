//! `tideway plan`: print the rules a node would program.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tideway_core::config::ProxyMode;
use tideway_core::plan::compile;
use tideway_core::render;

use crate::cluster_file;

/// Print the rules NODE would program for the cluster in FILE.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Multi-document Kubernetes YAML (Services, EndpointSlices, Nodes, ProxyConfigs).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// The node to plan for (a Node object in FILE).
    #[arg(long)]
    node: String,
    /// Backend; defaults to the node's ProxyConfig, else nftables.
    #[arg(long)]
    mode: Option<ProxyMode>,
}

/// Runs the command; returns the process exit code.
pub(crate) fn run(args: &PlanArgs) -> Result<i32> {
    let loaded = cluster_file::load(&args.file, &args.node, args.mode)?;
    let ruleset = compile(&loaded.cluster, &loaded.node);
    for w in ruleset.warnings() {
        eprintln!("warning: {}: {}", w.service_port, w.message);
    }
    let out = render::Renderer::new(loaded.node.settings.mode, &ruleset).node_text();
    print!("{out}");
    Ok(if loaded.skipped > 0 { 1 } else { 0 })
}

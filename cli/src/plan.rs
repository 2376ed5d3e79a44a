//! `tideway plan`: print the rules a node would program.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
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
    let mode = loaded.node.settings.mode;
    let mut out = String::new();
    for family in IpFamily::ALL {
        let has_v6 = ruleset.plans(family).next().is_some() || !ruleset.family(family).node_ips.is_empty();
        if family == IpFamily::V6 && !has_v6 {
            continue;
        }
        let program = render::lower(mode, &ruleset, family);
        if mode != ProxyMode::Nftables {
            out.push_str(&format!("# {family} ({mode})\n"));
        }
        out.push_str(&render::program_text(&program));
    }
    print!("{out}");
    Ok(if loaded.skipped > 0 { 1 } else { 0 })
}

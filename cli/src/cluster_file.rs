//! Loading a cluster manifest and resolving the node context, shared by `plan` and `trace`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use tideway_api::manifest;
use tideway_core::cluster::ClusterState;
use tideway_core::config::{ProxyMode, ProxySettings, resolve_proxy_config};
use tideway_core::plan::NodeContext;

/// A loaded cluster and how many objects were skipped.
pub(crate) struct Loaded {
    pub(crate) cluster: ClusterState,
    pub(crate) node: NodeContext,
    pub(crate) skipped: usize,
}

/// Loads `file`, reports skipped objects on stderr, and builds the context of `node`.
pub(crate) fn load(file: &Path, node: &str, mode: Option<ProxyMode>) -> Result<Loaded> {
    let m = manifest::load_file(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    for e in &m.errors {
        eprintln!("error: {e} (skipped)");
    }
    let cluster = ClusterState::from_snapshot(m.snapshot);
    let Some(n) = cluster.node(node) else {
        let names: Vec<&str> = cluster.nodes().map(|n| n.name.as_str()).collect();
        bail!(
            "{}: no Node named {node:?} (nodes in the file: {})",
            file.display(),
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        );
    };
    let mut settings = resolve_proxy_config(cluster.proxy_configs(), &n.labels)
        .map(|c| c.settings.clone())
        .unwrap_or_else(ProxySettings::default);
    if let Some(mode) = mode {
        settings.mode = mode;
    }
    let node = NodeContext::from_node(n, settings).with_service_cidrs(cluster.service_cidrs());
    Ok(Loaded { cluster, node, skipped: m.errors.len() })
}

/// Parses `ip:port` or `[ipv6]:port`.
pub(crate) fn parse_dst(s: &str) -> Result<(std::net::IpAddr, u16)> {
    let addr: std::net::SocketAddr =
        s.parse().with_context(|| format!("--dst {s:?}: expected IP:PORT or [IPv6]:PORT"))?;
    Ok((addr.ip(), addr.port()))
}

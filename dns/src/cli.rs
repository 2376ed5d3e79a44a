//! `tideway dns`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// Serve cluster DNS for the objects of a source.
#[derive(Debug, Args)]
pub struct DnsArgs {
    /// Where Services, EndpointSlices and Pods come from: `file:CLUSTER.yaml`.
    #[arg(long)]
    pub source: String,
    /// UDP and TCP listen address.
    #[arg(long, default_value = "0.0.0.0:53")]
    pub listen: SocketAddr,
    /// Cluster domain.
    #[arg(long, default_value = "cluster.local")]
    pub zone: String,
    /// resolv.conf listing the upstream servers for other names.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub upstream_resolv_conf: PathBuf,
    /// Pod records: disabled, insecure or verified.
    #[arg(long, default_value = "disabled")]
    pub pods: String,
}

/// Runs the DNS server until interrupted.
pub fn run(_args: &DnsArgs) -> anyhow::Result<i32> {
    anyhow::bail!("the DNS server is not built yet")
}

//! `tideway trace`: where does a packet go, and why?

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tideway_core::config::ProxyMode;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::compile;
use tideway_core::render;
use tideway_core::trace::{Origin, Packet, TraceEnv, render_trace, trace};

use crate::cluster_file;

/// Trace one new connection through the rules NODE would program.
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Multi-document Kubernetes YAML (Services, EndpointSlices, Nodes, ProxyConfigs).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// The node the packet arrives at (a Node object in FILE).
    #[arg(long)]
    node: String,
    /// Source address.
    #[arg(long)]
    src: std::net::IpAddr,
    /// Destination, IP:PORT or [IPv6]:PORT.
    #[arg(long)]
    dst: String,
    /// tcp, udp or sctp.
    #[arg(long, default_value = "tcp", value_parser = parse_proto)]
    proto: Protocol,
    /// pod, node or external.
    #[arg(long = "from", default_value = "pod")]
    origin: Origin,
    /// Backend; defaults to the node's ProxyConfig, else nftables.
    #[arg(long)]
    mode: Option<ProxyMode>,
}

/// A `--proto` that is not one.
#[derive(Debug, thiserror::Error)]
#[error("unknown protocol {0:?} (expected tcp, udp or sctp)")]
struct UnknownProtocol(String);

fn parse_proto(s: &str) -> Result<Protocol, UnknownProtocol> {
    Protocol::parse(s).ok_or_else(|| UnknownProtocol(s.to_string()))
}

/// Runs the command; returns the process exit code.
pub(crate) fn run(args: &TraceArgs) -> Result<i32> {
    let loaded = cluster_file::load(&args.file, &args.node, args.mode)?;
    let (dst, dport) = cluster_file::parse_dst(&args.dst)?;
    if IpFamily::of(&dst) != IpFamily::of(&args.src) {
        anyhow::bail!("--src {} and --dst {} are of different address families", args.src, args.dst);
    }
    let ruleset = compile(&loaded.cluster, &loaded.node);
    let family = IpFamily::of(&dst);
    let mode = loaded.node.settings.mode;
    let program = render::lower(mode, &ruleset, family);
    let packet = Packet { src: args.src, dst, protocol: args.proto, dport, origin: args.origin };
    let t = trace(&program, &packet, &TraceEnv::for_node(ruleset.family(family)));
    print!("node {} ({mode})\n{}", loaded.node.name, render_trace(&t));
    Ok(if loaded.skipped > 0 { 1 } else { 0 })
}

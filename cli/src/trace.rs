//! `tideway trace`: where does a packet go, and why? Traced from a cluster file (the rules
//! the node would program) or asked of a running agent (`POST /api/v1/trace`: the rules it
//! programmed), with the same tracer either way.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tideway_core::config::ProxyMode;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::compile;
use tideway_core::render;
use tideway_core::trace::{Origin, Packet, TraceEnv, render_trace, trace};

use crate::api_client::ApiClient;
use crate::cluster_file;

/// Trace one new connection through the rules NODE would program (from FILE) or has
/// programmed (asked of its running agent).
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Multi-document Kubernetes YAML (Services, EndpointSlices, Nodes, ProxyConfigs).
    #[arg(short = 'f', long = "file", required_unless_present_any = ["agent", "lab"])]
    file: Option<PathBuf>,
    /// Ask the running agent whose API is at this URL (`https://HOST:PORT`, `http://...`) instead.
    #[arg(long, conflicts_with_all = ["file", "lab", "mode"])]
    agent: Option<String>,
    /// Ask NODE's agent in this running lab instead.
    #[arg(long, conflicts_with_all = ["file", "mode"])]
    lab: Option<String>,
    /// Bearer token for the agent's API.
    #[arg(long, env = "TIDEWAY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    tls: tideway_telemetry::client::ServerCheck,
    /// The node the packet arrives at (a Node object in FILE; the lab node with --lab).
    #[arg(long, required_unless_present = "agent", default_value = "")]
    node: String,
    /// Source, IP or IP:PORT ([IPv6]:PORT): with a port, a Maglev Service's endpoint is the
    /// one the kernel's hash picks for this flow.
    #[arg(long, value_parser = parse_src)]
    src: Source,
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

/// `--src`: an address, with the source port when given.
#[derive(Debug, Clone, Copy)]
struct Source {
    ip: std::net::IpAddr,
    port: Option<u16>,
}

/// A `--src` that is neither IP nor IP:PORT.
#[derive(Debug, thiserror::Error)]
#[error("--src {0:?}: expected IP, IP:PORT or [IPv6]:PORT")]
struct BadSource(String);

fn parse_src(s: &str) -> Result<Source, BadSource> {
    if let Ok(a) = s.parse::<std::net::SocketAddr>() {
        return Ok(Source { ip: a.ip(), port: Some(a.port()) });
    }
    s.parse().map(|ip| Source { ip, port: None }).map_err(|_| BadSource(s.to_string()))
}

/// A `--proto` that is not one.
#[derive(Debug, thiserror::Error)]
#[error("unknown protocol {0:?} (expected tcp, udp or sctp)")]
struct UnknownProtocol(String);

fn parse_proto(s: &str) -> Result<Protocol, UnknownProtocol> {
    Protocol::parse(s).ok_or_else(|| UnknownProtocol(s.to_string()))
}

/// The `POST /api/v1/trace` body for this packet.
fn trace_request(args: &TraceArgs) -> Result<serde_json::Value> {
    let (dst, port) = cluster_file::parse_dst(&args.dst)?;
    let origin = match args.origin {
        Origin::Pod => "pod",
        Origin::Node => "node",
        Origin::External => "external",
    };
    let proto = args.proto.to_string().to_ascii_lowercase();
    let mut req =
        serde_json::json!({"src": args.src.ip, "dst": dst, "port": port, "protocol": proto, "from": origin});
    if let Some(sport) = args.src.port {
        req["srcPort"] = sport.into();
    }
    Ok(req)
}

/// Asks a running agent.
fn run_remote(args: &TraceArgs) -> Result<i32> {
    let api = match (&args.agent, &args.lab) {
        (Some(url), _) => ApiClient::new(url, args.token.clone(), &args.tls)?,
        (None, Some(lab)) => crate::inspect::lab_agent(lab, &args.node, args.token.clone(), &args.tls)?,
        (None, None) => anyhow::bail!("give -f FILE, --agent URL or --lab NAME"),
    };
    let answer = api.post("/api/v1/trace", &trace_request(args)?)?;
    print!(
        "node {} ({}, programmed)\n{}",
        answer["node"].as_str().unwrap_or("?"),
        answer["mode"].as_str().unwrap_or("?"),
        answer["text"].as_str().unwrap_or("")
    );
    Ok(0)
}

/// Runs the command; returns the process exit code.
pub(crate) fn run(args: &TraceArgs) -> Result<i32> {
    let Some(file) = &args.file else { return run_remote(args) };
    let loaded = cluster_file::load(file, &args.node, args.mode)?;
    let (dst, dport) = cluster_file::parse_dst(&args.dst)?;
    if IpFamily::of(&dst) != IpFamily::of(&args.src.ip) {
        anyhow::bail!("--src {} and --dst {} are of different address families", args.src.ip, args.dst);
    }
    let ruleset = compile(&loaded.cluster, &loaded.node);
    let family = IpFamily::of(&dst);
    let mode = loaded.node.settings.mode;
    let program = render::Renderer::new(mode, &ruleset).lower(family);
    let packet = Packet {
        src: args.src.ip,
        dst,
        protocol: args.proto,
        dport,
        sport: args.src.port,
        origin: args.origin,
    };
    let t = trace(&program, &packet, &TraceEnv::for_node(ruleset.family(family)));
    print!("node {} ({mode})\n{}", loaded.node.name, render_trace(&t));
    Ok(if loaded.skipped > 0 { 1 } else { 0 })
}

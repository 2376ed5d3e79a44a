//! `tideway`: one binary for every component.
//!
//! * `plan` / `trace`: compile a cluster manifest for a node; print its rules or follow a packet.
//! * `agent`: the node agent (see `tideway_node_agent`).
//! * `dns`: the cluster DNS server (see `tideway_dns`).
//! * `operator`: LoadBalancer IPs, announcers and rollout status (see `tideway_operator`).
//! * `lab`: the whole system in network namespaces on this host (see `tideway_lab`).
//! * `whoami`: the echo server pods run in the lab and the dataplane tests.
//! * `crdgen`: print the CustomResourceDefinitions generated from the API types.
//! * `cleanup-nodes`: every node's rules removed by its agent, before an uninstall.
//! * `stop-operator`: the operator stopped before an upgrade from a release without hand-over.
//! * `migrate`: kube-proxy's, CoreDNS's and MetalLB's configuration as Tideway objects and
//!   chart values.

#![forbid(unsafe_code)]
// A command-line tool: printing its results to stdout is the point.
#![allow(clippy::print_stdout)]

mod api_client;
mod cleanup_nodes;
mod cluster_file;
mod inspect;
mod migrate;
mod plan;
mod stop_operator;
mod trace;
mod whoami;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Planning allocates many small objects; mimalloc halves full-sync time over glibc malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tideway: cluster networking for Kubernetes (service proxy, cluster DNS, LB IPs).
#[derive(Debug, Parser)]
#[command(name = "tideway", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the rules a node would program (exit 1 if some objects were skipped as invalid).
    Plan(plan::PlanArgs),
    /// Follow one new connection through a node's rules (exit 1 if some objects were skipped).
    Trace(trace::TraceArgs),
    /// Run the node agent: program this node's dataplane.
    Agent(tideway_node_agent::cli::AgentArgs),
    /// Run the cluster DNS server.
    Dns(tideway_dns::cli::DnsArgs),
    /// Run the operator: LoadBalancer IPs, announcers, ProxyConfig rollout status.
    Operator(tideway_operator::cli::OperatorArgs),
    /// Run the whole system on this host in network namespaces (up, exec, apply, status, down).
    Lab(tideway_lab::cli::LabArgs),
    /// Print the CustomResourceDefinitions as YAML (or write one file each into --dir).
    Crdgen {
        /// Write `<name>.yaml` files into this directory instead of printing.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Answer TCP lines, HTTP GETs and UDP datagrams with a name and the peer address.
    Whoami(whoami::WhoamiArgs),
    /// Nodes, their modes, last syncs and drift, and each ProxyConfig's rollout (of a running
    /// lab, or of an operator at a URL).
    Status(inspect::StatusArgs),
    /// Explain an object of a running system: `explain service NS/NAME`.
    Explain(inspect::ExplainArgs),
    /// Switch a ProxyConfig's proxy mode over the operator's REST API.
    Mode(inspect::ModeArgs),
    /// Print the Tideway objects and chart values equivalent to a kube-proxy configuration, a
    /// Corefile and MetalLB's objects, and what could not be carried.
    Migrate(migrate::MigrateArgs),
    /// Have every node's agent remove what it programmed, and wait until each running agent
    /// says it has (the chart's pre-delete hook: `helm uninstall` leaves no rule behind).
    CleanupNodes(cleanup_nodes::CleanupNodesArgs),
    /// Scale the operator's Deployment to zero and wait until its Pods are gone (the chart's
    /// pre-upgrade hook, from a release whose operator moves restarting agents' addresses).
    StopOperator(stop_operator::StopOperatorArgs),
}

/// Allocator settings the long-running commands (`agent`, `dns`) run with: return freed memory
/// to the system at once instead of keeping arenas committed, which keeps resident memory close
/// to what the process holds (the cluster file's parse buffers and a full sync's scratch space
/// would otherwise stay resident; measured in docs/benchmarks.md at no CPU cost). mimalloc reads
/// them at start-up, so the process re-executes itself once with them.
const SERVER_ALLOCATOR_ENV: [(&str, &str); 2] =
    [("MIMALLOC_ARENA_EAGER_COMMIT", "0"), ("MIMALLOC_PURGE_DELAY", "0")];

fn with_server_allocator_settings() {
    use std::os::unix::process::CommandExt;
    if SERVER_ALLOCATOR_ENV.iter().all(|(k, _)| std::env::var_os(k).is_some()) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1));
    for (k, v) in SERVER_ALLOCATOR_ENV {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    // Only returns on failure; the server then runs with the default settings.
    let err = cmd.exec();
    eprintln!("warning: could not apply the allocator settings: {err}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Dns(_) | Command::Agent(_) | Command::Operator(_)) {
        with_server_allocator_settings();
    }
    let result = match &cli.command {
        Command::Plan(a) => plan::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Agent(a) => tideway_node_agent::cli::run(a),
        Command::Dns(a) => tideway_dns::cli::run(a),
        Command::Operator(a) => tideway_operator::cli::run(a),
        Command::Lab(a) => tideway_lab::cli::run(a),
        Command::Crdgen { dir } => crdgen(dir.as_deref()),
        Command::Whoami(a) => whoami::run(a),
        Command::Status(a) => inspect::status(a),
        Command::Explain(a) => inspect::explain(a),
        Command::Mode(a) => inspect::mode(a),
        Command::Migrate(a) => migrate::run(a),
        Command::CleanupNodes(a) => cleanup_nodes::run(a),
        Command::StopOperator(a) => stop_operator::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints every CRD as one multi-document YAML stream, or writes one file per CRD into `dir`
/// (`<plural>.<group>.yaml`, the chart's layout).
fn crdgen(dir: Option<&std::path::Path>) -> anyhow::Result<i32> {
    for (i, crd) in tideway_api::crd::all().iter().enumerate() {
        let yaml = serde_saphyr::to_string(crd)?;
        match dir {
            Some(dir) => {
                let name = crd.metadata.name.as_deref().unwrap_or("crd");
                std::fs::write(dir.join(format!("{name}.yaml")), yaml)?;
            }
            None if i == 0 => print!("{yaml}"),
            None => print!("---\n{yaml}"),
        }
    }
    Ok(0)
}

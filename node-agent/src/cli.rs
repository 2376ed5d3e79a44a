//! `tideway agent`: wires the source, the sync loop and the HTTP endpoints together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use prometheus_client::registry::Registry;
use tideway_api::duration::parse_duration;
use tideway_api::source::{FileSource, SharedCluster, Source};
use tideway_core::config::ProxyMode;

use crate::agent::{Agent, AgentOptions, AgentStatus};
use crate::health::ProxyHealth;
use crate::metrics::Metrics;

/// Program this node's dataplane from a source of cluster objects.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// This node's name (a Node object in the source).
    #[arg(long)]
    pub node: String,
    /// Where objects come from: `file:CLUSTER.yaml` (re-read when it changes).
    #[arg(long)]
    pub source: String,
    /// Override the mode of the node's ProxyConfig.
    #[arg(long)]
    pub mode: Option<ProxyMode>,
    /// Override the ProxyConfig's sync period (`30s`).
    #[arg(long, value_parser = parse_duration)]
    pub sync_period: Option<Duration>,
    /// Override the ProxyConfig's minimum sync period (`1s`).
    #[arg(long, value_parser = parse_duration)]
    pub min_sync_period: Option<Duration>,
    /// Full resync at least this often.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub full_sync_period: Duration,
    /// `/healthz` and `/livez`.
    #[arg(long, default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: SocketAddr,
    /// `/metrics`, `/proxyMode`, `/api/v1/status`.
    #[arg(long, default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: SocketAddr,
    /// How often the source file is checked for changes.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    pub file_poll_interval: Duration,
}

fn source_path(s: &str) -> anyhow::Result<PathBuf> {
    match s.split_once(':') {
        Some(("file", path)) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => bail!("unsupported --source {s:?} (expected file:PATH)"),
    }
}

/// Runs the agent until SIGINT or SIGTERM. Rules stay programmed on exit, so a restart
/// causes no gap.
pub fn run(args: &AgentArgs) -> anyhow::Result<i32> {
    let path = source_path(&args.source)?;
    tracing_subscriber_init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let cluster = SharedCluster::new();
        let source = FileSource::new(path, args.file_poll_interval);
        tokio::spawn(Source::run(source, cluster.clone()));

        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let registry = Arc::new(registry);
        let status = Arc::new(RwLock::new(AgentStatus::default()));
        let health = Arc::new(ProxyHealth::new(args.sync_period.unwrap_or(Duration::from_secs(30))));

        let healthz = tokio::net::TcpListener::bind(args.healthz_bind_address)
            .await
            .with_context(|| format!("binding {}", args.healthz_bind_address))?;
        let metrics_listener = tokio::net::TcpListener::bind(args.metrics_bind_address)
            .await
            .with_context(|| format!("binding {}", args.metrics_bind_address))?;
        let health_router = crate::http::health_router(health.clone(), metrics.clone());
        let metrics_router = crate::http::metrics_router(registry, status.clone());
        tokio::spawn(async move { axum::serve(healthz, health_router).await });
        tokio::spawn(async move { axum::serve(metrics_listener, metrics_router).await });

        let opts = AgentOptions {
            node: args.node.clone(),
            mode: args.mode,
            sync_period: args.sync_period,
            min_sync_period: args.min_sync_period,
            full_sync_period: args.full_sync_period,
        };
        let agent = Agent::new(opts, cluster, status, metrics, health);
        tracing::info!(node = %args.node, "agent started");
        agent.run(shutdown_signal()).await;
        tracing::info!("agent stopped; rules stay programmed");
        Ok(0)
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn tracing_subscriber_init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

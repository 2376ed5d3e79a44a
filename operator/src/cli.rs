//! `tideway operator`: the source, leader election, the reconcile loop and the HTTP endpoints.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use prometheus_client::registry::Registry;
use tideway_api::duration::parse_duration;
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_serve::auth::ApiAuthArgs;
use tideway_sources::gossip::GossipKeyArgs;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role};
use tideway_sources::lab::LabWriter;
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::ClusterWriter;
use tideway_sources::{Connect, Connected, SharedCluster, SourceArgs, SourceSpec};
use tokio::sync::watch;

use crate::api::ApiState;
use crate::election::Lead;
use crate::metrics::Metrics;
use crate::reconcile::{LoopOptions, OperatorStatus};
use crate::writer::LogWriter;

/// Assign LoadBalancer IPs, choose announcers, roll node state up into ProxyConfig status.
#[derive(Debug, Args)]
#[command(
    mut_arg("source", |a| a.help("Where objects come from: `kubernetes` (the default in a pod), `lab:DIR` (a running `tideway lab`) or `file:CLUSTER.yaml` (decisions are then logged, not written)")),
    mut_arg("api_token_file", |a| a.help("A file holding the bearer token REST changes need (the lab writes one). Without it, `--source kubernetes` checks tokens with TokenReview and SubjectAccessReview, and other sources take no changes over REST")),
    mut_arg("api_anonymous_reads", |a| a.help("Serve `GET /api/v1/...` without a token on a non-loopback address too (reads always need none on loopback)")),
    mut_arg("gossip_key_file", |a| a.help("The cluster's gossip key, as the agents' `--gossip-key-file` (the same file). Without it (and without `--gossip-insecure`) the operator does not join the gossip")),
    mut_arg("gossip_insecure", |a| a.help("Gossip without a key (anyone who reaches the agents' port can then move addresses)")),
)]
pub struct OperatorArgs {
    /// Logging and tracing.
    #[command(flatten)]
    pub log: tideway_telemetry::LogArgs,
    /// Where objects come from.
    #[command(flatten)]
    pub from: SourceArgs,
    /// `/healthz`, `/readyz`, `/metrics` and `/api/v1/status`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub http_bind_address: SocketAddr,
    /// HTTPS on `--http-bind-address` (probes then use HTTPS too).
    #[command(flatten)]
    pub tls: tideway_serve::tls::TlsArgs,
    /// Elect a leader among replicas with a Lease (only the leader writes).
    #[arg(long)]
    pub leader_elect: bool,
    /// At start, apply the CustomResourceDefinitions this release was built with over older
    /// ones in the cluster (Helm never upgrades a chart's `crds/`); needs `get`, `create` and
    /// `patch` on them.
    #[arg(long)]
    pub manage_crds: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "tideway-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Handle LoadBalancer Services of this `loadBalancerClass` (default: Services without one).
    #[arg(long)]
    pub load_balancer_class: Option<String>,
    /// Also read MetalLB's own `IPAddressPool`s and `L2Advertisement`s (`metallb.io/v1beta1`)
    /// as pools beside the LoadBalancerPools, and its `ServiceL2Status`es (v0.14+): an address
    /// never announced here stays on MetalLB's announcing node while that node is eligible.
    /// Only once MetalLB's controller is stopped: two allocators must never race for one
    /// address. MetalLB's CRDs must be installed.
    #[arg(long)]
    pub metallb_compat: bool,
    /// The namespace of MetalLB's objects (where its controller read them).
    #[arg(long, default_value = "metallb-system")]
    pub metallb_namespace: String,
    /// Compare everything with the cluster this often.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub resync_period: Duration,
    /// Who may call the REST API.
    #[command(flatten)]
    pub api: ApiAuthArgs,
    /// Where the agents' liveness gossip (SWIM, UDP) is received.
    #[arg(long, default_value = "0.0.0.0:7946")]
    pub gossip_bind_address: SocketAddr,
    /// The address the agents reach this replica at (its pod IP). Without it the operator
    /// does not join the gossip and moves addresses on Node Ready alone.
    #[arg(long, env = "POD_IP")]
    pub gossip_advertise_address: Option<std::net::IpAddr>,
    /// Every failure-detector timing this many times longer (1-100), as the agents'
    /// `--gossip-time-scale`: the same on every member.
    #[arg(long, env = "TIDEWAY_GOSSIP_TIME_SCALE", default_value = "1", value_parser = tideway_sources::gossip::parse_time_scale)]
    pub gossip_time_scale: f64,
    /// The gossip key.
    #[command(flatten)]
    pub gossip_key: GossipKeyArgs,
    /// How long a node keeps its addresses after its agent stopped gracefully (a rollout
    /// restarting it: the agent says so in its NodeProxyState's `stoppedAt` as it leaves) while
    /// the Node stays Ready. Its rules stay programmed meanwhile; an agent that crashed (no
    /// `stoppedAt`) loses them within about 2 s.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub restart_hand_over: Duration,
}

fn identity(args: &OperatorArgs) -> String {
    args.identity.clone().filter(|i| !i.is_empty()).unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| format!("tideway-operator-{}", std::process::id()))
    })
}

/// How long the HTTP server waits for the calls in flight when the operator stops.
const HTTP_GRACE: Duration = Duration::from_secs(5);

/// Runs the operator until SIGINT or SIGTERM.
pub fn run(args: &OperatorArgs) -> anyhow::Result<i32> {
    let spec = args.from.spec()?;
    let tls = args.tls.load()?;
    let sealing = args.gossip_key.sealing()?;
    let telemetry = tideway_telemetry::init("tideway-operator", args.log.log_format, "info")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = rt.block_on(async move {
        let cluster = SharedCluster::new();
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        tideway_serve::listen::register(&mut registry);
        let source_metrics = SourceMetrics::new(&mut registry);
        let refusals = Arc::new(tideway_sources::gossip::Refusals::default());
        refusals.register(&mut registry);
        let restarts = source_metrics.clone();
        let status = Arc::new(RwLock::new(OperatorStatus::default()));
        let (leader_tx, leader_rx) = watch::channel(Lead::from(!args.leader_elect));
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut election = None;
        anyhow::ensure!(
            !args.leader_elect || spec == SourceSpec::Kubernetes,
            "--leader-elect needs --source kubernetes"
        );
        let how = Connect {
            kubeconfig: args.from.kubeconfig(),
            file_poll: Duration::from_millis(500),
            audiences: args.api.audiences(),
            ..Connect::default()
        };
        let connected = tideway_sources::connect(spec, how, &cluster).await?;
        let review = connected.review();
        let writer: Arc<dyn ClusterWriter> = match connected {
            Connected::File => Arc::new(LogWriter),
            Connected::Lab(dir) => Arc::new(LabWriter(dir)),
            Connected::Kubernetes { client, .. } => {
                if args.manage_crds {
                    tideway_sources::kube::crds::keep_current(&client).await;
                }
                let metallb = args.metallb_compat.then(|| args.metallb_namespace.clone());
                let source = KubeSource::new(client.clone(), Role::Operator, source_metrics).with_metallb(metallb);
                tokio::spawn(source.run(cluster.clone()));
                let me = identity(args);
                if args.leader_elect {
                    tracing::info!(identity = %me, lease = %format!("{}/{}", args.lease_namespace, args.lease_name), "campaigning");
                    let lease = KubeLease::new(client.clone(), &args.lease_namespace, &args.lease_name);
                    let campaign = crate::election::run(lease, Elector::new(&me), LeaseTimings::default(), leader_tx, stopped());
                    election = Some(tokio::spawn(campaign));
                }
                Arc::new(KubeWriter::new(client, Some(me)))
            }
        };
        let listener = tokio::net::TcpListener::bind(args.http_bind_address)
            .await
            .with_context(|| format!("binding {}", args.http_bind_address))?;
        let api = ApiState {
            cluster: cluster.clone(),
            writer: writer.clone(),
            auth: args.api.authorizer(review)
                .with_context(|| "reading --api-token-file")?,
            open_reads: args.api.api_anonymous_reads || args.http_bind_address.ip().is_loopback(),
        };
        let router = crate::http::router(Arc::new(registry), status.clone(), api);
        let mut servers = tideway_serve::http::Servers::new();
        servers.serve(listener, tls, router);
        let opts = LoopOptions {
            class: args.load_balancer_class.clone(),
            resync_period: args.resync_period,
            ..LoopOptions::default()
        };
        let keys = args.gossip_advertise_address.and_then(|_| sealing.keys());
        if let (Some(advertise), Some(keys)) = (args.gossip_advertise_address, keys) {
            let me = identity(args);
            let join = tideway_sources::gossip::Join {
                bind: args.gossip_bind_address,
                advertise,
                node: &me,
                role: tideway_sources::gossip::Role::Operator,
                timings: tideway_core::liveness::TIMINGS.scaled(args.gossip_time_scale),
                keys,
                refusals,
            };
            match tideway_sources::gossip::start(join, cluster.clone()).await {
                Ok(members) => {
                    tokio::spawn(tideway_sources::gossip::feed_liveness(
                        cluster.clone(),
                        members,
                        args.restart_hand_over,
                        tideway_core::liveness::TIMINGS.scaled(args.gossip_time_scale).rejoin,
                    ));
                }
                Err(e) => tracing::error!(bind = %args.gossip_bind_address, error = %e, "cannot join the agents' gossip; addresses move on Node Ready alone"),
            }
        }
        let looping = crate::reconcile::run_supervised(
            cluster, writer, leader_rx, opts, metrics, status, restarts, stopped,
        );
        let reconcile = tokio::spawn(looping);
        tideway_sources::shutdown_signal().await;
        tracing::info!("stopping");
        let _ = stop_tx.send(true);
        let _ = reconcile.await;
        if let Some(e) = election {
            let _ = tokio::time::timeout(Duration::from_secs(5), e).await;
        }
        // Calls in flight (a status read, a ProxyConfig change) are answered before the exit.
        let cut = servers.stop(HTTP_GRACE).await;
        if cut > 0 {
            tracing::warn!(grace = ?HTTP_GRACE, "calls still running when the HTTP server stopped were dropped");
        }
        Ok(0)
    });
    telemetry.shutdown();
    result
}

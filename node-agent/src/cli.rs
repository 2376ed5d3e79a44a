//! `tideway agent`: wires the source, the sync loop and the HTTP endpoints together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use prometheus_client::registry::Registry;
use tideway_api::duration::parse_duration;
use tideway_core::config::ProxyMode;
use tideway_serve::auth::ApiAuthArgs;
use tideway_sources::gossip::GossipKeyArgs;
use tideway_sources::kube::{KubeNodeStateSink, KubeSource, Role};
use tideway_sources::lab::LabNodeStateSink;
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::{Connect, Connected, SharedCluster, SourceArgs};

use crate::agent::{Agent, AgentOptions, AgentStatus};
use crate::bgp_speaker::BgpSpeaker;
use crate::frr::FrrReload;
use crate::health::ProxyHealth;
use crate::l2_speaker::L2Speaker;
use crate::metrics::Metrics;
use crate::report::{self, ReportSettings};

/// Program this node's dataplane from a source of cluster objects.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Logging and tracing.
    #[command(flatten)]
    pub log: tideway_telemetry::LogArgs,
    /// The node-local DNS listener.
    #[command(flatten)]
    pub node_dns: crate::node_dns::NodeDnsArgs,
    /// Where kernel settings are written: `/proc/sys`, or where the host's `/proc/sys/net` is
    /// mounted below `DIR/net` in a container whose own `/proc/sys` is read-only (the chart:
    /// `/run/tideway/host/proc/sys`).
    #[arg(long, default_value = "/proc/sys")]
    pub sysctl_dir: PathBuf,
    /// This node's name (a Node object in the source).
    #[arg(long, required_unless_present = "cleanup", default_value = "", hide_default_value = true)]
    pub node: String,
    /// Remove every kernel object the agent programs on this node, in every mode (the nftables
    /// tables, the iptables chains and jumps of both iptables backends, IPVS's virtual servers,
    /// `kube-ipvs0` and the `KUBE-*` ipsets), without waiting for connections, then exit (as
    /// `kube-proxy --cleanup`). Kernel settings stay, and so does `KUBE-FIREWALL`, which the
    /// kubelet writes too.
    /// In iptables and IPVS modes the objects carry kube-proxy's names: where kube-proxy's own
    /// chains show it programs the node, those are left alone (and said so).
    #[arg(long)]
    pub cleanup: bool,
    /// Where objects come from.
    #[command(flatten)]
    pub from: SourceArgs,
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
    /// `/healthz` and `/livez`. A port another process holds (kube-proxy's, while both run) is
    /// retried every 5 s, not fatal: the NodeProxyState's `listenerConflicts` names it.
    #[arg(long, default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: SocketAddr,
    /// Also serves `/readyz`, `/livez` and `/healthz` here, for the kubelet's probes: a port no
    /// other proxy uses, so that beside a kube-proxy (holding 10256, where `/readyz` is not
    /// found) the probes still reach this agent.
    #[arg(long)]
    pub probe_bind_address: Option<SocketAddr>,
    /// `/metrics`, `/proxyMode`, `/api/v1/status` (a port in use is retried, as
    /// `--healthz-bind-address`).
    #[arg(long, default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: SocketAddr,
    /// HTTPS on `--metrics-bind-address` (`/healthz` stays plain HTTP).
    #[command(flatten)]
    pub tls: tideway_serve::tls::TlsArgs,
    /// Who may call the REST API.
    #[command(flatten)]
    pub api: ApiAuthArgs,
    /// How long a child process (`iptables-restore --wait`, `nft`, `ipset`, `vtysh`,
    /// `frr-reload.py`, ...) may run before it is killed with an error naming it; `/livez`
    /// fails while one runs past it, or was killed at it and has not succeeded since.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub command_deadline: Duration,
    /// How often the source file is checked for changes.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    pub file_poll_interval: Duration,
    /// The agents' liveness gossip (SWIM, UDP) listens here; others reach it at this node's
    /// address and port. The operator learns from it within about 2 s that an agent died.
    #[arg(long, default_value = "0.0.0.0:7946")]
    pub gossip_bind_address: SocketAddr,
    /// Do not join the liveness gossip (addresses then move on Node Ready alone).
    #[arg(long)]
    pub no_gossip: bool,
    /// The gossip key.
    #[command(flatten)]
    pub gossip_key: GossipKeyArgs,
    /// Do not watch `networking.k8s.io/v1` ServiceCIDRs, for clusters before Kubernetes 1.33,
    /// which serve none (the watch would never list, and the agent never sync). nftables mode
    /// then drops no traffic to unallocated Service addresses.
    #[arg(long)]
    pub no_service_cidrs: bool,
    /// Every failure-detector timing this many times longer (1-100), for slow environments
    /// where an agent can stall past the 600 ms suspicion while alive; detection slows alike.
    /// The same on every member.
    #[arg(long, env = "TIDEWAY_GOSSIP_TIME_SCALE", default_value = "1", value_parser = tideway_sources::gossip::parse_time_scale)]
    pub gossip_time_scale: f64,
    /// Speak BGP: read the BGP objects (`BGPPeer`, `BGPAdvertisement`, `BFDProfile`,
    /// `Community`) and the pools, and drive this node's FRR with what it advertises.
    #[arg(long)]
    pub bgp: bool,
    /// With `--bgp`, also read MetalLB's BGP objects, pools and advertisements in this
    /// namespace (`--source kubernetes`).
    #[arg(long, requires = "bgp")]
    pub metallb_namespace: Option<String>,
    /// With `--bgp` and `--source kubernetes`: read the `kubernetes.io/basic-auth` Secrets of
    /// this namespace for the peers' `passwordSecret`s (a peer naming one the agent does not
    /// have is left out).
    #[arg(long, requires = "bgp")]
    pub bgp_secret_namespace: Option<String>,
    /// With `--bgp`: FRR's `frr-reload.py`.
    #[arg(long, default_value = "/usr/lib/frr/frr-reload.py")]
    pub frr_reload: PathBuf,
    /// With `--bgp`: where the rendered FRR configuration is written.
    #[arg(long, default_value = "/var/run/tideway/frr")]
    pub frr_dir: PathBuf,
    /// With `--bgp`: FRR's path space (`-N`), when FRR runs under one.
    #[arg(long)]
    pub frr_pathspace: Option<String>,
}

/// How long a starting agent waits for its predecessor's last report (a loaded API server can
/// take seconds while a rollout restarts every Pod).
const INHERIT_PATIENCE: Duration = Duration::from_secs(10);

/// Joins the liveness gossip at this node's address once the source lists this node; a port
/// in use is logged and the agent goes on without (addresses then move on Node Ready alone).
async fn join_gossip(
    cluster: SharedCluster,
    node: String,
    bind: SocketAddr,
    scale: f64,
    keys: Option<tideway_sources::gossip::Keys>,
    refusals: Arc<tideway_sources::gossip::Refusals>,
) -> Option<tokio::sync::watch::Receiver<tideway_sources::gossip::Members>> {
    use tideway_core::net::IpFamily;
    cluster.wait_synced().await;
    let ip = loop {
        let ip = cluster
            .lock()
            .node(&node)
            .and_then(|n| n.primary_ip(IpFamily::V4).or_else(|| n.primary_ip(IpFamily::V6)));
        match ip {
            Some(ip) => break ip,
            None => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    };
    let join = tideway_sources::gossip::Join {
        bind,
        advertise: ip,
        node: &node,
        role: tideway_sources::gossip::Role::Agent,
        timings: tideway_core::liveness::TIMINGS.scaled(scale),
        keys,
        refusals,
    };
    match tideway_sources::gossip::start(join, cluster).await {
        Ok(members) => Some(members),
        Err(e) => {
            tracing::error!(%bind, error = %e, "cannot join the liveness gossip; addresses move on Node Ready alone");
            None
        }
    }
}

/// `--cleanup`: removes the agent's objects of every mode, saying what it removed; exit 1 when
/// a backend could not be cleaned.
#[allow(clippy::print_stdout)] // what it removed is the command's output
fn cleanup() -> i32 {
    use crate::dataplane::Cleaned;
    let mut code = 0;
    for (backend, cleaned) in crate::dataplane::cleanup_node() {
        match cleaned {
            Ok(Cleaned::Removed) => println!("{backend}: removed"),
            Ok(Cleaned::NothingThere) => println!("{backend}: nothing to remove"),
            Ok(Cleaned::LeftToKubeProxy(seen)) => println!("{backend}: left alone: {seen}"),
            Err(e) => {
                eprintln!("{backend}: {e}");
                code = 1;
            }
        }
    }
    code
}

/// Keeps `status.listener_conflicts` current for the listener at `addr`.
fn listener_conflicts(
    status: Arc<RwLock<AgentStatus>>,
    addr: SocketAddr,
) -> impl Fn(Option<String>) + Send + Sync {
    let prefix = format!("{addr}: ");
    move |conflict| {
        let mut s = status.write().unwrap_or_else(|e| e.into_inner());
        s.listener_conflicts.retain(|c| !c.starts_with(&prefix));
        s.listener_conflicts.extend(conflict);
    }
}

/// How long a stop may take: whatever the agent is doing (a long kernel write, a child
/// process), it is gone this long after SIGTERM, unless its sync loop has returned and it is
/// saying it stops ([`FAREWELL_WITHIN`] more).
const STOP_WITHIN: Duration = Duration::from_millis(900);

/// How long the HTTP servers wait for the calls in flight when the agent stops (well within
/// [`STOP_WITHIN`]).
const HTTP_GRACE: Duration = Duration::from_millis(500);

/// How long the last NodeProxyState write may take when the agent stops (beside
/// [`HTTP_GRACE`], once the sync loop has returned; the stop's watchdog waits this more).
/// Without it the operator takes the stop for a crash and moves the node's addresses: a busy
/// API server can take seconds (a write given 500 ms timed out in a rolling update on a loaded
/// machine and an address moved). It takes milliseconds otherwise, so a rollout waits no
/// longer.
const FAREWELL_WITHIN: Duration = Duration::from_secs(5);

/// Runs the agent until SIGINT or SIGTERM. Rules stay programmed on exit, so a restart
/// causes no gap. Without `CAP_NET_ADMIN` it stops at once, saying so.
pub fn run(args: &AgentArgs) -> anyhow::Result<i32> {
    if !crate::caps::has_net_admin() {
        anyhow::bail!(
            "tideway agent needs CAP_NET_ADMIN to program this node's rules: run it as root, or \
             grant the capability (securityContext.capabilities.add: [NET_ADMIN])"
        );
    }
    if args.cleanup {
        return Ok(cleanup());
    }
    let spec = args.from.spec()?;
    let tls = args.tls.load()?;
    let sealing = args.gossip_key.sealing()?;
    anyhow::ensure!(!args.command_deadline.is_zero(), "--command-deadline must be more than 0");
    crate::exec::set_deadline(args.command_deadline);
    crate::sysctl::set_root(&args.sysctl_dir);
    let telemetry = tideway_telemetry::init("tideway-agent", args.log.log_format, "info")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = rt.block_on(async move {
        let cluster = SharedCluster::new();
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        tideway_serve::listen::register(&mut registry);
        let source_metrics = SourceMetrics::new(&mut registry);
        let refusals = Arc::new(tideway_sources::gossip::Refusals::default());
        refusals.register(&mut registry);
        let registry = Arc::new(registry);
        let status = Arc::new(RwLock::new(AgentStatus::default()));
        let how = Connect {
            kubeconfig: args.from.kubeconfig(),
            file_poll: args.file_poll_interval,
            audiences: args.api.audiences(),
            fail_fast: true,
            lab_node: Some(&args.node),
        };
        let connected = tideway_sources::connect(spec, how, &cluster).await?;
        let review = connected.review();
        // Where the node's report goes, and how often (a file source reports nowhere).
        let report: Option<(Arc<dyn tideway_sources::status::NodeStateSink>, ReportSettings)> = match connected {
            Connected::File => None,
            Connected::Lab(dir) => {
                let settings = ReportSettings {
                    min_interval: Duration::from_secs(1),
                    jitter: Duration::ZERO,
                    ..Default::default()
                };
                Some((Arc::new(LabNodeStateSink(dir)), settings))
            }
            Connected::Kubernetes { client, .. } => {
                let role = Role::Agent { node: args.node.clone(), service_cidrs: !args.no_service_cidrs };
                let source = KubeSource::new(client.clone(), role, source_metrics.clone())
                    .with_bgp(args.bgp)
                    .with_bgp_secrets(args.bgp_secret_namespace.clone())
                    .with_metallb(args.metallb_namespace.clone())
                    .with_node_dns(args.node_dns.node_local_dns);
                tokio::spawn(source.run(cluster.clone()));
                let sink = Arc::new(KubeNodeStateSink::new(client).reporting_to(cluster.clone()));
                Some((sink, ReportSettings::default()))
            }
        };
        let farewell_sink = report.as_ref().map(|(sink, _)| sink.clone());
        let keys = if args.no_gossip { None } else { sealing.keys() };
        // The previous agent's graceful stop, kept in this one's reports until it has joined:
        // read before the first report, which would otherwise clear it (a new leader that had
        // not yet seen the stop would then move the node's addresses).
        let inherited_stop = match (&farewell_sink, &keys) {
            (Some(sink), Some(_)) => {
                let read = tokio::time::timeout(INHERIT_PATIENCE, sink.last_report(&args.node));
                let (now, hand_over) = (std::time::SystemTime::now(), tideway_core::liveness::HAND_OVER);
                tideway_core::liveness::inherited_stop(read.await.ok().flatten().as_ref(), now, hand_over)
            }
            _ => None,
        };
        status.write().unwrap_or_else(|e| e.into_inner()).joining_since = inherited_stop;
        if let Some((sink, settings)) = report {
            tokio::spawn(report::run_supervised(status.clone(), sink, settings, cluster.clone(), source_metrics));
        }
        let health = Arc::new(ProxyHealth::new(args.sync_period.unwrap_or(Duration::from_secs(30))));

        let health_router =
            crate::http::health_router(health.clone(), metrics.clone(), status.clone(), cluster.clone());
        let (publisher, programmed) = crate::agent::query::channel();
        let metrics_router = crate::http::metrics_router(registry, status.clone(), programmed);
        if !args.api.api_anonymous_reads && args.api.api_token_file.is_none() && review.is_none() {
            tracing::warn!("the REST API answers no one: start with --api-token-file, --source kubernetes or --api-anonymous-reads");
        }
        let auth =
            args.api.authorizer(review).context("reading --api-token-file")?;
        let metrics_router = crate::http::guarded(metrics_router, args.api.api_anonymous_reads, auth);
        // A port another process holds (kube-proxy's, beside it) is retried, not fatal.
        let mut servers = tideway_serve::http::Servers::new();
        let conflicts = |addr| listener_conflicts(status.clone(), addr);
        if let Some(addr) = args.probe_bind_address {
            servers.serve_when_bound(addr, None, health_router.clone(), conflicts(addr));
        }
        servers.serve_when_bound(args.healthz_bind_address, None, health_router, conflicts(args.healthz_bind_address));
        servers.serve_when_bound(args.metrics_bind_address, tls, metrics_router, conflicts(args.metrics_bind_address));

        let opts = AgentOptions {
            node: args.node.clone(),
            mode: args.mode,
            sync_period: args.sync_period,
            min_sync_period: args.min_sync_period,
            full_sync_period: args.full_sync_period,
        };
        let fence = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(keys) = keys {
            let (cluster, node, bind, fence) =
                (cluster.clone(), args.node.clone(), args.gossip_bind_address, fence.clone());
            let scale = args.gossip_time_scale;
            let joining = status.clone();
            tokio::spawn(async move {
                match join_gossip(cluster.clone(), node.clone(), bind, scale, keys, refusals).await {
                    Some(members) => {
                        let within = tideway_core::liveness::HAND_OVER;
                        let spread = tideway_core::liveness::TIMINGS.scaled(scale).worst_detection();
                        tokio::spawn(crate::report::joined(joining, members.clone(), node, within, spread));
                        crate::fencing::watch(cluster, members, fence).await;
                    }
                    None => joining.write().unwrap_or_else(|e| e.into_inner()).joining_since = None,
                }
            });
        }
        let last_status = status.clone();
        // The layer-2 speaker follows the announcements and the fence on its own task; it
        // answers until the process exits (through the farewell: the addresses stay for the
        // operator's hand-over).
        let speaker = L2Speaker::new(&args.node, cluster.clone(), status.clone(), metrics.clone(), fence.clone());
        tokio::spawn(speaker.run(std::future::pending()));
        // So does the BGP speaker, through the node's FRR.
        if args.bgp {
            let frr = FrrReload { program: args.frr_reload.clone(), dir: args.frr_dir.clone(), pathspace: args.frr_pathspace.clone() };
            let speaker = BgpSpeaker::new(&args.node, cluster.clone(), status.clone(), metrics.clone(), fence, Arc::new(frr));
            tokio::spawn(speaker.run(std::future::pending()));
        }
        let node_dns = crate::node_dns::NodeLocalDns::from_args(&args.node_dns)?;
        let hand_over = node_dns.as_ref().map(crate::node_dns::NodeLocalDns::hand_over);
        let agent = Agent::new(opts, cluster, status, metrics, health).answering(publisher).with_node_dns(node_dns);
        tracing::info!(node = %args.node, "agent started");
        // Set once the sync loop has returned: the farewell runs, on a time of its own.
        let loop_returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        agent.run(stop_signal(loop_returned.clone())).await;
        loop_returned.store(true, std::sync::atomic::Ordering::SeqCst);
        // The NodeProxyState says the agent stopped (its addresses stay for the operator's
        // hand-over: a rollout), while calls in flight (a health check, a REST read) are
        // answered before the exit.
        let farewell = async {
            if let Some(hand_over) = hand_over {
                hand_over.stop().await;
            }
            if let Some(sink) = farewell_sink {
                report::farewell(&last_status, sink.as_ref(), FAREWELL_WITHIN).await;
            }
        };
        let ((), dropped) = tokio::join!(farewell, servers.stop(HTTP_GRACE));
        if dropped > 0 {
            tracing::warn!(grace = ?HTTP_GRACE, "calls still running when the HTTP servers stopped were dropped");
        }
        tracing::info!("agent stopped; rules stay programmed");
        Ok(0)
    });
    telemetry.shutdown();
    result
}

/// Resolves on SIGINT or SIGTERM. The signal is watched by a task of its own, so it is seen
/// even while the sync loop is inside a long kernel write; if the loop has not returned
/// `STOP_WITHIN` later, running children are killed (their writes are transactions) and the
/// process exits with the rules it has. A loop that has returned leaves the farewell its own
/// time, bounded here too.
fn stop_signal(loop_returned: Arc<std::sync::atomic::AtomicBool>) -> impl std::future::Future<Output = ()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tideway_sources::shutdown_signal().await;
        let _ = tx.send(());
        std::thread::spawn(move || {
            std::thread::sleep(STOP_WITHIN);
            if loop_returned.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(FAREWELL_WITHIN);
            }
            tracing::warn!("still busy after a stop was asked; stopping now, rules stay programmed");
            crate::exec::kill_running();
            std::process::exit(0);
        });
    });
    async move {
        let _ = rx.await;
    }
}

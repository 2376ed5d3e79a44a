//! `tideway dns`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tideway_sources::kube::{KubeSource, Role};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::{Connect, Connected, SharedCluster, SourceArgs};

use crate::view::ClusterView;

use crate::config::{
    Settings, SettingsSource, check_ttl, external_zone, extra_zones, fallthrough, parse_service_name,
    parse_upstream,
};
use crate::records::PodsMode;
use crate::server::{Server, ServerConfig, UdpEngine};

/// Serve cluster DNS for the objects of a source.
#[derive(Debug, Args)]
#[command(mut_arg("source", |a| a.help("Where Services, EndpointSlices, Namespaces and Pods come from: `kubernetes` (the default in a pod), `file:CLUSTER.yaml` (re-read on change) or `lab:DIR` (a running `tideway lab`)")))]
pub struct DnsArgs {
    /// Logging and tracing.
    #[command(flatten)]
    pub log: tideway_telemetry::LogArgs,
    /// Where objects come from.
    #[command(flatten)]
    pub from: SourceArgs,
    /// UDP and TCP listen address.
    #[arg(long, default_value = "0.0.0.0:53")]
    pub listen: SocketAddr,
    /// Cluster domain; repeat it to serve the same records under further zones (CoreDNS's
    /// `kubernetes cluster.local example.local`): the first one names PTR targets.
    #[arg(long = "zone", default_value = "cluster.local")]
    pub zones: Vec<String>,
    /// Ask upstream for a name a cluster zone does not have instead of answering NXDOMAIN
    /// (CoreDNS's `fallthrough`): in every cluster zone, or `--fallthrough=ZONE,...` in those.
    #[arg(long, num_args = 0.., value_delimiter = ',', require_equals = true, value_name = "ZONE")]
    pub fallthrough: Option<Vec<String>>,
    /// resolv.conf listing the upstream servers for other names.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub upstream_resolv_conf: PathBuf,
    /// Upstream server (ADDR or ADDR:PORT), instead of the resolv.conf; repeatable.
    #[arg(long = "upstream")]
    pub upstreams: Vec<String>,
    /// Pod records: disabled, insecure or verified.
    #[arg(long, default_value = "disabled")]
    pub pods: String,
    /// TTL of cluster records (0..=3600).
    #[arg(long, default_value_t = 5)]
    pub ttl: u32,
    /// A zone in which `<svc>.<ns>.<ZONE>` resolves to the Service's LoadBalancer and external
    /// IPs (CoreDNS's `k8s_external`), e.g. `example.org`.
    #[arg(long)]
    pub external_zone: Option<String>,
    /// TTL of the external zone's records (0..=3600).
    #[arg(long, default_value_t = 5)]
    pub external_ttl: u32,
    /// Give a pod a Service's ClusterIP (A, AAAA, SRV) only once the agent on the pod's node
    /// reports the Service programmed (its NodeProxyState); SERVFAIL until then.
    #[arg(long)]
    pub require_programmed: bool,
    /// Name an endpoint without a hostname after the pod it targets
    /// (`<pod>.<svc>.<ns>.svc.<zone>`) instead of its dashed address, as CoreDNS's
    /// `endpoint_pod_names`.
    #[arg(long)]
    pub endpoint_pod_names: bool,
    /// The Service `ns.dns.<zone>` and the apex NS stand for.
    #[arg(long, default_value = "kube-system/kube-dns")]
    pub dns_service: String,
    /// `/health` listen address (`none` to disable).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_listen: String,
    /// `/ready` listen address (`none` to disable).
    #[arg(long, default_value = "0.0.0.0:8181")]
    pub ready_listen: String,
    /// `/metrics` listen address (`none` to disable).
    #[arg(long, default_value = "0.0.0.0:9153")]
    pub metrics_listen: String,
    /// REST API listen address (`/api/v1/records`, `/api/v1/stats`; `none` to disable).
    #[arg(long, default_value = "127.0.0.1:9154")]
    pub api_listen: String,
    /// HTTPS for the REST API (the probes and `/metrics` stay plain HTTP).
    #[command(flatten)]
    pub tls: tideway_serve::tls::TlsArgs,
    /// Keep serving this long after SIGTERM, with `/ready` failing.
    #[arg(long, default_value = "5s")]
    pub lameduck: String,
    /// Settings file (YAML), re-read when it changes or on SIGHUP.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How often the settings file and the resolv.conf are checked for changes.
    #[arg(long, default_value = "30s", value_parser = tideway_api::duration::parse_duration)]
    pub reload_interval: Duration,
    /// Worker threads and UDP sockets (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// UDP receive path: `native`, `hickory` (hickory-server's per-datagram tasks), or
    /// `floor` (benchmarks only: the native workers answering every query with one canned
    /// reply). `hickory` and `floor` are in builds with the `bench` feature only.
    #[arg(long, value_enum, default_value = "native", hide_possible_values = true)]
    pub udp_engine: UdpEngine,
    /// What the UDP workers' copies of their replies may take in memory, all workers together
    /// (`16Mi`, `512Ki`, or bytes).
    #[arg(long, default_value = "16Mi")]
    pub replay_budget: String,
    /// TCP connections open at once (Knot's `tcp-max-clients`); more wait in the kernel's
    /// listen backlog until one closes.
    #[arg(long, default_value_t = crate::tcp::DEFAULT_MAX_CLIENTS)]
    pub tcp_max_clients: usize,
    /// Close a TCP connection that takes longer than this to send a query or take a reply.
    #[arg(long, default_value = "10s")]
    pub tcp_idle_timeout: String,
    /// Skip the start-up forwarding-loop probe.
    #[arg(long)]
    pub no_loop_probe: bool,
}

fn optional_addr(flag: &str, value: &str) -> anyhow::Result<Option<SocketAddr>> {
    if value == "none" || value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).with_context(|| format!("--{flag}: invalid address {value:?}"))
}

fn duration(flag: &str, value: &str) -> anyhow::Result<Duration> {
    tideway_api::duration::parse_duration(value).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

/// The settings source described by `args`.
fn settings_source(args: &DnsArgs) -> anyhow::Result<SettingsSource> {
    let (first, more) = args.zones.split_first().context("--zone: at least one cluster zone")?;
    let mut base = Settings::new(first)?;
    base.index.extra_zones = extra_zones(more, &base.index.zone)?;
    base.index.fallthrough = fallthrough(args.fallthrough.as_deref())?;
    base.index.ttl = check_ttl(args.ttl)?;
    base.index.pods = args.pods.parse::<PodsMode>()?;
    base.index.dns_service = Some(parse_service_name(&args.dns_service)?);
    base.index.require_programmed = args.require_programmed;
    base.index.endpoint_pod_names = args.endpoint_pod_names;
    if let Some(zone) = &args.external_zone {
        base.index.external = Some(external_zone(zone, args.external_ttl, &base.index)?);
    }
    if !args.listen.ip().is_unspecified() {
        base.index.fallback_ns_addrs = vec![args.listen.ip()];
    }
    base.resolv_conf = Some(args.upstream_resolv_conf.clone());
    base.lameduck = duration("lameduck", &args.lameduck)?;
    let upstreams = args.upstreams.iter().map(|u| parse_upstream(u)).collect::<Result<_, _>>()?;
    Ok(SettingsSource { base, file: args.config.clone(), upstreams })
}

/// Runs the DNS server until interrupted. Exit code 0 after a clean shutdown, 1 when a
/// forwarding loop was detected.
pub fn run(args: &DnsArgs) -> anyhow::Result<i32> {
    let telemetry = tideway_telemetry::init(
        "tideway-dns",
        args.log.log_format,
        "info,hickory_server=warn,hickory_proto=warn",
    )?;
    let spec = args.from.spec()?;
    let source = settings_source(args)?;
    let settings = source.load()?;
    let watch_pods = settings.index.pods == PodsMode::Verified;
    let require_programmed = settings.index.require_programmed;
    let source_metrics = SourceMetrics::default();
    let workers =
        args.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let config = ServerConfig {
        health: optional_addr("health-listen", &args.health_listen)?,
        ready: optional_addr("ready-listen", &args.ready_listen)?,
        metrics: optional_addr("metrics-listen", &args.metrics_listen)?,
        api: optional_addr("api-listen", &args.api_listen)?,
        api_tls: args.tls.load()?,
        udp_sockets: workers,
        udp_engine: args.udp_engine,
        replay_budget: crate::config::parse_size("--replay-budget", &args.replay_budget)?,
        tcp: crate::tcp::TcpLimits {
            max_clients: args.tcp_max_clients.max(1),
            idle: duration("tcp-idle-timeout", &args.tcp_idle_timeout)?,
        },
        loop_probe: !args.no_loop_probe,
        source_metrics: Some(source_metrics.clone()),
        ..ServerConfig::new(args.listen, settings)
    };
    let reload_interval = args.reload_interval.max(Duration::from_millis(100));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        let cluster = SharedCluster::<ClusterView>::default();
        let server = Server::start(config, cluster.clone()).await?;
        let how = Connect {
            kubeconfig: args.from.kubeconfig(),
            file_poll: Duration::from_secs(1),
            ..Connect::default()
        };
        if let Connected::Kubernetes { client, .. } = tideway_sources::connect(spec, how, &cluster).await? {
            let role = Role::Dns { pods: watch_pods || require_programmed, node_states: require_programmed };
            tokio::spawn(KubeSource::new(client, role, source_metrics).run_dns(cluster));
        }
        let code = serve_until_stopped(&server, &source, reload_interval).await?;
        server.shutdown().await;
        Ok(code)
    });
    telemetry.shutdown();
    result
}

/// Reloads settings on change or SIGHUP until SIGTERM/SIGINT (0) or a fatal error (1).
async fn serve_until_stopped(
    server: &Server,
    source: &SettingsSource,
    interval: Duration,
) -> anyhow::Result<i32> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let mut seen = source.fingerprint(&server.settings());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(0),
            _ = term.recv() => return Ok(0),
            msg = server.failed() => {
                tracing::error!("stopping: {msg}");
                return Ok(1);
            }
            _ = hup.recv() => true,
            _ = tick.tick() => false,
        };
        // The files are read and parsed on a blocking thread, not the runtime's.
        let (src, current, last) = (source.clone(), server.settings(), seen.clone());
        let read = tokio::task::spawn_blocking(move || {
            let now = src.fingerprint(&current);
            let loaded = (forced || now != last).then(|| src.load());
            (now, loaded)
        })
        .await;
        let Ok((now, Some(loaded))) = read else {
            continue;
        };
        seen = now;
        match loaded {
            Ok(settings) if settings == server.settings() => {}
            Ok(settings) => match server.apply(settings) {
                Ok(()) => tracing::info!("settings reloaded"),
                Err(e) => tracing::error!(error = %e, "reload refused; keeping the previous settings"),
            },
            Err(e) => {
                server.core().metrics().reload_failed.inc();
                tracing::error!(error = %e, "reload failed; keeping the previous settings");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::records::{Fallthrough, parse_zone};

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        dns: DnsArgs,
    }

    fn index(args: &[&str]) -> anyhow::Result<crate::records::IndexSettings> {
        let cmd = Cmd::try_parse_from(std::iter::once("dns").chain(args.iter().copied()))?;
        Ok(settings_source(&cmd.dns)?.base.index)
    }

    #[test]
    fn zones_and_fallthrough_from_the_command_line() {
        let zone = |z: &str| parse_zone(z).unwrap();
        let ix = index(&[]).unwrap();
        assert_eq!(
            (ix.zone.clone(), ix.extra_zones.len(), &ix.fallthrough),
            (zone("cluster.local"), 0, &Fallthrough::Never)
        );
        let ix = index(&["--zone", "k8s.example", "--zone=Example.Local.", "--fallthrough"]).unwrap();
        assert_eq!(ix.zone, zone("k8s.example"));
        assert_eq!(ix.extra_zones, [zone("example.local")]);
        assert_eq!(ix.fallthrough, Fallthrough::Everywhere);
        let ix = index(&["--fallthrough=example.local,in-addr.arpa"]).unwrap();
        assert_eq!(ix.fallthrough, Fallthrough::In(vec![zone("example.local"), zone("in-addr.arpa")]));
        let twice = index(&["--zone", "a.local", "--zone", "A.LOCAL"]).unwrap_err().to_string();
        assert!(twice.contains("given twice"), "{twice}");
        let overlap = index(&["--zone", "a.local", "--zone", "ext.b.local", "--external-zone", "b.local"]);
        assert!(overlap.unwrap_err().to_string().contains("overlaps the cluster zone ext.b.local."));
        assert!(index(&["--fallthrough=.."]).is_err(), "not a zone");
    }
}

//! The node-local DNS listener (`--node-local-dns`): cluster DNS answered on the node itself,
//! by the DNS crate's answering code, from the agent's own view.
//!
//! ```text
//!  agent sync (state locked) --Follower::follow--> ClusterView --> RecordIndex --> answers
//!  listener: <address>:53 on lo (169.254.20.10), <cluster DNS ClusterIP>:53 (IP_TRANSPARENT)
//!  other names, ExternalName targets --forward + cache--> the cluster DNS Service's ClusterIP
//!  rules (core::render::node_dns): a pod's query to the ClusterIP is marked 0x2000 and left
//!  untracked while the transparent socket is there; `ip rule fwmark 0x2000/0x2000 lookup 53`
//!  with a `local` default route in table 53 delivers it here
//! ```
//!
//! Without the listener (the agent restarting, or killed with SIGKILL: its rules, address and
//! routes stay) the socket test fails and queries reach the cluster DNS Service as before.
//!
//! A stop hands over first ([`HandOver::stop`]): the divert rules leave the node's chains, so
//! new queries go to the Service at once, while those already queued are answered; then the
//! listener closes (the next agent's first sync writes the rules again). Clearing the sockets'
//! `IP_TRANSPARENT` instead would stop the divert too, but also their replies: a socket bound
//! to an address not of the node sends only while transparent. A SIGKILL cannot hand over: a
//! query the listener had taken and not yet answered is lost, and its client asks again after
//! its timeout.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tideway_core::cluster::{Changes, ClusterState};
use tideway_core::model::ServiceName;
use tideway_core::net::IpFamily;
use tideway_core::plan::{NODE_DNS_MARK, NodeDns};
use tideway_core::render::chains::TIDEWAY_NODE_DNS;
use tideway_core::render::node_dns::{DNS_PORT, NFT_PREROUTING};
use tideway_dns::config::{Settings, parse_service_name};
use tideway_dns::follow::Follower;
use tideway_dns::records::PodsMode;
use tideway_dns::server::{Server, ServerConfig, Sockets};
use tideway_dns::view::ClusterView;
use tideway_sources::SharedCluster;

use crate::exec;

/// The routing table that delivers marked queries to the node.
const ROUTE_TABLE: &str = "53";
/// How long a stop keeps answering the queries already queued once new ones go elsewhere.
const DRAIN: Duration = Duration::from_millis(200);
/// Its share of the agent's memory limit: the forward cache (success, denial) and the UDP
/// worker's copies of its replies, in bytes (the DNS server's defaults: 8 MiB, 2 MiB, 16 MiB).
const CACHE_BYTES: (usize, usize) = (2 << 20, 512 << 10);
const REPLAY_BYTES: usize = 4 << 20;

/// `tideway agent`'s node-local DNS flags.
#[derive(Debug, Clone, Args)]
pub struct NodeDnsArgs {
    /// Answer cluster DNS on this node: on --node-local-dns-address, and (nftables and
    /// iptables modes) on the cluster DNS Service's ClusterIP for this node's pods.
    #[arg(long)]
    pub node_local_dns: bool,
    /// The link-local address the listener holds on `lo`.
    #[arg(long, default_value = "169.254.20.10")]
    pub node_local_dns_address: IpAddr,
    /// The cluster DNS Service (its ClusterIPs are diverted; other names are forwarded to it).
    #[arg(long, default_value = "kube-system/kube-dns")]
    pub node_local_dns_service: String,
    /// The cluster zone.
    #[arg(long, default_value = "cluster.local")]
    pub node_local_dns_zone: String,
    /// Pod records, as the cluster DNS serves them: `insecure` answers them here from the name
    /// alone; `disabled` answers NXDOMAIN (`verified` is refused: it needs every pod).
    #[arg(long, default_value = "insecure")]
    pub node_local_dns_pods: String,
}

/// The listener and the view it answers from.
pub struct NodeLocalDns {
    address: IpAddr,
    service: ServiceName,
    settings: Settings,
    view: SharedCluster<ClusterView>,
    follower: Follower,
    /// The running listener, shared with the [`HandOver`] that stops it.
    running: Arc<Mutex<Option<Running>>>,
}

/// A running listener.
struct Running {
    /// The Service addresses it was started for.
    service_ips: Vec<IpAddr>,
    server: Server,
}

/// Stops the listener once the agent's loop has ended, handing its queries over first.
pub struct HandOver(Arc<Mutex<Option<Running>>>);

impl HandOver {
    /// New queries to the ClusterIP go to the Service from now on; those queued are answered
    /// for [`DRAIN`], then the listener closes.
    pub async fn stop(self) {
        let running = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(running) = running else { return };
        let _ = tokio::task::spawn_blocking(withdraw_divert).await;
        tokio::time::sleep(DRAIN).await;
        running.server.shutdown().await;
        tracing::info!("node-local DNS stopped; queries go to the cluster DNS Service");
    }
}

impl NodeLocalDns {
    /// The listener `args` ask for (none when off).
    pub fn from_args(args: &NodeDnsArgs) -> anyhow::Result<Option<NodeLocalDns>> {
        if !args.node_local_dns {
            return Ok(None);
        }
        let service = parse_service_name(&args.node_local_dns_service)?;
        let mut settings = Settings::new(&args.node_local_dns_zone)?;
        settings.index.pods = args.node_local_dns_pods.parse::<PodsMode>()?;
        anyhow::ensure!(
            settings.index.pods != PodsMode::Verified,
            "--node-local-dns-pods verified needs every pod, which the agent does not watch"
        );
        settings.index.dns_service = Some(service.clone());
        settings.index.fallback_ns_addrs = vec![args.node_local_dns_address];
        // The hand-over drains instead.
        settings.lameduck = Duration::ZERO;
        (settings.cache.success_bytes, settings.cache.denial_bytes) = CACHE_BYTES;
        Ok(Some(NodeLocalDns {
            address: args.node_local_dns_address,
            service,
            settings,
            view: SharedCluster::default(),
            follower: Follower::new(),
            running: Arc::default(),
        }))
    }

    /// What stops the listener when the agent stops.
    pub fn hand_over(&self) -> HandOver {
        HandOver(Arc::clone(&self.running))
    }

    /// Copies what changed into the listener's view (with the agent's state locked) and says
    /// where the rules send queries.
    pub fn follow(&mut self, state: &ClusterState, changes: &Changes) -> NodeDns {
        self.view.update(|view| self.follower.follow(view, state, changes));
        // The agent syncs once its source has its first complete view: so does this one.
        self.view.mark_synced();
        NodeDns::of(self.address, &self.service, state)
    }

    /// Starts the listener for `dns`'s addresses, or restarts it when they changed. Errors
    /// are logged: the rules divert nothing while no listener is up.
    pub async fn serve(&mut self, dns: &NodeDns) {
        let old = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if running.as_ref().is_some_and(|r| r.service_ips == dns.service_ips) {
                return;
            }
            running.take()
        };
        if let Some(old) = old {
            old.server.shutdown().await;
        }
        match self.start(dns).await {
            Ok(running) => {
                tracing::info!(address = %self.address, service_ips = ?dns.service_ips, "node-local DNS listening");
                *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
            }
            Err(e) => tracing::error!(error = format!("{e:#}"), "node-local DNS not started"),
        }
    }

    async fn start(&self, dns: &NodeDns) -> anyhow::Result<Running> {
        hold_routes(self.address, &dns.service_ips)?;
        let mut sockets = Sockets::bind(SocketAddr::new(self.address, DNS_PORT), 1)?;
        for ip in &dns.service_ips {
            sockets = sockets.and(Sockets::bind_transparent(SocketAddr::new(*ip, DNS_PORT), 1)?);
        }
        let mut settings = self.settings.clone();
        settings.forward.upstreams =
            dns.service_ips.iter().map(|ip| SocketAddr::new(*ip, DNS_PORT)).collect();
        let config = ServerConfig {
            replay_budget: REPLAY_BYTES,
            ..ServerConfig::new(SocketAddr::new(self.address, DNS_PORT), settings)
        };
        let server = Server::start_with(config, self.view.clone(), sockets).await?;
        Ok(Running { service_ips: dns.service_ips.clone(), server })
    }
}

/// Takes the divert rules out of whichever mode's chains hold them (nftables' prerouting
/// chain of each family, iptables' raw chain): pods' queries go to the Service from now on.
fn withdraw_divert() {
    let mut done = Vec::new();
    for family in ["ip", "ip6"] {
        let chain = ["flush", "chain", family, tideway_core::render::nftables::TABLE, NFT_PREROUTING];
        done.push(exec::run("nft", &chain, None).is_ok());
    }
    let iptables = crate::dataplane::Iptables::detect();
    for family in IpFamily::ALL {
        let bin = iptables.bin(family, "");
        done.push(exec::run(&bin, &["-w", "5", "-t", "raw", "-F", TIDEWAY_NODE_DNS], None).is_ok());
    }
    if !done.contains(&true) {
        tracing::warn!("node-local DNS: no divert rules found to withdraw");
    }
}

/// Holds `address` on `lo`, and for its family and each of `service_ips`' the policy route
/// that delivers marked queries to the node (a dual-stack Service's IPv6 queries too).
fn hold_routes(address: IpAddr, service_ips: &[IpAddr]) -> anyhow::Result<()> {
    let held = format!("{address}/{}", if address.is_ipv4() { 32 } else { 128 });
    exec::run("ip", &[flag(address), "addr", "replace", &held, "dev", "lo"], None)
        .context("holding the address on lo")?;
    let mut families: Vec<&str> = std::iter::once(&address).chain(service_ips).map(|ip| flag(*ip)).collect();
    families.sort_unstable();
    families.dedup();
    let mark = format!("{NODE_DNS_MARK:#x}/{NODE_DNS_MARK:#x}");
    for family in families {
        let any = if family == "-4" { "0.0.0.0/0" } else { "::/0" };
        exec::run("ip", &[family, "route", "replace", "local", any, "dev", "lo", "table", ROUTE_TABLE], None)
            .context("the local route of marked queries")?;
        let rules = exec::run("ip", &[family, "rule", "show", "fwmark", &mark], None).unwrap_or_default();
        if !rules.contains(&format!("lookup {ROUTE_TABLE}")) {
            let add = [family, "rule", "add", "fwmark", &mark, "lookup", ROUTE_TABLE, "priority", "53"];
            exec::run("ip", &add, None).context("the policy rule of marked queries")?;
        }
    }
    Ok(())
}

/// `ip`'s family flag for `ip`.
fn flag(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "-4" } else { "-6" }
}

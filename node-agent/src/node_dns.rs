//! The node-local DNS listener (`--node-local-dns`): cluster DNS answered on the node itself,
//! by the DNS crate's answering code, from the agent's own view.
//!
//! ```text
//!  agent sync (state locked) --Follower::copy--> Copied --(the node programmed it)-->
//!    ClusterView --> RecordIndex --> answers (an address only once this node's rules serve it)
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
use tideway_dns::follow::{Copied, Follower};
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
    /// What the agent's syncs copied and its node has not yet programmed, oldest first.
    staged: Vec<Copied>,
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
            staged: Vec::new(),
            running: Arc::default(),
        }))
    }

    /// What stops the listener when the agent stops.
    pub fn hand_over(&self) -> HandOver {
        HandOver(Arc::clone(&self.running))
    }

    /// Copies what changed (with the agent's state locked), for the listener's view once the
    /// node has programmed it ([`NodeLocalDns::programmed`]), and says where the rules send
    /// queries. While no listener runs (the agent's first syncs) no one reads the view, so it
    /// takes the copy at once rather than holding it (at 100,000 Services the first copy is
    /// the whole cluster).
    pub fn follow(&mut self, state: &ClusterState, changes: &Changes) -> NodeDns {
        let copied = self.follower.copy(state, changes);
        if !copied.is_empty() {
            self.staged.push(copied);
        }
        if !self.serving() {
            self.write_staged();
        }
        NodeDns::of(self.address, &self.service, state)
    }

    /// The node programmed what was copied so far: the listener answers it from now on (an
    /// address is never given out before this node's rules serve it), and listens on `dns`'s
    /// addresses.
    pub async fn programmed(&mut self, dns: &NodeDns) {
        self.write_staged();
        // The agent syncs once its source has its first complete view: so does this one.
        self.view.mark_synced();
        self.serve(dns).await;
    }

    fn write_staged(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        let staged = std::mem::take(&mut self.staged);
        self.view.update(|view| staged.into_iter().for_each(|copied| copied.into_view(view)));
    }

    fn serving(&self) -> bool {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Starts the listener for `dns`'s addresses, or restarts it when they changed. Errors
    /// are logged: the rules divert nothing while no listener is up.
    async fn serve(&mut self, dns: &NodeDns) {
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
        self.start_on(dns.service_ips.clone(), sockets).await
    }

    /// Serves on `sockets`, forwarding to `service_ips`.
    async fn start_on(&self, service_ips: Vec<IpAddr>, sockets: Sockets) -> anyhow::Result<Running> {
        let mut settings = self.settings.clone();
        settings.forward.upstreams = service_ips.iter().map(|ip| SocketAddr::new(*ip, DNS_PORT)).collect();
        let config = ServerConfig {
            replay_budget: REPLAY_BYTES,
            ..ServerConfig::new(SocketAddr::new(self.address, DNS_PORT), settings)
        };
        let server = Server::start_with(config, self.view.clone(), sockets).await?;
        Ok(Running { service_ips, server })
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

#[cfg(test)]
mod tests {
    use std::process::Command;

    use clap::Parser;
    use tideway_core::model::Service;
    use tideway_core::net::Protocol::Tcp;
    use tideway_core::testing::mk_service;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: NodeDnsArgs,
    }

    fn svc(name: &str, ip: &str) -> Service {
        mk_service("default", name).cluster_ip(ip).port("http", Tcp, 80).build()
    }

    /// `dig`'s short answer for `name` from the listener on 127.0.0.1:`port`.
    fn dig(port: u16, name: &str) -> String {
        let port = port.to_string();
        let args = ["+short", "+time=1", "+tries=1", "-p", &port, "@127.0.0.1", name];
        let out = Command::new("dig").args(args).output().expect("dig (dnsutils; `make deps`)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    // Two workers: `dig` blocks one while the server answers on the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_service_is_answered_only_once_the_node_has_programmed_it() {
        let args = Cli::parse_from(["agent", "--node-local-dns"]).args;
        let mut dns = NodeLocalDns::from_args(&args).unwrap().expect("on");
        let mut state = ClusterState::new();
        state.apply(svc("web", "10.96.0.20"));
        // The first sync, before any listener: the view takes the copy at once.
        let changes = state.take_changes();
        let first = dns.follow(&state, &changes);
        assert_eq!(dns.view.lock().service_count(), 1, "web in the view");
        // A listener on loopback (the agent's is on the node's addresses), for the Service
        // addresses it was started for (none here), so that `programmed` keeps it.
        assert!(first.service_ips.is_empty());
        dns.view.mark_synced();
        let listener = dns.start_on(Vec::new(), Sockets::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap());
        let running = listener.await.unwrap();
        let port = running.server.dns_addr.port();
        *dns.running.lock().unwrap() = Some(running);
        assert_eq!(dig(port, "web.default.svc.cluster.local"), "10.96.0.20");

        // A new Service, copied by a sync whose apply then failed: not answered; a later sync
        // copies nothing new; once one programs, it is.
        state.apply(svc("api", "10.96.0.21"));
        let changes = state.take_changes();
        dns.follow(&state, &changes);
        assert_eq!(dns.view.lock().service_count(), 1, "api in the view before it was programmed");
        assert_eq!(dig(port, "api.default.svc.cluster.local"), "");
        let next = dns.follow(&state, &Changes::default());
        dns.programmed(&next).await;
        assert_eq!(dns.view.lock().service_count(), 2, "api in the view once programmed");
        let started = std::time::Instant::now();
        while dig(port, "api.default.svc.cluster.local") != "10.96.0.21" {
            assert!(started.elapsed() < Duration::from_secs(5), "api never answered after it was programmed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let running = dns.running.lock().unwrap().take();
        running.expect("still listening").server.shutdown().await;
    }
}

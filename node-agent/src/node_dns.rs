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

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context;
use clap::Args;
use tideway_core::cluster::{Changes, ClusterState};
use tideway_core::model::ServiceName;
use tideway_core::plan::{NODE_DNS_MARK, NodeDns};
use tideway_dns::config::{Settings, parse_service_name};
use tideway_dns::records::PodsMode;
use tideway_dns::server::{Server, ServerConfig, Sockets};
use tideway_dns::view::{ClusterView, Follower};
use tideway_sources::SharedCluster;

use crate::exec;

/// The routing table that delivers marked queries to the node.
const ROUTE_TABLE: &str = "53";
const DNS_PORT: u16 = 53;

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
    /// alone; `disabled` answers NXDOMAIN; `verified` is not answered here.
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
    /// The running server and the Service addresses it was started for.
    server: Option<(Vec<IpAddr>, Server)>,
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
        Ok(Some(NodeLocalDns {
            address: args.node_local_dns_address,
            service,
            settings,
            view: SharedCluster::default(),
            follower: Follower::new(),
            server: None,
        }))
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
        if self.server.as_ref().is_some_and(|(ips, _)| *ips == dns.service_ips) {
            return;
        }
        if let Some((_, old)) = self.server.take() {
            old.shutdown().await;
        }
        match self.start(dns).await {
            Ok(server) => {
                tracing::info!(address = %self.address, service_ips = ?dns.service_ips, "node-local DNS listening");
                self.server = Some((dns.service_ips.clone(), server));
            }
            Err(e) => tracing::error!(error = format!("{e:#}"), "node-local DNS not started"),
        }
    }

    async fn start(&self, dns: &NodeDns) -> anyhow::Result<Server> {
        hold_routes(self.address)?;
        let mut sockets = Sockets::bind(SocketAddr::new(self.address, DNS_PORT), 1)?;
        for ip in &dns.service_ips {
            sockets = sockets.and(Sockets::bind_transparent(SocketAddr::new(*ip, DNS_PORT), 1)?);
        }
        let mut settings = self.settings.clone();
        settings.forward.upstreams =
            dns.service_ips.iter().map(|ip| SocketAddr::new(*ip, DNS_PORT)).collect();
        let config = ServerConfig::new(SocketAddr::new(self.address, DNS_PORT), settings);
        Ok(Server::start_with(config, self.view.clone(), sockets).await?)
    }
}

/// Holds `address` on `lo`, and the policy route that delivers marked queries to the node.
fn hold_routes(address: IpAddr) -> anyhow::Result<()> {
    let (family, host, any) = match address {
        IpAddr::V4(_) => ("-4", "/32", IpAddr::V4(Ipv4Addr::UNSPECIFIED).to_string() + "/0"),
        IpAddr::V6(_) => ("-6", "/128", "::/0".to_string()),
    };
    let held = format!("{address}{host}");
    exec::run("ip", &[family, "addr", "replace", &held, "dev", "lo"], None)
        .context("holding the address on lo")?;
    exec::run("ip", &[family, "route", "replace", "local", &any, "dev", "lo", "table", ROUTE_TABLE], None)
        .context("the local route of marked queries")?;
    let mark = format!("{NODE_DNS_MARK:#x}/{NODE_DNS_MARK:#x}");
    let rules = exec::run("ip", &[family, "rule", "show", "fwmark", &mark], None).unwrap_or_default();
    if !rules.contains(&format!("lookup {ROUTE_TABLE}")) {
        exec::run(
            "ip",
            &[family, "rule", "add", "fwmark", &mark, "lookup", ROUTE_TABLE, "priority", "53"],
            None,
        )
        .context("the policy rule of marked queries")?;
    }
    Ok(())
}

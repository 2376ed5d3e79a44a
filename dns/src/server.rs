//! Running the DNS server: sockets, the hickory-server instance, the index updater, the
//! operations listeners, the loop probe, reload and lameduck shutdown.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::registry::Registry;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tideway_sources::SharedCluster;

use crate::view::{ClusterView, Touched};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::config::Settings;
use crate::forward::Forwarder;
use crate::forward::cache::Cache;
use crate::handler::replay::ReplayBudget;
use crate::handler::{Core, DnsHandler};
use crate::metrics::Metrics;
use crate::ops::{self, Readiness};
use crate::records::RecordIndex;
use crate::tcp::TcpLimits;
use crate::udp::Answering;

/// Which code receives UDP queries. The product has one; the DNS benchmark's comparison
/// points come with the `bench` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UdpEngine {
    /// [`crate::udp`]: a thread per socket answering in place, bursts via `recvmmsg`/`sendmmsg`
    /// (default).
    #[default]
    Native,
    /// hickory-server's `register_socket` (a task per datagram); kept for comparison.
    #[cfg(feature = "bench")]
    Hickory,
    /// The native workers answering every query with one canned reply: the floor of the
    /// socket code, for benchmarks. Not a DNS server.
    #[cfg(feature = "bench")]
    Floor,
}

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// DNS address (UDP and TCP).
    pub listen: SocketAddr,
    /// `/health` listener.
    pub health: Option<SocketAddr>,
    /// `/ready` listener.
    pub ready: Option<SocketAddr>,
    /// `/metrics` listener.
    pub metrics: Option<SocketAddr>,
    /// REST API listener ([`crate::api`]).
    pub api: Option<SocketAddr>,
    /// HTTPS for the REST API listener (the probes and `/metrics` stay plain).
    pub api_tls: Option<Arc<tideway_serve::tls::Tls>>,
    /// UDP sockets sharing the port (one per worker).
    pub udp_sockets: usize,
    /// UDP receive path.
    pub udp_engine: UdpEngine,
    /// What every UDP worker's replayed copies may take together, in bytes.
    pub replay_budget: usize,
    /// TCP connections: how many at once, and how long one may idle.
    pub tcp: TcpLimits,
    /// Probe the upstreams for forwarding loops at start.
    pub loop_probe: bool,
    /// Serving settings.
    pub settings: Settings,
    /// The source's counters, served on `/metrics` with the server's own.
    pub source_metrics: Option<tideway_sources::metrics::SourceMetrics>,
}

impl ServerConfig {
    /// A config listening on `listen` with no operations listeners.
    pub fn new(listen: SocketAddr, settings: Settings) -> Self {
        ServerConfig {
            listen,
            health: None,
            ready: None,
            metrics: None,
            api: None,
            api_tls: None,
            udp_sockets: 1,
            udp_engine: UdpEngine::Native,
            replay_budget: crate::handler::replay::BUDGET,
            tcp: TcpLimits::default(),
            loop_probe: false,
            settings,
            source_metrics: None,
        }
    }
}

/// Why the server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, io::Error),
    /// The upstreams forward back to this server.
    #[error("forwarding loop: {0}")]
    Loop(String),
}

/// Pre-bound DNS sockets (tests bind them inside a network namespace).
#[derive(Debug)]
pub struct Sockets {
    /// UDP sockets, all on the same address but those [`and`](Self::and) added.
    pub udp: Vec<std::net::UdpSocket>,
    /// The TCP listener (its address is the server's).
    pub tcp: std::net::TcpListener,
    /// Further TCP listeners, on further addresses ([`and`](Self::and)).
    pub more_tcp: Vec<std::net::TcpListener>,
}

impl Sockets {
    /// Binds `count` UDP sockets (`SO_REUSEPORT`) and a TCP listener on `addr`; port 0 picks
    /// one free port for both.
    pub fn bind(addr: SocketAddr, count: usize) -> Result<Sockets, ServeError> {
        Self::bind_as(addr, count, false)
    }

    /// [`bind`](Self::bind) with `IP_TRANSPARENT`: `addr` need not be local, and packets to it
    /// that policy routing delivers here reach these sockets (the node-local DNS listener on
    /// the cluster DNS Service's ClusterIP). Needs `CAP_NET_ADMIN`.
    pub fn bind_transparent(addr: SocketAddr, count: usize) -> Result<Sockets, ServeError> {
        Self::bind_as(addr, count, true)
    }

    /// These sockets and `other`'s, served together (one server on several addresses).
    pub fn and(mut self, other: Sockets) -> Sockets {
        self.udp.extend(other.udp);
        self.more_tcp.push(other.tcp);
        self.more_tcp.extend(other.more_tcp);
        self
    }

    fn bind_as(addr: SocketAddr, count: usize, transparent: bool) -> Result<Sockets, ServeError> {
        let err = |e| ServeError::Bind(addr, e);
        let domain = Domain::for_address(addr);
        let new = |ty: Type, proto: SockProtocol| -> io::Result<Socket> {
            let s = Socket::new(domain, ty, Some(proto))?;
            if transparent && addr.is_ipv4() {
                s.set_ip_transparent_v4(true)?;
            } else if transparent {
                s.set_ip_transparent_v6(true)?;
            }
            Ok(s)
        };
        let tcp = new(Type::STREAM, SockProtocol::TCP).map_err(err)?;
        tcp.set_reuse_address(true).map_err(err)?;
        tcp.bind(&addr.into()).map_err(err)?;
        tcp.listen(1024).map_err(err)?;
        let tcp: std::net::TcpListener = tcp.into();
        let bound = tcp.local_addr().map_err(err)?;
        let mut udp = Vec::new();
        for _ in 0..count.max(1) {
            let s = new(Type::DGRAM, SockProtocol::UDP).map_err(err)?;
            s.set_reuse_port(true).map_err(err)?;
            // Room for bursts: dnsperf-style clients keep hundreds of queries in flight.
            let _ = s.set_recv_buffer_size(4 << 20);
            s.bind(&bound.into()).map_err(err)?;
            udp.push(s.into());
        }
        Ok(Sockets { udp, tcp, more_tcp: Vec::new() })
    }
}

/// True when `upstream` is this server itself.
fn is_self(upstream: SocketAddr, listen: SocketAddr) -> bool {
    upstream == listen
        || (listen.ip().is_unspecified() && upstream.port() == listen.port() && upstream.ip().is_loopback())
}

/// A running server.
pub struct Server {
    /// The bound DNS address.
    pub dns_addr: SocketAddr,
    /// The bound `/health` address.
    pub health_addr: Option<SocketAddr>,
    /// The bound `/ready` address.
    pub ready_addr: Option<SocketAddr>,
    /// The bound `/metrics` address.
    pub metrics_addr: Option<SocketAddr>,
    /// The bound REST API address.
    pub api_addr: Option<SocketAddr>,
    core: Arc<Core>,
    readiness: Arc<Readiness>,
    settings: Arc<Mutex<Settings>>,
    rebuild: Arc<Notify>,
    shutdown: watch::Sender<bool>,
    failure: watch::Receiver<Option<String>>,
    tasks: JoinSet<()>,
    workers: Vec<crate::udp::Worker>,
}

async fn http_listener(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, ServeError> {
    match addr {
        Some(a) => TcpListener::bind(a).await.map(Some).map_err(|e| ServeError::Bind(a, e)),
        None => Ok(None),
    }
}

impl Server {
    /// Binds the configured addresses and starts serving `cluster`.
    pub async fn start(
        config: ServerConfig,
        cluster: SharedCluster<ClusterView>,
    ) -> Result<Server, ServeError> {
        let sockets = Sockets::bind(config.listen, config.udp_sockets)?;
        Self::start_with(config, cluster, sockets).await
    }

    /// Starts serving `cluster` on pre-bound DNS sockets.
    pub async fn start_with(
        config: ServerConfig,
        cluster: SharedCluster<ClusterView>,
        sockets: Sockets,
    ) -> Result<Server, ServeError> {
        let err = |e| ServeError::Bind(config.listen, e);
        let tcp = TcpListener::from_std({
            sockets.tcp.set_nonblocking(true).map_err(err)?;
            sockets.tcp
        })
        .map_err(err)?;
        let dns_addr = tcp.local_addr().map_err(err)?;
        let settings = config.settings.clone();
        if let Some(up) = settings.forward.upstreams.iter().find(|u| is_self(**u, dns_addr)) {
            return Err(ServeError::Loop(format!("upstream {up} is this server ({dns_addr})")));
        }

        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(dns_addr, &mut registry));
        if let Some(m) = &config.source_metrics {
            m.register(&mut registry);
        }
        let core = Arc::new(Core::new(
            RecordIndex::unsynced(&settings.index),
            Forwarder::new(settings.forward.clone(), Arc::clone(&metrics)),
            Cache::new(settings.cache.clone(), Arc::clone(&metrics)),
            settings.options.clone(),
            Arc::clone(&metrics),
        ));
        let readiness = Arc::new(Readiness::default());
        // A source that is already synced is served from its full index from the first query.
        let mut built = None;
        refresh_index(&core, &cluster, &settings.index, &mut built, &readiness);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (failure_tx, failure) = watch::channel(None);
        let mut tasks = JoinSet::new();

        let mut hickory = hickory_server::Server::new(DnsHandler::new(Arc::clone(&core)));
        // TCP has a listener of its own (crate::tcp): hickory-server's takes every connection
        // and spins on EMFILE.
        tasks.spawn(crate::tcp::serve(tcp, Arc::clone(&core), config.tcp, shutdown_rx.clone()));
        for more in sockets.more_tcp {
            more.set_nonblocking(true).map_err(err)?;
            let more = TcpListener::from_std(more).map_err(err)?;
            tasks.spawn(crate::tcp::serve(more, Arc::clone(&core), config.tcp, shutdown_rx.clone()));
        }
        let mut workers = Vec::new();
        let budget = ReplayBudget::new(config.replay_budget, sockets.udp.len());
        for (i, udp) in sockets.udp.into_iter().enumerate() {
            let answering = match config.udp_engine {
                UdpEngine::Native => Answering::Server,
                #[cfg(feature = "bench")]
                UdpEngine::Floor => Answering::Floor,
                #[cfg(feature = "bench")]
                UdpEngine::Hickory => {
                    udp.set_nonblocking(true).map_err(err)?;
                    hickory.register_socket(UdpSocket::from_std(udp).map_err(err)?);
                    continue;
                }
            };
            let runtime = tokio::runtime::Handle::current();
            let worker = crate::udp::Worker::start(
                udp,
                Arc::clone(&core),
                runtime,
                i,
                answering,
                Arc::clone(&budget),
                Arc::clone(&readiness),
            );
            workers.push(worker.map_err(err)?);
        }
        let mut rx = shutdown_rx.clone();
        tasks.spawn(async move {
            let _ = rx.wait_for(|s| *s).await;
            if let Err(e) = hickory.shutdown_gracefully().await {
                tracing::warn!(error = %e, "DNS server stopped with an error");
            }
        });

        let registry = Arc::new(registry);
        let mut bound = [None, None, None, None];
        let index_core = Arc::clone(&core);
        let routers = [
            (config.health, None, ops::health_router()),
            (config.ready, None, ops::ready_router(Arc::clone(&readiness))),
            (config.metrics, None, tideway_serve::http::metrics_router(registry)),
            (config.api, config.api_tls.clone(), crate::api::router(Arc::new(move || index_core.index()))),
        ];
        for (slot, (addr, tls, router)) in bound.iter_mut().zip(routers) {
            if let Some(listener) = http_listener(addr).await? {
                *slot = listener.local_addr().ok();
                let mut rx = shutdown_rx.clone();
                tasks.spawn(async move {
                    let stop = async move {
                        let _ = rx.wait_for(|s| *s).await;
                    };
                    if let Err(e) = tideway_serve::http::serve(listener, tls, router, stop).await {
                        tracing::error!(error = %e, "HTTP listener failed");
                    }
                });
            }
        }

        let settings = Arc::new(Mutex::new(settings));
        let rebuild = Arc::new(Notify::new());
        tasks.spawn(index_task(
            Arc::clone(&core),
            cluster,
            Arc::clone(&settings),
            Arc::clone(&rebuild),
            Arc::clone(&readiness),
            built,
            shutdown_rx.clone(),
        ));
        if config.loop_probe {
            tasks.spawn(loop_probe(Arc::clone(&core), dns_addr, failure_tx, shutdown_rx));
        }
        tracing::info!(%dns_addr, "cluster DNS listening");
        Ok(Server {
            dns_addr,
            health_addr: bound[0],
            ready_addr: bound[1],
            metrics_addr: bound[2],
            api_addr: bound[3],
            core,
            readiness,
            settings,
            rebuild,
            shutdown,
            failure,
            tasks,
            workers,
        })
    }

    /// The request path's shared state.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Makes UDP worker `index` panic, again after every restart while `on` (tests: a
    /// worker that fails; nothing reaches it from the network).
    #[doc(hidden)]
    pub fn fail_udp_worker(&self, index: usize, on: bool) {
        if let Some(w) = self.workers.get(index) {
            w.fail(on);
        }
    }

    /// Readiness as `/ready` reports it.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The settings in use.
    pub fn settings(&self) -> Settings {
        self.settings.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Applies new settings without dropping a query (reload). Upstreams that point back at
    /// this server are refused and the previous settings stay.
    pub fn apply(&self, new: Settings) -> Result<(), ServeError> {
        if let Some(up) = new.forward.upstreams.iter().find(|u| is_self(**u, self.dns_addr)) {
            self.core.metrics().reload_failed.inc();
            return Err(ServeError::Loop(format!("upstream {up} is this server ({})", self.dns_addr)));
        }
        let mut cur = self.settings.lock().unwrap_or_else(|e| e.into_inner());
        if cur.forward != new.forward {
            self.core.forwarder().set_settings(new.forward.clone());
        }
        if cur.cache != new.cache {
            self.core.set_cache(Cache::new(new.cache.clone(), Arc::clone(self.core.metrics())));
        }
        if cur.options != new.options {
            self.core.set_options(new.options.clone());
        }
        let rebuild = cur.index != new.index;
        *cur = new;
        drop(cur);
        if rebuild {
            self.rebuild.notify_one();
        }
        Ok(())
    }

    /// Resolves when the server must stop because of an error (a forwarding loop).
    pub async fn failed(&self) -> String {
        let mut rx = self.failure.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops: `/ready` fails at once, DNS and `/health` keep serving for the lameduck
    /// duration, then every listener closes.
    pub async fn shutdown(mut self) {
        let lameduck = self.settings().lameduck;
        self.readiness.set_lameduck();
        if !lameduck.is_zero() {
            tracing::info!(?lameduck, "lameduck: still serving before shutdown");
            tokio::time::sleep(lameduck).await;
        }
        self.shutdown.send_replace(true);
        let workers = std::mem::take(&mut self.workers);
        workers.iter().for_each(crate::udp::Worker::stop);
        let _ =
            tokio::task::spawn_blocking(move || workers.into_iter().for_each(crate::udp::Worker::join)).await;
        while self.tasks.join_next().await.is_some() {}
    }
}

fn unix_now() -> u32 {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    u32::try_from(secs).unwrap_or(u32::MAX)
}

/// What the current index was built from: its settings, and the fingerprint of the node
/// reports it gates on (0 without `--require-programmed`).
type Built = Option<(crate::records::IndexSettings, u64)>;

/// Rebuilds the index if the cluster is synced and something relevant changed since `built`.
fn refresh_index(
    core: &Core,
    cluster: &SharedCluster<ClusterView>,
    wanted: &crate::records::IndexSettings,
    built: &mut Built,
    readiness: &Readiness,
) {
    if !cluster.is_synced() {
        if core.index().ttl() != wanted.ttl || core.index().zone() != &wanted.zone {
            core.set_index(RecordIndex::unsynced(wanted));
        }
        return;
    }
    let mut state = cluster.lock();
    let changes = state.take_changes();
    let reports = match built {
        Some((_, f)) if !changes.reports => *f,
        _ if wanted.require_programmed => crate::records::programmed_fingerprint(&state),
        _ => 0,
    };
    let same = built.as_ref().is_some_and(|(s, f)| s == wanted && *f == reports);
    if same && changes.objects == 0 {
        return;
    }
    let started = Instant::now();
    // Only some Services changed: their parts of the index are rebuilt, the rest shared.
    let updated = match &changes.touched {
        Touched::Services(services) if same => core.index().updated(&state, wanted, unix_now(), services),
        _ => None,
    };
    let how = if updated.is_some() { "updated" } else { "rebuilt" };
    let index = updated.unwrap_or_else(|| RecordIndex::build(&state, wanted, unix_now()));
    drop(state);
    let took = started.elapsed();
    let m = core.metrics();
    m.index_build_seconds.observe(took.as_secs_f64());
    m.index_services.set(i64::try_from(index.service_count()).unwrap_or(i64::MAX));
    m.index_endpoints.set(i64::try_from(index.endpoint_count()).unwrap_or(i64::MAX));
    tracing::info!(
        services = index.service_count(),
        endpoints = index.endpoint_count(),
        changed = changes.objects,
        millis = took.as_secs_f64() * 1e3,
        how,
        "cluster zone indexed"
    );
    core.set_index(index);
    readiness.set_synced();
    *built = Some((wanted.clone(), reports));
}

/// Keeps the index in step with the cluster and the settings, swapped in atomically: the
/// parts of the Services that changed rebuilt, or, after anything else (a relist, a namespace,
/// a pod, new settings), the whole index.
async fn index_task(
    core: Arc<Core>,
    cluster: SharedCluster<ClusterView>,
    settings: Arc<Mutex<Settings>>,
    rebuild: Arc<Notify>,
    readiness: Arc<Readiness>,
    mut built: Built,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let wanted = settings.lock().unwrap_or_else(|e| e.into_inner()).index.clone();
        // A rebuild reads the whole cluster under the state's lock: on a blocking thread, so
        // the runtime's threads keep answering meanwhile.
        let (c, cl, r) = (core.clone(), cluster.clone(), readiness.clone());
        let rebuilt = tokio::task::spawn_blocking(move || {
            refresh_index(&c, &cl, &wanted, &mut built, &r);
            built
        })
        .await;
        built = match rebuilt {
            Ok(b) => b,
            Err(e) => {
                // Built from scratch next time.
                tracing::error!(error = %e, "the zone rebuild failed; the previous zone keeps answering");
                None
            }
        };
        tokio::select! {
            _ = cluster.changed() => {}
            _ = rebuild.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// CoreDNS's `loop` plugin: query a random name through ourselves; if it comes back more than
/// twice, the upstreams forward to us and every forwarded query would circle until timeout.
async fn loop_probe(
    core: Arc<Core>,
    dns_addr: SocketAddr,
    failure: watch::Sender<Option<String>>,
    mut shutdown: watch::Receiver<bool>,
) {
    if core.forwarder().upstreams().is_empty() {
        return;
    }
    let target = if dns_addr.ip().is_unspecified() {
        match dns_addr {
            SocketAddr::V4(_) => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), dns_addr.port()),
            SocketAddr::V6(_) => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), dns_addr.port()),
        }
    } else {
        dns_addr
    };
    let name = core.probe().name();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let probe = async {
            let mut msg = hickory_proto::op::Message::query();
            msg.metadata.id = rand::random();
            msg.metadata.recursion_desired = true;
            msg.add_query(hickory_proto::op::Query::query(
                name.clone(),
                hickory_proto::rr::RecordType::HINFO,
            ));
            let bytes = msg.to_vec().map_err(io::Error::other)?;
            let local: SocketAddr = match target {
                SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            let socket = UdpSocket::bind(local).await?;
            socket.send_to(&bytes, target).await?;
            let mut buf = [0u8; 512];
            tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            io::Result::Ok(())
        };
        let answered = tokio::select! {
            r = probe => r.is_ok(),
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if core.probe().detected() {
            let msg = format!(
                "Loop ({target} -> {dns_addr}) detected for zone \".\": query \"HINFO {name}\" came back; \
                 the upstream servers forward to this server"
            );
            tracing::error!("{msg}");
            failure.send_replace(Some(msg));
            return;
        }
        if answered {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

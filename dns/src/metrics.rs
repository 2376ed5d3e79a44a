//! Prometheus metrics under CoreDNS's names and labels, so existing dashboards and alerts work.
//!
//! Per-query cost matters (the target is well over 100k answers per CPU-second): the label
//! values of a query are small enumerations, so each metric handle is looked up in its family
//! once and then kept in a slot table indexed by those enumerations; a query costs a few
//! atomic increments and histogram observations, no map lookups or allocations.

use std::sync::OnceLock;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Transport of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

impl Proto {
    fn label(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// Which part of the server wrote a response (CoreDNS's `plugin` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The server itself (malformed, refused, unsupported queries).
    Server,
    /// The cluster zone.
    Kubernetes,
    /// The response cache.
    Cache,
    /// An upstream server.
    Forward,
}

impl Source {
    const ALL: [Source; 4] = [Source::Server, Source::Kubernetes, Source::Cache, Source::Forward];

    fn label(self) -> &'static str {
        match self {
            Source::Server => "",
            Source::Kubernetes => "kubernetes",
            Source::Cache => "cache",
            Source::Forward => "forward",
        }
    }
}

/// The query types CoreDNS reports by name; everything else is `other`.
const TYPES: [(RecordType, &str); 17] = [
    (RecordType::A, "A"),
    (RecordType::AAAA, "AAAA"),
    (RecordType::CNAME, "CNAME"),
    (RecordType::NS, "NS"),
    (RecordType::PTR, "PTR"),
    (RecordType::SOA, "SOA"),
    (RecordType::MX, "MX"),
    (RecordType::TXT, "TXT"),
    (RecordType::SRV, "SRV"),
    (RecordType::ANY, "ANY"),
    (RecordType::AXFR, "AXFR"),
    (RecordType::IXFR, "IXFR"),
    (RecordType::DS, "DS"),
    (RecordType::DNSKEY, "DNSKEY"),
    (RecordType::HTTPS, "HTTPS"),
    (RecordType::SVCB, "SVCB"),
    (RecordType::NAPTR, "NAPTR"),
];
const N_TYPES: usize = TYPES.len() + 1;

fn type_index(t: RecordType) -> usize {
    TYPES.iter().position(|(rt, _)| *rt == t).unwrap_or(TYPES.len())
}

fn type_label(i: usize) -> &'static str {
    TYPES.get(i).map_or("other", |(_, l)| l)
}

const RCODES: [(ResponseCode, &str); 11] = [
    (ResponseCode::NoError, "NOERROR"),
    (ResponseCode::FormErr, "FORMERR"),
    (ResponseCode::ServFail, "SERVFAIL"),
    (ResponseCode::NXDomain, "NXDOMAIN"),
    (ResponseCode::NotImp, "NOTIMP"),
    (ResponseCode::Refused, "REFUSED"),
    (ResponseCode::YXDomain, "YXDOMAIN"),
    (ResponseCode::YXRRSet, "YXRRSET"),
    (ResponseCode::NXRRSet, "NXRRSET"),
    (ResponseCode::NotAuth, "NOTAUTH"),
    (ResponseCode::BADVERS, "BADVERS"),
];
const N_RCODES: usize = RCODES.len() + 1;

fn rcode_index(r: ResponseCode) -> usize {
    RCODES.iter().position(|(rc, _)| *rc == r).unwrap_or(RCODES.len())
}

/// The rcode as CoreDNS spells it in labels.
pub fn rcode_label(r: ResponseCode) -> &'static str {
    RCODES.get(rcode_index(r)).map_or("OTHER", |(_, l)| l)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: &'static str,
    zone: &'static str,
    view: &'static str,
    proto: &'static str,
    family: &'static str,
    r#type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    server: &'static str,
    zone: &'static str,
    view: &'static str,
    rcode: &'static str,
    plugin: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    server: &'static str,
    zone: &'static str,
    view: &'static str,
    r#type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SizeLabels {
    server: &'static str,
    zone: &'static str,
    view: &'static str,
    proto: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CacheLabels {
    pub(crate) server: &'static str,
    pub(crate) r#type: &'static str,
    pub(crate) zones: &'static str,
    pub(crate) view: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ServerLabels {
    pub(crate) server: &'static str,
    pub(crate) zones: &'static str,
    pub(crate) view: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToLabels {
    pub(crate) to: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToRcodeLabels {
    pub(crate) to: String,
    pub(crate) rcode: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    server: &'static str,
    zone: &'static str,
    view: &'static str,
    name: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
    goversion: &'static str,
}

fn duration_histogram() -> Histogram {
    // CoreDNS: 0.25 ms doubling, 16 buckets (up to ~8 s).
    Histogram::new(exponential_buckets(0.00025, 2.0, 16))
}

fn size_histogram() -> Histogram {
    Histogram::new([
        0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0, 8291.0, 16e3, 32e3, 48e3, 64e3,
    ])
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the DNS server exports, registered in one [`Registry`].
pub struct Metrics {
    server: &'static str,
    requests: Family<RequestLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    durations: HistogramFamily<TypeLabels>,
    request_sizes: HistogramFamily<SizeLabels>,
    response_sizes: HistogramFamily<SizeLabels>,
    do_requests: Family<ServerLabels, Counter>,
    request_slots: Vec<OnceLock<Counter>>,
    response_slots: Vec<OnceLock<Counter>>,
    duration_slots: Vec<OnceLock<Histogram>>,
    size_slots: [[OnceLock<Histogram>; 2]; 2],
    pub(crate) cache_entries: Family<CacheLabels, Gauge>,
    pub(crate) cache_hits: Family<CacheLabels, Counter>,
    pub(crate) cache_misses: Family<ServerLabels, Counter>,
    pub(crate) cache_requests: Family<ServerLabels, Counter>,
    pub(crate) cache_prefetches: Family<ServerLabels, Counter>,
    pub(crate) cache_evictions: Family<CacheLabels, Counter>,
    pub(crate) forward_requests: Family<ToLabels, Counter>,
    pub(crate) forward_responses: Family<ToRcodeLabels, Counter>,
    pub(crate) forward_durations: HistogramFamily<ToRcodeLabels>,
    pub(crate) forward_max_concurrent_rejects: Counter,
    pub(crate) forward_client_rejects: Counter,
    pub(crate) forward_coalesced: Counter,
    pub(crate) forward_healthcheck_failures: Family<ToLabels, Counter>,
    pub(crate) forward_healthcheck_broken: Counter,
    pub(crate) cache_served_stale: Family<ServerLabels, Counter>,
    pub(crate) panics: Counter,
    pub(crate) reload_failed: Counter,
    pub(crate) index_services: Gauge,
    pub(crate) index_endpoints: Gauge,
    pub(crate) index_build_seconds: Histogram,
    pub(crate) not_programmed: Counter,
    pub(crate) replayed: Counter,
}

/// CoreDNS's `zone` label: the default Corefile has a single `.:53` server block.
const ZONE: &str = ".";
const VIEW: &str = "";

impl Metrics {
    /// Creates the metrics for the server listening on `listen` (the `server` label is
    /// `dns://<listen>`) and registers them in `registry`.
    pub fn new(listen: std::net::SocketAddr, registry: &mut Registry) -> Self {
        // Leaked once per server: label values must be 'static for the slot tables.
        let server: &'static str = Box::leak(format!("dns://{listen}").into_boxed_str());
        let m = Metrics {
            server,
            requests: Family::default(),
            responses: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            request_sizes: Family::new_with_constructor(size_histogram),
            response_sizes: Family::new_with_constructor(size_histogram),
            do_requests: Family::default(),
            request_slots: (0..2 * 2 * N_TYPES).map(|_| OnceLock::new()).collect(),
            response_slots: (0..N_RCODES * Source::ALL.len()).map(|_| OnceLock::new()).collect(),
            duration_slots: (0..N_TYPES).map(|_| OnceLock::new()).collect(),
            size_slots: Default::default(),
            cache_entries: Family::default(),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
            cache_requests: Family::default(),
            cache_prefetches: Family::default(),
            cache_evictions: Family::default(),
            forward_requests: Family::default(),
            forward_responses: Family::default(),
            forward_durations: Family::new_with_constructor(duration_histogram),
            forward_max_concurrent_rejects: Counter::default(),
            forward_client_rejects: Counter::default(),
            forward_coalesced: Counter::default(),
            forward_healthcheck_failures: Family::default(),
            forward_healthcheck_broken: Counter::default(),
            cache_served_stale: Family::default(),
            panics: Counter::default(),
            reload_failed: Counter::default(),
            index_services: Gauge::default(),
            not_programmed: Counter::default(),
            replayed: Counter::default(),
            index_endpoints: Gauge::default(),
            index_build_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
        };
        // prometheus-client ends every help text with a period of its own: CoreDNS's texts
        // are written here without theirs.
        let r = registry;
        r.register(
            "coredns_dns_requests",
            "Counter of DNS requests made per zone, protocol and family",
            m.requests.clone(),
        );
        r.register("coredns_dns_responses", "Counter of response status codes", m.responses.clone());
        r.register(
            "coredns_dns_request_duration_seconds",
            "Histogram of the time (in seconds) each request took per zone",
            m.durations.clone(),
        );
        r.register(
            "coredns_dns_request_size_bytes",
            "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol",
            m.request_sizes.clone(),
        );
        r.register(
            "coredns_dns_response_size_bytes",
            "Size of the returned response in bytes",
            m.response_sizes.clone(),
        );
        r.register(
            "coredns_dns_do_requests",
            "Counter of DNS requests with DO bit set per zone",
            m.do_requests.clone(),
        );
        r.register("coredns_cache_entries", "The number of elements in the cache", m.cache_entries.clone());
        r.register("coredns_cache_hits", "The count of cache hits", m.cache_hits.clone());
        r.register(
            "coredns_cache_misses",
            "The count of cache misses. Deprecated, derive misses from cache hits/requests counters",
            m.cache_misses.clone(),
        );
        r.register("coredns_cache_requests", "The count of cache requests", m.cache_requests.clone());
        r.register(
            "coredns_cache_prefetch",
            "The number of times the cache has prefetched a cached item",
            m.cache_prefetches.clone(),
        );
        r.register("coredns_cache_evictions", "The count of cache evictions", m.cache_evictions.clone());
        r.register(
            "coredns_forward_requests",
            "Counter of requests made per upstream",
            m.forward_requests.clone(),
        );
        r.register(
            "coredns_forward_responses",
            "Counter of responses received per upstream",
            m.forward_responses.clone(),
        );
        r.register(
            "coredns_forward_request_duration_seconds",
            "Histogram of the time each request took",
            m.forward_durations.clone(),
        );
        r.register(
            "coredns_forward_max_concurrent_rejects",
            "Counter of the number of queries rejected because the concurrent queries were at maximum",
            m.forward_max_concurrent_rejects.clone(),
        );
        r.register(
            "tideway_dns_forward_client_rejects",
            "Forwarded queries refused because their client had its share of the concurrent queries in flight",
            m.forward_client_rejects.clone(),
        );
        r.register(
            "tideway_dns_forward_coalesced",
            "Forwarded queries answered by an identical query already in flight",
            m.forward_coalesced.clone(),
        );
        r.register(
            "coredns_forward_healthcheck_failures",
            "Counter of the number of failed healthchecks",
            m.forward_healthcheck_failures.clone(),
        );
        r.register(
            "coredns_cache_served_stale",
            "The number of requests served from stale cache entries",
            m.cache_served_stale.clone(),
        );
        r.register(
            "coredns_forward_healthcheck_broken",
            "Counter of the number of complete failures of the upstreams",
            m.forward_healthcheck_broken.clone(),
        );
        r.register("coredns_panics", "A metrics that counts the number of panics", m.panics.clone());
        r.register(
            "coredns_reload_failed",
            "Counter of the number of failed reload attempts",
            m.reload_failed.clone(),
        );
        r.register(
            "tideway_dns_not_programmed",
            "ClusterIP answers held back (SERVFAIL) because the asking pod's node had not programmed the Service yet",
            m.not_programmed.clone(),
        );
        r.register(
            "tideway_dns_replayed_answers",
            "Answers a UDP worker sent as a copy of its earlier reply to the same query",
            m.replayed.clone(),
        );
        r.register(
            "tideway_dns_index_services",
            "Services published in the cluster zone",
            m.index_services.clone(),
        );
        r.register(
            "tideway_dns_index_endpoints",
            "Ready endpoint addresses published in the cluster zone",
            m.index_endpoints.clone(),
        );
        r.register(
            "tideway_dns_index_build_seconds",
            "Time to rebuild the cluster zone's record index after a change",
            m.index_build_seconds.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                revision: "",
                goversion: "rust",
            })
            .set(1);
        r.register("coredns_build_info", "A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built", build);
        let plugins: Family<PluginLabels, Gauge> = Family::default();
        for name in [
            "kubernetes",
            "forward",
            "cache",
            "loadbalance",
            "loop",
            "health",
            "ready",
            "prometheus",
            "reload",
        ] {
            plugins.get_or_create(&PluginLabels { server, zone: ZONE, view: VIEW, name }).set(1);
        }
        r.register(
            "coredns_plugin_enabled",
            "A metric that indicates whether a plugin is enabled on per server and zone basis",
            plugins,
        );
        m
    }

    /// The `server` label value.
    pub fn server(&self) -> &'static str {
        self.server
    }

    pub(crate) fn server_labels(&self) -> ServerLabels {
        ServerLabels { server: self.server, zones: ZONE, view: VIEW }
    }

    pub(crate) fn cache_labels(&self, kind: &'static str) -> CacheLabels {
        CacheLabels { server: self.server, r#type: kind, zones: ZONE, view: VIEW }
    }

    /// Records an incoming query.
    pub fn request(&self, proto: Proto, ipv6: bool, qtype: RecordType, size: usize, dnssec_ok: bool) {
        let t = type_index(qtype);
        let slot = ((proto as usize) * 2 + usize::from(ipv6)) * N_TYPES + t;
        self.request_slots[slot]
            .get_or_init(|| {
                self.requests
                    .get_or_create(&RequestLabels {
                        server: self.server,
                        zone: ZONE,
                        view: VIEW,
                        proto: proto.label(),
                        family: if ipv6 { "2" } else { "1" },
                        r#type: type_label(t),
                    })
                    .clone()
            })
            .inc();
        // CoreDNS observes the request's length (its help text speaks of the EDNS0 buffer).
        self.size_histogram(0, proto).observe(size as f64);
        if dnssec_ok {
            self.do_requests.get_or_create(&self.server_labels()).inc();
        }
    }

    /// Records a response: its code, who wrote it, its size and how long the query took.
    pub fn response(
        &self,
        proto: Proto,
        qtype: RecordType,
        rcode: ResponseCode,
        source: Source,
        size: usize,
        seconds: f64,
    ) {
        let r = rcode_index(rcode);
        let slot = r * Source::ALL.len() + source as usize;
        self.response_slots[slot]
            .get_or_init(|| {
                self.responses
                    .get_or_create(&ResponseLabels {
                        server: self.server,
                        zone: ZONE,
                        view: VIEW,
                        rcode: RCODES.get(r).map_or("OTHER", |(_, l)| l),
                        plugin: source.label(),
                    })
                    .clone()
            })
            .inc();
        let t = type_index(qtype);
        self.duration_slots[t]
            .get_or_init(|| {
                self.durations
                    .get_or_create(&TypeLabels {
                        server: self.server,
                        zone: ZONE,
                        view: VIEW,
                        r#type: type_label(t),
                    })
                    .clone()
            })
            .observe(seconds);
        self.size_histogram(1, proto).observe(size as f64);
    }

    fn size_histogram(&self, which: usize, proto: Proto) -> &Histogram {
        self.size_slots[which][proto as usize].get_or_init(|| {
            let family = if which == 0 { &self.request_sizes } else { &self.response_sizes };
            family
                .get_or_create(&SizeLabels {
                    server: self.server,
                    zone: ZONE,
                    view: VIEW,
                    proto: proto.label(),
                })
                .clone()
        })
    }
}

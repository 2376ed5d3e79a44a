//! Churn at scale (`make bench-churn`; root): the agent, the DNS server and the operator, as
//! `tideway` processes in a network namespace of their own, read a cluster of `SCALES`
//! Services x 10 endpoints (default 10,000 and 100,000) from an API server while its
//! endpoints change at each of `RATES` changes a second (default 10, 100 and 1,000) for
//! `SECONDS` each (default 60): half of the changes turn an endpoint ready or not, four tenths
//! replace a pod with one at a new address, a tenth add or remove a Service with its slice.
//! Modes: nftables at every scale, iptables (the legacy backend) at 10,000 and below (`MODES`
//! narrows them).
//!
//! The API server is the test suite's stand-in (`tideway_tests::fake_api`), the one place this
//! benchmark keeps an imitation: the real API server and etcd on these two cores beside the
//! three components would measure themselves, not them. The components reach it through their
//! Kubernetes watch path, as in a cluster: every change is a watch event they decode.
//!
//! Printed per mode, scale and rate: each component's CPU (share of one core over the churn,
//! the `iptables-restore` it ran included) and RSS; the agent's event -> kernel latency (its `tideway_network_programming_duration_seconds`
//! histogram, from each slice's `endpoints.kubernetes.io/last-change-trigger-time` to the sync
//! that programmed it: bucket bounds, 1 ms doubling) and the full syncs the churn caused (the
//! drift check is off: `--sync-period 1h`); the DNS server's event -> answered latency (a
//! prober asks for a name each change makes appear, at most 20 a second, every millisecond
//! until it answers); the API writes per second the components made; how late the writer of
//! the changes was; and how long after the last change the agent had nothing pending.
//! `MIN_SYNC` is the agent's `--min-sync-period` (default 50ms; kube-proxy's and the agent's
//! default of 1 s would put event -> kernel near a second by design).
//!
//! With `FLOOD` (queries a second), the agent runs its node-local DNS listener and each rate
//! is measured again while dnsperf floods that listener with random names (`churn/flood.rs`).
//!
//! Then the first view from the real API server at 100,000 Services (`FIRST_VIEW`; see
//! `churn/first_view.rs`): streamed, and listed in pages, each component's RSS peak beside its
//! steady RSS.

#![allow(clippy::print_stdout)]

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use tideway_tests::fake_api::Account;
use tideway_tests::netns::{Netns, is_root};

#[path = "churn/changes.rs"]
mod changes;
#[path = "churn/etcd_seed.rs"]
mod etcd_seed;
#[path = "churn/first_view.rs"]
mod first_view;
#[path = "churn/flood.rs"]
mod flood;
#[path = "churn/observe.rs"]
mod observe;
#[path = "churn/real.rs"]
mod real;
#[path = "../tests/support/mod.rs"]
mod support;

use changes::{Cluster, ENDPOINTS, Kind, NODE};
use observe::{Answered, Buckets};
use real::{Real, Server, Standin};
use tideway_tests::metrics::{http_get, value as metric};

/// The components' network namespace.
const NS: &str = "twchurn";
const AGENT_METRICS: &str = "127.0.0.1:10249";
const DNS_SERVER: &str = "127.0.0.1:5353";
const DNS_METRICS: &str = "127.0.0.1:9153";
const OPERATOR_HTTP: &str = "127.0.0.1:18080";
/// The agent's histogram of event -> kernel.
const PROGRAMMING: &str = "tideway_network_programming_duration_seconds";
const FULL_SYNCS: &str = "kubeproxy_sync_full_proxy_rules_duration_seconds_count";
/// The scale and rate repeated on the real API server (`CROSS_CHECK=0` skips it).
const CROSS_CHECK: (usize, usize) = (10_000, 100);
/// At most this many DNS probes a second.
const PROBE_EVERY: Duration = Duration::from_millis(50);

fn env_list(key: &str, default: &str) -> Vec<String> {
    let v = std::env::var(key).unwrap_or_else(|_| default.into());
    v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn numbers(key: &str, default: &str) -> Vec<usize> {
    let mut out: Vec<usize> = env_list(key, default)
        .iter()
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{key}: {s:?} is not a number")))
        .collect();
    out.sort_unstable();
    out
}

/// The three components, running, and what they read.
struct Rig {
    // Dropped first: the components stop before their server.
    server: Box<dyn Server>,
    ns: Netns,
    dir: PathBuf,
    cluster: Option<Cluster>,
    procs: Vec<(&'static str, Child)>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        for (_, p) in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls inside `ns` until `done` holds (at most 600 s: 100,000 Services take a while).
fn wait_in(ns: &Netns, what: &'static str, done: impl Fn() -> bool + Send + 'static) {
    ns.wait_for(what, (Duration::from_secs(600), Duration::from_millis(200)), move || done().then_some(()));
}

/// The seed of the cluster of `n` Services.
fn seed(n: usize) -> u64 {
    0x5eed_0000 + n as u64
}

/// The arguments that read the API server with kubeconfig `kc`.
fn source(kc: &str) -> [String; 4] {
    ["--source".to_string(), "kubernetes".into(), "--kubeconfig".into(), kc.into()]
}

/// The agent's arguments: programming `mode`, the drift check off, its metrics and REST API on
/// [`AGENT_METRICS`].
fn agent_args(mode: &str, min_sync: &str, kc: &str) -> Vec<String> {
    let node_dns = (flood::rate() > 0).then_some("--node-local-dns");
    ["agent", "--node", NODE, "--mode", mode, "--min-sync-period", min_sync]
        .into_iter()
        .chain(["--sync-period", "1h", "--metrics-bind-address", AGENT_METRICS])
        .chain(["--healthz-bind-address", "127.0.0.1:10256", "--api-anonymous-reads"])
        .chain(node_dns)
        .map(String::from)
        .chain(source(kc))
        .collect()
}

/// The DNS server's arguments: serving on [`DNS_SERVER`], metrics on [`DNS_METRICS`], an
/// upstream never asked.
fn dns_args(kc: &str) -> Vec<String> {
    ["dns", "--listen", DNS_SERVER, "--metrics-listen", DNS_METRICS]
        .into_iter()
        .chain(["--health-listen", "none", "--ready-listen", "none", "--upstream", "127.0.0.1:9"])
        .chain(["--no-loop-probe"])
        .map(String::from)
        .chain(source(kc))
        .collect()
}

/// The agent's status says it synced and programmed `n` Service ports.
fn agent_synced(n: usize) -> bool {
    let status = http_get(AGENT_METRICS, "/api/v1/status").unwrap_or_default();
    let ports = status.split("\"service_ports\":").nth(1).and_then(|s| s.split(',').next());
    status.contains("\"synced\":true") && ports == Some(n.to_string().as_str())
}

/// The DNS server's index holds `n` Services.
fn dns_synced(n: usize) -> bool {
    let body = http_get(DNS_METRICS, "/metrics").unwrap_or_default();
    metric(&body, "tideway_dns_index_services") == Some(n as f64)
}

/// The three components on `n` Services, reading the stand-in API server, or the real one when
/// `real`.
fn start(n: usize, mode: &str, min_sync: &str, real: bool) -> Rig {
    let ns = Netns::create(NS);
    let dir = std::env::temp_dir().join(NS);
    std::fs::create_dir_all(&dir).expect("dir");
    let cluster = Cluster::new(n, seed(n));
    let server: Box<dyn Server> = if real {
        Box::new(Real::start(&ns, cluster.objects()))
    } else {
        let standin = Standin::start(&ns, cluster.objects());
        if flood::rate() > 0 {
            // The chart's grants with the listener on (the agent then reads Namespaces).
            standin.chart_values("custom-dns");
        }
        Box::new(standin)
    };
    let kubeconfig = |account| server.kubeconfig(&dir, account).display().to_string();
    let (agent_kc, dns_kc, operator_kc) =
        (kubeconfig(Account::Agent), kubeconfig(Account::Dns), kubeconfig(Account::Operator));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tideway"));
    let agent = agent_args(mode, min_sync, &agent_kc);
    let dns = dns_args(&dns_kc);
    let operator: Vec<String> = ["operator", "--http-bind-address", OPERATOR_HTTP]
        .into_iter()
        .map(String::from)
        .chain(source(&operator_kc))
        .collect();
    let backend = [("TIDEWAY_IPTABLES_BACKEND", "legacy")];
    let mut procs = Vec::new();
    for (name, args) in [("agent", agent), ("dns", dns), ("operator", operator)] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = dir.join(format!("{name}.log"));
        procs.push((name, ns.spawn(bin, &args, &log, &backend)));
    }
    let rig = Rig { server, ns, dir, cluster: Some(cluster), procs };
    let t = Instant::now();
    // A real API server has a Service of its own: `default/kubernetes`.
    let expected = n + usize::from(real);
    wait_in(&rig.ns, "the agent never synced every Service", move || agent_synced(expected));
    wait_in(&rig.ns, "the DNS server never published every Service", move || dns_synced(expected));
    wait_in(&rig.ns, "the operator never became ready", || {
        http_get(OPERATOR_HTTP, "/readyz").is_ok_and(|b| b.starts_with("HTTP/1.1 200") || b.contains(" 200 "))
    });
    let on = if real { " (the real API server)" } else { "" };
    println!(
        "{mode}, {n} Services x {ENDPOINTS} endpoints{on}: all three synced {:.1} s after start",
        t.elapsed().as_secs_f64()
    );
    rig
}

/// What one rate's churn measured.
struct Figures {
    changes: usize,
    /// How long the writer took to make them (longer than planned when it fell behind).
    wall: f64,
    cpu: Vec<f64>,
    rss_mib: Vec<f64>,
    programming: Buckets,
    slice_changes: usize,
    full_syncs: f64,
    answered: Vec<Duration>,
    unanswered: usize,
    writes: usize,
    late: Duration,
    caught_up: Option<Duration>,
}

/// The churn's writes: `rate` changes a second for `seconds`, with probes of the names they
/// make appear. Returns the changes made by kind, how late the latest write was, and the
/// probes' results.
fn drive(
    server: &mut dyn Server,
    cluster: &mut Cluster,
    rate: usize,
    seconds: usize,
) -> (Vec<Kind>, Duration, Vec<Answered>) {
    let (tx, rx) = mpsc::channel();
    let (start, mut kinds, mut late, mut last_probe, mut probes) =
        (Instant::now(), Vec::new(), Duration::ZERO, None::<Instant>, 0usize);
    for k in 0..rate * seconds {
        let due = start + Duration::from_secs_f64(k as f64 / rate as f64);
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        } else {
            late = late.max(now - due);
        }
        let mut change = cluster.next(SystemTime::now());
        let appears = change.appears.take();
        kinds.push(change.kind);
        server.write(change);
        let written = Instant::now();
        if let Some(name) = appears
            && last_probe.is_none_or(|t| t.elapsed() >= PROBE_EVERY)
        {
            last_probe = Some(written);
            observe::probe(NS, DNS_SERVER, name, written, probes as u16, tx.clone());
            probes += 1;
        }
    }
    drop(tx);
    let results = rx.iter().take(probes).collect();
    (kinds, late, results)
}

/// Each component's CPU seconds, with the children it waited for (`iptables-restore`, `nft`).
fn cpu(rig: &Rig) -> Vec<f64> {
    rig.procs.iter().map(|(_, p)| tideway_tests::procfs::cpu_seconds(p.id(), true)).collect()
}

fn agent_metrics(rig: &Rig) -> String {
    rig.ns.run(|| http_get(AGENT_METRICS, "/metrics").unwrap_or_default())
}

fn churn(rig: &mut Rig, rate: usize, seconds: usize) -> Figures {
    std::thread::sleep(Duration::from_secs(2));
    let before = agent_metrics(rig);
    rig.server.mark();
    let (cpu_before, t0) = (cpu(rig), Instant::now());
    let mut cluster = rig.cluster.take().expect("cluster");
    let (kinds, late, results) = drive(rig.server.as_mut(), &mut cluster, rate, seconds);
    rig.cluster = Some(cluster);
    let wall = t0.elapsed().as_secs_f64();
    let cpu_after = cpu(rig);
    let ended = Instant::now();
    let caught_up = rig.ns.run(move || {
        while ended.elapsed() < Duration::from_secs(60) {
            let body = http_get(AGENT_METRICS, "/metrics").unwrap_or_default();
            let pending = [
                "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                "kubeproxy_sync_proxy_rules_service_changes_pending",
            ];
            if pending.iter().all(|p| metric(&body, p) == Some(0.0)) {
                return Some(ended.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    });
    // Read once the agent caught up, so that the changes still pending when the churn ended
    // (a sync's worth; more in iptables mode, where a sync takes over a second) are measured too.
    let after = agent_metrics(rig);
    let writes = rig.server.component_writes();
    let mut answered: Vec<Duration> = results.iter().flatten().copied().collect();
    answered.sort();
    Figures {
        changes: kinds.len(),
        wall,
        cpu: cpu_before.iter().zip(&cpu_after).map(|(b, a)| (a - b) / wall * 100.0).collect(),
        rss_mib: rig.procs.iter().map(|(_, p)| tideway_tests::procfs::rss_mib(p.id())).collect(),
        programming: Buckets::read(&after, PROGRAMMING).since(&Buckets::read(&before, PROGRAMMING)),
        slice_changes: kinds.iter().filter(|k| **k != Kind::Removed).count(),
        full_syncs: metric(&after, FULL_SYNCS).unwrap_or(0.0) - metric(&before, FULL_SYNCS).unwrap_or(0.0),
        unanswered: results.len() - answered.len(),
        answered,
        writes,
        late,
        caught_up,
    }
}

fn pick(sorted: &[Duration], q: f64) -> String {
    match sorted.len() {
        0 => "-".into(),
        n => format!("{:.1}", sorted[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1000.0),
    }
}

fn report(mode: &str, n: usize, rate: usize, seconds: usize, on: &str, f: &Figures) {
    let share = |i: usize| format!("{:.1} % of a core, RSS {:.0} MiB", f.cpu[i], f.rss_mib[i]);
    let p = &f.programming;
    println!(
        "{mode} {n} Services{on}, {rate} changes/s for {seconds} s ({} changes in {:.1} s; writer at most {} ms late):\n  \
         agent: {}; event -> kernel p50 {} ms, p99 {}, max {} ({} of {} slice changes measured); \
         full syncs {}; nothing pending {}\n  \
         dns: {}; event -> answered p50 {} ms, p99 {}, max {} ({} probes, {} unanswered within {} s)\n  \
         operator: {}; the components' API writes {:.2}/s",
        f.changes,
        f.wall,
        f.late.as_millis(),
        share(0),
        p.quantile_ms(0.5),
        p.quantile_ms(0.99),
        p.quantile_ms(1.0),
        p.count(),
        f.slice_changes,
        f.full_syncs,
        f.caught_up
            .map_or("after 60 s: behind".into(), |d| format!("{} ms after the last change", d.as_millis())),
        share(1),
        pick(&f.answered, 0.5),
        pick(&f.answered, 0.99),
        pick(&f.answered, 1.0),
        f.answered.len() + f.unanswered,
        f.unanswered,
        observe::PROBE_PATIENCE.as_secs(),
        share(2),
        f.writes as f64 / seconds as f64,
    );
}

fn main() {
    if !is_root() {
        println!("churn: needs root (network namespaces, the agent's rules); nothing measured");
        return;
    }
    let scales = numbers("SCALES", "10000,100000");
    let rates = numbers("RATES", "10,100,1000");
    let seconds = numbers("SECONDS", "60")[0].max(1);
    let modes = env_list("MODES", "nftables,iptables");
    let min_sync = std::env::var("MIN_SYNC").unwrap_or_else(|_| "50ms".into());
    assert!(scales.iter().all(|n| (1..=200_000).contains(n)), "SCALES: 1 to 200,000 Services");
    println!("churn: agent --min-sync-period {min_sync}, drift check off; {seconds} s a rate");
    for &n in &scales {
        for mode in &modes {
            // iptables at 100,000 Services takes minutes a sync: measured at 10,000 and below.
            if mode == "iptables" && n > 10_000 {
                continue;
            }
            let mut rig = start(n, mode, &min_sync, false);
            let queries = flood::queries(&rig.dir, seed(n));
            for &rate in &rates {
                let f = churn(&mut rig, rate, seconds);
                report(mode, n, rate, seconds, "", &f);
                if flood::rate() > 0 {
                    let dnsperf = flood::start(NS, &queries, flood::rate(), seconds + 2);
                    let f = churn(&mut rig, rate, seconds);
                    let said = flood::finish(dnsperf);
                    let on =
                        format!(" with {} random names/s at {} ({said})", flood::rate(), flood::LISTENER);
                    report(mode, n, rate, seconds, &on, &f);
                }
            }
        }
    }
    // The cross-check: 10,000 Services at 100 changes a second on the real API server.
    if std::env::var("CROSS_CHECK").as_deref() != Ok("0") {
        let (n, rate) = (CROSS_CHECK.0, CROSS_CHECK.1);
        let mut rig = start(n, "nftables", &min_sync, true);
        let f = churn(&mut rig, rate, seconds);
        report("nftables", n, rate, seconds, " on the real API server", &f);
    }
    let first = numbers("FIRST_VIEW", "100000")[0];
    if first > 0 {
        first_view::run(first, seed(first));
    }
}

//! kube-proxy against Tideway's agent in the same run (root; `make bench-peers`): the real
//! kube-proxy (`make peers`) with the configuration kubeadm's kube-proxy addon writes, and
//! `tideway agent` with its defaults, each on node-a of a twin cluster of its own
//! (`cli/tests/support/twin.rs`), each reading the same real API server (`make kube`) with its
//! own ServiceAccount's token, measured the same way, in nftables mode and in iptables mode:
//!
//! * full sync: the proxy started on a node whose kernel holds none of its rules, to the last of
//!   `SCALES` Services (default 1,000 and 10,000) × 10 endpoints answering a connection from a
//!   pod on that node (the 10 endpoints are the same 10 pods, on the other node);
//! * at rest after that sync: the proxy's RSS, and its CPU share (children included: the
//!   `iptables-restore` and `nft` runs) over 30 s;
//! * at the smallest scale, network programming: a Service and its EndpointSlice created with
//!   `kubectl apply`, from kubectl's exit to the ClusterIP answering the pod (p50 and p99 over
//!   `SERVICES` Services, default 100, one at a time, each 1.1 s after the last answered, past
//!   both proxies' `minSyncPeriod`); and one endpoint change (the slice patched to another pod)
//!   to the new pod answering (p50 and the slowest of 20 changes, as far apart).
//!
//! Times are known to about 10 ms: a connection is tried every 2 ms and waits 10 ms at most.
//! The layer-2 part (`l2.rs`: MetalLB's failover against Tideway's, in a kube lab) comes first,
//! the DNS part (`dns.rs`) last; `PARTS=proxy`, `PARTS=dns` or `PARTS=l2` runs one.
//!
//! Both proxies keep their own defaults (both `minSyncPeriod` 1 s). In iptables mode both use the
//! legacy backend: kube-proxy through `iptables*` names in its PATH that are the legacy tools,
//! the agent through `TIDEWAY_IPTABLES_BACKEND=legacy` (`iptables-nft-restore` takes minutes at
//! 10,000 Services, for either). The EndpointSlices are written by the benchmark, not by the
//! EndpointSlice controller: the proxies read the same objects either way, and the controller's
//! own pace at 10,000 Services is not what is measured.
//!
//! `cargo bench -p tideway --bench peers` (`MODES=nftables` for one mode, `SCALES=1000` for one
//! scale, `SERVICES=20` for fewer programming samples).

#![allow(clippy::print_stdout)]

#[path = "lab/arp_probe.rs"]
mod arp_probe;
#[path = "peers/dns.rs"]
mod dns;
#[path = "peers/l2.rs"]
mod l2;
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::real_api::{Api, battery, merge};
use support::twin::{Proxy, Twin, kubeadm_addon};
use tideway_lab::kube::apply::Applier;
use tideway_tests::netns::{Cluster, Netns, is_root};
use tideway_tests::procfs;

const ENDPOINTS: u8 = 10;
/// The endpoint change's Service, written with the rest (its slice names one pod at a time).
const CHANGE: &str = "10.96.199.1:80";
/// The pause after a change answered before the next: longer than both proxies' `minSyncPeriod`
/// (1 s), so that each change is programmed as it comes, not held back by the sync before.
const PROGRAMMING_GAP: Duration = Duration::from_millis(1100);
/// How long a try waits for its connection: the resolution of every time measured here.
const CONNECT_WITHIN: Duration = Duration::from_millis(10);

fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

/// What one proxy did in one mode at one scale.
struct Figures {
    sync: Duration,
    rss_mib: f64,
    cpu_percent: f64,
    programming: Option<(Duration, Duration)>,
    change: Option<(Duration, Duration)>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    assert!(is_root(), "the benchmark needs root (network namespaces, the kernel's rules)");
    let modes = list("MODES", "nftables,iptables");
    let mut scales: Vec<usize> =
        list("SCALES", "1000,10000").iter().map(|s| s.parse().expect("SCALES")).collect();
    scales.sort_unstable();
    scales.dedup();
    let samples: usize = std::env::var("SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    // Service i's address is 10.96.16.0 + i, below 10.96.199.1 (the endpoint change's) and
    // 10.96.200.1.. (the programming samples').
    assert!(scales.iter().all(|&s| (1..=40_000).contains(&s)), "SCALES from 1 to 40,000");
    assert!((1..=250).contains(&samples), "SERVICES from 1 to 250");
    for tool in ["dig", "dnsperf", "taskset"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        assert!(found.is_ok_and(|o| o.status.success()), "{tool} is missing (make bench-peers installs it)");
    }
    kubectl_present();
    let parts = list("PARTS", "proxy,dns,l2");
    if parts.iter().any(|p| p == "l2") {
        let trials = std::env::var("TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
        l2::run(trials);
    }
    if !parts.iter().any(|p| p == "proxy" || p == "dns") {
        return;
    }
    let mut api = Api::start("peerbench", &[]).await;
    let kubeadm = kubeadm_addon(&mut api).await;
    let base: Vec<Value> = battery("")
        .into_iter()
        .filter(|o| ["Node", "ProxyConfig"].contains(&o["kind"].as_str().unwrap_or_default()))
        .chain([json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})])
        .chain(service("chg", CHANGE, &[0]))
        .collect();
    api.applier.apply_all(base).await.unwrap();
    let legacy = legacy_tools();
    let mut written = 0;
    let mut table = Vec::new();
    for (k, &scale) in scales.iter().enumerate() {
        let t = Instant::now();
        write_services(&api, written, scale).await;
        println!("{scale} Services × {ENDPOINTS} endpoints written in {:.1} s", t.elapsed().as_secs_f64());
        written = scale;
        for mode in modes.iter().filter(|_| parts.iter().any(|p| p == "proxy")) {
            merge(
                &api.admin,
                "/apis/tideway.io/v1alpha1/proxyconfigs/default",
                json!({"spec": {"mode": mode}}),
            )
            .await;
            for proxy in [Proxy::KubeProxy(kubeadm.clone()), Proxy::Tideway(Vec::new())] {
                let detailed = (k == 0).then_some(samples);
                let f = measure(&api, &proxy, mode, scale, detailed, &legacy).await;
                println!("{scale} {mode} {}: {}", proxy.name(), shown(&f));
                table.push((scale, mode.clone(), proxy.name(), f));
            }
        }
    }
    print_ratios(&table);
    if parts.iter().any(|p| p == "dns") {
        print_dns(&dns::measure(&mut api, written).await, written);
    }
}

/// The DNS servers' figures, medians over the rounds, and Tideway's over CoreDNS's.
fn print_dns(served: &[dns::Served], services: usize) {
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "\n| {services} Services | coredns | tideway | ratio (above 1: Tideway better) |\n|---|---|---|---|"
    );
    let [c, t] = served else { return };
    let row = |name: &str, a: f64, b: f64, better_high: bool| {
        let ratio = if better_high { b / a.max(1e-9) } else { a / b.max(1e-9) };
        println!("| {name} | {a:.2} | {b:.2} | {ratio:.2} |");
    };
    row("queries per second, saturating", median(&c.qps), median(&t.qps), true);
    row("answers per server CPU-second", median(&c.per_cpu_second), median(&t.per_cpu_second), true);
    row("p50 ms at the fixed rate", median(&c.p50_ms), median(&t.p50_ms), false);
    row("p99 ms at the fixed rate", median(&c.p99_ms), median(&t.p99_ms), false);
    row("RSS MiB", c.rss_mib, t.rss_mib, false);
    println!("queries lost over every run: coredns {}, tideway {}", c.lost, t.lost);
    for s in served {
        println!("{}: qps {:?}, per CPU-s {:?}, p99 ms {:?}", s.server, s.qps, s.per_cpu_second, s.p99_ms);
    }
}

/// One proxy's run: a twin started, its full sync, its rest, and (`detailed`: that many
/// samples) its programming and endpoint-change latencies.
async fn measure(
    api: &Api,
    proxy: &Proxy,
    mode: &str,
    scale: usize,
    detailed: Option<usize>,
    legacy: &str,
) -> Figures {
    let path = format!("{legacy}:{}", std::env::var("PATH").unwrap_or_default());
    let env: Vec<(&str, &str)> = match (mode, proxy) {
        ("iptables", Proxy::KubeProxy(_)) => vec![("PATH", path.as_str())],
        ("iptables", Proxy::Tideway(_)) => vec![("TIDEWAY_IPTABLES_BACKEND", "legacy")],
        _ => Vec::new(),
    };
    let test = format!("{}{}{}", &proxy.name()[..2], &mode[..2], scale);
    let twin = Twin::start(api, proxy, mode, &test, endpoint_pods, &env).await;
    let last = address(scale - 1);
    let answered =
        tokio::task::block_in_place(|| until_answered(twin.pod(), last, None, Duration::from_secs(900)));
    let at =
        answered.unwrap_or_else(|e| panic!("{} never served {last}: {e}\n{}", proxy.name(), twin.logged()));
    let sync = at - twin.started;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_mib, cpu_percent) = at_rest(twin.proxy.id(), Duration::from_secs(30)).await;
    let mut figures = Figures { sync, rss_mib, cpu_percent, programming: None, change: None };
    if let Some(samples) = detailed {
        figures.programming = Some(programming(api, &twin, samples).await);
        figures.change = Some(endpoint_changes(api, &twin).await);
    }
    figures
}

/// The twin's endpoints: pods e0..e9 on node-b (10.244.2.20–29).
fn endpoint_pods(c: &mut Cluster) {
    for i in 0..ENDPOINTS {
        c.add_pod(1, &format!("e{i}"), 20 + i, 8080);
    }
}

/// Service `i`'s ClusterIP and port: 10.96.16.0 onwards.
fn address(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 96, 16 + (i / 256) as u8, (i % 256) as u8], 80))
}

/// A selectorless Service at `addr` and its slice naming endpoint pods `pods` (ready, on node-b).
fn service(name: &str, addr: &str, pods: &[u8]) -> [Value; 2] {
    let ip = addr.split(':').next().expect("an address");
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|p| json!({"addresses": [format!("10.244.2.{}", 20 + p)], "nodeName": "node-b", "conditions": {"ready": true}}))
        .collect();
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "bench"},
            "spec": {"clusterIP": ip, "ports": [{"name": "p", "port": 80}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": "bench", "labels": {
                "kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": "bench"}},
            "addressType": "IPv4", "ports": [{"name": "p", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints}),
    ]
}

/// Writes Services `from..to` with their slices, eight writers at once.
async fn write_services(api: &Api, from: usize, to: usize) {
    let all: Vec<usize> = (0..ENDPOINTS as usize).collect();
    let pods: Vec<u8> = all.iter().map(|&p| p as u8).collect();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let mut applier = Applier::new(api.admin.clone(), "tideway-bench");
        let pods = pods.clone();
        writers.spawn(async move {
            for i in (from..to).filter(|i| i % 8 == w) {
                let objects = service(&format!("s-{i}"), &address(i).to_string(), &pods);
                applier.apply_all(objects.to_vec()).await.expect("a Service and its slice written");
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
}

/// Connects from `ns` to `dst` until a pod answers (pod `want` when given) or `within` passes:
/// when it answered. A try waits at most 10 ms for the connection (before the rules exist a
/// SYN may be dropped without a word), so the moment is known to about 10 ms.
fn until_answered(
    ns: &Netns,
    dst: SocketAddr,
    want: Option<&str>,
    within: Duration,
) -> Result<Instant, String> {
    let want = want.map(str::to_string);
    ns.run(move || {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            match ask(dst) {
                Ok(name) if want.as_deref().is_none_or(|w| w == name) => return Ok(Instant::now()),
                Ok(name) => last = format!("answered by {name}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Err(last)
    })
}

/// One connection and one line: who answered.
fn ask(dst: SocketAddr) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&dst, CONNECT_WITHIN).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| e.to_string())?;
    s.write_all(b"hi\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
    line.split_whitespace().next().map(str::to_string).ok_or_else(|| format!("answer {line:?}"))
}

/// RSS (MiB) now and CPU share (% of one core, children included) over `window`, of `pid`.
async fn at_rest(pid: u32, window: Duration) -> (f64, f64) {
    let before = procfs::cpu_seconds(pid, true);
    tokio::time::sleep(window).await;
    let used = procfs::cpu_seconds(pid, true) - before;
    (procfs::rss_mib(pid), 100.0 * used / window.as_secs_f64())
}

/// `samples` Services created with `kubectl apply`, one at a time: from kubectl's exit to the
/// ClusterIP answering the pod (p50, p99). They are deleted afterwards.
async fn programming(api: &Api, twin: &Twin, samples: usize) -> (Duration, Duration) {
    let server = api.standalone.cp.host_url();
    let kubeconfig =
        api.standalone.kubeconfig_for("bench-admin", &["kubeadm:cluster-admins"], &server).unwrap();
    let mut took = Vec::new();
    for i in 0..samples {
        let addr = format!("10.96.200.{}:80", i + 1);
        let mut objects = service(&format!("p-{i}"), &addr, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        for o in &mut objects {
            o["metadata"]["labels"]["bench"] = json!("programming");
        }
        let file = twin.c.path("programming.json");
        let items = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        std::fs::write(&file, items.to_string()).unwrap();
        kubectl(&kubeconfig, &["apply", "-f", &file.display().to_string()]);
        let applied = Instant::now();
        let dst = addr.parse().unwrap();
        let answered =
            tokio::task::block_in_place(|| until_answered(twin.pod(), dst, None, Duration::from_secs(30)));
        took.push(answered.unwrap_or_else(|e| panic!("{addr}: {e}\n{}", twin.logged())) - applied);
        tokio::time::sleep(PROGRAMMING_GAP).await;
    }
    kubectl(&kubeconfig, &["delete", "-n", "bench", "services,endpointslices", "-l", "bench=programming"]);
    percentiles(took)
}

/// 20 changes of the `chg` Service's one endpoint (e0, e1, e0, ...): from the patch's answer
/// to the new pod answering the pod (p50, p99).
async fn endpoint_changes(api: &Api, twin: &Twin) -> (Duration, Duration) {
    let dst: SocketAddr = CHANGE.parse().unwrap();
    let mut took = Vec::new();
    for k in 0..20u8 {
        let pod = (k + 1) % 2;
        let [_, slice] = service("chg", CHANGE, &[pod]);
        let path = "/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices/chg-1";
        merge(&api.admin, path, json!({"endpoints": slice["endpoints"]})).await;
        let patched = Instant::now();
        let want = format!("e{pod}");
        let answered = tokio::task::block_in_place(|| {
            until_answered(twin.pod(), dst, Some(&want), Duration::from_secs(30))
        });
        took.push(answered.unwrap_or_else(|e| panic!("{want}: {e}\n{}", twin.logged())) - patched);
        tokio::time::sleep(PROGRAMMING_GAP).await;
    }
    percentiles(took)
}

fn kubectl_program() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

fn kubectl_present() {
    let out = Command::new(kubectl_program()).args(["version", "--client"]).output();
    assert!(out.is_ok_and(|o| o.status.success()), "kubectl is missing (set KUBECTL to one)");
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) {
    let program = kubectl_program();
    let out = Command::new(program).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// A directory whose `iptables*` and `ip6tables*` are the legacy tools (kube-proxy finds them by
/// these names in its PATH).
fn legacy_tools() -> String {
    let dir = std::env::temp_dir().join(format!("tideway-peerbench-legacy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for family in ["iptables", "ip6tables"] {
        for suffix in ["", "-save", "-restore"] {
            let link: PathBuf = dir.join(format!("{family}{suffix}"));
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("/usr/sbin/xtables-legacy-multi", &link).unwrap();
        }
    }
    dir.display().to_string()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn shown(f: &Figures) -> String {
    let pair =
        |p: Option<(Duration, Duration)>| p.map(|(a, b)| format!("p50 {} p99/slowest {}", ms(a), ms(b)));
    format!(
        "full sync {}, at rest {:.1} MiB and {:.2} % of a core{}{}",
        ms(f.sync),
        f.rss_mib,
        f.cpu_percent,
        pair(f.programming).map(|p| format!(", programming {p}")).unwrap_or_default(),
        pair(f.change).map(|p| format!(", endpoint change {p}")).unwrap_or_default(),
    )
}

/// kube-proxy's figure over Tideway's, per scale and mode (above 1: Tideway is faster or smaller).
fn print_ratios(table: &[(usize, String, &str, Figures)]) {
    if table.is_empty() {
        return;
    }
    println!(
        "\n| scale | mode | figure | kube-proxy | tideway | kube-proxy / tideway |\n|---|---|---|---|---|---|"
    );
    for pair in table.chunks(2) {
        let [(scale, mode, _, kp), (_, _, _, tw)] = pair else { continue };
        let row = |name: &str, a: f64, b: f64, unit: &str| {
            // CPU at rest is counted in 10 ms ticks over 30 s: a few ticks make no ratio.
            let floor = if unit == "%" { 0.1 } else { 0.0 };
            let ratio = if a.min(b) > floor { format!("{:.2}", a / b) } else { "–".into() };
            println!("| {scale} | {mode} | {name} | {a:.1} {unit} | {b:.1} {unit} | {ratio} |");
        };
        let msf = |d: Duration| d.as_secs_f64() * 1000.0;
        row("full sync", msf(kp.sync), msf(tw.sync), "ms");
        row("RSS at rest", kp.rss_mib, tw.rss_mib, "MiB");
        row("CPU at rest", kp.cpu_percent, tw.cpu_percent, "%");
        if let (Some(a), Some(b)) = (kp.programming, tw.programming) {
            row("programming p50", msf(a.0), msf(b.0), "ms");
            row("programming p99", msf(a.1), msf(b.1), "ms");
        }
        if let (Some(a), Some(b)) = (kp.change, tw.change) {
            row("endpoint change p50", msf(a.0), msf(b.0), "ms");
            row("endpoint change, slowest", msf(a.1), msf(b.1), "ms");
        }
    }
}

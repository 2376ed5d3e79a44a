//! CoreDNS against `tideway dns` on the benchmark's Services, read from the same API server:
//! CoreDNS (`make peers`) with the Corefile kubeadm's CoreDNS addon writes (its `cache 30`,
//! `loop`, `health`, `ready` and `prometheus` included), changed as
//! `cli/tests/support/coredns.rs` lists; `tideway dns` as `cli/tests/support/dns_server.rs`
//! starts it: one worker, no loop probe, and here its health, ready and metrics listeners off. Each server's threads are held on CPU 1 and dnsperf on CPU 0, as in
//! `bench/dns/run.sh` (whose dnsperf arguments these are), the servers taking turns for
//! `ROUNDS` rounds (default 3):
//!
//! * saturating (`-c 4 -T 1 -q 500`, `DNS_SECONDS` s, default 20): queries per second, and
//!   answers per server CPU-second (the server's utime + stime over the run);
//! * at a fixed rate (`-Q RATE`, default 20,000): p50 and p99 latency of every query, a lost
//!   one counted at dnsperf's timeout (5 s), and how many were lost;
//! * the server's RSS after the runs.
//!
//! The queries: the Services' names, 80 % A of a Service, 10 % SRV of its port, 10 % a name in
//! the Services' namespace that does not exist (NXDOMAIN).

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::coredns::CoreDns;
use crate::support::dns_server::Dns;
use crate::support::patience;
use crate::support::real_api::{Api, get};
use tideway_tests::netns::eventually;
use tideway_tests::procfs::{cpu_seconds, rss_mib};

/// What one server did, over the rounds.
pub(crate) struct Served {
    pub(crate) server: &'static str,
    pub(crate) qps: Vec<f64>,
    pub(crate) per_cpu_second: Vec<f64>,
    pub(crate) p50_ms: Vec<f64>,
    pub(crate) p99_ms: Vec<f64>,
    /// Queries dnsperf counted lost, over every run.
    pub(crate) lost: u64,
    pub(crate) rss_mib: f64,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Both servers measured on `services` Services (`s-0`.. in namespace `bench`).
pub(crate) async fn measure(api: &mut Api, services: usize) -> Vec<Served> {
    api.standalone.kubeadm_addon("coredns").expect("kubeadm's CoreDNS addon");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": "kube-system"}});
    api.applier.delete(&deployment).await.unwrap();
    let held =
        get(&api.admin, "/api/v1/namespaces/kube-system/configmaps/coredns").await.expect("a Corefile");
    let corefile = held["data"]["Corefile"].as_str().expect("a Corefile").to_string();
    let dir = api.standalone.dir.join("dns");
    std::fs::create_dir_all(&dir).unwrap();
    let queries = dir.join("queries.txt");
    std::fs::write(&queries, query_mix(services)).unwrap();

    let coredns_kc = api.standalone.token_kubeconfig("kube-system", "coredns").await.unwrap();
    let tideway_kc = api.standalone.token_kubeconfig("kube-system", "tideway-dns").await.unwrap();
    let (coredns, tideway) = on_cpu(1, || {
        let flags =
            ["--ttl", "30", "--health-listen", "none", "--metrics-listen", "none", "--ready-listen", "none"];
        (CoreDns::start(&corefile, &coredns_kc, &dir), Dns::start(&tideway_kc, &dir, "tideway-dns", &flags))
    });
    let last = format!("s-{}.bench.svc.cluster.local", services - 1);
    for (name, addr) in [("coredns", coredns.addr), ("tideway", tideway.addr)] {
        eventually(patience(120.0), || {
            let out = dig(addr, &last);
            if out.contains("ANSWER: 1") { Ok(()) } else { Err(format!("{name}: {out}")) }
        })
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", coredns.log(), tideway.log()));
    }

    let rounds = env("ROUNDS", 3);
    let seconds = env("DNS_SECONDS", 20);
    let rate = env("RATE", 20_000);
    let mut served = vec![Served::new("coredns"), Served::new("tideway")];
    for _ in 0..rounds {
        for (s, (addr, pid)) in
            [(coredns.addr, coredns.pid()), (tideway.addr, tideway.pid())].into_iter().enumerate()
        {
            let before = cpu_seconds(pid, false);
            let out = dnsperf(addr, &queries, seconds, &["-c", "4", "-T", "1", "-q", "500"]);
            let cpu = cpu_seconds(pid, false) - before;
            let completed = field(&out, "Queries completed:");
            served[s].lost += field(&out, "Queries lost:") as u64;
            served[s].qps.push(field(&out, "Queries per second:"));
            served[s].per_cpu_second.push(completed / cpu.max(0.01));
            let rate = rate.to_string();
            let fixed =
                dnsperf(addr, &queries, seconds, &["-c", "4", "-T", "1", "-q", "500", "-Q", &rate, "-v"]);
            let (p50, p99) = latencies(&fixed);
            served[s].lost += field(&fixed, "Queries lost:") as u64;
            served[s].p50_ms.push(p50);
            served[s].p99_ms.push(p99);
        }
    }
    served[0].rss_mib = rss_mib(coredns.pid());
    served[1].rss_mib = rss_mib(tideway.pid());
    served
}

impl Served {
    fn new(server: &'static str) -> Served {
        Served {
            server,
            qps: vec![],
            per_cpu_second: vec![],
            p50_ms: vec![],
            p99_ms: vec![],
            lost: 0,
            rss_mib: 0.0,
        }
    }
}

/// The query file: per Service, 8 A, 1 SRV and 1 NXDOMAIN question, spread by a stride.
fn query_mix(services: usize) -> String {
    let mut text = String::new();
    for k in 0..services * 10 {
        let i = (k * 7919) % services;
        let line = match k % 10 {
            8 => format!("_p._tcp.s-{i}.bench.svc.cluster.local SRV\n"),
            9 => format!("nosuch-{i}.bench.svc.cluster.local A\n"),
            _ => format!("s-{i}.bench.svc.cluster.local A\n"),
        };
        text.push_str(&line);
    }
    text
}

/// Runs `f` with the calling thread held on `cpu`: what it spawns inherits that.
fn on_cpu<T>(cpu: usize, f: impl FnOnce() -> T) -> T {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    let before = sched_getaffinity(Pid::from_raw(0)).expect("the thread's CPUs");
    let mut one = CpuSet::new();
    one.set(cpu).expect("a CPU");
    sched_setaffinity(Pid::from_raw(0), &one).expect("held on one CPU");
    let out = f();
    sched_setaffinity(Pid::from_raw(0), &before).expect("the CPUs back");
    out
}

fn dig(addr: std::net::SocketAddr, name: &str) -> String {
    let out = Command::new("dig")
        .args([&format!("@{}", addr.ip()), "-p", &addr.port().to_string(), "+tries=1", "+time=2", name, "A"])
        .output()
        .expect("dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// dnsperf against `addr` for `seconds`, on CPU 0: what it printed.
fn dnsperf(addr: std::net::SocketAddr, queries: &std::path::Path, seconds: u64, args: &[&str]) -> String {
    let out = Command::new("taskset")
        .args(["-c", "0", "dnsperf", "-s", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .arg("-d")
        .arg(queries)
        .args(["-l", &seconds.to_string()])
        .args(args)
        .output()
        .expect("dnsperf (make bench-peers installs it)");
    std::thread::sleep(Duration::from_millis(500));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "dnsperf {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The number after `label` in dnsperf's summary.
fn field(out: &str, label: &str) -> f64 {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("dnsperf printed no {label:?}:\n{out}"))
}

/// p50 and p99 (ms) of every query's latency (`-v`: a `>` line per query, the latency last; a
/// lost one, `> T ...`, counts as dnsperf's timeout of 5 s).
fn latencies(out: &str) -> (f64, f64) {
    let mut v: Vec<f64> = out
        .lines()
        .filter(|l| l.starts_with("> "))
        .filter_map(
            |l| if l.starts_with("> T ") { Some(5.0) } else { l.split_whitespace().last()?.parse().ok() },
        )
        .collect();
    assert!(!v.is_empty(), "dnsperf -v printed no answers:\n{}", &out[..out.len().min(2000)]);
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p) as usize] * 1000.0;
    (at(0.5), at(0.99))
}

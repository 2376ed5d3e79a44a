//! Memory and time of whole `tideway agent` and `tideway dns` processes reading the same
//! cluster from a YAML file and from a stand-in API server: one that streams the first view
//! (`sendInitialEvents`), and one that cannot, so the component lists it.

use std::time::{Duration, Instant};

use tideway_tests::fake_api::{Account, BackgroundApi};
use tideway_tests::metrics::{http_get, value as metric};
use tideway_tests::netns::Netns;

use super::{ENDPOINTS, NODE, manifest, ms};

/// Where the measured process reads the cluster from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    File,
    /// The API server streams the first view (`sendInitialEvents`).
    Kubernetes,
    /// The API server cannot stream lists (before Kubernetes 1.32): the component lists.
    KubernetesListed,
}

impl From {
    const ALL: [From; 3] = [From::File, From::Kubernetes, From::KubernetesListed];

    fn tag(self) -> &'static str {
        match self {
            From::File => "file",
            From::Kubernetes => "kube",
            From::KubernetesListed => "kube-listed",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            From::File => "the YAML file",
            From::Kubernetes => "the Kubernetes API (streamed list, then watch)",
            From::KubernetesListed => {
                "the Kubernetes API, a server without streamed lists (list, then watch)"
            }
        }
    }
}

/// The component measured.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Component {
    Agent,
    Dns,
}

/// What one process did: start to synced (the agent's first sync done; the DNS server's zone
/// holding every Service), that first sync or zone build, RSS and peak (KiB), and its CPU at
/// rest (share of one core over [`REST`]; the agent checks for drift every [`CHECK_EVERY`]).
struct ProcessFigures {
    to_synced: Duration,
    sync_ms: String,
    rss_kib: u64,
    peak_kib: u64,
    rest_cpu: f64,
}

/// How long CPU at rest is measured.
const REST: Duration = Duration::from_secs(15);
/// How long a component may take to sync, polled every 100 ms.
const WAIT: (Duration, Duration) = (Duration::from_secs(300), Duration::from_millis(100));
/// The agent's sync period (its drift check) while at rest.
const CHECK_EVERY: &str = "5s";
/// Where the measured DNS server serves its metrics (inside its namespace).
const DNS_METRICS: &str = "127.0.0.1:9153";

/// User plus system CPU time of process `pid`.
fn cpu_time(pid: u32) -> Duration {
    Duration::from_secs_f64(tideway_tests::procfs::cpu_seconds(pid, false))
}

/// The arguments naming the source, with the stand-in API server when there is one.
fn source(
    from: From,
    ns: &Netns,
    dir: &std::path::Path,
    text: &str,
    account: Account,
) -> (Vec<String>, Option<BackgroundApi>) {
    if from == From::File {
        let file = dir.join("cluster.yaml");
        std::fs::write(&file, text).expect("manifest");
        return (vec!["--source".into(), format!("file:{}", file.display())], None);
    }
    let server = BackgroundApi::start(Some(&ns.name));
    server.api.stream_lists(from == From::Kubernetes);
    server.preload_yaml(text);
    let kubeconfig = server.api.kubeconfig(dir, account);
    let args =
        vec!["--source".into(), "kubernetes".into(), "--kubeconfig".into(), kubeconfig.display().to_string()];
    (args, Some(server))
}

/// Starts `component` on `n` Services x 10 endpoints read `from` where it says, and measures
/// it once synced.
fn run(component: Component, n: usize, from: From) -> ProcessFigures {
    let name = if component == Component::Agent { "agent" } else { "dns" };
    let tag = format!("{name}-{}", from.tag());
    let ns = Netns::create(&format!("twbench-rss-{tag}"));
    let dir = std::env::temp_dir().join(format!("twbench-rss-{tag}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let account = if component == Component::Agent { Account::Agent } else { Account::Dns };
    let (source, _server) = source(from, &ns, &dir, &manifest(n), account);
    let log = dir.join(format!("{name}.log"));
    // `TIDEWAY_BIN`: another build to measure (an earlier one, for a before-and-after).
    let other = std::env::var_os("TIDEWAY_BIN").map(std::path::PathBuf::from);
    let bin = other.as_deref().unwrap_or(std::path::Path::new(env!("CARGO_BIN_EXE_tideway")));
    let mut args = match component {
        // The bench reads the agent's status over its REST API, on its own namespace's loopback.
        Component::Agent => {
            vec!["agent", "--node", NODE, "--sync-period", CHECK_EVERY, "--api-anonymous-reads"]
        }
        // Nothing is forwarded: an upstream that is never asked, and no probe of it.
        Component::Dns => vec![
            "dns",
            "--listen",
            "127.0.0.1:5353",
            "--metrics-listen",
            DNS_METRICS,
            "--upstream",
            "127.0.0.1:9",
            "--no-loop-probe",
        ],
    };
    args.extend(source.iter().map(String::as_str));
    let t = Instant::now();
    let mut child = ns.spawn(bin, &args, &log, &[]);
    let sync_ms = match component {
        Component::Agent => {
            let status = ns.wait_for("the agent never synced", WAIT, || {
                http_get("127.0.0.1:10249", "/api/v1/status").ok().filter(|b| b.contains("\"synced\":true"))
            });
            // Every Service read and programmed (one port each), none skipped as invalid.
            let ports = status.split("\"service_ports\":").nth(1).and_then(|s| s.split(',').next());
            assert_eq!(ports, Some(n.to_string().as_str()), "Service ports programmed, of {n}");
            status
                .split("\"last_sync_ms\":")
                .nth(1)
                .and_then(|s| s.split(',').next())
                .unwrap_or("?")
                .to_string()
        }
        Component::Dns => {
            // Every Service in the zone, none skipped as invalid.
            let body = ns.wait_for("the DNS server never published every Service", WAIT, move || {
                let body = http_get(DNS_METRICS, "/metrics").ok()?;
                (metric(&body, "tideway_dns_index_services") == Some(n as f64)).then_some(body)
            });
            metric(&body, "tideway_dns_index_build_seconds_sum")
                .map_or("?".into(), |s| format!("{:.1}", s * 1000.0))
        }
    };
    let to_synced = t.elapsed();
    // Settled: the allocator returns what loading needed.
    std::thread::sleep(Duration::from_secs(2));
    let proc = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let kib = |k: &str| {
        proc.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l[k.len()..].trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let before = cpu_time(child.id());
    std::thread::sleep(REST);
    let rest_cpu = (cpu_time(child.id()) - before).as_secs_f64() / REST.as_secs_f64() * 100.0;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    ProcessFigures { to_synced, sync_ms, rss_kib: kib("VmRSS:"), peak_kib: kib("VmHWM:"), rest_cpu }
}

/// The components `COMPONENTS` names (`agent`, `dns`; both by default).
fn components() -> Vec<Component> {
    let wanted = std::env::var("COMPONENTS").unwrap_or_else(|_| "agent,dns".into());
    let mut out = Vec::new();
    for name in wanted.split(',').map(str::trim) {
        match name {
            "agent" => out.push(Component::Agent),
            "dns" => out.push(Component::Dns),
            other => panic!("COMPONENTS: unknown component {other:?} (agent, dns)"),
        }
    }
    out
}

/// The agent and the DNS server (or those `COMPONENTS` names) reading `n` Services from a
/// file, then from the Kubernetes API (streamed first view, and listed from a server that
/// cannot stream it).
pub(crate) fn memory(n: usize) {
    for component in components() {
        let [file, kube, listed] = From::ALL.map(|from| run(component, n, from));
        let (name, synced, first) = match component {
            Component::Agent => ("agent", "synced", "first sync"),
            Component::Dns => ("dns", "every Service published", "zone builds"),
        };
        for (from, f) in From::ALL.iter().zip([&file, &kube, &listed]) {
            let drift = if component == Component::Agent {
                format!(" (drift check every {CHECK_EVERY})")
            } else {
                String::new()
            };
            println!(
                "tideway {name}, {n} services x {ENDPOINTS} endpoints from {}: RSS {} MiB (peak {} MiB), started to {synced} {}, {first} {} ms, CPU at rest {:.1} % of a core{drift}",
                from.describe(),
                f.rss_kib / 1024,
                f.peak_kib / 1024,
                ms(f.to_synced),
                f.sync_ms,
                f.rest_cpu
            );
        }
        println!(
            "{name}, kubernetes / file: RSS ratio {:.2}, peak ratio {:.2}, started-to-synced ratio {:.2}",
            kube.rss_kib as f64 / file.rss_kib.max(1) as f64,
            kube.peak_kib as f64 / file.peak_kib.max(1) as f64,
            kube.to_synced.as_secs_f64() / file.to_synced.as_secs_f64()
        );
        println!(
            "{name}, streamed / listed: peak ratio {:.2}, started-to-synced ratio {:.2}",
            kube.peak_kib as f64 / listed.peak_kib.max(1) as f64,
            kube.to_synced.as_secs_f64() / listed.to_synced.as_secs_f64()
        );
    }
}

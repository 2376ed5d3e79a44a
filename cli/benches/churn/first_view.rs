//! The first view read from the real API server (`make kube`'s control plane) at
//! `FIRST_VIEW` Services x 10 endpoints (default 100,000; `FIRST_VIEW=0` skips it): the agent
//! and the DNS server, each alone, from a server that streams the first view
//! (`sendInitialEvents`), then from one started with `--feature-gates=WatchList=false`, which
//! refuses to, so that they list the latest in pages. Printed per component: start to synced,
//! the RSS peak during the first view (`VmHWM`), the RSS once settled, their ratio (the target:
//! a peak at most twice the steady RSS), the list pages it asked for, and whether the API
//! server served those lists from its watch cache or from etcd (its own counters).
//!
//! The cluster is written once into a control plane (the first Service through the API, the
//! rest into its etcd as the API server stores them: see `etcd_seed.rs` for why), whose etcd is
//! then stopped cleanly and its data directory kept (under the build's temporary directory,
//! named by the size and a hash of the objects) as a snapshot: every later run starts its two
//! control planes from a copy of it.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;
use tideway_tests::fake_api::Account;
use tideway_tests::netns::Netns;
use tideway_tests::procfs::status_kib;

use super::changes::{Cluster, ENDPOINTS};
use super::real::{Real, Server};

/// The components' network namespace here.
const NS: &str = "twfirst";
/// How long a component rests after its first view before its steady RSS is read.
const SETTLE: Duration = Duration::from_secs(5);

/// How the API server gives the first view.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serving {
    Streamed,
    /// A server without the WatchList feature: lists of the latest, in pages.
    Paged,
}

impl Serving {
    fn describe(self) -> &'static str {
        match self {
            Serving::Streamed => "streamed (sendInitialEvents)",
            Serving::Paged => "listed in pages (a server with WatchList=false)",
        }
    }
}

/// What one component's first view measured.
struct FirstView {
    to_synced: Duration,
    peak_mib: f64,
    steady_mib: f64,
    /// The list requests it made: every page is one.
    pages: usize,
    /// Pages asking for more than a page's worth, or for the watch cache's whole list.
    unpaged: usize,
    /// Lists of EndpointSlices the API server answered from its watch cache, and from etcd.
    from_cache: f64,
    from_etcd: f64,
}

/// Measures the first view at `n` Services (the churn's cluster of that size, `seed`).
pub(crate) fn run(n: usize, seed: u64) {
    let objects = Cluster::new(n, seed).objects();
    let snapshot = snapshot_path(n, &objects);
    let count = objects.len();
    if snapshot.join("member").is_dir() {
        println!(
            "\nfirst view: {n} Services x {ENDPOINTS} endpoints from an etcd snapshot an earlier run wrote"
        );
    } else {
        forget_other_snapshots(n);
        let took = Real::snapshot(objects, &snapshot);
        println!(
            "\nfirst view: {n} Services x {ENDPOINTS} endpoints written to the real API server's etcd: \
             {count} objects in {:.0} s ({:.0} a second); etcd's data kept for later runs",
            took.as_secs_f64(),
            count as f64 / took.as_secs_f64()
        );
    }
    for serving in [Serving::Streamed, Serving::Paged] {
        let ns = Netns::create(NS);
        let dir = std::env::temp_dir().join(NS);
        std::fs::create_dir_all(&dir).expect("dir");
        let flags: &[&str] = match serving {
            Serving::Streamed => &[],
            Serving::Paged => &["--feature-gates=WatchList=false"],
        };
        let t = Instant::now();
        let tag = if serving == Serving::Streamed { "fvs" } else { "fvp" };
        let mut server = Real::from_snapshot(&ns, tag, &snapshot, flags);
        let (apiserver, etcd) = server.control_plane_rss();
        println!(
            "  {}: control plane ready {:.0} s after start from the snapshot (API server RSS {apiserver:.0} MiB, etcd {etcd:.0} MiB)",
            serving.describe(),
            t.elapsed().as_secs_f64()
        );
        for component in ["agent", "dns"] {
            let f = measure(&mut server, &ns, &dir, component, n + 1);
            report(component, &f);
        }
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Starts `component` alone against `server`, waits until it holds all `n` Services, lets it
/// settle, and reads what it used and asked for.
fn measure(server: &mut Real, ns: &Netns, dir: &Path, component: &str, n: usize) -> FirstView {
    let account = if component == "agent" { Account::Agent } else { Account::Dns };
    let kc = server.kubeconfig(dir, account).display().to_string();
    let args = match component {
        "agent" => super::agent_args("nftables", "1s", &kc),
        _ => super::dns_args(&kc),
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let before = server.apiserver_metrics();
    server.mark();
    let t = Instant::now();
    let bin = Path::new(env!("CARGO_BIN_EXE_tideway"));
    let child = Stopped(ns.spawn(bin, &args, &dir.join(format!("{component}-first-view.log")), &[]));
    let pid = child.0.id();
    if component == "agent" {
        super::wait_in(ns, "the agent never synced every Service", move || super::agent_synced(n));
    } else {
        super::wait_in(ns, "the DNS server never published every Service", move || super::dns_synced(n));
    }
    let to_synced = t.elapsed();
    std::thread::sleep(SETTLE);
    let (steady_mib, peak_mib) = (mib(status_kib(pid, "VmRSS")), mib(status_kib(pid, "VmHWM")));
    let lists = server.component_lists();
    let after = server.apiserver_metrics();
    let delta = |name: &str| list_count(&after, name) - list_count(&before, name);
    FirstView {
        to_synced,
        peak_mib,
        steady_mib,
        pages: lists.len(),
        unpaged: lists
            .iter()
            .filter(|uri| !uri.contains("limit=500") || uri.contains("resourceVersion=0"))
            .count(),
        from_cache: delta("apiserver_cache_list_total"),
        from_etcd: delta("apiserver_storage_list_total"),
    }
}

/// A child killed when dropped.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The sum of metric `name`'s samples for EndpointSlices in the API server's `metrics`.
fn list_count(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("endpointslices"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn report(component: &str, f: &FirstView) {
    let ratio = f.peak_mib / f.steady_mib.max(1.0);
    let verdict = if ratio <= 2.0 { "within" } else { "OVER" };
    println!(
        "    {component:<5} synced {:.1} s after start; RSS peak {:.0} MiB, steady {:.0} MiB: {ratio:.2} x \
         ({verdict} the target of 2 x); {} list pages ({} not paged); EndpointSlice lists answered \
         from the watch cache {:.0}, from etcd {:.0}",
        f.to_synced.as_secs_f64(),
        f.peak_mib,
        f.steady_mib,
        f.pages,
        f.unpaged,
        f.from_cache,
        f.from_etcd,
    );
}

/// Where the snapshot of `objects` (`n` Services) is kept: named by the size and a hash of the
/// objects, so that a change to the cluster's shape writes a new one.
fn snapshot_path(n: usize, objects: &[Value]) -> PathBuf {
    let mut hasher = std::hash::DefaultHasher::new();
    for o in objects {
        serde_json::to_string(o).unwrap_or_default().hash(&mut hasher);
    }
    snapshots().join(format!("churn-etcd-{n}-{:016x}", hasher.finish()))
}

fn snapshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Removes the snapshots of `n` Services that an earlier shape of the cluster left.
fn forget_other_snapshots(n: usize) {
    let prefix = format!("churn-etcd-{n}-");
    for entry in std::fs::read_dir(snapshots()).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

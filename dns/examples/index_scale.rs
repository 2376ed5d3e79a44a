//! The DNS index at scale: build time and memory for `SERVICES` Services (default 100,000)
//! x 10 endpoints, as ClusterIP Services (the Service name answers with the ClusterIP; each
//! endpoint still has its own name and PTR record) and as headless Services (the Service name
//! answers with every endpoint: 1,000,000 addresses at the default), with the process's RSS
//! after the cluster model, after the index, and its peak. The build time is the median of
//! `RUNS` (default 7) builds, each after the last index was dropped. Then one Service's
//! change, `UPDATES` times (default 200), each a different Service: an endpoint replaced by a
//! new address, the index updated in place from the view (its part rebuilt, the rest shared);
//! printed as median, p99 and max. Last, churn: `RATE` such changes a second (default 100)
//! for `CHURN_SECONDS` (default 10), each written into the view and the index updated, with
//! the process's CPU time over that span as a share of one core (the index's upkeep and the
//! view's, not a watch's decoding).
//!
//! `cargo run --release -p tideway-dns --example index_scale` (run with
//! `MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0`, as `tideway dns` sets them: freed
//! pages go back to the system at once, so every build faults its memory in again).

#![allow(clippy::print_stdout)]

// The allocator of the `tideway` binary.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, synthetic_slice};
use tideway_dns::records::{IndexSettings, RecordIndex};
use tideway_dns::view::{ClusterView, Touched};

const ENDPOINTS: usize = 10;

fn kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(k: u64) -> String {
    format!("{:.0} MiB", k as f64 / 1024.0)
}

fn cluster(n: usize, headless: bool) -> ClusterView {
    let mut c = ClusterView::new();
    for i in 0..n {
        let (ns, name) = (format!("ns-{}", i / 100), format!("svc-{}", i % 100));
        let svc = mk_service(&ns, &name).port("http", Tcp, 80);
        let svc = if headless {
            svc.headless()
        } else {
            svc.cluster_ip(&format!("10.{}.{}.{}", 96 + i / 62500, i / 250 % 250, i % 250 + 1))
        };
        c.apply_service(svc.build());
        c.apply_endpoint_slice(synthetic_slice(i, ENDPOINTS, None));
    }
    c.take_changes();
    c
}

/// Measures one kind in this process.
fn measure(n: usize, headless: bool) {
    let settings = IndexSettings::new("cluster.local").expect("zone");
    let before = kib("VmRSS:");
    let state = cluster(n, headless);
    let model = kib("VmRSS:");
    let runs: usize = std::env::var("RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(7).max(1);
    let mut times: Vec<Duration> = Vec::new();
    let mut index = None;
    for _ in 0..runs {
        drop(index.take());
        let t = Instant::now();
        index = Some(RecordIndex::build(&state, &settings, 1));
        times.push(t.elapsed());
    }
    times.sort();
    let with_index = kib("VmRSS:");
    let kind = if headless { "headless" } else { "ClusterIP" };
    println!(
        "DNS index, {n} {kind} Services x {ENDPOINTS} endpoints: build {:.0} ms (median of {runs}; \
         {:.0}-{:.0}), RSS view {} + index {} = {} (process peak {})",
        times[runs / 2].as_secs_f64() * 1000.0,
        times[0].as_secs_f64() * 1000.0,
        times[runs - 1].as_secs_f64() * 1000.0,
        mib(model.saturating_sub(before)),
        mib(with_index.saturating_sub(model)),
        mib(with_index),
        mib(kib("VmHWM:")),
    );
    let index = index.expect("built");
    updates(n, headless, &settings, state, index);
}

/// Times one Service's change: the slice of Service `i` gets a new address for one endpoint.
fn updates(
    n: usize,
    headless: bool,
    settings: &IndexSettings,
    mut state: ClusterView,
    mut index: RecordIndex,
) {
    let count: usize = std::env::var("UPDATES").ok().and_then(|s| s.parse().ok()).unwrap_or(200).max(1);
    let mut times: Vec<Duration> = Vec::new();
    for k in 0..count {
        let i = k * 7919 % n;
        state.apply_endpoint_slice(synthetic_slice(i, ENDPOINTS, Some(k % ENDPOINTS)));
        let Touched::Services(touched) = state.take_changes().touched else { panic!("one Service touched") };
        let t = Instant::now();
        index = index.updated(&state, settings, 2, &touched).expect("updated in place");
        times.push(t.elapsed());
    }
    times.sort();
    let kind = if headless { "headless" } else { "ClusterIP" };
    let share = churn(n, settings, &mut state, &mut index);
    println!(
        "DNS index, {n} {kind} Services: {share}; one Service's update {:.2} ms median, p99 {:.2}, max {:.2} \
         ({count} updates, {} parts)",
        times[count / 2].as_secs_f64() * 1000.0,
        times[count * 99 / 100].as_secs_f64() * 1000.0,
        times[count - 1].as_secs_f64() * 1000.0,
        index.part_count(),
    );
}

/// CPU seconds this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, fields 14 and 15 of the whole line; clock ticks of 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

/// `RATE` changes a second for `CHURN_SECONDS`, each applied and indexed: the CPU share.
fn churn(n: usize, settings: &IndexSettings, state: &mut ClusterView, index: &mut RecordIndex) -> String {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d).max(1);
    let (rate, seconds) = (env("RATE", 100), env("CHURN_SECONDS", 10));
    // The changed slices are made beforehand: making them is the benchmark's work, not the
    // server's (a watch hands it decoded objects).
    let changed: Vec<_> = (0..rate * seconds)
        .map(|k| {
            synthetic_slice((k as usize).wrapping_mul(104_729) % n, ENDPOINTS, Some(k as usize % ENDPOINTS))
        })
        .collect();
    let (start, cpu) = (Instant::now(), cpu_seconds());
    for (k, slice) in changed.into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(k as f64 / rate as f64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        state.apply_endpoint_slice(slice);
        let Touched::Services(touched) = state.take_changes().touched else { panic!("one Service touched") };
        *index = index.updated(state, settings, 3, &touched).expect("updated in place");
    }
    let (wall, used) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    format!("{rate} changes/s for {seconds} s took {:.1} % of a core", used / wall * 100.0)
}

fn main() {
    let n: usize = std::env::var("SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    match std::env::var("INDEX_KIND").as_deref() {
        Ok("headless") => measure(n, true),
        Ok(_) => measure(n, false),
        // Each kind in a process of its own, so that neither's peak hides the other's.
        Err(_) => {
            for kind in ["clusterip", "headless"] {
                let exe = std::env::current_exe().expect("own path");
                let status = std::process::Command::new(exe).env("INDEX_KIND", kind).status().expect("run");
                assert!(status.success(), "{kind} failed");
            }
        }
    }
}

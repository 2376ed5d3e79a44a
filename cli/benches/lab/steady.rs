//! The fault-free run: the demo left alone for `STEADY_SECONDS` (default 600) while `LOAD`
//! busy threads (default one per CPU) keep every CPU full, at the production gossip timings.
//! Once a second: svc1's announcer (from `lab status`), every agent's `fenced` (its status
//! API) and a `curl` of svc1's address from `mypc`. A fault-free cluster moves nothing,
//! fences nobody and answers every curl; each count is a false failover.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{announcer, in_ns, status};

/// What the run saw.
#[derive(Debug, Default)]
struct Seen {
    samples: u64,
    moves: Vec<(u64, Option<String>, Option<String>)>,
    fenced: BTreeSet<(u64, String)>,
    failed_curls: u64,
}

/// Keeps `n` threads spinning until the returned flag is set.
fn load(n: usize) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..n {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
    }
    stop
}

/// Whether `node`'s agent says it is fenced (None: no answer).
pub(crate) fn fenced(s: &serde_json::Value, node: &str) -> Option<bool> {
    let label = format!("agent/{node}");
    let url = tideway_lab::certs::url(&label, s["apis"][&label].as_str()?, "/api/v1/status");
    let token = format!("authorization: Bearer {}", s["apiToken"].as_str().unwrap_or_default());
    let out = Command::new("curl")
        .args(["-s", "--max-time", "1", "--cacert", s["caFile"].as_str()?, "-H", &token, &url])
        .output()
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()?["fenced"].as_bool()
}

/// Runs the lab as it is for `seconds` under `threads` busy threads and prints the counts.
pub(crate) fn run(seconds: u64, threads: usize) {
    let stop = load(threads);
    let mypc = format!("tw-{}-h-mypc", crate::NAME);
    let started = Instant::now();
    let mut seen = Seen::default();
    let mut last = announcer("svc1");
    let mut unanswered = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        let tick = Instant::now();
        let at = started.elapsed().as_secs();
        let s = status();
        let nodes: Vec<String> = s["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["name"].as_str().map(str::to_string))
            .collect();
        for node in &nodes {
            match fenced(&s, node) {
                Some(true) => _ = seen.fenced.insert((at, node.clone())),
                Some(false) => {}
                None => unanswered += 1,
            }
        }
        let now = announcer("svc1");
        if now != last {
            seen.moves.push((at, last.clone(), now.clone()));
            last = now;
        }
        if !in_ns(&mypc, &["curl", "-s", "--max-time", "1", "172.18.255.200"]).contains("Hostname:") {
            seen.failed_curls += 1;
        }
        seen.samples += 1;
        std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    println!(
        "fault-free run, {seconds} s under {threads} busy threads, {} samples: svc1 moved {} times {:?}; agents seen fenced {} times {:?}; curls failed {}; agent status unanswered {unanswered}",
        seen.samples,
        seen.moves.len(),
        seen.moves,
        seen.fenced.len(),
        seen.fenced,
        seen.failed_curls
    );
}

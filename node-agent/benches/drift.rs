//! The periodic drift check against a full sync, at 10,000 and 100,000 Services x 10
//! endpoints (nftables). With nothing changed the check reads the ruleset generation only;
//! after another program's transaction it reads the table back over netlink (chains, rule
//! digests, every set element: small sets dumped, large ones asked for by key) and compares
//! it with the program. The full sync plans, renders and applies everything, then learns the
//! rule digests. For reference, the check it replaced
//! listed the table with `nft -j list table` (timed at the first scale only: at 100,000
//! Services it runs for minutes). Root; everything happens in a network namespace of its own.
//!
//! iptables mode (legacy backend) at `IPTABLES_SCALES` (default 10,000): the full sync, which
//! reads the chains back once to learn their digests, and the periodic check, which reads them
//! back (`iptables-save`) and compares rule counts, jumps and each chain's digest.
//!
//! `cargo bench -p tideway-node-agent --bench drift` (`SCALES=10000,100000`, `RUNS=3`,
//! `IPTABLES_SCALES=10000`).

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::{Ruleset, compile};
use tideway_core::program::ProgramState;
use tideway_core::render;
use tideway_core::testing::{mk_node, mk_node_context, synthetic_cluster};
use tideway_node_agent::dataplane::{Dataplane, Desired, Iptables, IptablesBackend, Nftables, Update};
use tideway_tests::netns::Netns;

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What the agent holds between syncs: the plans of `services` x 10 endpoints for this node
/// and what it keeps of their programs.
struct Planned {
    mode: ProxyMode,
    ruleset: Ruleset,
    kept: [ProgramState; 2],
}

impl Planned {
    fn new(services: usize) -> Planned {
        Planned::in_mode(ProxyMode::Nftables, services)
    }

    fn in_mode(mode: ProxyMode, services: usize) -> Planned {
        let mut c = synthetic_cluster(services, 10);
        c.apply(mk_node("node-a", "192.168.0.10", "zone-a"));
        c.take_changes();
        let ruleset = compile(&c, &mk_node_context());
        let programs = IpFamily::ALL.map(|f| render::Renderer::new(mode, &ruleset).lower(f));
        let kept = programs.each_ref().map(ProgramState::new);
        Planned { mode, ruleset, kept }
    }

    /// As the agent gives it to the dataplane (whole programs rendered when asked for).
    fn desired(&self) -> Desired<'_> {
        Desired::new(self.mode, &self.ruleset, self.kept.each_ref())
    }
}

/// Another program's nf_tables transaction (the generation moves on; our table is untouched).
fn touch() {
    let ok = std::process::Command::new("sh")
        .args(["-c", "nft add table ip unrelated && nft delete table ip unrelated"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "nft");
}

struct Figures {
    full: Duration,
    unchanged: Duration,
    content: Duration,
    shallow: Duration,
}

fn scale(services: usize, runs: usize, reference: bool) {
    let ns = Netns::create(&format!("twdrift-{services}"));
    let f = ns.run(move || {
        let mut dp = Nftables::new();
        let mut full = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let p = Planned::new(services);
            dp.apply(&p.desired(), Update::Full).expect("apply");
            full.push(t.elapsed());
        }
        let p = Planned::new(services);
        dp.apply(&p.desired(), Update::Full).expect("apply");
        let mut check = |deep: bool, foreign: bool| {
            let mut times = Vec::new();
            for _ in 0..runs {
                if foreign {
                    touch();
                }
                let t = Instant::now();
                // A check renders the whole programs only when it reads the table back.
                let drift = dp.verify(&p.desired(), deep).expect("verify");
                times.push(t.elapsed());
                assert!(drift.is_empty(), "a clean table read back with drift: {drift:?}");
            }
            median(times)
        };
        let unchanged = check(true, false);
        let content = check(true, true);
        let shallow = check(false, true);
        Figures { full: median(full), unchanged, content, shallow }
    });
    println!(
        "{services} Services x 10: full sync (plan + render + apply + learn) {}; check with nothing changed {:.3} ms; \
         check after another program's transaction {} ({:.2} x the full sync; {} without set elements)",
        ms(f.full),
        f.unchanged.as_secs_f64() * 1e3,
        ms(f.content),
        f.content.as_secs_f64() / f.full.as_secs_f64(),
        ms(f.shallow)
    );
    if reference {
        let t = Instant::now();
        let out = ns.sh("nft -j list table ip tideway | wc -c");
        println!(
            "  for reference, the old check's `nft -j list table`: {} ({} bytes)",
            ms(t.elapsed()),
            out.trim()
        );
    }
}

/// iptables mode, legacy backend: a full sync (restore, then one read-back learning every
/// chain's digest) and the clean periodic check (one `iptables-save` per family, counts, jumps
/// and digests compared).
fn iptables_scale(services: usize, runs: usize) {
    let ns = Netns::create(&format!("twdrift-ipt-{services}"));
    let (full, check) = ns.run(move || {
        let mut dp = Iptables::new(IptablesBackend::Legacy);
        let p = Planned::in_mode(ProxyMode::Iptables, services);
        let (mut full, mut check) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            dp.apply(&p.desired(), Update::Full).expect("apply");
            full.push(t.elapsed());
            let t = Instant::now();
            let drift = dp.verify(&p.desired(), true).expect("verify");
            check.push(t.elapsed());
            assert!(drift.is_empty(), "clean rules read back with drift: {drift:?}");
        }
        (median(full), median(check))
    });
    println!(
        "{services} Services x 10, iptables (legacy): full sync (restore + learn) {}; clean check by count and content {} ({:.2} x the full sync)",
        ms(full),
        ms(check),
        check.as_secs_f64() / full.as_secs_f64()
    );
}

fn main() {
    if !tideway_tests::netns::is_root() {
        eprintln!("the drift benchmark needs root (a network namespace)");
        std::process::exit(2);
    }
    let scales: Vec<usize> = std::env::var("SCALES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs = std::env::var("RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for (i, n) in scales.into_iter().enumerate() {
        scale(n, runs, i == 0);
    }
    let iptables: Vec<usize> = std::env::var("IPTABLES_SCALES")
        .unwrap_or_else(|_| "10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for n in iptables {
        iptables_scale(n, runs);
    }
}

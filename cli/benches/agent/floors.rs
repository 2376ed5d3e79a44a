//! The floors an iptables endpoint change is measured against: what bare `iptables-restore`
//! transactions cost on the agent's table.

use super::*;

/// Transactions timed per floor, at most (the median is taken): as many as the changes, so
/// that both medians are taken over as many samples where the table is small...
const FLOOR_SAMPLES: usize = CHANGES;
/// ...and as many as fit in this time where it is not (at least five).
const FLOOR_BUDGET: Duration = Duration::from_secs(15);

/// What bare `iptables-restore` transactions cost on the agent's table: the floors an
/// endpoint change is measured against.
pub(crate) struct IptablesFloors {
    /// An empty transaction: it only reads the nat table (libiptc skips the write when
    /// nothing changed).
    pub(crate) empty: Duration,
    /// A chain created and deleted: the legacy interface reads, rebuilds and writes the whole
    /// table back, as any real change must.
    pub(crate) smallest: Duration,
    /// One Service's chain flushed and refilled with the rules it has. Every endpoint change
    /// rewrites its Service's chain (the endpoints it jumps to), and on the nft backend a rule
    /// added to a chain that the base chains reach makes the kernel check every chain they
    /// reach at commit, which an empty chain does not.
    pub(crate) chain: Duration,
}

impl IptablesFloors {
    pub(crate) fn measure() -> Self {
        let variant = iptables_variant();
        let tool = format!("iptables-{variant}-restore");
        let time = |input: &str| {
            let started = Instant::now();
            let mut samples = Vec::new();
            while samples.len() < FLOOR_SAMPLES && (samples.len() < 5 || started.elapsed() < FLOOR_BUDGET) {
                let t = Instant::now();
                pipe(&tool, &["--noflush", "--wait"], input);
                samples.push(t.elapsed());
            }
            median(samples)
        };
        IptablesFloors {
            empty: time("*nat\nCOMMIT\n"),
            smallest: time("*nat\n:TWBENCH-FLOOR - [0:0]\n-X TWBENCH-FLOOR\nCOMMIT\n"),
            chain: time(&service_chain_as_it_is(&variant)),
        }
    }
}

/// A transaction that rewrites the first Service chain of the nat table with its own rules.
fn service_chain_as_it_is(variant: &str) -> String {
    let out = Command::new(format!("iptables-{variant}-save")).args(["-t", "nat"]).output().expect("save");
    let saved = String::from_utf8_lossy(&out.stdout);
    let chain = saved
        .lines()
        .find_map(|l| l.strip_prefix("-A KUBE-SVC-")?.split_whitespace().next())
        .map(|c| format!("KUBE-SVC-{c}"))
        .expect("a Service chain in the nat table");
    let prefix = format!("-A {chain} ");
    let rules: Vec<&str> = saved.lines().filter(|l| l.starts_with(&prefix)).collect();
    format!("*nat\n:{chain} - [0:0]\n{}\nCOMMIT\n", rules.join("\n"))
}

//! The floors an iptables endpoint change is measured against: what bare `iptables-restore`
//! transactions cost on the agent's table.

use super::*;

/// Transactions timed per floor (the median is taken).
const FLOOR_SAMPLES: usize = 11;

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
            median(
                (0..FLOOR_SAMPLES)
                    .map(|_| {
                        let t = Instant::now();
                        pipe(&tool, &["--noflush", "--wait"], input);
                        t.elapsed()
                    })
                    .collect(),
            )
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

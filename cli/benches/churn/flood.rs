//! A random-name flood at the agent's node-local DNS listener while the endpoints churn
//! (`FLOOD`, queries a second; the agent then runs with `--node-local-dns`): dnsperf in the
//! components' namespace, asking names no one defined, half under the cluster zone (answered
//! NXDOMAIN from the agent's own index) and half outside it (forwarded to the cluster DNS
//! Service, which this cluster does not have: answered SERVFAIL at once). The agent's event ->
//! kernel with the flood is printed beside the same rate's without it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The listener's address (`--node-local-dns-address`'s default).
pub(crate) const LISTENER: &str = "169.254.20.10";
/// How many names the query file holds (dnsperf goes round it).
const NAMES: usize = 100_000;

/// The flood's queries a second (`FLOOD`; 0, the default, measures no flood).
pub(crate) fn rate() -> usize {
    std::env::var("FLOOD").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Writes the flood's random names (seeded) to a query file in `dir`.
pub(crate) fn queries(dir: &Path, seed: u64) -> PathBuf {
    let mut x = seed | 1;
    let mut next = move || {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut text = String::with_capacity(NAMES * 48);
    for i in 0..NAMES {
        let (label, ns) = (next(), next() % 100);
        if i % 2 == 0 {
            let _ = writeln!(text, "r{label:x}.ns-{ns}.svc.cluster.local A");
        } else {
            let _ = writeln!(text, "r{label:x}.example.org A");
        }
    }
    let path = dir.join("flood-queries.txt");
    std::fs::write(&path, text).expect("the flood's query file");
    path
}

/// dnsperf flooding the listener from namespace `ns` at `rate` queries a second for `seconds`.
pub(crate) fn start(ns: &str, file: &Path, rate: usize, seconds: usize) -> Child {
    let file = file.display().to_string();
    let (rate, seconds) = (rate.to_string(), seconds.to_string());
    let args =
        ["netns", "exec", ns, "dnsperf", "-s", LISTENER, "-d", &file, "-l", &seconds, "-Q", &rate, "-c", "8"];
    Command::new("ip")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dnsperf (make bench-churn installs it)")
}

/// What dnsperf said once it ended: queries sent and answered.
pub(crate) fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("dnsperf ends");
    let text = String::from_utf8_lossy(&out.stdout);
    let figure = |key: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap_or("?")
    };
    format!("{} sent, {} answered", figure("Queries sent:"), figure("Queries completed:"))
}

//! What the benchmark reads while the churn runs: a histogram's quantiles from its buckets,
//! and DNS names asked until they answer.

use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A histogram's cumulative buckets: (upper bound, count).
#[derive(Debug, Clone, Default)]
pub(crate) struct Buckets(Vec<(f64, f64)>);

impl Buckets {
    /// Histogram `name`'s buckets in `body`.
    pub(crate) fn read(body: &str, name: &str) -> Buckets {
        let prefix = format!("{name}_bucket{{le=\"");
        let parse = |l: &str| {
            let rest = l.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        };
        Buckets(body.lines().filter_map(parse).collect())
    }

    /// What was observed since `before`.
    pub(crate) fn since(&self, before: &Buckets) -> Buckets {
        let earlier = |le: f64| before.0.iter().find(|b| b.0 == le).map_or(0.0, |b| b.1);
        Buckets(self.0.iter().map(|&(le, n)| (le, n - earlier(le))).collect())
    }

    pub(crate) fn count(&self) -> f64 {
        self.0.last().map_or(0.0, |b| b.1)
    }

    /// The upper bound of the bucket holding quantile `q`, in ms ("-" when nothing was
    /// observed; "> N" past the last finite bound).
    pub(crate) fn quantile_ms(&self, q: f64) -> String {
        let total = self.count();
        if total == 0.0 {
            return "-".into();
        }
        let at = self.0.iter().find(|b| b.1 >= total * q).map_or(f64::INFINITY, |b| b.0);
        if at.is_finite() {
            return format!("≤{}", ms(at));
        }
        let last = self.0.iter().rev().find(|b| b.0.is_finite()).map_or(0.0, |b| b.0);
        format!(">{}", ms(last))
    }
}

fn ms(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms < 10.0 { format!("{ms}") } else { format!("{ms:.0}") }
}

/// A DNS query for the A record of `name`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// True when `server` answers `name` with at least one record (NOERROR).
fn answered(sock: &UdpSocket, server: &str, id: u16, name: &str) -> bool {
    if sock.send_to(&query(id, name), server).is_err() {
        return false;
    }
    let mut buf = [0u8; 1500];
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        let Ok((n, _)) = sock.recv_from(&mut buf) else { return false };
        if n < 12 || buf[..2] != id.to_be_bytes() {
            continue;
        }
        return buf[3] & 0x0f == 0 && u16::from_be_bytes([buf[6], buf[7]]) > 0;
    }
    false
}

/// How long a name took to answer after its change was written, or `None` when it did not
/// within [`PROBE_PATIENCE`].
pub(crate) type Answered = Option<Duration>;

/// How long a prober asks before it gives up.
pub(crate) const PROBE_PATIENCE: Duration = Duration::from_secs(10);

/// Asks `server` (in network namespace `ns`) for `name` (under the cluster zone) every
/// millisecond from `since` until it answers, on a thread of its own; the result goes to `out`.
pub(crate) fn probe(
    ns: &'static str,
    server: &'static str,
    name: String,
    since: Instant,
    id: u16,
    out: mpsc::Sender<Answered>,
) {
    std::thread::spawn(move || {
        let name = format!("{name}.svc.cluster.local");
        let result = (|| {
            let netns = std::fs::File::open(format!("/run/netns/{ns}")).ok()?;
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            let sock = UdpSocket::bind("127.0.0.1:0").ok()?;
            sock.set_read_timeout(Some(Duration::from_millis(50))).ok()?;
            while since.elapsed() < PROBE_PATIENCE {
                if answered(&sock, server, id, &name) {
                    return Some(since.elapsed());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        })();
        let _ = out.send(result);
    });
}

//! The prober: real packets from a pod, from the node and from outside hosts to one frontend,
//! and what came of them, in words both proxies' outcomes can be compared in.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use std::time::Duration;

use tideway_tests::netns::{Answer, Netns, tcp_from};

use crate::support::http_get;
use crate::support::twin::Twin;

/// Connections tried per frontend: with four endpoints, the chance one of them is never picked
/// in 40 tries is 4 × (3/4)^40, about 4 in 100,000.
const TRIES: usize = 40;

/// Where a probe is sent from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum From {
    /// Pod `c` on node-a (not an endpoint of anything).
    Pod,
    /// node-a itself.
    Node,
    /// The outside client, inside the LB source ranges (192.168.0.100).
    Outside,
    /// The outside client's second address, outside them (203.0.113.5).
    Unlisted,
}

/// What is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Send {
    /// A TCP connection and one line.
    Tcp,
    /// A TCP connection and one line, to a Service with ClientIP affinity: which endpoint does
    /// not matter, that one alone answers does.
    Sticky,
    /// One UDP datagram.
    Udp,
    /// An HTTP GET of `/healthz` (a health check node port): its status code.
    Health,
}

/// What the Kubernetes documentation says a probe meets, whichever proxy serves it: the check
/// that the twin's network carries what it should, so that two proxies failing alike for a
/// reason of the test's own cannot pass as agreeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Expect {
    /// An endpoint answers.
    Answer,
    /// No endpoint answers (no endpoints, no local endpoint for `externalTrafficPolicy: Local`
    /// from outside, a source outside `loadBalancerSourceRanges`).
    Fail,
    /// An endpoint answers in this mode only (a NodePort on the node's 127.0.0.1: iptables mode
    /// with `nodePortAddresses` unset allows it, nftables mode never does).
    AnswerIn(&'static str),
    /// A health check node port's HTTP status.
    Status(u16),
}

/// One frontend probed from one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Probe {
    /// What the frontend is, in words (`np NodePort`).
    pub(crate) what: &'static str,
    pub(crate) from: From,
    pub(crate) to: SocketAddr,
    pub(crate) send: Send,
    pub(crate) expect: Expect,
}

impl Probe {
    /// Whether `outcome` is what the probe expects in `mode`.
    pub(crate) fn met_by(&self, outcome: &Outcome, mode: &str) -> bool {
        let answered = !outcome.answered_by.is_empty();
        match self.expect {
            Expect::Answer => answered,
            Expect::Fail => !answered,
            Expect::AnswerIn(m) => answered == (m == mode),
            Expect::Status(code) => outcome.failed.contains(&format!("HTTP {code}")),
        }
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} from {:?} ({:?})", self.what, self.to, self.from, self.send)
    }
}

/// What came of a probe's tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The endpoints that answered (for a sticky frontend, how many did).
    pub(crate) answered_by: BTreeSet<String>,
    /// The source address the endpoints saw, named (`the outside client`, `node-a`).
    pub(crate) seen_as: BTreeSet<String>,
    /// How the tries that failed failed (`refused`, `no answer`), or a health check's status.
    pub(crate) failed: BTreeSet<String>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "answered by {:?} seeing {:?}, failed {:?}", self.answered_by, self.seen_as, self.failed)
    }
}

/// Sends `probe`'s tries in `twin`. A failing frontend is tried twice, not forty times: failures here are decided by
/// rules, not chance, and each unanswered try waits out its timeout.
pub(crate) fn run(twin: &Twin, probe: &Probe) -> Outcome {
    let c = &twin.c;
    let mut outcome =
        Outcome { answered_by: BTreeSet::new(), seen_as: BTreeSet::new(), failed: BTreeSet::new() };
    if probe.send == Send::Health {
        let code = match http_get(&c.client, probe.to, "/healthz") {
            Ok((code, _)) => format!("HTTP {code}"),
            Err(e) => failure(&e),
        };
        outcome.failed.insert(code);
        return outcome;
    }
    let (ns, src) = match probe.from {
        From::Pod => (twin.pod(), None),
        From::Node => (&c.nodes[0].ns, None),
        From::Outside => (&c.client, None),
        From::Unlisted => (&c.client, Some(IpAddr::from([203, 0, 113, 5]))),
    };
    let mut failures = 0;
    for _ in 0..TRIES {
        let answer = match probe.send {
            Send::Udp => udp(ns, probe.to),
            _ => tcp_from(ns, src, probe.to),
        };
        match answer {
            Ok(a) => {
                outcome.answered_by.insert(a.name);
                outcome.seen_as.insert(named(a.peer.ip()));
            }
            Err(e) => {
                outcome.failed.insert(failure(&e));
                failures += 1;
                if outcome.answered_by.is_empty() && failures >= 2 {
                    break;
                }
            }
        }
    }
    if probe.send == Send::Sticky && !outcome.answered_by.is_empty() {
        outcome.answered_by = BTreeSet::from([format!("{} endpoint(s)", outcome.answered_by.len())]);
        // Which source the endpoint sees depends on the endpoint picked (a local one sees the
        // node's address on the pod's link, a remote one the node's own): the other probes
        // compare the sources.
        outcome.seen_as.clear();
    }
    outcome
}

/// A source address as the test names it.
fn named(ip: IpAddr) -> String {
    match ip.to_string().as_str() {
        "192.168.0.100" => "the outside client".into(),
        "203.0.113.5" => "the unlisted client".into(),
        "192.168.0.10" => "node-a".into(),
        "192.168.0.11" => "node-b".into(),
        "10.244.1.50" => "pod c".into(),
        "127.0.0.1" => "loopback".into(),
        other => other.into(),
    }
}

/// How a try failed, in a word: the prober's errors carry the system's message.
fn failure(error: &str) -> String {
    let e = error.to_lowercase();
    let word = if e.contains("refused") {
        "refused"
    } else if e.contains("timed out") || e.contains("would block") || e.contains("temporarily unavailable") {
        "no answer"
    } else if e.contains("not permitted") {
        // The node's own packet refused in the output path (a drop, or the drop of the
        // original packet that a reject answers): what the sending socket sees.
        "not permitted"
    } else if e.contains("no route") || e.contains("unreachable") {
        "unreachable"
    } else if e.contains("reset") || e.contains("closed") {
        "reset"
    } else {
        return format!("error: {error}");
    };
    word.into()
}

/// One datagram to `dst` from a connected UDP socket, so that an ICMP "port unreachable" (a
/// reject) shows as a refused try, not as a try nobody answered (a drop).
fn udp(ns: &Netns, dst: SocketAddr) -> Result<Answer, String> {
    ns.run(move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        s.connect(dst).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_millis(1500))).map_err(|e| e.to_string())?;
        s.send(b"hi").map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let mut words = text.split_whitespace();
        let (name, peer) = (words.next(), words.next().and_then(|p| p.parse().ok()));
        match (name, peer) {
            (Some(name), Some(peer)) => Ok(Answer { name: name.to_string(), peer }),
            _ => Err(format!("unexpected answer {text:?}")),
        }
    })
}

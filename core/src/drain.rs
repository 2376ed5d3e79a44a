//! IPVS real servers of one virtual server, reconciled with kube-proxy's graceful termination:
//! the decision half. The agent lists what the kernel has (weights, connection counts, how long
//! each removed server has been draining) and carries out what this returns.
//!
//! A real server the program no longer lists stops taking new connections (weight 0) and is
//! deleted once it carries none, or after a time limit. Only TCP drains: UDP and SCTP real
//! servers go at once (their flows move on the next packet, as `expire_nodest_conn` is set).

use std::net::IpAddr;
use std::time::Duration;

use crate::net::Protocol;
use crate::program::RealServer;

/// A real server as the kernel has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Present {
    /// Address.
    pub ip: IpAddr,
    /// Port.
    pub port: u16,
    /// Its weight now.
    pub weight: u32,
    /// Active and inactive connections.
    pub connections: u32,
    /// How long it has been draining, if it is.
    pub draining_for: Option<Duration>,
}

/// What to do with one real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Add it with this weight.
    Add(u32),
    /// Set its weight (listed again, or listed with another weight); it no longer drains.
    Reweight(u32),
    /// Listed as it is; it no longer drains (if it did).
    Keep,
    /// Not listed, still carrying connections: weight 0, and it starts (or goes on) draining.
    Drain,
    /// Not listed and drained (or not TCP, or past the limit): delete it.
    Delete,
}

/// The steps that take `present` to `wanted` for a virtual server of `protocol`, servers that
/// have drained longer than `limit` being deleted whatever they carry. One step per address,
/// present ones first (in their order), then the additions.
pub fn steps(
    protocol: Protocol,
    wanted: &[RealServer],
    present: &[Present],
    limit: Duration,
) -> Vec<((IpAddr, u16), Step)> {
    let want = |ip: IpAddr, port: u16| wanted.iter().find(|w| w.ip == ip && w.port == port);
    let mut out: Vec<((IpAddr, u16), Step)> = present
        .iter()
        .map(|p| {
            let step = match want(p.ip, p.port) {
                Some(w) if w.weight != p.weight => Step::Reweight(w.weight),
                Some(_) => Step::Keep,
                None if protocol != Protocol::Tcp || p.connections == 0 => Step::Delete,
                None if p.draining_for.is_some_and(|d| d > limit) => Step::Delete,
                None => Step::Drain,
            };
            ((p.ip, p.port), step)
        })
        .collect();
    for w in wanted.iter().filter(|w| !present.iter().any(|p| p.ip == w.ip && p.port == w.port)) {
        out.push(((w.ip, w.port), Step::Add(w.weight)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ip;

    fn rs(addr: &str, weight: u32) -> RealServer {
        RealServer { ip: ip(addr), port: 8080, weight }
    }

    fn present(addr: &str, weight: u32, connections: u32, draining_secs: Option<u64>) -> Present {
        Present {
            ip: ip(addr),
            port: 8080,
            weight,
            connections,
            draining_for: draining_secs.map(Duration::from_secs),
        }
    }

    const LIMIT: Duration = Duration::from_secs(900);

    #[test]
    fn removed_tcp_servers_drain_until_idle_or_the_limit() {
        let got = steps(
            Protocol::Tcp,
            &[rs("10.0.0.1", 1), rs("10.0.0.2", 2), rs("10.0.0.9", 1)],
            &[
                present("10.0.0.1", 1, 5, None),
                present("10.0.0.2", 1, 0, None),
                present("10.0.0.3", 1, 4, None),
                present("10.0.0.4", 0, 2, Some(60)),
                present("10.0.0.5", 0, 0, Some(60)),
                present("10.0.0.6", 0, 7, Some(901)),
            ],
            LIMIT,
        );
        let step = |a: &str| got.iter().find(|(k, _)| k.0 == ip(a)).map(|(_, s)| *s);
        assert_eq!(step("10.0.0.1"), Some(Step::Keep));
        assert_eq!(step("10.0.0.2"), Some(Step::Reweight(2)));
        assert_eq!(step("10.0.0.3"), Some(Step::Drain), "carries connections: weight 0 first");
        assert_eq!(step("10.0.0.4"), Some(Step::Drain), "still busy, within the limit");
        assert_eq!(step("10.0.0.5"), Some(Step::Delete), "drained");
        assert_eq!(step("10.0.0.6"), Some(Step::Delete), "past the limit");
        assert_eq!(got.last(), Some(&((ip("10.0.0.9"), 8080), Step::Add(1))));
    }

    #[test]
    fn udp_and_sctp_servers_go_at_once_and_a_listed_server_stops_draining() {
        for protocol in [Protocol::Udp, Protocol::Sctp] {
            let got = steps(protocol, &[], &[present("10.0.0.3", 1, 4, None)], LIMIT);
            assert_eq!(got, [((ip("10.0.0.3"), 8080), Step::Delete)], "{protocol:?}");
        }
        // Listed again while draining at weight 0: back to its weight.
        let got = steps(Protocol::Tcp, &[rs("10.0.0.4", 1)], &[present("10.0.0.4", 0, 2, Some(60))], LIMIT);
        assert_eq!(got, [((ip("10.0.0.4"), 8080), Step::Reweight(1))]);
    }
}

//! Random clusters for property tests: a seeded PRNG, random Services and EndpointSlices
//! covering every Service feature the planner branches on, and random mutations.

use crate::cluster::ClusterState;
use crate::model::{EndpointSlice, Service};
use crate::net::Protocol;

use super::{mk_service, mk_slice};

/// A small deterministic PRNG (xorshift), so failures reproduce from the seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Service `ns/svc{i}`: ClusterIP (sometimes dual-stack), sometimes a UDP port, NodePort or
/// LoadBalancer, a contested externalIP, ETP/ITP Local, affinity, source ranges.
pub fn random_service(rng: &mut Rng, i: u64) -> Service {
    let name = format!("svc{i}");
    let mut b =
        mk_service("ns", &name).cluster_ip(&format!("10.96.0.{}", i + 1)).port("http", Protocol::Tcp, 80);
    if rng.below(4) == 0 {
        b = b.cluster_ip(&format!("fd00:96::{:x}", i + 1));
    }
    if rng.below(3) == 0 {
        b = b.port("dns", Protocol::Udp, 53);
    }
    match rng.below(5) {
        0 => b = b.node_port(30000 + i as u16),
        1 => b = b.node_port(30000 + i as u16).lb_ip(&format!("192.168.0.{}", 200 + i % 20)),
        _ => {}
    }
    if rng.below(4) == 0 {
        // Sometimes two Services claim the same externalIP and port.
        b = b.external_ip(&format!("192.168.0.{}", 150 + rng.below(3)));
    }
    if rng.below(3) == 0 {
        b = b.etp_local();
    }
    if rng.below(5) == 0 {
        b = b.itp_local();
    }
    if rng.below(5) == 0 {
        b = b.affinity(600);
    }
    if rng.below(5) == 0 {
        b = b.source_range(["192.168.0.0/24", "10.1.0.0/16", "172.16.5.0/24"][rng.below(3) as usize]);
    }
    b.build()
}

/// The IPv4 or IPv6 slice of `ns/svc{i}`: up to four endpoints on two nodes, ready, serving
/// and terminating, or not ready.
pub fn random_slice(rng: &mut Rng, i: u64, v6: bool) -> EndpointSlice {
    let name = format!("svc{i}");
    let mut s = mk_slice("ns", &name).name(&format!("{name}-{}", if v6 { "v6" } else { "v4" }));
    s = s.port("http", Protocol::Tcp, 8080).port("dns", Protocol::Udp, 5353);
    for j in 0..rng.below(5) {
        let node = if rng.below(2) == 0 { "node-a" } else { "node-b" };
        let addr = if v6 {
            format!("fd00:244:1::{:x}", 16 * i + j + 1)
        } else {
            format!("10.244.{}.{}", i % 200, j + 1)
        };
        let (ready, serving, terminating) = match rng.below(6) {
            0 => (false, true, true),
            1 => (false, false, false),
            _ => (true, true, false),
        };
        s = s.endpoint(&addr, node, ready, serving, terminating);
    }
    s.build()
}

/// One random change among `services` Services: delete or replace a Service, replace or
/// delete one of its slices.
pub fn mutate(rng: &mut Rng, c: &mut ClusterState, services: u64) {
    let i = rng.below(services);
    match rng.below(5) {
        0 => {
            c.delete::<Service>("ns", &format!("svc{i}"));
        }
        1 | 2 => {
            c.apply(random_service(rng, i));
        }
        _ => {
            let v6 = rng.below(4) == 0;
            if rng.below(6) == 0 {
                c.delete::<EndpointSlice>("ns", &format!("svc{i}-{}", if v6 { "v6" } else { "v4" }));
            } else {
                c.apply(random_slice(rng, i, v6));
            }
        }
    }
}

//! The liveness gossip of a whole cluster in one process, on simulated time: the members the
//! components run (foca with [`super::config`]), their messages delivered after a fixed
//! latency, no sockets. It shows what a cluster of thousands of nodes would see: how many
//! messages each node sends (SWIM's load is constant per node, whatever the cluster size),
//! whether a fault-free run declares anyone down, and how long the cluster takes to learn
//! that one agent died.
//!
//! Every member starts knowing every other as alive (a formed cluster), runs `fault_free`
//! of simulated time, then one member stops answering; the run ends when every other member
//! has declared it down, or `fault_free` later.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use foca::{AccumulatingRuntime, Foca, OwnedNotification, PostcardCodec, Timer};
use rand::SeedableRng;
use tideway_core::liveness::GossipTimings;

use super::config;
use super::member::{Member, Role};

/// What to simulate.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Members (one agent per node).
    pub nodes: usize,
    /// The failure detector's timings.
    pub timings: GossipTimings,
    /// Simulated time before the fault (its first second is not counted in the load).
    pub fault_free: Duration,
    /// One-way delivery time of every message.
    pub latency: Duration,
    /// Seed of every member's random choices.
    pub seed: u64,
}

/// What the simulation saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Members.
    pub nodes: usize,
    /// Messages a member sent per second, on average over the fault-free run.
    pub messages_per_node_second: f64,
    /// The same, for the member that sent most.
    pub busiest_messages_per_node_second: f64,
    /// Bytes a member sent per second, on average.
    pub bytes_per_node_second: f64,
    /// Members declared down during the fault-free run (false failovers).
    pub false_downs: usize,
    /// From the fault to the first member declaring the dead one down.
    pub first_detection: Option<Duration>,
    /// From the fault to the last live member doing so (None: some never did).
    pub all_detected: Option<Duration>,
}

type Gossip = Foca<Member, PostcardCodec, rand::rngs::StdRng, foca::NoCustomBroadcast>;

enum Event {
    Timer(Timer<Member>),
    Data(Vec<u8>),
}

struct Sim {
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Reverse<(Duration, u64, usize)>>,
    events: HashMap<u64, Event>,
    members: Vec<Gossip>,
    runtime: AccumulatingRuntime<Member>,
    index: HashMap<SocketAddr, usize>,
    dead: Option<usize>,
    latency: Duration,
    counting: bool,
    sent: Vec<(u64, u64)>,
    /// (time, who declared, whom) of every MemberDown.
    downs: Vec<(Duration, usize, usize)>,
}

fn addr(i: usize) -> SocketAddr {
    let [_, b, c, d] = (i as u32).to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, b, c, d)), super::PORT)
}

fn member(i: usize) -> Member {
    Member { addr: addr(i), node: format!("node-{i}"), role: Role::Agent, bump: 1 }
}

impl Sim {
    fn push(&mut self, at: Duration, to: usize, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, to)));
        self.events.insert(self.seq, event);
    }

    /// Delivers what member `i` asked for: messages, timers, notifications.
    fn drain(&mut self, i: usize) {
        while let Some((to, data)) = self.runtime.to_send() {
            if self.counting {
                self.sent[i].0 += 1;
                self.sent[i].1 += data.len() as u64;
            }
            if let Some(&j) = self.index.get(&to.addr) {
                self.push(self.now + self.latency, j, Event::Data(data.to_vec()));
            }
        }
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.push(self.now + after, i, Event::Timer(timer));
        }
        while let Some(n) = self.runtime.to_notify() {
            if let OwnedNotification::MemberDown(m) = n
                && let Some(&j) = self.index.get(&m.addr)
            {
                self.downs.push((self.now, i, j));
            }
        }
    }

    /// Runs events until `until`.
    fn run(&mut self, until: Duration) {
        while let Some(Reverse((at, seq, to))) = self.queue.peek().copied() {
            if at > until {
                break;
            }
            self.queue.pop();
            let event = self.events.remove(&seq);
            self.now = at;
            if Some(to) == self.dead {
                continue;
            }
            let result = match event {
                Some(Event::Timer(t)) => self.members[to].handle_timer(t, &mut self.runtime),
                Some(Event::Data(d)) => self.members[to].handle_data(&d, &mut self.runtime),
                None => Ok(()),
            };
            if let Err(e) = result {
                tracing::debug!(member = to, error = %e, "simulated gossip");
            }
            self.drain(to);
        }
        self.now = until;
    }
}

/// Runs the simulation `opts` describes.
pub fn simulate(opts: Options) -> Report {
    let n = opts.nodes.max(2);
    let mut sim = Sim {
        now: Duration::ZERO,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        members: Vec::with_capacity(n),
        runtime: AccumulatingRuntime::new(),
        index: (0..n).map(|i| (addr(i), i)).collect(),
        dead: None,
        latency: opts.latency,
        counting: false,
        sent: vec![(0, 0); n],
        downs: Vec::new(),
    };
    for i in 0..n {
        let rng = rand::rngs::StdRng::seed_from_u64(opts.seed.wrapping_add(i as u64));
        let mut foca = Foca::new(member(i), config(&opts.timings, n), rng, PostcardCodec);
        let others = (0..n).filter(|j| *j != i).map(|j| foca::Member::alive(member(j)));
        if let Err(e) = foca.apply_many(others, false, &mut sim.runtime) {
            tracing::debug!(member = i, error = %e, "simulated gossip start");
        }
        sim.members.push(foca);
        sim.drain(i);
    }
    let warm_up = Duration::from_secs(1).min(opts.fault_free / 2);
    sim.run(warm_up);
    sim.counting = true;
    sim.run(opts.fault_free);
    sim.counting = false;
    let counted = (opts.fault_free - warm_up).as_secs_f64().max(f64::MIN_POSITIVE);
    let false_downs = sim.downs.len();
    let victim = n / 2;
    sim.dead = Some(victim);
    let fault = sim.now;
    let mut detected = vec![false; n];
    let deadline = fault + opts.fault_free;
    let step = opts.timings.probe_period;
    while sim.now < deadline && detected.iter().enumerate().filter(|(i, d)| *i != victim && !**d).count() > 0
    {
        sim.run(sim.now + step);
        for (_, who, whom) in &sim.downs {
            if *whom == victim {
                detected[*who] = true;
            }
        }
    }
    let times: Vec<Duration> = sim
        .downs
        .iter()
        .filter(|(t, _, whom)| *whom == victim && *t >= fault)
        .map(|(t, _, _)| *t - fault)
        .collect();
    let everyone = detected.iter().enumerate().all(|(i, d)| i == victim || *d);
    let per_second: Vec<f64> = sim.sent.iter().map(|(m, _)| *m as f64 / counted).collect();
    Report {
        nodes: n,
        messages_per_node_second: per_second.iter().sum::<f64>() / n as f64,
        busiest_messages_per_node_second: per_second.iter().copied().fold(0.0, f64::max),
        bytes_per_node_second: sim.sent.iter().map(|(_, b)| *b as f64).sum::<f64>() / counted / n as f64,
        false_downs,
        first_detection: times.iter().min().copied(),
        all_detected: everyone.then(|| times.iter().max().copied()).flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_core::liveness::{AFTER_DETECTION, TIMINGS};

    fn run(nodes: usize) -> Report {
        simulate(Options {
            nodes,
            timings: TIMINGS,
            fault_free: Duration::from_secs(5),
            latency: Duration::from_micros(200),
            seed: 7,
        })
    }

    #[test]
    fn load_per_node_stays_flat_as_the_cluster_grows_and_a_death_is_learnt_by_all_in_time() {
        let (small, large) = (run(20), run(200));
        for r in [&small, &large] {
            assert_eq!(r.false_downs, 0, "{r:?}");
            let all = r.all_detected.unwrap_or_else(|| panic!("not every member learnt it: {r:?}"));
            assert!(all <= TIMINGS.worst_detection() + AFTER_DETECTION, "{r:?}");
            assert!(r.first_detection.is_some_and(|f| f <= all), "{r:?}");
        }
        // Ten times the members, about the same messages per member (SWIM: O(1) per node).
        let ratio = large.messages_per_node_second / small.messages_per_node_second;
        assert!((0.7..1.4).contains(&ratio), "{small:?}\n{large:?}");
    }
}

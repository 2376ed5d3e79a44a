//! Balanced announcers against a simple model.
//!
//! A deterministic random walk adds and removes addresses (some may be announced by every
//! node, some only by a few), and kills and revives nodes. After every step, for every
//! address: it moved only if its announcer stopped being eligible (never only to rebalance);
//! a new or moving one went to an eligible node announcing the fewest other addresses by the
//! model's count, ties to the smallest sha256(node#ip); the operator's counts equal the
//! model's. And while no node dies or revives and only addresses every node may announce are
//! added, no node announces more than its share of them plus one.

use std::collections::BTreeMap;
use std::net::IpAddr;

use tideway_core::announce::{Load, announcer_hash, choose_balanced};
use tideway_core::model::ServiceName;
use tideway_core::testing::random::Rng;

const NODES: usize = 7;

#[derive(Debug, Clone)]
struct Address {
    ip: IpAddr,
    /// Nodes that may announce it (None: every node).
    only: Option<Vec<String>>,
    announcer: Option<String>,
}

fn node(i: usize) -> String {
    format!("node-{i}")
}

fn model_load(addresses: &BTreeMap<ServiceName, Address>, node: &str, ip: IpAddr) -> usize {
    addresses.values().filter(|a| a.ip != ip && a.announcer.as_deref() == Some(node)).count()
}

struct Walk {
    rng: Rng,
    alive: Vec<bool>,
    addresses: BTreeMap<ServiceName, Address>,
    load: Load,
    next: u32,
    moves: usize,
}

impl Walk {
    fn eligible(&self, a: &Address) -> Vec<String> {
        (0..NODES)
            .filter(|i| self.alive[*i])
            .map(node)
            .filter(|n| a.only.as_ref().is_none_or(|o| o.contains(n)))
            .collect()
    }

    fn decide_all(&mut self, at: &str) {
        let names: Vec<ServiceName> = self.addresses.keys().cloned().collect();
        for name in names {
            let a = self.addresses[&name].clone();
            let eligible = self.eligible(&a);
            let got =
                choose_balanced(a.ip, &eligible, a.announcer.as_deref(), |n| self.load.besides(n, a.ip));
            let forced = a.announcer.as_ref().is_none_or(|c| !eligible.contains(c));
            if !forced {
                assert_eq!(got, a.announcer, "{at}: {name} moved only to rebalance");
            } else {
                let want = eligible
                    .iter()
                    .min_by_key(|n| (model_load(&self.addresses, n, a.ip), announcer_hash(n, a.ip)))
                    .cloned();
                assert_eq!(got, want, "{at}: {name} least loaded, then the hash");
                self.moves += usize::from(a.announcer.is_some() && got.is_some());
            }
            self.load.set(&name, a.ip, got.as_deref());
            self.addresses.get_mut(&name).unwrap().announcer = got;
        }
        for i in 0..NODES {
            let n = node(i);
            let model = self.addresses.values().filter(|a| a.announcer.as_deref() == Some(&n)).count();
            assert_eq!(self.load.of(&n), model, "{at}: counts of {n}");
        }
    }

    fn add(&mut self, restricted: bool) {
        self.next += 1;
        let name = ServiceName::new("ns", format!("s{}", self.next));
        let ip = IpAddr::from([10, 2, (self.next >> 8) as u8, self.next as u8]);
        let only = restricted.then(|| (0..2).map(|_| node(self.rng.below(NODES as u64) as usize)).collect());
        self.addresses.insert(name, Address { ip, only, announcer: None });
    }

    fn step(&mut self) {
        match self.rng.below(10) {
            0 => {
                let i = self.rng.below(NODES as u64) as usize;
                self.alive[i] = !self.alive[i];
            }
            1 | 2 if !self.addresses.is_empty() => {
                let k = self.rng.below(self.addresses.len() as u64) as usize;
                let name = self.addresses.keys().nth(k).cloned().unwrap();
                self.addresses.remove(&name);
                self.load.remove(&name);
            }
            3 => self.add(true),
            _ => self.add(false),
        }
    }
}

#[test]
fn new_and_moving_addresses_go_to_the_least_loaded_node() {
    for seed in [11u64, 12, 13] {
        let mut w = Walk {
            rng: Rng(seed * 104_729),
            alive: vec![true; NODES],
            addresses: BTreeMap::new(),
            load: Load::new(),
            next: 0,
            moves: 0,
        };
        for n in 0..400 {
            w.step();
            w.decide_all(&format!("seed {seed} step {n}"));
        }
        assert!(w.moves > 20, "seed {seed}: deaths force moves: {}", w.moves);
    }
}

#[test]
fn with_a_steady_node_set_no_node_exceeds_its_share_plus_one() {
    for seed in [21u64, 22, 23] {
        let mut rng = Rng(seed * 7919);
        let alive: Vec<bool> = (0..NODES).map(|_| rng.below(4) != 0).collect();
        let mut w = Walk { rng, alive, addresses: BTreeMap::new(), load: Load::new(), next: 0, moves: 0 };
        let live = w.alive.iter().filter(|a| **a).count();
        for n in 1..=300 {
            w.add(false);
            w.decide_all(&format!("seed {seed} address {n}"));
            let share = n as f64 / live as f64;
            for i in (0..NODES).filter(|i| w.alive[*i]) {
                let held = w.load.of(&node(i)) as f64;
                assert!(held <= share + 1.0, "seed {seed}: node-{i} holds {held} of {n} ({live} nodes)");
            }
        }
    }
}

//! A complete program: the base fragment and one fragment per service port, and the program
//! assembled whole (every chain and set with its rules and elements) for printers and the
//! tracer.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::ir::*;
use crate::config::ProxyMode;
use crate::model::ServicePortName;
use crate::net::IpFamily;

/// A complete program for one family and one proxy mode (which printer and kernel interface
/// it is for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Program {
    /// Printer/kernel interface.
    pub mode: ProxyMode,
    /// Family.
    pub family: IpFamily,
    /// Chains, sets and rules that exist regardless of Services.
    pub base: Fragment,
    /// One fragment per service port.
    pub services: BTreeMap<ServicePortName, Fragment>,
    /// kube-proxy's large-cluster mode (iptables): per-endpoint comments are omitted.
    pub large_cluster: bool,
}

/// A chain with every contribution in place, in evaluation order.
#[derive(Debug, Clone)]
pub struct AssembledChain<'a> {
    /// The definition (hook, table, name).
    pub def: &'a Chain,
    /// Rules: head, per-Service contributions (in key order), tail.
    pub rules: Vec<&'a Rule>,
}

/// A set with every element in place.
#[derive(Debug, Clone)]
pub struct AssembledSet<'a> {
    /// The definition.
    pub def: &'a Set,
    /// Elements (definer's first, then contributions in key order; shared ones deduplicated).
    pub elements: Vec<&'a Element>,
}

/// A whole program flattened for printing and tracing.
#[derive(Debug, Clone, Default)]
pub struct Assembled<'a> {
    /// Chains in definition order: base first, then per-Service chains in key order.
    pub chains: Vec<AssembledChain<'a>>,
    /// Sets in definition order.
    pub sets: Vec<AssembledSet<'a>>,
    /// IPVS virtual servers.
    pub virtual_servers: Vec<&'a VirtualServer>,
}

impl<'a> Assembled<'a> {
    /// Finds a chain.
    pub fn chain(&self, table: &str, name: &str) -> Option<&AssembledChain<'a>> {
        self.chains.iter().find(|c| c.def.table == table && &*c.def.name == name)
    }

    /// Finds a set.
    pub fn set(&self, table: &str, name: &str) -> Option<&AssembledSet<'a>> {
        self.sets.iter().find(|s| s.def.table == table && &*s.def.name == name)
    }
}

impl Program {
    /// An empty program.
    pub fn new(mode: ProxyMode, family: IpFamily, base: Fragment) -> Program {
        Program { mode, family, base, services: BTreeMap::new(), large_cluster: false }
    }

    /// Every fragment, base first.
    pub fn fragments(&self) -> impl Iterator<Item = &Fragment> {
        std::iter::once(&self.base).chain(self.services.values())
    }

    /// Rules in the program (chain rules and contributions), without assembling it.
    pub fn rule_count(&self) -> usize {
        self.fragments().map(Fragment::rule_count).sum()
    }

    /// Flattens the program: contributions placed into their chains and sets.
    pub fn assemble(&self) -> Assembled<'_> {
        let mut out = Assembled::default();
        let mut chain_index: FxHashMap<(&str, &str), usize> = FxHashMap::default();
        let mut set_index: FxHashMap<(&str, &str), usize> = FxHashMap::default();
        for frag in self.fragments() {
            for chain in frag.chains.iter().chain(&frag.shared_chains) {
                if let Entry::Vacant(slot) = chain_index.entry((chain.table, &chain.name)) {
                    slot.insert(out.chains.len());
                    out.chains.push(AssembledChain { def: chain, rules: chain.rules.iter().collect() });
                }
            }
            for set in &frag.sets {
                set_index.insert((set.table, &set.name), out.sets.len());
                out.sets.push(AssembledSet { def: set, elements: set.elements.iter().collect() });
            }
            for set in &frag.shared_sets {
                if let Entry::Vacant(slot) = set_index.entry((set.table, &set.name)) {
                    slot.insert(out.sets.len());
                    out.sets.push(AssembledSet { def: set, elements: set.elements.iter().collect() });
                }
            }
        }
        for frag in self.services.values() {
            for (chain, rule) in &frag.rules {
                if let Some(i) = chain_index.get(&(chain.table, &*chain.name)) {
                    out.chains[*i].rules.push(rule);
                }
            }
            for (set, elem) in &frag.elements {
                if let Some(i) = set_index.get(&(set.table, &*set.name)) {
                    out.sets[*i].elements.push(elem);
                }
            }
            out.virtual_servers.extend(&frag.virtual_servers);
        }
        // Shared chains' ways in, in the chains' name order, after the rules contributed.
        let mut entries: Vec<(&Name, usize, &Rule)> = out
            .chains
            .iter()
            .filter_map(|c| {
                let def: &Chain = c.def;
                let (from, rule) = def.entry.as_ref()?;
                Some((&def.name, *chain_index.get(&(from.table, &*from.name))?, rule))
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (_, at, rule) in entries {
            out.chains[at].rules.push(rule);
        }
        for c in &mut out.chains {
            c.rules.extend(&c.def.tail);
        }
        for s in out.sets.iter_mut().filter(|s| s.def.shared) {
            let mut seen = FxHashSet::default();
            s.elements.retain(|e| seen.insert(*e));
        }
        out.virtual_servers.extend(&self.base.virtual_servers);
        out
    }
}

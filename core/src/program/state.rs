//! A model of what the kernel holds after applying programs and change sets.
//!
//! It applies a [`ChangeSet`] with the kernel's strictness (deleting something absent or
//! adding an element twice is an error), so tests can prove that incremental syncs reach
//! exactly the state a full sync would, and fake dataplanes can record what they were given.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::complete::Program;
use super::diff::ChangeSet;
use super::ir::{ChainRef, Element, Rule, SetRef, VirtualServer};

/// A change the kernel would refuse, and what it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Adding something that is already there.
    #[error("{0} already exists")]
    Exists(String),
    /// Changing or deleting something that is not there.
    #[error("no {0}")]
    Missing(String),
}
use crate::net::Protocol;

/// Chains, set members and virtual servers, as programmed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelState {
    /// Rules per chain, in order.
    pub chains: BTreeMap<ChainRef, Vec<Rule>>,
    /// Number of trailing rules that must stay last (e.g. the NodePort jump).
    pub tails: BTreeMap<ChainRef, Vec<Rule>>,
    /// Members per set or map.
    pub sets: BTreeMap<SetRef, BTreeSet<Element>>,
    /// IPVS virtual servers.
    pub virtual_servers: BTreeMap<(IpAddr, Protocol, u16), VirtualServer>,
}

impl KernelState {
    /// The state right after a full sync of `p`.
    pub fn of(p: &Program) -> KernelState {
        let asm = p.assemble();
        let mut k = KernelState::default();
        for c in &asm.chains {
            let id = c.def.id();
            let body = c.rules.len() - c.def.tail.len();
            k.chains.insert(id.clone(), c.rules[..body].iter().map(|r| (*r).clone()).collect());
            k.tails.insert(id, c.def.tail.clone());
        }
        for s in &asm.sets {
            k.sets.insert(s.def.id(), s.elements.iter().map(|e| (*e).clone()).collect());
        }
        for v in &asm.virtual_servers {
            k.virtual_servers.insert((v.ip, v.protocol, v.port), (*v).clone());
        }
        k
    }

    /// Applies `cs` (computed for the new program `p`), failing like the kernel would.
    pub fn apply(&mut self, cs: &ChangeSet, p: &Program) -> Result<(), Refused> {
        if cs.full {
            *self = KernelState::of(p);
            return Ok(());
        }
        for s in &cs.add_sets {
            if self.sets.insert(s.id(), s.elements.iter().cloned().collect()).is_some() {
                return Err(Refused::Exists(format!("set {}", s.name)));
            }
        }
        for c in &cs.add_chains {
            if self.chains.insert(c.id(), c.rules.clone()).is_some() {
                return Err(Refused::Exists(format!("chain {}", c.name)));
            }
            self.tails.insert(c.id(), c.tail.clone());
        }
        for c in &cs.flush_chains {
            let rules = self
                .chains
                .get_mut(&c.id())
                .ok_or_else(|| Refused::Missing(format!("chain {} to flush", c.name)))?;
            *rules = c.rules.clone();
            self.tails.insert(c.id(), c.tail.clone());
        }
        for (c, r) in &cs.delete_rules {
            let rules = self
                .chains
                .get_mut(c)
                .ok_or_else(|| Refused::Missing(format!("chain {} to delete a rule of", c.name)))?;
            let i = rules
                .iter()
                .position(|x| x == r)
                .ok_or_else(|| Refused::Missing(format!("rule to delete in {}", c.name)))?;
            rules.remove(i);
        }
        for (s, e) in &cs.delete_elements {
            let set = self
                .sets
                .get_mut(s)
                .ok_or_else(|| Refused::Missing(format!("set {} to delete an element of", s.name)))?;
            if !set.remove(e) {
                return Err(Refused::Missing(format!("element to delete in {}: {e:?}", s.name)));
            }
        }
        for (s, e) in &cs.add_elements {
            let set = self
                .sets
                .get_mut(s)
                .ok_or_else(|| Refused::Missing(format!("set {} to add an element to", s.name)))?;
            if !set.insert(e.clone()) {
                return Err(Refused::Exists(format!("element of {}: {e:?}", s.name)));
            }
        }
        for (c, r) in &cs.add_rules {
            self.chains
                .get_mut(c)
                .ok_or_else(|| Refused::Missing(format!("chain {} to add a rule to", c.name)))?
                .push(r.clone());
        }
        for c in &cs.delete_chains {
            if self.chains.remove(c).is_none() {
                return Err(Refused::Missing(format!("chain {} to delete", c.name)));
            }
            self.tails.remove(c);
        }
        for s in &cs.delete_sets {
            if self.sets.remove(s).is_none() {
                return Err(Refused::Missing(format!("set {} to delete", s.name)));
            }
        }
        for v in &cs.delete_virtual_servers {
            self.virtual_servers
                .remove(&(v.ip, v.protocol, v.port))
                .ok_or_else(|| Refused::Missing(format!("virtual server {}:{} to delete", v.ip, v.port)))?;
        }
        for (_, v) in &cs.update_virtual_servers {
            let slot = self
                .virtual_servers
                .get_mut(&(v.ip, v.protocol, v.port))
                .ok_or_else(|| Refused::Missing(format!("virtual server {}:{} to update", v.ip, v.port)))?;
            *slot = v.clone();
        }
        for v in &cs.add_virtual_servers {
            if self.virtual_servers.insert((v.ip, v.protocol, v.port), v.clone()).is_some() {
                return Err(Refused::Exists(format!("virtual server {}:{}", v.ip, v.port)));
            }
        }
        Ok(())
    }

    /// The same state with each chain's rules sorted: rules that Services contribute to a shared
    /// chain match disjoint packets, so their order carries no meaning.
    pub fn canonical(&self) -> KernelState {
        let mut k = self.clone();
        k.chains.values_mut().for_each(|rules| rules.sort_by_key(|r| format!("{r:?}")));
        k
    }
}

impl KernelState {
    /// A short description of how `self` differs from `other` (for test failures).
    pub fn describe_difference(&self, other: &KernelState) -> String {
        let mut out = Vec::new();
        let (a, b) = (self.canonical(), other.canonical());
        for (c, rules) in &a.chains {
            match b.chains.get(c) {
                None => out.push(format!("chain {} only on the left", c.name)),
                Some(r) if r != rules => {
                    out.push(format!("chain {} differs: {rules:?}\n   vs {r:?}", c.name))
                }
                _ => {}
            }
        }
        out.extend(
            b.chains
                .keys()
                .filter(|c| !a.chains.contains_key(*c))
                .map(|c| format!("chain {} only on the right", c.name)),
        );
        for (s, elems) in &a.sets {
            match b.sets.get(s) {
                None => out.push(format!("set {} only on the left", s.name)),
                Some(e) if e != elems => {
                    let left: Vec<_> = elems.difference(e).take(5).collect();
                    let right: Vec<_> = e.difference(elems).take(5).collect();
                    out.push(format!("set {}: left-only {left:?}, right-only {right:?}", s.name));
                }
                _ => {}
            }
        }
        out.extend(
            b.sets
                .keys()
                .filter(|s| !a.sets.contains_key(*s))
                .map(|s| format!("set {} only on the right", s.name)),
        );
        if a.virtual_servers != b.virtual_servers {
            out.push("virtual servers differ".into());
        }
        out.join("\n")
    }
}

//! Minimal changes between programs.
//!
//! Fragments are compared as wholes; inside a changed fragment, chains are added, flushed and
//! refilled, or deleted, and rules/elements contributed to base chains and sets are added or
//! deleted one by one. Things several fragments can share (per-count dispatch chains, hairpin
//! elements, IPVS addresses) are reference counted, so they appear with their first user and
//! disappear with their last.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::Serialize;

use super::complete::Program;
use super::ir::{
    Chain, ChainRef, ElemData, Element, Fragment, Name, Rule, Set, SetRef, Value, Verdict, VirtualServer,
};
use crate::model::ServicePortName;
use crate::net::Protocol;

/// Kernel-facing changes, in no particular order (printers order them safely).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChangeSet {
    /// The base changed: replace everything with the new program.
    pub full: bool,
    /// Chains to create, with their rules.
    pub add_chains: Vec<Chain>,
    /// Existing chains whose rules changed: flush and refill.
    pub flush_chains: Vec<Chain>,
    /// Chains to delete.
    pub delete_chains: Vec<ChainRef>,
    /// Sets to create, with their elements.
    pub add_sets: Vec<Set>,
    /// Sets to delete.
    pub delete_sets: Vec<SetRef>,
    /// Elements to add to existing sets.
    pub add_elements: Vec<(SetRef, Element)>,
    /// Elements to remove from existing sets.
    pub delete_elements: Vec<(SetRef, Element)>,
    /// Definitions (without elements) of the existing sets a service port owns whose elements
    /// change in place (a Maglev table behind ClientIP affinity): the kernel encoding of an
    /// element needs its set's key and data types, which only the base's sets have otherwise.
    pub element_sets: Vec<Set>,
    /// Rules to add to base chains.
    pub add_rules: Vec<(ChainRef, Rule)>,
    /// Rules to remove from base chains.
    pub delete_rules: Vec<(ChainRef, Rule)>,
    /// IPVS virtual servers to create.
    pub add_virtual_servers: Vec<VirtualServer>,
    /// IPVS virtual servers to change (old, new).
    pub update_virtual_servers: Vec<(VirtualServer, VirtualServer)>,
    /// IPVS virtual servers to delete.
    pub delete_virtual_servers: Vec<VirtualServer>,
}

impl ChangeSet {
    /// Cancels operations that undo each other within one change set: a chain deleted by one
    /// fragment and created by another (a shared chain changing hands) becomes a refill, and a
    /// set deleted and created again keeps the creation only. Call after the last `replace`.
    pub fn normalize(&mut self) {
        let added: BTreeSet<ChainRef> = self.add_chains.iter().map(Chain::id).collect();
        let readded: BTreeSet<ChainRef> =
            self.delete_chains.iter().filter(|c| added.contains(*c)).cloned().collect();
        if !readded.is_empty() {
            self.delete_chains.retain(|c| !readded.contains(c));
            let (refill, keep): (Vec<Chain>, Vec<Chain>) =
                std::mem::take(&mut self.add_chains).into_iter().partition(|c| readded.contains(&c.id()));
            self.add_chains = keep;
            self.flush_chains.extend(refill);
        }
        let added: BTreeSet<SetRef> = self.add_sets.iter().map(Set::id).collect();
        self.delete_sets.retain(|s| !added.contains(s));
    }

    /// True when nothing needs to change.
    pub fn is_empty(&self) -> bool {
        !self.full && self.operations() == 0
    }

    /// Number of kernel objects touched (chains, sets, elements, rules, virtual servers).
    pub fn operations(&self) -> usize {
        self.add_chains.len()
            + self.flush_chains.len()
            + self.delete_chains.len()
            + self.add_sets.len()
            + self.delete_sets.len()
            + self.add_elements.len()
            + self.delete_elements.len()
            + self.add_rules.len()
            + self.delete_rules.len()
            + self.add_virtual_servers.len()
            + self.update_virtual_servers.len()
            + self.delete_virtual_servers.len()
    }
}

/// What the counts are kept by: a shared chain, a shared set, or an element of a shared set (the set's
/// index among the base's shared sets, and the element in a compact byte form: a hairpin
/// element `ip . ip` is 11 bytes inline instead of a 152-byte structure, which matters with
/// one per local endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RefKey {
    Chain(ChainRef),
    Set(SetRef),
    Elem(u16, ElemKey),
}

type ElemKey = smallvec::SmallVec<[u8; 22]>;

/// `e` as bytes, one to one: every value and the data start with a tag that fixes their length.
fn elem_key(e: &Element) -> ElemKey {
    let mut k = ElemKey::new();
    let ip = |k: &mut ElemKey, ip: &IpAddr| match ip {
        IpAddr::V4(a) => {
            k.push(4);
            k.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            k.push(6);
            k.extend_from_slice(&a.octets());
        }
    };
    let name = |k: &mut ElemKey, n: &str| {
        k.extend_from_slice(&u16::try_from(n.len()).unwrap_or(u16::MAX).to_be_bytes());
        k.extend_from_slice(n.as_bytes());
    };
    for v in &e.key {
        match v {
            Value::Ip(a) => ip(&mut k, a),
            Value::Net(n) => {
                k.push(1);
                ip(&mut k, &n.addr());
                k.push(n.prefix_len());
            }
            Value::Proto(p) => k.extend_from_slice(&[2, *p as u8]),
            Value::Port(p) => {
                k.push(3);
                k.extend_from_slice(&p.to_be_bytes());
            }
            Value::Int(i) => {
                k.push(5);
                k.extend_from_slice(&i.to_be_bytes());
            }
        }
    }
    match &e.data {
        None => k.push(0),
        Some(ElemData::AddrPort(a, p)) => {
            k.push(1);
            ip(&mut k, a);
            k.extend_from_slice(&p.to_be_bytes());
        }
        Some(ElemData::Verdict(v)) => match v {
            Verdict::Jump(c) => {
                k.push(2);
                name(&mut k, c);
            }
            Verdict::Goto(c) => {
                k.push(3);
                name(&mut k, c);
            }
            Verdict::Return => k.push(4),
            Verdict::Accept => k.push(5),
            Verdict::Drop => k.push(6),
            Verdict::Reject => k.push(7),
        },
    }
    k
}

/// What is kept of a programmed program between syncs: its node-level part (dialect, family,
/// base) and the counts needed to update it one fragment at a time. The per-Service fragments
/// are not kept: a caller re-derives the fragment it replaces from the plan it had (see
/// [`render::update`](crate::render::update)), so a node holds its rules once, as plans.
#[derive(Debug, Clone)]
pub struct ProgramState {
    /// The program without its service fragments.
    skeleton: Program,
    refs: HashMap<RefKey, u32>,
    /// The base's shared sets (a [`RefKey::Elem`] names one by its index here).
    shared_sets: Vec<SetRef>,
    /// Elements fragments contribute to the base's interval sets, counted (an interval set is
    /// rewritten whole by the netlink backend; these are few: source ranges).
    intervals: HashMap<SetRef, BTreeMap<Element, u32>>,
    /// The rule count of the whole program, kept current one fragment at a time.
    rules: usize,
    /// The ways in of the shared chains in use, by the base chain they sit in, in the shared
    /// chains' name order.
    entries: HashMap<ChainRef, BTreeMap<Name, Rule>>,
    /// Base chains whose ways in changed since the last change set, with the ways in they had
    /// then: rewritten whole unless they have the same again.
    dirty: BTreeMap<ChainRef, BTreeMap<Name, Rule>>,
    /// Shared sets whose first user came in this change set (created at its end), and those
    /// whose last user left (deleted then): a set that leaves and comes back in one change
    /// set stays as it is.
    set_births: BTreeMap<SetRef, Set>,
    set_deaths: BTreeSet<SetRef>,
}

type VsKey = (std::net::IpAddr, Protocol, u16);

impl ProgramState {
    /// Starts from `program` (what is, or is about to be, programmed).
    pub fn new(program: &Program) -> ProgramState {
        let mut state = ProgramState::start(program);
        for frag in program.services.values() {
            state.take(frag);
        }
        state
    }

    /// Starts from `program`'s node-level part alone: its service fragments, if any, are
    /// left for [`take`](Self::take) (a program lowered one fragment at a time).
    pub fn start(program: &Program) -> ProgramState {
        let shared_sets = program.base.sets.iter().filter(|s| s.shared).map(Set::id).collect();
        let intervals =
            program.base.sets.iter().filter(|s| s.flags.interval).map(|s| (s.id(), BTreeMap::new()));
        let skeleton = Program { services: BTreeMap::new(), base: program.base.clone(), ..*program };
        ProgramState {
            skeleton,
            refs: HashMap::default(),
            shared_sets,
            intervals: intervals.collect(),
            rules: program.base.rule_count(),
            entries: HashMap::default(),
            dirty: BTreeMap::new(),
            set_births: BTreeMap::new(),
            set_deaths: BTreeSet::new(),
        }
    }

    /// Makes room for the references of about `fragments` more service fragments (each puts
    /// at least one element in a shared map), so that taking them in does not regrow the
    /// count table again and again.
    pub fn reserve(&mut self, fragments: usize) {
        self.refs.reserve(fragments);
    }

    /// Counts one more service fragment of the program in.
    pub fn take(&mut self, frag: &Fragment) {
        self.rules += frag.rule_count();
        for k in self.ref_keys(frag) {
            *self.refs.entry(k).or_default() += 1;
        }
        for c in &frag.shared_chains {
            if let Some((from, rule)) = &c.entry {
                self.entries.entry(from.clone()).or_default().insert(c.name.clone(), rule.clone());
            }
        }
        self.count_intervals(&[], &frag.elements);
    }

    /// The program's node-level part: dialect, family and base, with no service fragments.
    pub fn skeleton(&self) -> &Program {
        &self.skeleton
    }

    /// Rules of the whole program (as [`Program::rule_count`]).
    pub fn rule_count(&self) -> usize {
        self.rules
    }

    /// Every element the program puts in the base's interval set `set` (the set's own and
    /// the fragments'), sorted; empty for any other set.
    pub fn interval_elements(&self, set: &str) -> Vec<&Element> {
        let own = self.skeleton.base.sets.iter().filter(|s| &*s.name == set).flat_map(|s| &s.elements);
        let contributed = self.intervals.iter().filter(|(r, _)| &*r.name == set).flat_map(|(_, e)| e.keys());
        let mut out: Vec<&Element> = own.chain(contributed).collect();
        out.sort();
        out.dedup();
        out
    }

    fn count_intervals(&mut self, gone: &[(SetRef, Element)], added: &[(SetRef, Element)]) {
        for (s, e) in gone {
            if let Some(elems) = self.intervals.get_mut(s)
                && let Some(n) = elems.get_mut(e)
            {
                *n -= 1;
                if *n == 0 {
                    elems.remove(e);
                }
            }
        }
        for (s, e) in added {
            if let Some(elems) = self.intervals.get_mut(s) {
                *elems.entry(e.clone()).or_default() += 1;
            }
        }
    }

    fn ref_keys(&self, frag: &Fragment) -> Vec<RefKey> {
        // A fragment holds a shared chain once, however many of its frontends use it.
        let chains: BTreeSet<ChainRef> = frag.shared_chains.iter().map(Chain::id).collect();
        let sets: BTreeSet<SetRef> = frag.shared_sets.iter().map(Set::id).collect();
        let mut keys: Vec<RefKey> = chains.into_iter().map(RefKey::Chain).collect();
        keys.extend(sets.into_iter().map(RefKey::Set));
        keys.extend(
            frag.elements.iter().filter_map(|(s, e)| self.shared(s).map(|i| RefKey::Elem(i, elem_key(e)))),
        );
        keys
    }

    /// The index of `set` among the shared sets, when it is one.
    fn shared(&self, set: &SetRef) -> Option<u16> {
        self.shared_sets.iter().position(|s| s == set).and_then(|i| u16::try_from(i).ok())
    }

    fn inc(&mut self, k: RefKey) -> bool {
        let n = self.refs.entry(k).or_default();
        *n += 1;
        *n == 1
    }

    fn dec(&mut self, k: RefKey) -> bool {
        match self.refs.get_mut(&k) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                self.refs.remove(&k);
                true
            }
            None => false,
        }
    }

    /// Replaces one service port's fragment `old` (as it was rendered, `None` when it had
    /// none) with `new` (`None`: removed), appending the kernel changes this needs to `out`
    /// (normalize `out` after the last call, or use `replace_all`, which also rewrites the base
    /// chains whose shared chains' ways in came or went).
    pub fn replace(&mut self, old: Option<&Fragment>, new: Option<&Fragment>, out: &mut ChangeSet) {
        let none = Fragment::default();
        let (old, new) = (old.unwrap_or(&none), new.unwrap_or(&none));
        self.rules = self.rules - old.rule_count() + new.rule_count();
        if old != new {
            self.diff_fragment(old, new, out);
            self.count_intervals(&old.elements, &new.elements);
        }
    }

    fn diff_fragment(&mut self, old: &Fragment, new: &Fragment, out: &mut ChangeSet) {
        // Owned chains.
        let old_chains: BTreeMap<ChainRef, &Chain> = old.chains.iter().map(|c| (c.id(), c)).collect();
        let new_chains: BTreeMap<ChainRef, &Chain> = new.chains.iter().map(|c| (c.id(), c)).collect();
        for (id, c) in &new_chains {
            match old_chains.get(id) {
                Some(prev) if prev == c => {}
                Some(_) => out.flush_chains.push((*c).clone()),
                None => out.add_chains.push((*c).clone()),
            }
        }
        out.delete_chains.extend(old_chains.keys().filter(|id| !new_chains.contains_key(*id)).cloned());

        // Owned sets: recreate when the definition changed.
        let old_sets: BTreeMap<SetRef, &Set> = old.sets.iter().map(|s| (s.id(), s)).collect();
        let new_sets: BTreeMap<SetRef, &Set> = new.sets.iter().map(|s| (s.id(), s)).collect();
        for (id, s) in &new_sets {
            match old_sets.get(id) {
                Some(prev) if prev == s => {}
                Some(_) => {
                    out.delete_sets.push(id.clone());
                    out.add_sets.push((*s).clone());
                }
                None => out.add_sets.push((*s).clone()),
            }
        }
        out.delete_sets.extend(old_sets.keys().filter(|id| !new_sets.contains_key(*id)).cloned());

        // Shared chains: created by their first user, deleted with their last.
        let old_shared: BTreeSet<ChainRef> = old.shared_chains.iter().map(Chain::id).collect();
        let new_shared: BTreeSet<ChainRef> = new.shared_chains.iter().map(Chain::id).collect();
        for c in new.shared_chains.iter().filter(|c| !old_shared.contains(&c.id())) {
            if self.inc(RefKey::Chain(c.id())) {
                out.add_chains.push(c.clone());
                self.enter(c, true);
            }
        }
        for c in old.shared_chains.iter().filter(|c| !new_shared.contains(&c.id())) {
            if self.dec(RefKey::Chain(c.id())) {
                out.delete_chains.push(c.id());
                self.enter(c, false);
            }
        }

        // Shared sets: created by their first user, deleted with their last.
        let old_shared: BTreeSet<SetRef> = old.shared_sets.iter().map(Set::id).collect();
        let new_shared: BTreeSet<SetRef> = new.shared_sets.iter().map(Set::id).collect();
        for s in new.shared_sets.iter().filter(|s| !old_shared.contains(&s.id())) {
            if self.inc(RefKey::Set(s.id())) && !self.set_deaths.remove(&s.id()) {
                self.set_births.insert(s.id(), s.clone());
            }
        }
        for id in old_shared.difference(&new_shared) {
            if self.dec(RefKey::Set(id.clone())) && self.set_births.remove(id).is_none() {
                self.set_deaths.insert(id.clone());
            }
        }

        // Rules contributed to base chains.
        let old_rules: HashSet<&(ChainRef, Rule)> = old.rules.iter().collect();
        let new_rules: HashSet<&(ChainRef, Rule)> = new.rules.iter().collect();
        out.delete_rules.extend(old.rules.iter().filter(|r| !new_rules.contains(r)).cloned());
        out.add_rules.extend(new.rules.iter().filter(|r| !old_rules.contains(r)).cloned());

        // Elements contributed to base sets (and to sets of this fragment's own).
        let old_elems: HashSet<&(SetRef, Element)> = old.elements.iter().collect();
        let new_elems: HashSet<&(SetRef, Element)> = new.elements.iter().collect();
        let mut touched: BTreeSet<&SetRef> = BTreeSet::new();
        for (s, e) in old.elements.iter().filter(|x| !new_elems.contains(x)) {
            let gone = self.shared(s).is_none_or(|i| self.dec(RefKey::Elem(i, elem_key(e))));
            if gone {
                out.delete_elements.push((s.clone(), e.clone()));
                touched.insert(s);
            }
        }
        for (s, e) in new.elements.iter().filter(|x| !old_elems.contains(x)) {
            let fresh = self.shared(s).is_none_or(|i| self.inc(RefKey::Elem(i, elem_key(e))));
            if fresh {
                out.add_elements.push((s.clone(), e.clone()));
                touched.insert(s);
            }
        }
        let kept = |s: &&Set| touched.contains(&s.id()) && old_sets.get(&s.id()) == Some(s);
        out.element_sets
            .extend(new.sets.iter().filter(kept).map(|s| Set { elements: Vec::new(), ..s.clone() }));
        for s in old.shared_sets.iter().chain(&new.shared_sets).filter(|s| touched.contains(&s.id())) {
            if !out.element_sets.iter().any(|e| e.id() == s.id()) {
                out.element_sets.push(Set { elements: Vec::new(), ..s.clone() });
            }
        }

        // IPVS virtual servers, keyed by address, protocol and port.
        let key = |v: &VirtualServer| -> VsKey { (v.ip, v.protocol, v.port) };
        let old_vs: BTreeMap<VsKey, &VirtualServer> =
            old.virtual_servers.iter().map(|v| (key(v), v)).collect();
        let new_vs: BTreeMap<VsKey, &VirtualServer> =
            new.virtual_servers.iter().map(|v| (key(v), v)).collect();
        for (k, v) in &new_vs {
            match old_vs.get(k) {
                Some(prev) if prev == v => {}
                Some(prev) => out.update_virtual_servers.push(((*prev).clone(), (*v).clone())),
                None => out.add_virtual_servers.push((*v).clone()),
            }
        }
        out.delete_virtual_servers
            .extend(old_vs.iter().filter(|(k, _)| !new_vs.contains_key(k)).map(|(_, v)| (*v).clone()));
    }
}

impl ProgramState {
    /// Replaces several fragments (each as it was, and as it is now) and returns the
    /// normalized change set.
    pub fn replace_all<'f>(
        &mut self,
        fragments: impl IntoIterator<Item = (Option<&'f Fragment>, Option<&'f Fragment>)>,
    ) -> ChangeSet {
        let mut out = ChangeSet::default();
        for (old, new) in fragments {
            self.replace(old, new, &mut out);
        }
        self.rewrite_entered(&mut out);
        out.add_sets.extend(std::mem::take(&mut self.set_births).into_values());
        out.delete_sets.extend(std::mem::take(&mut self.set_deaths));
        out.normalize();
        out
    }

    /// Records shared chain `c`'s way in as there (`on`) or gone.
    fn enter(&mut self, c: &Chain, on: bool) {
        let Some((from, rule)) = &c.entry else { return };
        let entries = self.entries.entry(from.clone()).or_default();
        self.dirty.entry(from.clone()).or_insert_with(|| entries.clone());
        if on {
            entries.insert(c.name.clone(), rule.clone());
        } else {
            entries.remove(&c.name);
        }
    }

    /// Rewrites each base chain whose ways in changed: its own rules, then the ways in.
    fn rewrite_entered(&mut self, out: &mut ChangeSet) {
        for (id, before) in std::mem::take(&mut self.dirty) {
            let entries = self.entries.get(&id);
            if entries.unwrap_or(&BTreeMap::new()) == &before {
                continue;
            }
            let Some(def) = self.skeleton.base.chains.iter().find(|c| c.id() == id) else { continue };
            let mut chain = def.clone();
            chain.rules.extend(entries.into_iter().flat_map(|e| e.values().cloned()));
            if entries.is_some_and(BTreeMap::is_empty) {
                self.entries.remove(&id);
            }
            out.flush_chains.push(chain);
        }
    }
}

/// The minimal change from `old` to `new`. When the base differs (node addresses, settings,
/// mode), the result is a full replacement.
pub fn diff(old: &Program, new: &Program) -> ChangeSet {
    if old.mode != new.mode
        || old.family != new.family
        || old.base != new.base
        || old.large_cluster != new.large_cluster
    {
        return ChangeSet { full: true, ..ChangeSet::default() };
    }
    let mut state = ProgramState::new(old);
    let keys: BTreeSet<&ServicePortName> = old.services.keys().chain(new.services.keys()).collect();
    let changed = keys
        .into_iter()
        .map(|k| (old.services.get(k), new.services.get(k)))
        .filter(|(before, after)| before != after);
    state.replace_all(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Key;
    use smallvec::smallvec;

    #[test]
    fn element_keys_tell_every_element_apart() {
        let ip = |s: &str| Value::Ip(s.parse().unwrap());
        let e = |key: Key, data: Option<ElemData>| Element { key, data };
        let elements = [
            e(smallvec![ip("10.0.0.1"), ip("10.0.0.1")], None),
            e(smallvec![ip("10.0.0.1"), ip("10.0.0.2")], None),
            e(smallvec![ip("::a00:1"), ip("10.0.0.1")], None),
            e(smallvec![Value::Net("10.0.0.0/8".parse().unwrap())], None),
            e(smallvec![Value::Net("10.0.0.0/16".parse().unwrap())], None),
            e(smallvec![Value::Port(0x0203)], None),
            e(smallvec![Value::Proto(Protocol::Tcp), Value::Port(3)], None),
            e(smallvec![Value::Int(0x0203)], None),
            e(smallvec![Value::Port(0x0203)], Some(ElemData::AddrPort("10.0.0.1".parse().unwrap(), 80))),
            e(smallvec![Value::Port(0x0203)], Some(ElemData::Verdict(Verdict::Goto("ab".into())))),
            e(smallvec![Value::Port(0x0203)], Some(ElemData::Verdict(Verdict::Jump("ab".into())))),
            e(smallvec![Value::Port(0x0203)], Some(ElemData::Verdict(Verdict::Goto("abc".into())))),
            e(smallvec![Value::Port(0x0203)], Some(ElemData::Verdict(Verdict::Accept))),
        ];
        let keys: BTreeSet<ElemKey> = elements.iter().map(elem_key).collect();
        assert_eq!(keys.len(), elements.len(), "two elements share a key");
        // A hairpin element stays inline.
        assert!(!elem_key(&elements[0]).spilled());
    }
}

//! A full apply written as the program streams in, one service fragment at a time, so the
//! whole program is never held beside the batch (at 100,000 Services it would be several
//! hundred MiB for the few seconds of a first sync).
//!
//! The batch says what `nft -f` of the whole program would, in an order the kernel accepts
//! without seeing ahead: the table, the base's chains and sets (each set's size written once
//! its elements are counted), the base chains' own rules; then per fragment its chains, its
//! sets (a shared set with its first user), its rules and the rules it adds to base chains;
//! the elements fragments add to the base's and the shared sets wait for a full message of
//! their set (or, for interval sets, for the end); the shared chains' ways in and the base
//! chains' closing rules come last.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use tideway_core::net::IpFamily;
use tideway_core::program::{Chain, ChainRef, Element, Fragment, Name, Program, Rule, Set, SetRef};
use tideway_core::render::nftables::TABLE;
use tideway_core::render::nftables::capacity::{Room, capacity};

use super::batch::{Batch, msg};
use super::expr::{self, SetIndex};
use super::objects::{chain, nfproto, table};
use super::{affinity, elements, sets};

/// One family's affinity clients, by set name.
pub(super) type Kept = std::collections::HashMap<String, Vec<affinity::Client>>;

/// Elements of a set sent together once this many wait (about two full messages).
const WAITING: usize = 1024;

/// A set of the base, or a shared set, with the elements fragments add to it.
struct BaseSet<'p> {
    def: Cow<'p, Set>,
    id: u32,
    /// Elements in the set so far (written or waiting).
    held: usize,
    /// Where its declared size is written, to be set once every element is counted.
    size_at: Option<usize>,
    waiting: Vec<Element>,
}

/// One family's program being written into a batch.
pub(super) struct Full<'p> {
    fam: u8,
    family: IpFamily,
    skeleton: &'p Program,
    index: SetIndex<'p>,
    sets: Vec<BaseSet<'p>>,
    by_name: HashMap<Name, usize>,
    /// The ways in of the shared chains written so far, by chain name.
    entries: BTreeMap<Name, (ChainRef, Rule)>,
    /// Chains created so far, the base's and the fragments' (a shared one only once).
    chains: HashSet<Name>,
    next_id: u32,
    /// The fragments' own sets as declared.
    room: Room,
}

impl<'p> Full<'p> {
    /// Starts `skeleton`'s family: the table recreated with the base's chains, sets and rules.
    pub(super) fn start(b: &mut Batch, skeleton: &'p Program) -> Full<'p> {
        let fam = nfproto(skeleton.family);
        table(b, fam, false, "add table");
        b.message(msg::DELTABLE, fam, 0, "delete table");
        b.str(super::objects::TABLE_NAME, TABLE);
        table(b, fam, true, "recreate table");
        let base = &skeleton.base;
        let mut w = Full {
            fam,
            family: skeleton.family,
            skeleton,
            index: SetIndex { sets: HashMap::default() },
            sets: Vec::new(),
            by_name: HashMap::default(),
            entries: BTreeMap::new(),
            chains: base.chains.iter().chain(&base.shared_chains).map(|c| c.name.clone()).collect(),
            next_id: 1,
            room: Room::default(),
        };
        for c in base.chains.iter().chain(&base.shared_chains) {
            chain(b, fam, c);
        }
        for s in &base.sets {
            w.declare_base(b, s);
        }
        for c in base.chains.iter().chain(&base.shared_chains) {
            w.rules(b, &c.name, &c.rules, None);
        }
        w
    }

    fn declare_base(&mut self, b: &mut Batch, s: &'p Set) {
        let id = self.next_id;
        self.next_id += 1;
        let size_at = sets::declare(b, self.fam, TABLE, s, id, s.elements.len());
        self.index.sets.insert(&s.name, (s, Some(id)));
        self.by_name.insert(s.name.clone(), self.sets.len());
        self.sets.push(BaseSet { def: Cow::Borrowed(s), id, held: 0, size_at, waiting: Vec::new() });
        let i = self.sets.len() - 1;
        for e in &s.elements {
            self.add(b, i, Cow::Borrowed(e));
        }
    }

    /// Writes one service fragment.
    pub(super) fn fragment(&mut self, b: &mut Batch, f: &Fragment) {
        self.own_part(b, f, None);
        for (s, e) in &f.elements {
            self.add_to(b, s, Cow::Borrowed(e));
        }
    }

    /// Writes one service fragment, passed on for good: its elements for the base's sets
    /// wait for their message without being copied.
    /// A fragment, its affinity sets given back the clients they held (`kept`, by set name).
    pub(super) fn fragment_owned(&mut self, b: &mut Batch, mut f: Fragment, kept: Option<&Kept>) {
        self.own_part(b, &f, kept);
        for (s, e) in std::mem::take(&mut f.elements) {
            self.add_to(b, &s, Cow::Owned(e));
        }
    }

    /// A shared set, with its first user: declared empty, sized at the end as the base's are.
    /// Rules name it by name (the kernel finds a set of the same batch by name).
    fn declare_shared(&mut self, b: &mut Batch, s: &Set) {
        let id = self.next_id;
        self.next_id += 1;
        let size_at = sets::declare(b, self.fam, TABLE, s, id, 0);
        self.by_name.insert(s.name.clone(), self.sets.len());
        let def = Cow::Owned(Set { elements: Vec::new(), ..s.clone() });
        self.sets.push(BaseSet { def, id, held: 0, size_at, waiting: Vec::new() });
    }

    /// A fragment's chains, its own sets, its rules and the rules it adds to the base's chains.
    fn own_part(&mut self, b: &mut Batch, f: &Fragment, kept: Option<&Kept>) {
        for s in &f.shared_sets {
            if !self.by_name.contains_key(&*s.name) {
                self.declare_shared(b, s);
            }
        }
        let fresh: Vec<&Chain> =
            f.shared_chains.iter().filter(|c| self.chains.insert(c.name.clone())).collect();
        for c in &fresh {
            if let Some(entry) = &c.entry {
                self.entries.insert(c.name.clone(), entry.clone());
            }
        }
        for c in f.chains.iter().chain(fresh.iter().copied()) {
            chain(b, self.fam, c);
        }
        self.chains.extend(f.chains.iter().map(|c| c.name.clone()));
        // The fragment's own sets are known to its rules only.
        let mut own = None;
        if !f.sets.is_empty() {
            let mut index = SetIndex { sets: self.index.sets.clone() };
            for s in &f.sets {
                let id = self.next_id;
                self.next_id += 1;
                let added = f.elements.iter().filter(|(to, _)| to.name == s.name).map(|(_, e)| e);
                let all: Vec<&Element> = s.elements.iter().chain(added).collect();
                sets::declare(b, self.fam, TABLE, s, id, all.len());
                self.room.declare(s, all.len());
                if !all.is_empty() {
                    elements::elements(b, self.fam, TABLE, s, &all, Some(id), false);
                }
                let clients =
                    kept.filter(|_| s.flags.dynamic_timeout.is_some()).and_then(|k| k.get(&*s.name));
                if let Some(clients) = clients {
                    affinity::restore(b, self.fam, &s.name, id, clients);
                }
                index.sets.insert(&s.name, (s, Some(id)));
            }
            own = Some(index);
        }
        for c in f.chains.iter().chain(fresh.iter().copied()) {
            self.rules(b, &c.name, c.rules.iter().chain(&c.tail), own.as_ref());
        }
        for (c, r) in &f.rules {
            if self.chains.contains(&c.name) {
                self.rules(b, &c.name, [r], own.as_ref());
            }
        }
    }

    fn add_to(&mut self, b: &mut Batch, set: &SetRef, e: Cow<'_, Element>) {
        if let Some(i) = self.by_name.get(&*set.name).copied() {
            self.add(b, i, e);
        }
    }

    fn rules<'r>(
        &mut self,
        b: &mut Batch,
        chain: &str,
        rules: impl IntoIterator<Item = &'r Rule>,
        own: Option<&SetIndex<'_>>,
    ) {
        let index = own.unwrap_or(&self.index);
        for r in rules {
            expr::rule(b, self.fam, self.family, TABLE, chain, r, index, &mut self.next_id);
        }
    }

    /// Adds an element to base set `i`, sending what waits once a message's worth does.
    ///
    /// An element of a shared set several fragments give (a pod behind two ports in
    /// `hairpin`) is sent each time: the kernel keeps one, as `nft add element` of one it
    /// holds (no `NLM_F_EXCL`). Remembering which were sent would cost more than the batch
    /// at 100,000 Services (half a million hairpin pairs); the set's count, and so its
    /// declared room, errs on the large side by the repeats.
    fn add(&mut self, b: &mut Batch, i: usize, e: Cow<'_, Element>) {
        let s = &mut self.sets[i];
        s.held += 1;
        s.waiting.push(e.into_owned());
        if s.waiting.len() >= WAITING && !s.def.flags.interval {
            self.send(b, i);
        }
    }

    fn send(&mut self, b: &mut Batch, i: usize) {
        let s = &mut self.sets[i];
        if s.waiting.is_empty() {
            return;
        }
        let all: Vec<&Element> = s.waiting.iter().collect();
        elements::elements(b, self.fam, TABLE, &s.def, &all, Some(s.id), false);
        s.waiting.clear();
    }

    /// Sends what waits, closes the base chains and writes every set's size; returns how full
    /// each set was declared.
    pub(super) fn finish(mut self, b: &mut Batch) -> Room {
        for i in 0..self.sets.len() {
            self.send(b, i);
        }
        for (from, rule) in std::mem::take(&mut self.entries).into_values() {
            self.rules(b, &from.name, [&rule], None);
        }
        let skeleton = self.skeleton;
        for c in skeleton.base.chains.iter().chain(&skeleton.base.shared_chains) {
            self.rules(b, &c.name, &c.tail, None);
        }
        for s in &self.sets {
            if let (Some(at), Some(size)) = (s.size_at, capacity(&s.def, s.held)) {
                b.patch_be32(at, size);
            }
            self.room.declare(&s.def, s.held);
        }
        self.room
    }
}

//! nftables: everything in `table ip tideway` and `table ip6 tideway`, one netlink transaction
//! per sync (both families together), so a failed sync changes nothing.
//!
//! Drift is found by content over netlink: each chain's rules are digested right after they
//! are applied, and the periodic check reads the table back (chains and their headers, rule
//! digests, set elements) and compares it with those digests and with the program
//! ([`tideway_core::drift`]). A repair rewrites only the chains and sets that differ.
//!
//! The check starts with the ruleset generation, which every nf_tables transaction in the
//! namespace moves on by one: when it is still the one our last transaction left, nothing
//! changed and the check ends there (one netlink round trip at any scale).

mod in_use;

use std::collections::HashMap;

use tideway_core::config::ProxyMode;
use tideway_core::drift::{self, Digest, Expected, Found, Repair};
use tideway_core::program::{ChangeSet, Element, Program};
use tideway_core::render::nftables::capacity::Room;
use tideway_core::render::nftables::{TABLE, text};

use super::backend::{Dataplane, DataplaneError, Drift, Retired, Update};
use super::desired::Desired;
use super::keep::Keep;
use crate::exec;
use crate::netlink::nft::{ElementRead, NftNetlink, element_digest, full_batch_room};

/// Sets up to this size are read back whole (extra elements are found too); larger ones are
/// read by key, because a dump costs the kernel time quadratic in the set's size.
const DUMP_UP_TO: usize = 4096;

/// The nftables backend: changes and reading back go over netlink; removing the tables after
/// a mode switch uses the `nft` tool.
#[derive(Default)]
pub struct Nftables {
    netlink: Option<NftNetlink>,
    /// Rule digests by chain, learnt right after the rules were applied (IPv4, IPv6).
    learnt: [HashMap<String, Digest>; 2],
    /// What the last check found (IPv4, IPv6): what a repair rewrites.
    found: [Vec<Found>; 2],
    /// The ruleset generation our last transaction left (or the last check found clean);
    /// `None` when another transaction may have run since.
    generation: Option<u32>,
    /// How full each sized set is (IPv4, IPv6): a change that would overflow one is applied
    /// as a full sync.
    room: [Room; 2],
}

impl std::fmt::Debug for Nftables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nftables").field("connected", &self.netlink.is_some()).finish()
    }
}

impl Nftables {
    /// A backend using `nft` from `PATH`.
    pub fn new() -> Self {
        Nftables::default()
    }

    fn nft(args: &[&str], input: Option<&str>) -> Result<String, DataplaneError> {
        Ok(exec::run("nft", args, input)?)
    }

    fn tables() -> Result<Vec<String>, DataplaneError> {
        let out = Self::nft(&["list", "tables"], None)?;
        Ok(out.lines().map(|l| l.trim().to_string()).collect())
    }

    /// With our table gone, the Services that tracked connections use go in first, in a
    /// transaction of their own ([`in_use`]); the full one follows.
    fn connections_first(&mut self, desired: &Desired<'_>) -> Result<(), DataplaneError> {
        let first = in_use::first(self.netlink()?, desired)?;
        if first.ports.is_empty() {
            return Ok(());
        }
        tracing::info!(
            service_ports = first.ports.len(),
            "our table is gone: the Services that tracked connections use are programmed first"
        );
        self.transaction(|nl| {
            // A few Services: the batch grows past its first room if it needs to.
            nl.apply_tables(full_batch_room(0), |apply| {
                desired.stream_only(&first.ports, |skeleton, fragments| {
                    if first.families.contains(&skeleton.family) {
                        apply.family(skeleton, fragments);
                    }
                });
            })
        })
    }

    fn netlink(&mut self) -> Result<&mut NftNetlink, DataplaneError> {
        if self.netlink.is_none() {
            self.netlink = Some(NftNetlink::open()?);
        }
        Ok(self.netlink.as_mut().expect("just opened"))
    }

    /// Runs our transaction `commit` and notes the generation it leaves, unless another
    /// transaction ran alongside (the next check then reads everything).
    fn transaction<R>(
        &mut self,
        commit: impl FnOnce(&mut NftNetlink) -> Result<R, DataplaneError>,
    ) -> Result<R, DataplaneError> {
        self.generation = None;
        let nl = self.netlink()?;
        let before = nl.generation().ok();
        let done = match commit(nl) {
            Ok(done) => done,
            Err(e) => {
                // A fresh socket for the retry (nothing of this transaction was applied).
                self.netlink = None;
                return Err(e);
            }
        };
        let after = nl.generation().ok();
        if let (Some(b), Some(a)) = (before, after)
            && a.wrapping_sub(b) <= 1
        {
            self.generation = Some(a);
        }
        Ok(done)
    }

    /// Learns the rule digests of the chains just written: all of them after a full update,
    /// else those `changes` filled. A chain that cannot be read is forgotten (the next check
    /// adopts what it finds).
    fn learn(&mut self, i: usize, p: &Program, changes: Option<&ChangeSet>) {
        let chains: Option<Vec<String>> = changes.filter(|cs| !cs.full).map(|cs| {
            for c in &cs.delete_chains {
                self.learnt[i].remove(&*c.name);
            }
            let filled = cs.add_chains.iter().chain(&cs.flush_chains).map(|c| c.name.to_string());
            let edited = cs.add_rules.iter().chain(&cs.delete_rules).map(|(c, _)| c.name.to_string());
            filled.chain(edited).collect()
        });
        self.learn_chains(i, p, chains);
    }

    fn learn_chains(&mut self, i: usize, p: &Program, chains: Option<Vec<String>>) {
        let family = p.family;
        let Ok(nl) = self.netlink() else { return };
        match chains {
            None => match nl.rule_digests(family, None) {
                Ok(all) => self.learnt[i] = all,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read back the rules just applied");
                    self.learnt[i].clear();
                }
            },
            Some(names) => {
                let read: Vec<_> =
                    names.into_iter().map(|n| (nl.rule_digests(family, Some(&n)), n)).collect();
                for (digests, name) in read {
                    match digests {
                        Ok(d) => self.learnt[i].extend(d),
                        Err(e) => {
                            tracing::warn!(error = %e, chain = %name, "cannot read back the rules just applied");
                            self.learnt[i].remove(&name);
                        }
                    }
                }
            }
        }
    }

    /// What family `i`'s table should hold: the program's chains (with the learnt rule
    /// digests) and sets (with their elements' digest when `deep`), and how to read each
    /// set's elements back.
    fn expected<'p>(
        &self,
        i: usize,
        p: &'p Program,
        deep: bool,
    ) -> (Expected, HashMap<String, ElementRead<'p>>) {
        let asm = p.assemble();
        let mut e = Expected::default();
        let mut reads = HashMap::new();
        for c in &asm.chains {
            e.chains.insert(c.def.name.to_string(), (c.def.hook, self.learnt[i].get(&*c.def.name).copied()));
        }
        for s in asm.sets {
            let name = s.def.name.to_string();
            if !deep || s.def.flags.dynamic_timeout.is_some() {
                e.sets.insert(name, None);
                continue;
            }
            let mut unique: Vec<&Element> = s.elements;
            unique.sort();
            unique.dedup();
            e.sets.insert(name.clone(), Some(element_digest(s.def, &unique)));
            let read = if s.def.flags.interval || unique.len() <= DUMP_UP_TO {
                ElementRead::Dump
            } else {
                ElementRead::Lookup(s.def, unique)
            };
            reads.insert(name, read);
        }
        (e, reads)
    }
}

impl Dataplane for Nftables {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Nftables
    }

    fn apply(&mut self, desired: &Desired<'_>, update: Update<'_>) -> Result<(), DataplaneError> {
        let changes = match update {
            Update::Changes(cs) if cs.iter().any(|c| c.full) => None,
            Update::Changes(cs) if cs.iter().zip(&self.room).all(|(c, room)| room.fits(c)) => Some(cs),
            Update::Changes(_) => {
                tracing::info!("a map outgrew the room it was declared with; rewriting the table with more");
                None
            }
            Update::Full => None,
        };
        match changes {
            Some(cs) => {
                self.transaction(|nl| nl.apply_changes(desired.kept(), cs))?;
                for (room, c) in self.room.iter_mut().zip(cs) {
                    room.apply(c);
                }
            }
            None => {
                self.connections_first(desired)?;
                // A port and an endpoint each put about two elements in the maps.
                let room_for = full_batch_room(2 * desired.size());
                // The table is recreated: ClientIP affinity's clients are carried over.
                let clients = self.netlink()?.affinity_clients().unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot read the affinity sets; clients lose their endpoint");
                    Default::default()
                });
                self.room = self.transaction(|nl| {
                    nl.apply_full(room_for, |apply| {
                        apply.keep_clients(clients);
                        desired.stream(|skeleton, fragments| apply.family(skeleton, fragments));
                    })
                })?;
            }
        }
        for (i, p) in desired.skeletons().into_iter().enumerate() {
            self.learn(i, p, changes.map(|cs| cs[i]));
        }
        Ok(())
    }

    fn verify(&mut self, desired: &Desired<'_>, deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let now = self.netlink()?.generation()?;
        if self.generation == Some(now) {
            return Ok(Vec::new());
        }
        let mut drift = Vec::new();
        for (i, p) in desired.programs().into_iter().enumerate() {
            let (expected, reads) = self.expected(i, p, deep);
            let observed = self.netlink()?.observe(p.family, &reads)?;
            // Chains whose digest could not be learnt are adopted as they are now.
            if let Some(o) = &observed {
                for (name, (_, rules)) in &expected.chains {
                    if let (None, Some(seen)) = (rules, o.chains.get(name)) {
                        self.learnt[i].insert(name.clone(), seen.rules);
                    }
                }
            }
            let found = drift::compare(&expected, observed.as_ref());
            let table = format!("table {} {TABLE}", text::family_kw(p.family));
            drift.extend(found.iter().map(|f| Drift {
                kind: f.kind,
                object: if f.name.is_empty() { table.clone() } else { format!("{table} {}", f.name) },
                detail: f.detail.clone(),
            }));
            self.found[i] = found;
        }
        // Read as applied: the generation read before the check is ours again.
        self.generation = drift.is_empty().then_some(now);
        Ok(drift)
    }

    fn repair(&mut self, desired: &Desired<'_>, _drift: &[Drift]) -> Result<(), DataplaneError> {
        let plans = self.found.clone().map(|f| Repair::plan(&f));
        if plans.iter().any(|p| p.full) {
            self.connections_first(desired)?;
        }
        let desired = desired.programs();
        let work: Vec<(&Program, Repair)> =
            desired.into_iter().zip(plans.iter().cloned()).filter(|(_, r)| !r.is_empty()).collect();
        self.transaction(|nl| nl.repair(&work))?;
        for (i, (p, plan)) in desired.into_iter().zip(plans).enumerate() {
            for name in &plan.delete_chains {
                self.learnt[i].remove(name);
            }
            if plan.full {
                self.room[i] = Room::of(p);
            } else {
                self.room[i].redeclared(p, &plan.add_sets);
            }
            if plan.full {
                self.learn_chains(i, p, None);
            } else if !plan.is_empty() {
                self.learn_chains(i, p, Some(plan.filled_chains().cloned().collect()));
            }
            self.found[i].clear();
        }
        Ok(())
    }

    fn cleanup(&mut self, _keep: &Keep) -> Result<Retired, DataplaneError> {
        self.learnt = Default::default();
        self.generation = None;
        self.room = Default::default();
        let tables = Self::tables()?;
        let mut script = String::new();
        for fam in ["ip", "ip6"] {
            if tables.iter().any(|t| *t == format!("table {fam} {TABLE}")) {
                script.push_str(&format!("delete table {fam} {TABLE}\n"));
            }
        }
        if !script.is_empty() {
            Self::nft(&["-f", "-"], Some(&script))?;
        }
        Ok(Retired::Done)
    }

    fn present(&mut self) -> Result<bool, DataplaneError> {
        let tables = Self::tables()?;
        Ok(tables.iter().any(|t| *t == format!("table ip {TABLE}") || *t == format!("table ip6 {TABLE}")))
    }
}

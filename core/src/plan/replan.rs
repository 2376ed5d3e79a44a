//! Keeping a [`Ruleset`] current: the Services that changed are planned again, each plan
//! claiming every frontend it asks for, and a contested frontend goes to its owner (the first
//! claimant in key order), which may change plans of other Services too.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::compile::plan_service;
use super::ruleset::{Changed, Frontend, PlanKey, Ruleset, ServicePortPlan};
use super::tally::Tally;
use crate::cluster::{ClusterState, ServiceSlices};
use crate::model::{Service, ServiceName};

/// A Service to plan again: its name, and the Service with its slices unless it is gone.
type Replan<'a> = (&'a ServiceName, Option<(&'a Service, ServiceSlices<'a>)>);

/// Plans that changed, each with its plan before, in the order found: a key's first entry
/// is the one that counts.
type Log = Vec<(PlanKey, Option<ServicePortPlan>)>;

/// Plans taken out, by key, until their Services are planned again.
type Old = FxHashMap<PlanKey, ServicePortPlan>;

impl Ruleset {
    /// Re-plans `services` from `cluster` and returns the keys whose plans changed, including
    /// plans of other Services whose frontends changed owner as a consequence, each with its
    /// plan before the update (`None` for a new one).
    pub fn update<'a>(
        &mut self,
        cluster: &'a ClusterState,
        services: impl IntoIterator<Item = &'a ServiceName>,
    ) -> Changed {
        // Each Service once, however often it is named.
        let names: BTreeSet<&ServiceName> = services.into_iter().collect();
        let found = names
            .into_iter()
            .map(|name| (name, cluster.service(name).map(|svc| (svc, cluster.endpoint_slices_for(name)))));
        let mut log = Log::new();
        self.replan(found, Some(&mut log));
        // A stable sort keeps each key's first entry first.
        log.sort_by(|a, b| a.0.cmp(&b.0));
        log.dedup_by(|later, first| later.0 == first.0);
        log.into_iter().collect()
    }

    /// Plans every Service of `cluster`, walking the Services and their slices side by side
    /// (a whole compile, whose caller needs no list of changes).
    pub(super) fn fill(&mut self, cluster: &ClusterState) {
        self.replan(
            cluster.services_with_slices().map(|(svc, slices)| (&svc.name, Some((svc, slices)))),
            None,
        );
    }

    /// Plans `services` again, logging each plan that changed into `log` if there is one.
    fn replan<'s>(&mut self, services: impl Iterator<Item = Replan<'s>>, mut log: Option<&mut Log>) {
        let mut old = Old::default();
        let mut touched: Vec<Frontend> = Vec::new();
        let mut planned: Vec<(PlanKey, ServicePortPlan)> = Vec::with_capacity(services.size_hint().0);
        for (name, found) in services {
            self.forget(name, &mut old, &mut touched);
            if let Some((svc, slices)) = found {
                self.plan_in(name, svc, slices, &mut touched, &mut planned);
            }
        }
        self.settle(&mut planned, &mut old, log.as_deref_mut());
        // Into an empty map (a whole compile), the plans go in bulk: sorted once, in runs.
        if self.services.is_empty() {
            self.services = planned.into_iter().collect();
        } else {
            self.services.extend(planned);
        }
        self.hand_over(touched, log.as_deref_mut());
        if let Some(log) = log {
            let gone = old.into_iter().filter(|(k, _)| !self.services.contains_key(k));
            log.extend(gone.map(|(k, p)| (k, Some(p))));
        }
    }

    /// Takes `name`'s plans out, keeping each in `old` and its frontends in `touched`.
    fn forget(&mut self, name: &ServiceName, old: &mut Old, touched: &mut Vec<Frontend>) {
        self.health_checks.remove(name);
        for key in self.by_service.remove(name).unwrap_or_default() {
            let Some(plan) = self.services.remove(&key) else { continue };
            *self.endpoint_totals.entry(plan.family).or_default() -= plan.reachable_count();
            self.tally -= Tally::of(&plan);
            for f in plan.requested_frontends() {
                self.unclaim(f, &key);
                touched.push(f);
            }
            old.insert(key, plan);
        }
    }

    /// Plans `svc` into `planned`, each plan claiming every frontend it asks for.
    fn plan_in(
        &mut self,
        name: &ServiceName,
        svc: &Service,
        slices: ServiceSlices<'_>,
        touched: &mut Vec<Frontend>,
        planned: &mut Vec<(PlanKey, ServicePortPlan)>,
    ) {
        let (plans, health) = plan_service(svc, slices, &self.node);
        if let Some(h) = health {
            self.health_checks.insert(name.clone(), h);
        }
        if plans.is_empty() {
            return;
        }
        let mut keys = Vec::with_capacity(plans.len());
        for plan in plans {
            let key = (plan.family, plan.name.clone());
            for f in plan.requested_frontends() {
                self.claim(f, &key);
                touched.push(f);
            }
            *self.endpoint_totals.entry(plan.family).or_default() += plan.reachable_count();
            keys.push(key.clone());
            planned.push((key, plan));
        }
        self.by_service.insert(name.clone(), keys);
    }

    /// The new plans keep their contested frontends only where they own them; each is
    /// counted in and logged when it differs from before.
    fn settle(
        &mut self,
        planned: &mut [(PlanKey, ServicePortPlan)],
        old: &mut Old,
        mut log: Option<&mut Log>,
    ) {
        for (key, plan) in planned {
            let claims = &self.claims;
            if plan.requested_frontends().any(|f| claims.get(&f).is_some_and(|c| c.len() > 1)) {
                plan.restrict_to(|f| claims.get(f).and_then(|c| c.first()) == Some(&*key));
            }
            self.tally += Tally::of(plan);
            if let Some(log) = log.as_deref_mut()
                && old.get(key) != Some(&*plan)
            {
                log.push((key.clone(), old.remove(key)));
            }
        }
    }

    /// Other claimants of the touched frontends may have gained or lost one: each takes what
    /// it owns now, and is logged with its plan before when that changed it.
    fn hand_over(&mut self, touched: Vec<Frontend>, mut log: Option<&mut Log>) {
        let mut others: BTreeSet<PlanKey> = BTreeSet::new();
        for f in touched {
            let Some(c) = self.claims.get(&f) else { continue };
            for k in c {
                // A sole claimant changes only if it was shadowed (none is, most of the time).
                let shadowed = || {
                    self.tally.shadowed > 0 && self.services.get(k).is_some_and(|p| !p.shadowed.is_empty())
                };
                if c.len() > 1 || shadowed() {
                    others.insert(k.clone());
                }
            }
        }
        for key in others {
            let claims = &self.claims;
            let Some(plan) = self.services.get_mut(&key) else { continue };
            let before = plan.clone();
            plan.restrict_to(|f| claims.get(f).and_then(|c| c.first()) == Some(&key));
            if before != *plan {
                self.tally -= Tally::of(&before);
                self.tally += Tally::of(plan);
                if let Some(log) = log.as_deref_mut() {
                    log.push((key, Some(before)));
                }
            }
        }
    }

    fn claim(&mut self, f: Frontend, key: &PlanKey) {
        let c = self.claims.entry(f).or_default();
        if let Err(i) = c.binary_search(key) {
            c.insert(i, key.clone());
        }
    }

    fn unclaim(&mut self, f: Frontend, key: &PlanKey) {
        if let Some(c) = self.claims.get_mut(&f) {
            if let Ok(i) = c.binary_search(key) {
                c.remove(i);
            }
            if c.is_empty() {
                self.claims.remove(&f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{Tally, compile};
    use crate::testing::*;

    #[test]
    fn a_service_named_twice_is_planned_once() {
        let cluster = synthetic_cluster(5, 2);
        let node = mk_node_context();
        let mut ruleset = compile(&cluster, &node);
        let name = cluster.services().nth(2).expect("a Service").name.clone();
        let changed = ruleset.update(&cluster, [&name, &name]);
        assert!(changed.is_empty(), "nothing changed: {changed:?}");
        assert_eq!(ruleset.tally(), Tally::sum(ruleset.services.values()), "counted once");
        assert_eq!(ruleset, compile(&cluster, &node));
    }
}

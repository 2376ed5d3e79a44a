//! Services, and the versions that say how far a reader of the cluster has come.
//!
//! Since Kubernetes 1.35 (KEP-5504) a `resourceVersion` is an integer that grows with every
//! write, comparable between objects of one kind. Two versions follow from it:
//!
//! * [`ClusterState::services_version`]: the highest Service version applied. Watch events
//!   arrive in version order, so an agent that programmed everything it had seen when this was
//!   `R` has every Service change up to `R` programmed: its report needs `R` alone, not a list.
//! * [`Service::spec_version`]: the version at which the Service's `metadata.generation` took
//!   its current value, as far as this reader saw it (the version of the object when first
//!   seen at this generation). Its rules are programmed on a node once the node's `R` reaches
//!   it; a status-only change does not move it, so it holds nothing back.
//!
//! Versions that are not integers (an API server before the guarantee, storage other than
//! etcd) leave both unknown, and readers say they cannot tell.

use super::registry::{Keyed, StateKind};
use super::state::{ClusterState, Snapshot};
use super::store::service_names;
use crate::model::{Service, ServiceName};

impl StateKind for Service {
    const KIND: &'static str = "Service";
    const NAMESPACED: bool = true;
    fn names(&self) -> (&str, &str) {
        (&self.name.namespace, &self.name.name)
    }
    fn listed(snapshot: &mut Snapshot) -> &mut Vec<Self> {
        &mut snapshot.services
    }
    fn apply(state: &mut ClusterState, mut svc: Self) -> bool {
        state.saw_service_version(svc.resource_version);
        let old = state.services.get(&svc.name).map(|o| (o.generation, o.spec_version));
        svc.spec_version = spec_version(old, &svc);
        let name = svc.name.clone();
        let changed = state.services.apply(svc);
        if changed {
            state.changes.services.insert(name);
            state.changes.service_events += 1;
        }
        changed
    }
    fn replace(state: &mut ClusterState, mut services: Vec<Self>) {
        for svc in &mut services {
            state.saw_service_version(svc.resource_version);
            let old = state.services.get(&svc.name).map(|o| (o.generation, o.spec_version));
            svc.spec_version = spec_version(old, svc);
        }
        let changed = state.services.replace(services);
        state.changes.service_events += changed.len() as u64;
        state.changes.services.extend(service_names(changed));
    }
    fn held(state: &ClusterState) -> Box<dyn Iterator<Item = &Self> + '_> {
        Box::new(state.services.values())
    }
}

impl Keyed for Service {
    fn delete(state: &mut ClusterState, namespace: &str, name: &str) -> bool {
        let removed = state.services.delete(&(namespace, name)).is_some();
        if removed {
            state.changes.services.insert(ServiceName::new(namespace, name));
            state.changes.service_events += 1;
        }
        removed
    }
    fn get<'s>(state: &'s ClusterState, namespace: &str, name: &str) -> Option<&'s Self> {
        state.services.get(&(namespace, name))
    }
}

impl ClusterState {
    /// The Service called `name`.
    pub fn service(&self, name: &ServiceName) -> Option<&Service> {
        self.services.get(name)
    }

    /// Every Service, sorted by name.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values()
    }

    /// The highest Service `resourceVersion` applied, never lower than before (a deletion or a
    /// relist does not take it back); `None` while no Service had an integer version.
    pub fn services_version(&self) -> Option<u64> {
        self.services_version
    }

    fn saw_service_version(&mut self, version: Option<u64>) {
        self.services_version = self.services_version.max(version);
    }
}

/// The version at which `new`'s generation took its value: kept from the version before
/// (`old`: its generation and spec version) while the generation stays, else the version of
/// `new` itself.
pub fn spec_version(old: Option<(i64, Option<u64>)>, new: &Service) -> Option<u64> {
    match old {
        Some((generation, Some(version))) if generation == new.generation => Some(version),
        _ => new.resource_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(generation: i64, version: Option<u64>) -> Service {
        let mut s = Service::new(ServiceName::new("ns", "web"));
        s.generation = generation;
        s.resource_version = version;
        s
    }

    #[test]
    fn the_spec_version_moves_with_the_generation_only() {
        let mut state = ClusterState::new();
        let name = ServiceName::new("ns", "web");
        state.apply(svc(1, Some(10)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(10));
        // A write that leaves the spec (status, labels): a new version, the same generation.
        state.apply(svc(1, Some(12)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(10));
        state.apply(svc(2, Some(15)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(15));
        // A relist that finds it unchanged keeps it; one that finds a new generation moves it.
        state.replace(vec![svc(2, Some(15))]);
        assert_eq!(state.service(&name).unwrap().spec_version, Some(15));
        state.replace(vec![svc(3, Some(20))]);
        assert_eq!(state.service(&name).unwrap().spec_version, Some(20));
        assert_eq!(state.services_version(), Some(20));
    }

    #[test]
    fn the_services_version_only_grows() {
        let mut state = ClusterState::new();
        assert_eq!(state.services_version(), None);
        state.apply(svc(1, None));
        assert_eq!(state.services_version(), None, "versions that do not compare say nothing");
        state.apply(svc(1, Some(30)));
        state.delete::<Service>("ns", "web");
        assert_eq!(state.services_version(), Some(30), "a deletion does not take it back");
        state.replace(vec![svc(1, Some(25))]);
        assert_eq!(state.services_version(), Some(30));
    }

    #[test]
    fn a_service_first_seen_without_a_version_gets_one_when_it_has_one() {
        let mut state = ClusterState::new();
        state.apply(svc(1, None));
        state.apply(svc(1, Some(40)));
        assert_eq!(state.service(&ServiceName::new("ns", "web")).unwrap().spec_version, Some(40));
    }
}

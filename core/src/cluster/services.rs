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

use super::ClusterState;
use super::store::service_names;
use crate::model::{Service, ServiceName};

impl ClusterState {
    /// Inserts or updates a Service; returns false when nothing changed.
    pub fn apply_service(&mut self, mut svc: Service) -> bool {
        self.saw_service_version(svc.resource_version);
        let old = self.services.get(&svc.name).map(|o| (o.generation, o.spec_version));
        svc.spec_version = spec_version(old, &svc);
        let name = svc.name.clone();
        let changed = self.services.apply(svc);
        if changed {
            self.changes.services.insert(name);
            self.changes.service_events += 1;
        }
        changed
    }

    /// Removes a Service; returns false when it was absent.
    pub fn delete_service(&mut self, name: &ServiceName) -> bool {
        let removed = self.services.delete(name).is_some();
        if removed {
            self.changes.services.insert(name.clone());
            self.changes.service_events += 1;
        }
        removed
    }

    /// Replaces every Service (after a relist), recording only real differences.
    pub fn replace_services(&mut self, mut services: Vec<Service>) {
        for svc in &mut services {
            self.saw_service_version(svc.resource_version);
            let old = self.services.get(&svc.name).map(|o| (o.generation, o.spec_version));
            svc.spec_version = spec_version(old, svc);
        }
        let changed = self.services.replace(services);
        self.changes.service_events += changed.len() as u64;
        self.changes.services.extend(service_names(changed));
    }

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
        state.apply_service(svc(1, Some(10)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(10));
        // A write that leaves the spec (status, labels): a new version, the same generation.
        state.apply_service(svc(1, Some(12)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(10));
        state.apply_service(svc(2, Some(15)));
        assert_eq!(state.service(&name).unwrap().spec_version, Some(15));
        // A relist that finds it unchanged keeps it; one that finds a new generation moves it.
        state.replace_services(vec![svc(2, Some(15))]);
        assert_eq!(state.service(&name).unwrap().spec_version, Some(15));
        state.replace_services(vec![svc(3, Some(20))]);
        assert_eq!(state.service(&name).unwrap().spec_version, Some(20));
        assert_eq!(state.services_version(), Some(20));
    }

    #[test]
    fn the_services_version_only_grows() {
        let mut state = ClusterState::new();
        assert_eq!(state.services_version(), None);
        state.apply_service(svc(1, None));
        assert_eq!(state.services_version(), None, "versions that do not compare say nothing");
        state.apply_service(svc(1, Some(30)));
        state.delete_service(&ServiceName::new("ns", "web"));
        assert_eq!(state.services_version(), Some(30), "a deletion does not take it back");
        state.replace_services(vec![svc(1, Some(25))]);
        assert_eq!(state.services_version(), Some(30));
    }

    #[test]
    fn a_service_first_seen_without_a_version_gets_one_when_it_has_one() {
        let mut state = ClusterState::new();
        state.apply_service(svc(1, None));
        state.apply_service(svc(1, Some(40)));
        assert_eq!(state.service(&ServiceName::new("ns", "web")).unwrap().spec_version, Some(40));
    }
}

//! The EndpointSlices a state holds: each stored once, found by name (events name a slice)
//! and by Service (the planner and DNS read a Service's slices). Both orders are sets of
//! pointers to the one copy, keyed by the slice's own fields: no key strings of their own.

use std::collections::btree_set::Range;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use super::store::{Key, ordered_by_key};
use crate::model::{EndpointSlice, Service};

/// Every EndpointSlice, by namespace.
#[derive(Debug, Clone, Default)]
pub(crate) struct SliceIndex {
    namespaces: BTreeMap<String, NamespaceSlices>,
}

/// One namespace's slices, in both orders.
#[derive(Debug, Clone, Default)]
struct NamespaceSlices {
    by_name: BTreeSet<ByName>,
    by_service: BTreeSet<ByService>,
}

/// A slice in slice-name order.
#[derive(Debug, Clone)]
struct ByName(Arc<EndpointSlice>);

/// A slice in Service-then-slice-name order.
#[derive(Debug, Clone)]
struct ByService(Arc<EndpointSlice>);

impl SliceIndex {
    /// The slice `name` in `namespace`.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&EndpointSlice> {
        let slice = self.namespaces.get(namespace)?.by_name.get(&("", name) as &dyn Key)?;
        Some(&slice.0)
    }

    /// Stores `slice` in place of the one of the same name; the one replaced.
    pub(crate) fn insert(&mut self, slice: EndpointSlice) -> Option<Arc<EndpointSlice>> {
        if !self.namespaces.contains_key(&slice.namespace) {
            self.namespaces.insert(slice.namespace.clone(), NamespaceSlices::default());
        }
        let ns = self.namespaces.get_mut(&slice.namespace)?;
        let slice = Arc::new(slice);
        let old = ns.by_name.replace(ByName(Arc::clone(&slice))).map(|old| old.0);
        if let Some(old) = &old {
            ns.by_service.remove(&(old.service.as_str(), old.name.as_str()) as &dyn Key);
        }
        ns.by_service.insert(ByService(slice));
        old
    }

    /// Removes the slice `name` in `namespace`; the one removed.
    pub(crate) fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<EndpointSlice>> {
        let ns = self.namespaces.get_mut(namespace)?;
        let old = ns.by_name.take(&("", name) as &dyn Key)?.0;
        ns.by_service.remove(&(old.service.as_str(), name) as &dyn Key);
        if ns.by_name.is_empty() {
            self.namespaces.remove(namespace);
        }
        Some(old)
    }

    /// Every slice, by namespace, then name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &EndpointSlice> {
        self.namespaces.values().flat_map(|ns| ns.by_name.iter()).map(|s| &*s.0)
    }

    /// The slices of Service `service` in `namespace`, by slice name.
    pub(crate) fn for_service(&self, namespace: &str, service: &str) -> ServiceSlices<'_> {
        let Some(ns) = self.namespaces.get(namespace) else { return ServiceSlices::NONE };
        let from = (service, "");
        let rest = ns.by_service.range::<dyn Key, _>((Bound::Included(&from as &dyn Key), Bound::Unbounded));
        ServiceSlices::run(rest, service)
    }

    /// Each of `services` (in name order) with its slices: one walk of the Services and of
    /// each namespace's slices side by side instead of a lookup per Service.
    pub(crate) fn with_services<'a>(
        &'a self,
        services: impl Iterator<Item = &'a Service>,
    ) -> impl Iterator<Item = (&'a Service, ServiceSlices<'a>)> {
        let mut namespace: Option<(&'a str, Option<Range<'a, ByService>>)> = None;
        services.map(move |svc| {
            let ns = svc.name.namespace.as_str();
            if namespace.as_ref().is_none_or(|(current, _)| *current != ns) {
                let slices = self.namespaces.get(ns).map(|n| n.by_service.range::<dyn Key, _>(..));
                namespace = Some((ns, slices));
            }
            let Some((_, Some(cursor))) = &mut namespace else { return (svc, ServiceSlices::NONE) };
            // Past slices of earlier Services (the one before, and Services that do not exist).
            while cursor.clone().next().is_some_and(|s| s.0.service < svc.name.name) {
                cursor.next();
            }
            (svc, ServiceSlices::run(cursor.clone(), &svc.name.name))
        })
    }
}

/// The EndpointSlices of one Service, sorted by slice name
/// ([`ClusterState::endpoint_slices_for`](super::ClusterState::endpoint_slices_for),
/// [`ClusterState::services_with_slices`](super::ClusterState::services_with_slices)).
#[derive(Debug, Clone)]
pub struct ServiceSlices<'a> {
    /// Slices from the Service's first on, and the Service's name (a stored slice's);
    /// `None` once past its last.
    run: Option<(Range<'a, ByService>, &'a str)>,
}

impl<'a> ServiceSlices<'a> {
    const NONE: ServiceSlices<'a> = ServiceSlices { run: None };

    /// The slices at the start of `rest` that belong to `service`.
    fn run(rest: Range<'a, ByService>, service: &str) -> Self {
        match rest.clone().next() {
            Some(first) if first.0.service == service => {
                ServiceSlices { run: Some((rest, &first.0.service)) }
            }
            _ => Self::NONE,
        }
    }
}

impl<'a> Iterator for ServiceSlices<'a> {
    type Item = &'a EndpointSlice;

    fn next(&mut self) -> Option<&'a EndpointSlice> {
        let (rest, service) = self.run.as_mut()?;
        match rest.next() {
            Some(slice) if slice.0.service == *service => Some(&slice.0),
            _ => {
                self.run = None;
                None
            }
        }
    }
}

impl Key for ByService {
    /// Service, then slice name.
    fn key(&self) -> (&str, &str) {
        (&self.0.service, &self.0.name)
    }
}

ordered_by_key!(ByService);

impl Key for ByName {
    /// The slice name (within its namespace).
    fn key(&self) -> (&str, &str) {
        ("", &self.0.name)
    }
}

ordered_by_key!(ByName);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServiceName;
    use crate::testing::mk_slice;

    /// Random inserts, moves between Services and removals, checked after each step against
    /// a map from (namespace, slice name) to Service.
    #[test]
    fn both_orders_agree_with_a_plain_map_through_a_random_walk() {
        let (namespaces, services) = (["a", "b"], ["s", "s-1", "t", "zz"]);
        let mut model: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut index = SliceIndex::default();
        let mut x: u64 = 7;
        let mut roll = |n: usize| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as usize % n
        };
        for _ in 0..2000 {
            let (ns, name) = (namespaces[roll(2)], format!("slice-{}", roll(12)));
            if roll(4) == 0 {
                let removed = index.remove(ns, &name).map(|s| s.service.clone());
                assert_eq!(removed, model.remove(&(ns.to_string(), name)));
            } else {
                let service = services[roll(4)];
                let mut slice = mk_slice(ns, service).name(&name).build();
                slice.service = service.into();
                let replaced = index.insert(slice).map(|s| s.service.clone());
                assert_eq!(replaced, model.insert((ns.to_string(), name), service.to_string()));
            }
            let all: Vec<(String, String, String)> =
                index.iter().map(|s| (s.namespace.clone(), s.name.clone(), s.service.clone())).collect();
            let want: Vec<(String, String, String)> =
                model.iter().map(|((ns, n), svc)| (ns.clone(), n.clone(), svc.clone())).collect();
            assert_eq!(all, want);
            let svcs: Vec<Service> = namespaces
                .iter()
                .flat_map(|ns| services.map(|s| Service::new(ServiceName::new(*ns, s))))
                .collect();
            let walked: Vec<Vec<String>> = index
                .with_services(svcs.iter())
                .map(|(_, run)| run.map(|s| s.name.clone()).collect())
                .collect();
            for (svc, walked) in svcs.iter().zip(walked) {
                let want: Vec<String> = model
                    .iter()
                    .filter(|((ns, _), s)| *ns == svc.name.namespace && **s == svc.name.name)
                    .map(|((_, n), _)| n.clone())
                    .collect();
                let looked_up: Vec<String> =
                    index.for_service(&svc.name.namespace, &svc.name.name).map(|s| s.name.clone()).collect();
                assert_eq!((&walked, &looked_up), (&want, &want), "{}", svc.name);
            }
        }
    }
}

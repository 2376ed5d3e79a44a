//! MetalLB's `ServiceL2Status`es found by the Service they name: the store keeps them by
//! their own names (a delete names the object, not its Service), the operator asks by Service.
//! Kept as they change; knows nothing of the state.

use std::collections::{BTreeMap, BTreeSet};

use super::store::ChangedKey;
use crate::model::ServiceName;

/// Which status names which Service, both ways.
#[derive(Debug, Clone, Default)]
pub(super) struct StatusIndex {
    /// The Service each status (namespace, name) names.
    service_of: BTreeMap<ChangedKey, ServiceName>,
    /// The statuses naming each Service.
    by_service: BTreeMap<ServiceName, BTreeSet<ChangedKey>>,
}

impl StatusIndex {
    /// Records that the status `key` now names `service` (None: the status is gone); returns
    /// the Services whose statuses changed (the one it named before, the one it names now).
    pub(super) fn set(&mut self, key: ChangedKey, service: Option<&ServiceName>) -> Vec<ServiceName> {
        let mut touched = Vec::new();
        if let Some(old) = self.service_of.remove(&key) {
            if let Some(keys) = self.by_service.get_mut(&old) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_service.remove(&old);
                }
            }
            touched.push(old);
        }
        if let Some(svc) = service {
            self.by_service.entry(svc.clone()).or_default().insert(key.clone());
            self.service_of.insert(key, svc.clone());
            if !touched.contains(svc) {
                touched.push(svc.clone());
            }
        }
        touched
    }

    /// The first status (by namespace, then name) naming `service`: one speaker's, as MetalLB
    /// keeps one per Service (two only for a moment while the announcer moves).
    pub(super) fn first(&self, service: &ServiceName) -> Option<&ChangedKey> {
        self.by_service.get(service)?.first()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_found_by_its_service_until_it_names_another_or_goes() {
        let mut index = StatusIndex::default();
        let (web, db) = (ServiceName::new("shop", "web"), ServiceName::new("shop", "db"));
        let key = |name: &str| ("metallb-system".to_string(), name.to_string());
        let only_web = std::slice::from_ref(&web);
        assert_eq!(index.set(key("l2-b"), Some(&web)), only_web);
        assert_eq!(index.set(key("l2-a"), Some(&web)), only_web);
        assert_eq!(index.first(&web), Some(&key("l2-a")), "two for a moment: the first by name");
        assert_eq!(index.set(key("l2-a"), Some(&db)), [web.clone(), db.clone()]);
        assert_eq!((index.first(&web), index.first(&db)), (Some(&key("l2-b")), Some(&key("l2-a"))));
        assert_eq!(index.set(key("l2-b"), None), only_web);
        assert_eq!(index.first(&web), None);
        assert!(index.set(key("l2-b"), None).is_empty(), "gone already");
    }
}

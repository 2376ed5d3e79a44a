//! `metadata.resourceVersion` for the lab's objects, as an API server gives them: one counter
//! for the whole lab, and an object takes its next value each time it changes. Readers compare
//! them (a node's programmed version against a Service's), so the lab must not leave them out:
//! without them every "programmed on" would read "cannot tell".

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The versions given so far.
#[derive(Debug, Clone, Default)]
pub struct ResourceVersions {
    /// The last version given.
    last: u64,
    /// (kind, namespace, name) -> the object as last stamped (without its version), and its
    /// version.
    objects: BTreeMap<(String, String, String), (String, u64)>,
}

impl ResourceVersions {
    /// Stamps each of `objects` with its version: the one it had while unchanged, else the next.
    /// Objects no longer present are forgotten (one that comes back is new).
    pub fn stamp(&mut self, objects: &mut [Value]) {
        let mut seen = BTreeMap::new();
        for o in objects.iter_mut() {
            if let Some(meta) = o["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
            }
            let text = o.to_string();
            let text_of = |field: &str| o["metadata"][field].as_str().unwrap_or_default().to_string();
            let key =
                (o["kind"].as_str().unwrap_or_default().to_string(), text_of("namespace"), text_of("name"));
            let version = match self.objects.remove(&key) {
                Some((old, version)) if old == text => version,
                _ => {
                    self.last += 1;
                    self.last
                }
            };
            o["metadata"]["resourceVersion"] = json!(version.to_string());
            seen.insert(key, (text, version));
        }
        self.objects = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(o: &Value) -> u64 {
        o["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
    }

    #[test]
    fn an_object_keeps_its_version_until_it_changes_and_versions_only_grow() {
        let svc = |port: u16| json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo"}, "spec": {"ports": [{"port": port}]}});
        let node = json!({"kind": "Node", "metadata": {"name": "node-a"}});
        let mut v = ResourceVersions::default();
        let mut objects = vec![svc(80), node.clone()];
        v.stamp(&mut objects);
        let (web, node_a) = (version(&objects[0]), version(&objects[1]));
        assert!(web != node_a && web > 0 && node_a > 0);

        let mut again = vec![svc(80), node.clone()];
        v.stamp(&mut again);
        assert_eq!((version(&again[0]), version(&again[1])), (web, node_a), "unchanged");
        // Stamping what was stamped (the file read back) changes nothing either.
        v.stamp(&mut again);
        assert_eq!(version(&again[0]), web);

        let mut changed = vec![svc(81), node.clone()];
        v.stamp(&mut changed);
        assert!(version(&changed[0]) > web.max(node_a), "a change takes the next version");
        assert_eq!(version(&changed[1]), node_a);

        // Gone, then back: a new object, a new version.
        v.stamp(&mut [svc(81)]);
        let mut back = vec![svc(81), node];
        v.stamp(&mut back);
        assert!(version(&back[1]) > version(&changed[0]));
    }
}

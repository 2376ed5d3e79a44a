//! Field ownership as the API server keeps it (structured-merge-diff, simplified): every
//! field of an object is owned by the field managers that set it. Maps are fields of fields;
//! lists and scalars are single fields (Tideway's lists are atomic or replaced whole).
//!
//! * An apply by manager M sets the fields its configuration names. A field another manager
//!   owns with a different value is a conflict (409) unless the apply is forced, which moves
//!   the field to M; the same value is shared. Fields M applied before and omits now are
//!   removed, unless another manager owns them too.
//! * An update (create, PUT, merge patch, or a change the test makes) gives its manager the
//!   fields it changed, taking them from the others.
//! * Applies to `/status` touch only `status`; applies to the object never do.
//!
//! The sets are shown in `metadata.managedFields` in the `fieldsV1` form.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// A field: the keys from the object's root.
pub(super) type Path = Vec<String>;

/// Who owns what, per (manager, operation, subresource).
#[derive(Debug, Default, Clone)]
pub(super) struct Owners(BTreeMap<(String, &'static str, String), BTreeSet<Path>>);

/// Metadata the server keeps, never a manager's field.
const SERVER_META: &[&str] =
    &["name", "namespace", "resourceVersion", "uid", "generation", "managedFields", "creationTimestamp"];

/// The fields `v` sets, within `sub` ("status": only status; "": all but status).
pub(super) fn fields(v: &Value, sub: &str) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    for (k, child) in v.as_object().into_iter().flatten() {
        let in_scope = if sub == "status" { k == "status" } else { k != "status" };
        if !in_scope || k == "apiVersion" || k == "kind" {
            continue;
        }
        let mut path = vec![k.clone()];
        if k == "metadata" {
            for (m, mv) in child.as_object().into_iter().flatten() {
                if !SERVER_META.contains(&m.as_str()) {
                    path.push(m.clone());
                    leaves(mv, &mut path, &mut out);
                    path.pop();
                }
            }
        } else {
            leaves(child, &mut path, &mut out);
        }
    }
    out
}

fn leaves(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, child) in map {
                path.push(k.clone());
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// True when applying `wanted` over `stored` changes nothing: equal, or an empty map over a
/// map (an empty map in a configuration only claims the map).
fn same(stored: Option<&Value>, wanted: Option<&Value>) -> bool {
    stored == wanted
        || (wanted.is_some_and(|w| w.as_object().is_some_and(Map::is_empty))
            && stored.is_some_and(Value::is_object))
}

fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn set(v: &mut Value, path: &[String], value: Value) {
    let (last, parents) = path.split_last().expect("a field has a name");
    let mut at = v;
    for k in parents {
        if !at.get(k).is_some_and(Value::is_object) {
            at[k] = json!({});
        }
        at = &mut at[k];
    }
    at[last] = value;
}

/// Removes the field and the maps it leaves empty.
fn remove(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else { return };
    let Some(map) = v.as_object_mut() else { return };
    if rest.is_empty() {
        map.remove(first);
        return;
    }
    if let Some(child) = map.get_mut(first) {
        remove(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(first);
        }
    }
}

/// Why an apply was refused.
pub(super) struct Conflicts(pub Vec<(String, Path)>);

impl Conflicts {
    /// The API server's message: `Apply failed with 1 conflict: conflict with "m": .spec.x`.
    pub(super) fn message(&self) -> String {
        let each: Vec<String> =
            self.0.iter().map(|(m, p)| format!("conflict with \"{m}\": .{}", p.join("."))).collect();
        format!(
            "Apply failed with {} conflict{}: {}",
            each.len(),
            if each.len() == 1 { "" } else { "s" },
            each.join(", ")
        )
    }
}

impl Owners {
    fn others<'a>(&'a self, manager: &'a str) -> impl Iterator<Item = (&'a str, &'a BTreeSet<Path>)> + 'a {
        self.0.iter().filter(move |((m, _, _), _)| m != manager).map(|((m, _, _), set)| (m.as_str(), set))
    }

    /// Applies `config` by `manager` to `obj` (the stored object, or an empty one).
    pub(super) fn apply(
        &mut self,
        obj: &mut Value,
        config: &Value,
        manager: &str,
        sub: &str,
        force: bool,
    ) -> Result<(), Conflicts> {
        let wanted = fields(config, sub);
        let mut conflicts = Vec::new();
        for f in &wanted {
            if same(get(obj, f), get(config, f)) {
                continue;
            }
            for (other, owned) in self.others(manager) {
                if owned.contains(f) {
                    conflicts.push((other.to_string(), f.clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(Conflicts(conflicts));
        }
        for (_, f) in &conflicts {
            for ((m, _, _), owned) in self.0.iter_mut() {
                if m != manager {
                    owned.remove(f);
                }
            }
        }
        let key = (manager.to_string(), "Apply", sub.to_string());
        let before = self.0.remove(&key).unwrap_or_default();
        for dropped in before.difference(&wanted) {
            if !self.0.values().any(|owned| owned.contains(dropped)) {
                remove(obj, dropped);
            }
        }
        for f in &wanted {
            if !same(get(obj, f), get(config, f)) {
                set(obj, f, get(config, f).cloned().unwrap_or(Value::Null));
            }
        }
        self.0.insert(key, wanted);
        self.prune(obj);
        Ok(())
    }

    /// Records an update by `manager` from `old` (None: created) to `new`: the fields it
    /// changed become its own.
    pub(super) fn update(&mut self, old: Option<&Value>, new: &Value, manager: &str, sub: &str) {
        let changed: BTreeSet<Path> = fields(new, sub)
            .into_iter()
            .filter(|f| old.is_none_or(|old| get(old, f) != get(new, f)))
            .collect();
        if changed.is_empty() {
            self.prune(new);
            return;
        }
        for owned in self.0.values_mut() {
            owned.retain(|f| !changed.contains(f));
        }
        self.0.entry((manager.to_string(), "Update", sub.to_string())).or_default().extend(changed);
        self.prune(new);
    }

    /// Forgets fields the object no longer has, and managers left with none.
    fn prune(&mut self, obj: &Value) {
        for owned in self.0.values_mut() {
            owned.retain(|f| get(obj, f).is_some());
        }
        self.0.retain(|_, owned| !owned.is_empty());
    }

    /// `metadata.managedFields`, as the API server shows it.
    pub(super) fn managed_fields(&self, api_version: &str) -> Value {
        let entries: Vec<Value> = self
            .0
            .iter()
            .map(|((manager, operation, sub), owned)| {
                let mut trie = json!({});
                for f in owned {
                    let keys: Vec<String> = f.iter().map(|k| format!("f:{k}")).collect();
                    set(&mut trie, &keys, json!({}));
                }
                let mut entry = json!({"manager": manager, "operation": operation, "apiVersion": api_version,
                    "fieldsType": "FieldsV1", "fieldsV1": trie});
                if !sub.is_empty() {
                    entry["subresource"] = json!(sub);
                }
                entry
            })
            .collect();
        Value::Array(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Path {
        p.split('.').map(str::to_string).collect()
    }

    #[test]
    fn managers_share_equal_values_conflict_on_different_ones_and_force_takes_over() {
        let mut owners = Owners::default();
        let mut obj = json!({"metadata": {"name": "web"}});
        let a =
            json!({"metadata": {"name": "web", "labels": {"a": "1"}}, "spec": {"mode": "nftables", "x": 1}});
        owners.apply(&mut obj, &a, "alice", "", false).ok().unwrap();
        assert_eq!(obj["spec"], json!({"mode": "nftables", "x": 1}));
        // bob applies the same mode (shared) and another x (a conflict).
        let b = json!({"spec": {"mode": "nftables", "x": 2}});
        let err = owners.apply(&mut obj, &b, "bob", "", false).err().unwrap();
        assert_eq!(err.message(), "Apply failed with 1 conflict: conflict with \"alice\": .spec.x");
        assert_eq!(obj["spec"]["x"], 1, "nothing changed");
        owners.apply(&mut obj, &b, "bob", "", true).ok().unwrap();
        assert_eq!(obj["spec"]["x"], 2);
        // alice stops applying both: mode stays (bob shares it), x stays (bob owns it now),
        // her label goes.
        owners.apply(&mut obj, &json!({"spec": {"other": true}}), "alice", "", false).ok().unwrap();
        assert_eq!(obj["spec"], json!({"mode": "nftables", "x": 2, "other": true}));
        assert!(obj["metadata"]["labels"].is_null());
        let managed = owners.managed_fields("v1");
        assert_eq!(managed[0]["manager"], "alice");
        assert_eq!(managed[0]["fieldsV1"], json!({"f:spec": {"f:other": {}}}));
        assert_eq!(managed[1]["fieldsV1"], json!({"f:spec": {"f:mode": {}, "f:x": {}}}));
    }

    #[test]
    fn status_applies_touch_only_status_and_updates_take_what_they_change() {
        let mut owners = Owners::default();
        let mut obj = json!({"spec": {"a": 1}, "status": {"old": true}});
        owners.update(None, &obj, "kubectl", "");
        let s = json!({"spec": {"a": 9}, "status": {"ready": true}});
        owners.apply(&mut obj, &s, "agent", "status", false).ok().unwrap();
        assert_eq!(obj, json!({"spec": {"a": 1}, "status": {"old": true, "ready": true}}));
        let old = obj.clone();
        obj["spec"]["a"] = json!(2);
        owners.update(Some(&old), &obj, "editor", "");
        assert!(owners.0[&("editor".into(), "Update", String::new())].contains(&path("spec.a")));
        assert!(
            !owners.0.contains_key(&("kubectl".into(), "Update", String::new())),
            "kubectl owns nothing left"
        );
    }
}

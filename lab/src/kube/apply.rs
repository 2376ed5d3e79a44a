//! Objects through the API server, as `kubectl apply --server-side --force-conflicts
//! --field-manager MANAGER` sends them: one server-side apply per object, namespaces and
//! CustomResourceDefinitions first (and the CRDs waited for until they are served), then the
//! rest in the order given.
//!
//! A Pod whose apply the server refuses as invalid (most of a Pod's spec cannot change) is
//! deleted and created again, as `kubectl apply --force` does. [`Applier::prune`] deletes what a
//! manager applied and a file no longer names (`lab replace`), found by the `managedFields`
//! entry the server keeps for every apply: the server, not the lab, remembers what was applied.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, Error};
use serde_json::Value;

/// How long a namespace's `default` ServiceAccount may take to be made.
const SERVICE_ACCOUNT_WITHIN: Duration = Duration::from_secs(60);
/// How long a new CustomResourceDefinition may take to be served.
const CRD_SERVED_WITHIN: Duration = Duration::from_secs(30);

/// What could not be applied, deleted or listed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The object has no `apiVersion`, `kind` or `metadata.name`.
    #[error("an object without apiVersion, kind or metadata.name: {0}")]
    Unnamed(String),
    /// The API server does not serve the kind.
    #[error("{kind} {name}: the API server does not serve {api_version} {kind}: {}", said(error))]
    Unknown {
        /// apiVersion.
        api_version: String,
        /// Kind.
        kind: String,
        /// `namespace/name` or `name`.
        name: String,
        /// Why.
        error: Box<Error>,
    },
    /// The API server refused the request.
    #[error("{verb} {kind} {name}: {}", said(error))]
    Refused {
        /// `apply`, `delete`, `list`.
        verb: &'static str,
        /// Kind.
        kind: String,
        /// `namespace/name` or `name`.
        name: String,
        /// The server's answer.
        error: Box<Error>,
    },
    /// A CustomResourceDefinition that was not served in time.
    #[error("CustomResourceDefinition {0} is not served after {CRD_SERVED_WITHIN:?}")]
    NotServed(String),
}

/// What the server said: its message for a refusal, the error otherwise.
fn said(e: &Error) -> String {
    match e {
        Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

/// An object's kind and name: `(apiVersion, kind, namespace, name)`.
pub type ObjectKey = (String, String, String, String);

/// The key of `obj`, or why it has none.
pub fn key_of(obj: &Value) -> Result<ObjectKey, ApplyError> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let key = (s("/apiVersion"), s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
    if key.0.is_empty() || key.1.is_empty() || key.3.is_empty() {
        return Err(ApplyError::Unnamed(obj.to_string().chars().take(200).collect()));
    }
    Ok(key)
}

fn shown((_, _, ns, name): &ObjectKey) -> String {
    if ns.is_empty() { name.clone() } else { format!("{ns}/{name}") }
}

/// The order objects are applied in: namespaces, then CRDs, then everything else as given.
fn rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        _ => 2,
    }
}

/// Sorts `objects` into the order they can be applied in (stable within a rank).
pub fn in_apply_order(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| rank(o["kind"].as_str().unwrap_or("")));
    objects
}

/// Applies objects as one field manager, finding each kind's resource once.
pub struct Applier {
    client: Client,
    manager: String,
    /// Where namespaced objects without a namespace go (`helm install`'s release namespace,
    /// `kubectl apply`'s `default`).
    namespace: String,
    resources: BTreeMap<(String, String), (ApiResource, ApiCapabilities)>,
}

impl Applier {
    /// Applies as `manager`, with `client`'s credentials.
    pub fn new(client: Client, manager: &str) -> Applier {
        Applier {
            client,
            manager: manager.to_string(),
            namespace: "default".into(),
            resources: BTreeMap::new(),
        }
    }

    /// Namespaced objects without a namespace go to `namespace`.
    pub fn in_namespace(mut self, namespace: &str) -> Applier {
        self.namespace = namespace.to_string();
        self
    }

    /// The resource of `api_version`/`kind`, asked of the server once (again after a CRD).
    async fn resource(&mut self, key: &ObjectKey) -> Result<(ApiResource, ApiCapabilities), ApplyError> {
        let (api_version, kind) = (key.0.clone(), key.1.clone());
        if let Some(r) = self.resources.get(&(api_version.clone(), kind.clone())) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let found =
            kube::discovery::pinned_kind(&self.client, &gvk).await.map_err(|source| ApplyError::Unknown {
                api_version: api_version.clone(),
                kind: kind.clone(),
                name: shown(key),
                error: Box::new(source),
            })?;
        self.resources.insert((api_version, kind), found.clone());
        Ok(found)
    }

    async fn api(&mut self, key: &ObjectKey) -> Result<Api<DynamicObject>, ApplyError> {
        let (resource, caps) = self.resource(key).await?;
        Ok(match caps.scope {
            Scope::Namespaced => {
                let ns = if key.2.is_empty() { self.namespace.as_str() } else { key.2.as_str() };
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
        })
    }

    /// Applies every object, namespaces and CRDs first; stops at the first refusal.
    pub async fn apply_all(&mut self, objects: Vec<Value>) -> Result<(), ApplyError> {
        for obj in in_apply_order(objects) {
            self.apply(&obj).await?;
        }
        Ok(())
    }

    /// Applies every object whose kind the server serves, in [`Applier::apply_all`]'s order;
    /// returns the others (a CRD not installed yet); stops at the first refusal.
    pub async fn apply_served(&mut self, objects: Vec<Value>) -> Result<Vec<Value>, ApplyError> {
        let mut held = Vec::new();
        for obj in in_apply_order(objects) {
            match self.apply(&obj).await {
                Err(ApplyError::Unknown { .. }) => held.push(obj),
                other => other?,
            }
        }
        Ok(held)
    }

    /// Applies one object (force: the manager takes the fields it sets).
    pub async fn apply(&mut self, obj: &Value) -> Result<(), ApplyError> {
        let key = key_of(obj)?;
        let api = self.api(&key).await?;
        let params = PatchParams::apply(&self.manager).force();
        let refused = |source| ApplyError::Refused {
            verb: "apply",
            kind: key.1.clone(),
            name: shown(&key),
            error: Box::new(source),
        };
        let patch = Patch::Apply(obj);
        let mut answer = api.patch(&key.3, &params, &patch).await;
        let deadline = Instant::now() + SERVICE_ACCOUNT_WITHIN;
        // A new namespace's `default` ServiceAccount comes from the controller-manager a moment
        // later, and admission refuses pods until it does (a client that created the namespace
        // and its pods at once retries, as kubectl users do by hand).
        while let Err(Error::Api(s)) = &answer
            && s.code == 403
            && s.message.contains("serviceaccount")
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            answer = api.patch(&key.3, &params, &patch).await;
        }
        match answer {
            Ok(_) => {}
            Err(Error::Api(s)) if key.1 == "Pod" && s.code == 422 => {
                // A Pod's spec is mostly immutable: replace it, as `kubectl apply --force` does.
                self.delete_now(&api, &key).await?;
                api.patch(&key.3, &params, &Patch::Apply(obj)).await.map_err(refused)?;
            }
            Err(e) => return Err(refused(e)),
        }
        if key.1 == "CustomResourceDefinition" {
            self.wait_served(obj, &key).await?;
        }
        Ok(())
    }

    /// Deletes `key` and waits until it is gone (a Pod's kubelet finishes its grace period).
    async fn delete_now(&self, api: &Api<DynamicObject>, key: &ObjectKey) -> Result<(), ApplyError> {
        let refused = |source| ApplyError::Refused {
            verb: "delete",
            kind: key.1.clone(),
            name: shown(key),
            error: Box::new(source),
        };
        match api.delete(&key.3, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(refused(e)),
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            match api.get_opt(&key.3).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(e) => return Err(refused(e)),
            }
        }
        Ok(())
    }

    /// Waits until the CRD `obj` is Established and its kinds are discoverable.
    async fn wait_served(&mut self, obj: &Value, key: &ObjectKey) -> Result<(), ApplyError> {
        let group = obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.pointer("/spec/names/kind").and_then(Value::as_str).unwrap_or("").to_string();
        let versions: Vec<String> = obj
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| v["served"] == true)
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect();
        let deadline = Instant::now() + CRD_SERVED_WITHIN;
        for version in versions {
            let gvk = GroupVersionKind::gvk(&group, &version, &kind);
            loop {
                match kube::discovery::pinned_kind(&self.client, &gvk).await {
                    Ok(found) => {
                        self.resources.insert((format!("{group}/{version}"), kind.clone()), found);
                        break;
                    }
                    Err(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await
                    }
                    Err(_) => return Err(ApplyError::NotServed(key.3.clone())),
                }
            }
        }
        Ok(())
    }

    /// Deletes the object named by `obj` (gone already is fine).
    pub async fn delete(&mut self, obj: &Value) -> Result<(), ApplyError> {
        let key = key_of(obj)?;
        let api = self.api(&key).await?;
        match api.delete(&key.3, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(ApplyError::Refused {
                verb: "delete",
                name: shown(&key),
                kind: key.1,
                error: Box::new(source),
            }),
        }
    }

    /// Deletes every object of the kinds `kinds` (apiVersion, kind) that this manager applied
    /// and `keep` does not name; returns what it deleted.
    pub async fn prune(
        &mut self,
        kinds: &BTreeSet<(String, String)>,
        keep: &BTreeSet<ObjectKey>,
    ) -> Result<Vec<ObjectKey>, ApplyError> {
        let mut deleted = Vec::new();
        for (api_version, kind) in kinds {
            let probe: ObjectKey = (api_version.clone(), kind.clone(), String::new(), String::new());
            let (resource, caps) = match self.resource(&probe).await {
                Ok(found) => found,
                // A kind the server does not serve has no object to delete.
                Err(ApplyError::Unknown { .. }) => continue,
                Err(e) => return Err(e),
            };
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let list = api.list(&ListParams::default()).await.map_err(|source| ApplyError::Refused {
                verb: "list",
                kind: kind.clone(),
                name: String::new(),
                error: Box::new(source),
            })?;
            let manager = self.manager.clone();
            for o in list.items.iter().filter(|o| applied_by(o, &manager)) {
                let ns = if caps.scope == Scope::Namespaced { o.metadata.namespace.clone() } else { None };
                let key = (
                    api_version.clone(),
                    kind.clone(),
                    ns.unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default(),
                );
                if keep.contains(&key) {
                    continue;
                }
                let obj = serde_json::json!({"apiVersion": key.0, "kind": key.1,
                    "metadata": {"namespace": key.2, "name": key.3}});
                self.delete(&obj).await?;
                deleted.push(key);
            }
        }
        Ok(deleted)
    }
}

/// Whether `manager` has applied fields of `obj` (a `managedFields` entry of operation Apply).
fn applied_by(obj: &DynamicObject, manager: &str) -> bool {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() == Some(manager) && f.operation.as_deref() == Some("Apply"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn namespaces_and_crds_go_first_and_the_rest_keeps_its_order() {
        let o =
            |kind: &str, name: &str| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
        let ordered = in_apply_order(vec![
            o("Service", "a"),
            o("CustomResourceDefinition", "c"),
            o("Pod", "b"),
            o("Namespace", "n"),
            o("Service", "d"),
        ]);
        let names: Vec<&str> = ordered.iter().map(|v| v["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["n", "c", "a", "b", "d"]);
    }

    #[test]
    fn an_object_needs_a_kind_and_a_name() {
        assert!(key_of(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})).is_err());
        let key =
            key_of(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}));
        assert_eq!(key.unwrap(), ("v1".into(), "Pod".into(), "x".into(), "p".into()));
    }

    #[test]
    fn only_the_managers_own_applies_are_pruned() {
        let obj = |manager: &str, op: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s",
                "managedFields": [{"manager": manager, "operation": op}]}}))
            .unwrap()
        };
        assert!(applied_by(&obj("tideway-lab", "Apply"), "tideway-lab"));
        assert!(!applied_by(&obj("tideway-lab", "Update"), "tideway-lab"));
        assert!(!applied_by(&obj("kubectl", "Apply"), "tideway-lab"));
    }
}

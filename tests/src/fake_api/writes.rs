//! The writes: create, replace, server-side apply, merge patch, delete, each recording field
//! ownership ([`super::apply`]) and honouring `metadata.resourceVersion` preconditions.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::apply::Owners;
use super::state::{Inner, Resource, object_key};
use super::status::status;

/// Where a write goes and how it was asked for.
pub(super) struct Write {
    pub(super) collection: String,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
    pub(super) sub: Option<String>,
    pub(super) query: BTreeMap<String, String>,
}

/// Field manager of a write that names none (the API server derives one from the user agent).
const UNNAMED_MANAGER: &str = "unknown";

impl Write {
    fn key(&self) -> (String, String) {
        (self.namespace.clone().unwrap_or_default(), self.name.clone())
    }

    fn manager(&self) -> &str {
        self.query.get("fieldManager").map_or(UNNAMED_MANAGER, String::as_str)
    }

    fn sub(&self) -> &str {
        self.sub.as_deref().unwrap_or("")
    }

    /// POST: creates the object (409 when it exists).
    pub(super) fn create(self, inner: &mut Inner, mut obj: Value) -> Response {
        let res = inner.resources.get_mut(&self.collection).expect("resource");
        if let Some(ns) = &self.namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let key = object_key(&obj);
        if res.objects.contains_key(&key) {
            return status(409, "AlreadyExists", &format!("{} {:?} already exists", res.kind, key.1));
        }
        obj["kind"] = json!(res.kind);
        obj["apiVersion"] = json!(res.api_version);
        obj["metadata"]["uid"] = json!(format!("uid-{}-{}", key.0, key.1));
        obj["metadata"]["generation"] = json!(1);
        let mut owners = Owners::default();
        owners.update(None, &obj, self.manager(), "");
        owners.update(None, &obj, self.manager(), "status");
        inner.rv += 1;
        let obj = res.store(key, obj, owners, inner.rv, "ADDED");
        (StatusCode::CREATED, axum::Json(obj)).into_response()
    }

    /// PUT: replaces the object; a `resourceVersion` in it must be the current one (else 409).
    pub(super) fn replace(self, inner: &mut Inner, mut obj: Value) -> Response {
        let res = inner.resources.get_mut(&self.collection).expect("resource");
        let key = self.key();
        let Some(current) = res.objects.get(&key) else {
            return status(404, "NotFound", &format!("{} {:?} not found", res.kind, key.1));
        };
        if let Some(conflict) = precondition(res, current, &obj) {
            return conflict;
        }
        obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
        obj["metadata"]["generation"] = next_generation(current, &obj);
        let mut owners = res.owners.get(&key).cloned().unwrap_or_default();
        owners.update(Some(current), &obj, self.manager(), "");
        owners.update(Some(current), &obj, self.manager(), "status");
        inner.rv += 1;
        axum::Json(res.store(key, obj, owners, inner.rv, "MODIFIED")).into_response()
    }

    /// Server-side apply of `config` (the object is created if absent, except through
    /// `/status`): field ownership per manager, 409 on a conflict unless forced.
    pub(super) fn apply(self, inner: &mut Inner, config: Value) -> Response {
        let res = inner.resources.get_mut(&self.collection).expect("resource");
        let key = self.key();
        let Some(manager) = self.query.get("fieldManager") else {
            return status(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io is invalid: fieldManager: Required value",
            );
        };
        let current = res.objects.get(&key);
        if current.is_none() && self.sub() == "status" {
            return status(404, "NotFound", &format!("{} {:?} not found", res.kind, key.1));
        }
        if let Some(conflict) = current.and_then(|c| precondition(res, c, &config)) {
            return conflict;
        }
        let mut obj = current.cloned().unwrap_or_else(|| {
            json!({"kind": res.kind, "apiVersion": res.api_version,
                "metadata": {"name": key.1, "uid": format!("uid-{}-{}", key.0, key.1), "generation": 1}})
        });
        if let Some(ns) = &self.namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let mut owners = res.owners.get(&key).cloned().unwrap_or_default();
        let force = self.query.get("force").is_some_and(|f| f == "true");
        if let Err(conflicts) = owners.apply(&mut obj, &config, manager, self.sub(), force) {
            return status(409, "Conflict", &conflicts.message());
        }
        if let Some(current) = current {
            obj["metadata"]["generation"] = next_generation(current, &obj);
            obj["metadata"]["managedFields"] = owners.managed_fields(&res.api_version);
            // A no-op apply writes nothing: no new resourceVersion, no watch event.
            if &obj == current {
                return axum::Json(obj).into_response();
            }
        }
        let event = if current.is_some() { "MODIFIED" } else { "ADDED" };
        inner.rv += 1;
        axum::Json(res.store(key, obj, owners, inner.rv, event)).into_response()
    }

    /// A JSON merge patch of an existing object; a `resourceVersion` in it is a precondition.
    pub(super) fn merge_patch(self, inner: &mut Inner, patch: Value) -> Response {
        let res = inner.resources.get_mut(&self.collection).expect("resource");
        let key = self.key();
        let Some(current) = res.objects.get(&key) else {
            return status(404, "NotFound", &format!("{} {:?} not found", res.kind, key.1));
        };
        if let Some(conflict) = precondition(res, current, &patch) {
            return conflict;
        }
        let mut obj = tideway_api::merge_patch::merge_patch(current, &patch);
        obj["metadata"]["generation"] = next_generation(current, &obj);
        let mut owners = res.owners.get(&key).cloned().unwrap_or_default();
        owners.update(Some(current), &obj, self.manager(), self.sub());
        inner.rv += 1;
        axum::Json(res.store(key, obj, owners, inner.rv, "MODIFIED")).into_response()
    }

    /// DELETE (404 when absent).
    pub(super) fn delete(self, inner: &mut Inner) -> Response {
        let res = inner.resources.get_mut(&self.collection).expect("resource");
        let key = self.key();
        let Some(mut obj) = res.objects.remove(&key) else {
            return status(404, "NotFound", &format!("{} {:?} not found", res.kind, key.1));
        };
        res.owners.remove(&key);
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        res.emit(inner.rv, json!({"type": "DELETED", "object": obj.clone()}));
        axum::Json(obj).into_response()
    }
}

/// 409 when `request` names a `resourceVersion` other than `current`'s.
fn precondition(res: &Resource, current: &Value, request: &Value) -> Option<Response> {
    let wanted = request["metadata"]["resourceVersion"].as_str()?;
    (current["metadata"]["resourceVersion"].as_str() != Some(wanted)).then(|| {
        let name = current["metadata"]["name"].as_str().unwrap_or_default();
        let msg = format!(
            "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
            res.kind
        );
        status(409, "Conflict", &msg)
    })
}

/// `metadata.generation`: counts changes of everything but metadata and status.
fn next_generation(current: &Value, new: &Value) -> Value {
    let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
    let body = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    json!(if body(current) != body(new) { generation + 1 } else { generation })
}

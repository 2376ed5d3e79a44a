//! The server's state behind its lock: each resource's objects, event history and field
//! owners, the requests received, and what the test set (failures, hung users, an outage,
//! tokens, grants, the chart's RBAC).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::apply;
use super::rbac::{self, Account};
use super::recorded::Recorded;
use super::reviews;

/// Field manager of the changes a test makes with [`FakeApi::upsert`](super::FakeApi::upsert) and
/// [`FakeApi::preload`](super::FakeApi::preload).
pub const TEST_MANAGER: &str = "test";

/// One resource: `/api/v1/services`, `/apis/tideway.io/v1alpha1/proxyconfigs`, ...
pub(super) struct Resource {
    pub(super) kind: String,
    pub(super) api_version: String,
    /// (namespace or "", name) -> object
    pub(super) objects: BTreeMap<(String, String), Value>,
    /// The latest events with their resource versions, for watches resuming from one.
    pub(super) log: Vec<(u64, Value)>,
    /// The newest version dropped from `log`: a watch from an older one is 410 Gone.
    pub(super) compacted: u64,
    /// How many events `log` keeps.
    pub(super) history: usize,
    pub(super) events: broadcast::Sender<(u64, Value)>,
    /// Field ownership per object.
    pub(super) owners: BTreeMap<(String, String), apply::Owners>,
    pub(super) forbidden: bool,
    pub(super) gone_next_watch: bool,
}

impl Resource {
    /// A resource of `kind` (`apiVersion` `api_version`) with no object yet.
    pub(super) fn new(kind: &str, api_version: &str, history: usize) -> Resource {
        Resource {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
            objects: BTreeMap::new(),
            log: Vec::new(),
            compacted: 0,
            history,
            events: broadcast::channel(1 << 16).0,
            owners: BTreeMap::new(),
            forbidden: false,
            gone_next_watch: false,
        }
    }
}

pub(super) struct Inner {
    pub(super) resources: BTreeMap<String, Resource>,
    pub(super) requests: Vec<Recorded>,
    pub(super) rv: u64,
    /// (method, path) -> HTTP status to answer, once each.
    pub(super) failures: Vec<(String, String, u16)>,
    pub(super) reviews: reviews::Reviews,
    /// Users whose requests hang until released (then they are dropped, never applied).
    pub(super) hanging: BTreeMap<String, tokio::sync::watch::Sender<bool>>,
    /// While set, every request is answered with this status (an outage).
    pub(super) outage: Option<u16>,
    /// The longest a watch lasts, whatever its `timeoutSeconds`.
    pub(super) watch_cap: Option<std::time::Duration>,
    /// Streams lists (`sendInitialEvents`, the `WatchList` feature, on by default since
    /// Kubernetes 1.32); when off, such a watch is refused as a server without it refuses it.
    pub(super) watch_list: bool,
    /// Bearer token -> the account it authenticates.
    pub(super) accounts: BTreeMap<String, Account>,
    /// The chart's RBAC (one value set's) that decides what each account may do.
    pub(super) rbac: &'static rbac::Rbac,
    pub(super) usage: rbac::Usage,
}

impl Resource {
    /// Fills in what the API server would: apiVersion, resourceVersion, a uid. Returns the key.
    pub(super) fn stamp(&self, obj: &mut Value, rv: u64) -> (String, String) {
        obj["apiVersion"] = json!(self.api_version);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = object_key(obj);
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{}-{}", key.0, key.1));
        }
        key
    }

    /// Records a change the test made (field manager `test`) in `obj`'s managed fields.
    pub(super) fn track(&mut self, key: &(String, String), obj: &mut Value) {
        let owners = self.owners.entry(key.clone()).or_default();
        let old = self.objects.get(key);
        owners.update(old, obj, TEST_MANAGER, "");
        owners.update(old, obj, TEST_MANAGER, "status");
        obj["metadata"]["managedFields"] = owners.managed_fields(&self.api_version);
    }

    /// Stores `obj` at `rv` with its `owners`, and tells the watches; returns it.
    pub(super) fn store(
        &mut self,
        key: (String, String),
        mut obj: Value,
        owners: apply::Owners,
        rv: u64,
        event: &str,
    ) -> Value {
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["managedFields"] = owners.managed_fields(&self.api_version);
        self.owners.insert(key.clone(), owners);
        self.objects.insert(key, obj.clone());
        self.emit(rv, json!({"type": event, "object": obj.clone()}));
        obj
    }

    pub(super) fn emit(&mut self, rv: u64, event: Value) {
        self.log.push((rv, event.clone()));
        if self.log.len() > self.history {
            let gone = self.log.len() - self.history;
            self.compacted = self.log[gone - 1].0;
            self.log.drain(..gone);
        }
        let _ = self.events.send((rv, event));
    }
}

/// An object's namespace ("" for a cluster-scoped one) and name.
pub(super) fn object_key(obj: &Value) -> (String, String) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("").to_string();
    let name = obj["metadata"]["name"].as_str().expect("object has a name").to_string();
    (ns, name)
}

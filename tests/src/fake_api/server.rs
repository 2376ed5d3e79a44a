//! [`FakeApi`]: the server, and what a test does with it: objects added, changed and removed
//! (with or without watch events), watches expired, compacted, capped or cut, outages, failures,
//! hung users, tokens and grants, and the requests it received.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use super::handlers::handle;
use super::rbac::{self, Account};
use super::recorded::Recorded;
use super::resources::{RESOURCES, path_of, path_of_object};
use super::reviews;
use super::state::{Inner, Resource};
use super::watch::{CLOSE, DROP, gone};

/// The fake API server; stops when dropped (with the runtime that serves it).
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// Events kept per resource for watches that resume (the API server's watch cache keeps 100 by
/// default; older versions are compacted away).
pub const HISTORY: usize = 100;

impl FakeApi {
    /// Starts serving on 127.0.0.1 (of the current network namespace) in the current runtime.
    pub async fn start() -> FakeApi {
        FakeApi::start_at(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts serving on `bind` (port 0: any free one) in the current runtime: an address
    /// other than loopback lets processes in other network namespaces reach it, as the nodes
    /// of a cluster reach its API server.
    pub async fn start_at(bind: SocketAddr) -> FakeApi {
        let resources = RESOURCES
            .iter()
            .map(|(path, kind, api_version)| (path.to_string(), Resource::new(kind, api_version, HISTORY)))
            .collect();
        let inner = Arc::new(Mutex::new(Inner {
            resources,
            requests: Vec::new(),
            rv: 1,
            failures: Vec::new(),
            reviews: Default::default(),
            hanging: BTreeMap::new(),
            outage: None,
            watch_cap: None,
            watch_list: true,
            accounts: Account::COMPONENTS
                .into_iter()
                .chain([Account::ClusterAdmin])
                .map(|a| (a.token().to_string(), a))
                .collect(),
            rbac: rbac::Rbac::chart(rbac::DEFAULT_VALUES),
            usage: Default::default(),
        }));
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind fake API");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeApi { inner, addr }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a kubeconfig pointing at this server into `dir` that authenticates as
    /// `account`; returns its path.
    pub fn kubeconfig(&self, dir: &Path, account: Account) -> PathBuf {
        self.kubeconfig_as(dir, account, account.token())
    }

    /// As [`FakeApi::kubeconfig`] with a bearer token of its own (one replica of a component:
    /// requests are recorded, and can be made to hang, per token).
    pub fn kubeconfig_as(&self, dir: &Path, account: Account, token: &str) -> PathBuf {
        self.lock().accounts.insert(token.to_string(), account);
        let path = dir.join(format!("kubeconfig-{token}"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: fake\n  user:\n    token: {}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr, token
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// Adds or replaces an object (JSON in Kubernetes form; kind and apiVersion are filled in).
    pub fn upsert(&self, mut obj: Value) {
        let path = path_of_object(&obj);
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path).expect("resource");
        let key = res.stamp(&mut obj, rv);
        let kind = if res.objects.contains_key(&key) { "MODIFIED" } else { "ADDED" };
        res.track(&key, &mut obj);
        res.objects.insert(key, obj.clone());
        res.emit(rv, json!({"type": kind, "object": obj}));
    }

    /// Adds many objects at once without emitting events (a large initial list).
    pub fn preload(&self, objects: impl IntoIterator<Item = Value>) {
        let mut inner = self.lock();
        for mut obj in objects {
            inner.rv += 1;
            let rv = inner.rv;
            let res = inner.resources.get_mut(path_of_object(&obj)).expect("resource");
            let key = res.stamp(&mut obj, rv);
            res.track(&key, &mut obj);
            res.objects.insert(key, obj);
        }
    }

    /// Deletes an object.
    pub fn delete(&self, kind: &str, namespace: Option<&str>, name: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        res.owners.remove(&key);
        if let Some(mut obj) = res.objects.remove(&key) {
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            res.emit(rv, json!({"type": "DELETED", "object": obj}));
        }
    }

    /// Removes an object without a watch event (as if it went while no watch was open).
    pub fn remove_silently(&self, kind: &str, namespace: Option<&str>, name: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        res.owners.remove(&key);
        res.objects.remove(&key);
    }

    /// The stored object, if any.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let inner = self.lock();
        inner.resources[path_of(kind)]
            .objects
            .get(&(namespace.unwrap_or("").to_string(), name.to_string()))
            .cloned()
    }

    /// Authorizes by the chart rendered with the value set `set` (a file of
    /// `helm/tideway/ci`, as the snapshots name it) instead of the default values.
    pub fn chart_values(&self, set: &str) {
        self.lock().rbac = rbac::Rbac::chart(set);
    }

    /// Stops serving `kind` at all, as an API server where its CRD is not installed: every
    /// request for it is a `404 NotFound` ("could not find the requested resource").
    pub fn unserve(&self, kind: &str) {
        self.lock().resources.remove(path_of(kind));
    }

    /// Serves `kind` again after [`FakeApi::unserve`], with no object (its CRD installed).
    pub fn serve(&self, kind: &str) {
        let path = path_of(kind);
        let (_, kind, api_version) = RESOURCES.iter().find(|(p, _, _)| *p == path).expect("resource");
        let mut inner = self.lock();
        inner.resources.entry(path.to_string()).or_insert_with(|| Resource::new(kind, api_version, HISTORY));
    }

    /// Makes every request for `kind` answer 403, whatever the chart grants (a grant withdrawn
    /// or not yet in force), or stop doing so.
    pub fn forbid(&self, kind: &str, forbidden: bool) {
        self.lock().resources.get_mut(path_of(kind)).expect("resource").forbidden = forbidden;
    }

    /// Ends the open watches of `kind` with a `410 Gone` error event (the server compacted
    /// past them), and answers the next watch the same way: the client must relist.
    pub fn expire_watches(&self, kind: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        res.gone_next_watch = true;
        let _ = res.events.send((rv, gone()));
    }

    /// Keeps the latest `events` events per resource for resuming watches (default
    /// [`HISTORY`]); what is older is compacted away at the next change.
    pub fn keep_history(&self, events: usize) {
        for res in self.lock().resources.values_mut() {
            res.history = events.max(1);
        }
    }

    /// Compacts the history of `kind` now (as etcd's compaction): a watch from any version
    /// before the current one gets 410 Gone. Open watches carry on.
    pub fn compact(&self, kind: &str) {
        let mut inner = self.lock();
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        res.log.clear();
        res.compacted = rv;
    }

    /// Ends every watch after `cap` at most, whatever its `timeoutSeconds` (the API server's
    /// request timeout, shortened so that tests see many watches end); `None`: as asked.
    pub fn cap_watches(&self, cap: Option<std::time::Duration>) {
        self.lock().watch_cap = cap;
    }

    /// Whether watches stream lists (`sendInitialEvents=true`; on unless turned off): off, the
    /// server answers such a watch `422 Invalid` as a server without the `WatchList` feature
    /// (Kubernetes 1.27-1.31 by default) does.
    pub fn stream_lists(&self, on: bool) {
        self.lock().watch_list = on;
    }

    /// Cuts the open watch connections of `kind` mid-stream (no clean end, as when a load
    /// balancer or the network drops them).
    pub fn drop_watches(&self, kind: &str) {
        let inner = self.lock();
        let _ = inner.resources[path_of(kind)].events.send((inner.rv, json!({"type": DROP})));
    }

    /// An outage (`Some(code)`, e.g. 503 while the API server restarts) or its end (`None`):
    /// while it lasts every request is answered `code`; as it starts, every open watch ends
    /// without an event, as when the server closes its connections.
    pub fn outage(&self, code: Option<u16>) {
        let mut inner = self.lock();
        inner.outage = code;
        if code.is_some() {
            inner.rv += 1;
            let rv = inner.rv;
            for res in inner.resources.values() {
                let _ = res.events.send((rv, json!({"type": CLOSE})));
            }
        }
    }

    /// Answers the next `method` request to exactly `path` with `code` (once).
    pub fn fail_next(&self, method: &str, path: &str, code: u16) {
        self.lock().failures.push((method.to_string(), path.to_string(), code));
    }

    /// Makes every new request from `user` hang (as behind a partition or an overloaded server)
    /// until [`FakeApi::release`]; open watches keep streaming.
    pub fn hang(&self, user: &str) {
        self.lock().hanging.insert(user.to_string(), tokio::sync::watch::channel(true).0);
    }

    /// Releases `user`'s hung requests: each is answered 503 and never applied (the request
    /// was lost on the way); new requests are served again.
    pub fn release(&self, user: &str) {
        if let Some(hung) = self.lock().hanging.remove(user) {
            hung.send_replace(false);
        }
    }

    /// TokenReviews of `token` authenticate `user` in `groups` (a token for the API server's
    /// own audience, as `kubectl create token SA` mints).
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.add_token_for(token, user, groups, &[reviews::API_AUDIENCE]);
    }

    /// As [`FakeApi::add_token`], for `audiences` (`kubectl create token SA --audience A`).
    pub fn add_token_for(&self, token: &str, user: &str, groups: &[&str], audiences: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        let audiences = audiences.iter().map(|a| a.to_string()).collect();
        self.lock().reviews.tokens.insert(token.into(), (user.into(), groups, audiences));
    }

    /// SubjectAccessReviews allow `user` to `verb` the `resource` of API `group`.
    pub fn grant(&self, user: &str, verb: &str, group: &str, resource: &str) {
        self.lock().reviews.grants.insert((user.into(), verb.into(), group.into(), resource.into()));
    }

    /// Every stored object of `kind`.
    pub fn list(&self, kind: &str) -> Vec<Value> {
        self.lock().resources[path_of(kind)].objects.values().cloned().collect()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Requests whose path starts with `prefix`.
    pub fn requests_to(&self, prefix: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.starts_with(prefix)).collect()
    }
}

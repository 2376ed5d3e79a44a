//! Cluster sources: where a component's [`ClusterState`] comes from.
//!
//! Every component owns a [`SharedCluster`]; a source (a YAML file today, Kubernetes watchers
//! and the lab later) writes objects into it with the event-shaped `ClusterState` API and wakes
//! the consumer, which takes the accumulated changes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tideway_core::cluster::{ClusterState, Snapshot};
use tokio::sync::{Notify, watch};

use crate::manifest::{self, LoadError, ObjectRef};

/// A cluster state shared between a source and its consumer.
#[derive(Clone)]
pub struct SharedCluster {
    state: Arc<Mutex<ClusterState>>,
    changed: Arc<Notify>,
    synced: watch::Sender<bool>,
    errors: Arc<Mutex<Vec<LoadError>>>,
}

impl Default for SharedCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedCluster {
    /// An empty, not-yet-synced state.
    pub fn new() -> Self {
        SharedCluster {
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
            synced: watch::channel(false).0,
            errors: Arc::default(),
        }
    }

    /// Locks the state (hold it briefly; never across an await).
    pub fn lock(&self) -> MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mutates the state and wakes the consumer.
    pub fn update<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.notify_one();
        r
    }

    /// Waits until the state may have changed since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Records that the source delivered its first complete view.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
        self.changed.notify_one();
    }

    /// True once the source delivered a complete view.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first complete view.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Problems found in the source's input the last time it was read.
    pub fn errors(&self) -> Vec<LoadError> {
        self.errors.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_errors(&self, errors: Vec<LoadError>) {
        *self.errors.lock().unwrap_or_else(|e| e.into_inner()) = errors;
    }
}

/// Reads a manifest file and re-reads it whenever it changes.
///
/// An unreadable file or broken YAML keeps the previous state. An object whose new version is
/// invalid keeps its last valid version, so an edit mistake never removes what was programmed.
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    interval: Duration,
}

type Fingerprint = (SystemTime, u64);

impl FileSource {
    /// Watches `path`, checking for changes every `interval`.
    pub fn new(path: impl Into<PathBuf>, interval: Duration) -> Self {
        FileSource { path: path.into(), interval }
    }

    /// Loads the file once into `cluster`; returns the errors found.
    pub fn load_once(&self, cluster: &SharedCluster) -> Result<Vec<LoadError>, LoadError> {
        let m = manifest::load_file(&self.path)?;
        let keep: Vec<ObjectRef> = m.errors.iter().filter_map(|e| e.object.as_deref().cloned()).collect();
        let mut snapshot = m.snapshot;
        {
            let state = cluster.lock();
            carry_over(&state, &keep, &mut snapshot);
        }
        for e in &m.errors {
            tracing::warn!(error = %e, "invalid object skipped");
        }
        cluster.update(|s| s.reset(snapshot));
        cluster.set_errors(m.errors.clone());
        Ok(m.errors)
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        let md = std::fs::metadata(&self.path).ok()?;
        Some((md.modified().ok()?, md.len()))
    }

    /// Loads the file, marks the state synced, then reloads on change until cancelled.
    pub async fn run(self, cluster: SharedCluster) {
        let mut last: Option<Fingerprint> = None;
        let mut synced = false;
        loop {
            let fp = self.fingerprint();
            if fp.is_some() && fp != last {
                match self.load_once(&cluster) {
                    Ok(errors) => {
                        tracing::info!(file = %self.path.display(), errors = errors.len(), "cluster file loaded");
                        last = fp;
                        if !synced {
                            synced = true;
                            cluster.mark_synced();
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cluster file not loaded; keeping the previous state")
                    }
                }
            } else if fp.is_none() && last.is_some() {
                tracing::error!(file = %self.path.display(), "cluster file disappeared; keeping the previous state");
                last = None;
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}

/// Where a component's objects come from: a YAML file today, Kubernetes watchers and the lab
/// later. A source writes into the [`SharedCluster`], marks it synced once it delivered a
/// complete view, and keeps it current until the returned future is dropped.
pub trait Source: Send + 'static {
    /// Feeds `cluster` until cancelled.
    fn run(self, cluster: SharedCluster) -> impl Future<Output = ()> + Send;
}

impl Source for FileSource {
    fn run(self, cluster: SharedCluster) -> impl Future<Output = ()> + Send {
        FileSource::run(self, cluster)
    }
}

/// Puts the current version of every object in `keep` back into `snapshot`.
fn carry_over(state: &ClusterState, keep: &[ObjectRef], snapshot: &mut Snapshot) {
    let wanted: BTreeMap<(&str, Option<&str>, &str), ()> =
        keep.iter().map(|o| ((o.kind.as_str(), o.namespace.as_deref(), o.name.as_str()), ())).collect();
    let has = |kind: &str, ns: Option<&str>, name: &str| {
        wanted.contains_key(&(kind, ns, name)) || wanted.contains_key(&(kind, None, name))
    };
    snapshot
        .services
        .extend(state.services().filter(|s| has("Service", Some(&s.name.namespace), &s.name.name)).cloned());
    snapshot.endpoint_slices.extend(
        state.endpoint_slices().filter(|s| has("EndpointSlice", Some(&s.namespace), &s.name)).cloned(),
    );
    snapshot.nodes.extend(state.nodes().filter(|n| has("Node", None, &n.name)).cloned());
    snapshot.pods.extend(state.pods().filter(|p| has("Pod", Some(&p.namespace), &p.name)).cloned());
    snapshot
        .proxy_configs
        .extend(state.proxy_configs().filter(|c| has("ProxyConfig", None, &c.name)).cloned());
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ns1}\nspec:\n  clusterIP: 10.96.0.10\n  ports: [{port: 80}]\n";

    #[test]
    fn an_invalid_edit_keeps_the_last_valid_version() {
        let dir = std::env::temp_dir().join(format!("tideway-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, SVC).unwrap();
        let src = FileSource::new(&path, Duration::from_millis(10));
        let cluster = SharedCluster::new();
        assert!(src.load_once(&cluster).unwrap().is_empty());
        std::fs::write(&path, SVC.replace("10.96.0.10", "10.96.0.999")).unwrap();
        let errors = src.load_once(&cluster).unwrap();
        assert_eq!(errors.len(), 1);
        let svc = cluster.lock().services().next().cloned().expect("kept");
        assert_eq!(svc.cluster_ips, vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]);
        // Removing the object for real does remove it.
        std::fs::write(&path, "").unwrap();
        src.load_once(&cluster).unwrap();
        assert_eq!(cluster.lock().service_count(), 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}

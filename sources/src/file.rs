//! The file source: a multi-document Kubernetes YAML file, re-read when it changes.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tideway_api::manifest::{self, LoadError, ObjectRef};

use crate::shared::{InvalidObjects, ObjectKey, SharedCluster, Store, compact};

/// Reads a manifest file and re-reads it whenever it changes.
///
/// An unreadable file or broken YAML keeps the previous state. An object whose new version is
/// invalid keeps its last valid version, so an edit mistake never removes what was programmed.
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    interval: Duration,
    reach: Option<crate::lab::reach::Reach>,
}

/// What tells a new version of the file without reading it: its inode (a file replaced by a
/// rename, as the lab and kubelet's ConfigMap volumes do, is a new one), modification time and
/// length. The time alone is not enough: it moves in clock ticks of several milliseconds, and
/// two versions of one length written within one tick would look the same.
type Fingerprint = (u64, SystemTime, u64);

impl FileSource {
    /// Watches `path`, checking for changes every `interval`.
    pub fn new(path: impl Into<PathBuf>, interval: Duration) -> Self {
        FileSource { path: path.into(), interval, reach: None }
    }

    /// Reads the file only while `reach` says the control plane is reachable (the lab's
    /// faults): cut off, the state stays as it was, as with an API server that does not answer.
    pub fn gated(mut self, reach: crate::lab::reach::Reach) -> Self {
        self.reach = Some(reach);
        self
    }

    /// Loads the file once into `cluster`; returns the errors found.
    pub fn load_once<S: Store>(&self, cluster: &SharedCluster<S>) -> Result<Vec<LoadError>, LoadError> {
        let m = manifest::load_file(&self.path)?;
        let keep: Vec<ObjectRef> = m.errors.iter().filter_map(|e| e.object.as_deref().cloned()).collect();
        let snapshot = compact(m.snapshot);
        for e in &m.errors {
            tracing::warn!(error = %e, "invalid object skipped");
        }
        cluster.update(|s| s.reset_keeping(snapshot, &keep));
        cluster.replace_invalid(invalid_objects(&m.errors));
        Ok(m.errors)
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(&self.path).ok()?;
        Some((md.ino(), md.modified().ok()?, md.len()))
    }

    /// Loads the file, marks the state synced, then reloads on change until cancelled. Each
    /// check (the file's metadata, reading and parsing it, replacing the state under its lock)
    /// runs on a blocking thread, not on the runtime's.
    pub async fn run<S: Store>(self, cluster: SharedCluster<S>) {
        let mut last: Option<Fingerprint> = None;
        let mut synced = false;
        loop {
            let reachable = self.reach.as_ref().is_none_or(crate::lab::reach::Reach::reachable);
            cluster.set_api_reachable(reachable);
            if !reachable {
                tokio::time::sleep(self.interval).await;
                continue;
            }
            let (src, into) = (self.clone(), cluster.clone());
            let checked = tokio::task::spawn_blocking(move || {
                let fp = src.fingerprint();
                let loaded = (fp.is_some() && fp != last).then(|| src.load_once(&into));
                (fp, loaded)
            })
            .await;
            let (fp, loaded) = match checked {
                Ok(checked) => checked,
                Err(e) => {
                    tracing::error!(error = %e, "reading the cluster file failed; keeping the previous state");
                    (last, None)
                }
            };
            match loaded {
                Some(Ok(errors)) => {
                    tracing::info!(file = %self.path.display(), errors = errors.len(), "cluster file loaded");
                    last = fp;
                    if !synced {
                        synced = true;
                        cluster.mark_synced();
                    }
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "cluster file not loaded; keeping the previous state")
                }
                None if fp.is_none() && last.is_some() => {
                    tracing::error!(file = %self.path.display(), "cluster file disappeared; keeping the previous state");
                    last = None;
                }
                None => {}
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}

/// The file's errors keyed by object (a document that names no object is keyed by its place).
fn invalid_objects(errors: &[LoadError]) -> InvalidObjects {
    errors
        .iter()
        .map(|e| {
            let key = match &e.object {
                Some(o) => ObjectKey::new(&o.kind, o.namespace.as_deref(), &o.name),
                None => ObjectKey::new("Document", None, format!("{}#{}", e.file, e.document)),
            };
            (key, e.to_string())
        })
        .collect()
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

    /// A bad edit to a BGP peer keeps the session as it was: the peer is not withdrawn.
    #[test]
    fn an_invalid_bgp_edit_keeps_the_last_valid_peer() {
        const PEER: &str = "apiVersion: tideway.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: tor}\n\
                            spec: {myASN: 64512, peerASN: 64513, peerAddress: 172.30.0.1}\n";
        let dir = std::env::temp_dir().join(format!("tideway-src-bgp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, PEER).unwrap();
        let src = FileSource::new(&path, Duration::from_millis(10));
        let cluster = SharedCluster::new();
        assert!(src.load_once(&cluster).unwrap().is_empty());
        std::fs::write(&path, PEER.replace("172.30.0.1", "172.30.0.300")).unwrap();
        assert_eq!(src.load_once(&cluster).unwrap().len(), 1);
        let peers: Vec<String> = cluster.lock().bgp().peers.iter().map(|p| p.address.to_string()).collect();
        assert_eq!(peers, ["172.30.0.1"], "the last valid version is kept");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The file is a FIFO, so reading it blocks until the test writes to it: on a runtime of
    /// one thread, a task beside the source still runs meanwhile, so the read is not on it.
    #[tokio::test(flavor = "current_thread")]
    async fn the_file_is_read_off_the_runtime() {
        let dir = std::env::temp_dir().join(format!("tideway-src-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo");
        assert!(made.success());
        // Were the read on the runtime's thread, this test would stop until this writer (from
        // 5 s on, once a second for 30 s) lets a read through, and then find the state synced
        // already. It also ends a read left blocked when the test stops.
        let unblock = path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            for _ in 0..30 {
                let _ = std::fs::write(&unblock, SVC);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        let cluster = SharedCluster::new();
        let source = tokio::spawn(FileSource::new(&path, Duration::from_millis(10)).run(cluster.clone()));
        // The source is blocked in its read; this task runs on the runtime's only thread.
        let mut ticks = 0;
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            ticks += 1;
        }
        assert_eq!(ticks, 5);
        assert!(!cluster.is_synced(), "nothing was written to the FIFO yet");
        let writer = path.clone();
        tokio::task::spawn_blocking(move || std::fs::write(writer, SVC)).await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
        assert_eq!(cluster.lock().service_count(), 1);
        source.abort();
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A version replacing the file by a rename, of the same length and stamped with the same
    /// modification time (two writes within one clock tick), is still seen as new.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renamed_version_of_the_same_length_and_time_is_read() {
        let dir = std::env::temp_dir().join(format!("tideway-src-rename-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, SVC).unwrap();
        let cluster = SharedCluster::new();
        let source = tokio::spawn(FileSource::new(&path, Duration::from_millis(10)).run(cluster.clone()));
        tokio::time::timeout(Duration::from_secs(10), cluster.wait_synced()).await.expect("synced");
        let stamp = std::fs::metadata(&path).unwrap().modified().unwrap();
        let next = SVC.replace("10.96.0.10", "10.96.0.11");
        assert_eq!(next.len(), SVC.len());
        let tmp = dir.join(".c.yaml.tmp");
        std::fs::write(&tmp, &next).unwrap();
        std::fs::File::options().write(true).open(&tmp).unwrap().set_modified(stamp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let want: std::net::IpAddr = "10.96.0.11".parse().unwrap();
        let mut seen = false;
        for _ in 0..500 {
            seen = cluster.lock().services().next().is_some_and(|s| s.cluster_ips == vec![want]);
            if seen {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(seen, "the new version was not read");
        source.abort();
        std::fs::remove_dir_all(&dir).ok();
    }
}

//! Marks the state synced once every kind delivered its first complete list.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::shared::Signals;

/// Marks the state synced once every kind delivered its first complete list.
#[derive(Clone)]
pub(super) struct SyncBarrier {
    cluster: Signals,
    pending: Arc<Mutex<BTreeSet<String>>>,
    listed: watch::Sender<BTreeSet<String>>,
}

impl SyncBarrier {
    pub(super) fn new(cluster: Signals, kinds: &[&str]) -> Self {
        cluster.set_unlisted(kinds.iter().map(|k| k.to_string()).collect());
        SyncBarrier {
            cluster,
            pending: Arc::new(Mutex::new(kinds.iter().map(|k| k.to_string()).collect())),
            listed: watch::channel(BTreeSet::new()).0,
        }
    }

    pub(super) fn done(&self, kind: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let removed = pending.remove(kind);
        self.cluster.set_unlisted(pending.iter().cloned().collect());
        if removed && pending.is_empty() {
            tracing::info!("every watched kind is listed; the cluster state is synced");
            self.cluster.mark_synced();
        }
        self.listed.send_modify(|l| {
            l.insert(kind.to_string());
        });
    }

    pub(super) async fn wait_listed(&self, kinds: &[&str]) {
        let mut rx = self.listed.subscribe();
        let _ = rx.wait_for(|l| kinds.iter().all(|k| l.contains(*k))).await;
    }
}

//! Where the operator's election keeps its Lease: the calls it makes ([`LeaseStore`]), made
//! on the API server by [`KubeLease`](crate::kube::KubeLease) or in memory by [`MemoryLease`]
//! (for paused-clock tests of the election loop, with calls that hang on demand), as the
//! status sinks have [`MemoryWriter`](crate::status::MemoryWriter).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tideway_core::operator::lease::LeaseRecord;
use tokio::sync::watch;

use crate::status::WriteError;

/// The Lease calls the election makes; every write is conditional on the version read.
#[async_trait::async_trait]
pub trait LeaseStore: Send + Sync {
    /// The Lease as stored (with what the conditional writes need).
    type Lease: Send + Sync;
    /// What the Lease says.
    fn record(lease: &Self::Lease) -> LeaseRecord;
    /// The Lease now (None: it does not exist).
    async fn read(&self) -> Result<Option<Self::Lease>, WriteError>;
    /// Creates it, held by `me` (409: someone else created it first).
    async fn create(&self, me: &str, duration: Duration) -> Result<(), WriteError>;
    /// Takes it over from whoever held it.
    async fn take(
        &self,
        current: Self::Lease,
        me: &str,
        duration: Duration,
        transitions: i32,
    ) -> Result<(), WriteError>;
    /// Renews it.
    async fn renew(&self, current: Self::Lease) -> Result<(), WriteError>;
    /// Gives it up.
    async fn release(&self, current: Self::Lease) -> Result<(), WriteError>;
}

/// A Lease in memory, shared by the candidates made with [`MemoryLease::candidate`]; each
/// candidate's calls can be made to hang (as a partitioned or overloaded API server does).
#[derive(Clone, Default)]
pub struct MemoryLease {
    stored: Arc<Mutex<Option<LeaseRecord>>>,
    versions: Arc<Mutex<u64>>,
    hang: Arc<watch::Sender<bool>>,
}

impl MemoryLease {
    /// Another candidate's handle on the same Lease (its own hang switch).
    pub fn candidate(&self) -> MemoryLease {
        MemoryLease { stored: self.stored.clone(), versions: self.versions.clone(), hang: Arc::default() }
    }

    /// Makes this candidate's calls hang until `hang(false)` (then they fail: the answers are lost).
    pub fn hang(&self, hang: bool) {
        self.hang.send_replace(hang);
    }

    /// The Lease as stored.
    pub fn stored(&self) -> Option<LeaseRecord> {
        self.stored.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn reachable(&self) -> Result<(), WriteError> {
        if !*self.hang.borrow() {
            return Ok(());
        }
        let mut rx = self.hang.subscribe();
        let _ = rx.wait_for(|h| !*h).await;
        Err(WriteError::Transport("connection dropped".into()))
    }

    fn write(
        &self,
        expect: Option<&LeaseRecord>,
        edit: impl FnOnce(&mut LeaseRecord),
    ) -> Result<(), WriteError> {
        let mut stored = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        if stored.as_ref().map(|s| &s.version) != expect.map(|e| &e.version) {
            return Err(WriteError::Refused { code: 409, message: "the object has been modified".into() });
        }
        let mut record = stored.clone().unwrap_or_default();
        edit(&mut record);
        let mut versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        *versions += 1;
        record.version = Some(versions.to_string());
        *stored = Some(record);
        Ok(())
    }
}

#[async_trait::async_trait]
impl LeaseStore for MemoryLease {
    type Lease = LeaseRecord;

    fn record(lease: &LeaseRecord) -> LeaseRecord {
        lease.clone()
    }

    async fn read(&self) -> Result<Option<LeaseRecord>, WriteError> {
        self.reachable().await?;
        Ok(self.stored())
    }

    async fn create(&self, me: &str, duration: Duration) -> Result<(), WriteError> {
        self.reachable().await?;
        self.write(None, |r| {
            *r = LeaseRecord { holder: Some(me.into()), duration, transitions: 0, version: None }
        })
    }

    async fn take(
        &self,
        current: LeaseRecord,
        me: &str,
        duration: Duration,
        transitions: i32,
    ) -> Result<(), WriteError> {
        self.reachable().await?;
        self.write(Some(&current), |r| {
            r.holder = Some(me.into());
            r.duration = duration;
            r.transitions = transitions;
        })
    }

    async fn renew(&self, current: LeaseRecord) -> Result<(), WriteError> {
        self.reachable().await?;
        self.write(Some(&current), |_| {})
    }

    async fn release(&self, current: LeaseRecord) -> Result<(), WriteError> {
        self.reachable().await?;
        self.write(Some(&current), |r| {
            r.holder = None;
            r.duration = Duration::from_secs(1);
        })
    }
}

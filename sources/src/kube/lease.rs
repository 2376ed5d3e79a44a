//! The operator's Lease (`coordination.k8s.io/v1`): read, create, take over, renew and release,
//! each a conditional write (the Lease's `resourceVersion`), so two candidates racing for it
//! cannot both win: the loser gets a 409. The decisions are `tideway_core::operator::lease`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tideway_core::operator::lease::LeaseRecord;

use crate::lease::LeaseStore;
use crate::status::WriteError;

/// One Lease, by namespace and name.
pub struct KubeLease {
    api: Api<Lease>,
    name: String,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// What the Lease says, for the elector.
pub fn record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity,
        duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
        transitions: spec.lease_transitions.unwrap_or(0),
        version: lease.resource_version(),
    }
}

impl KubeLease {
    /// The Lease `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        KubeLease { api: Api::namespaced(client, namespace), name: name.to_string() }
    }

    /// Writes `lease` back edited by `edit`, conditional on the version it was read with.
    async fn replace(&self, mut lease: Lease, edit: impl FnOnce(&mut LeaseSpec)) -> Result<(), WriteError> {
        let mut spec = lease.spec.take().unwrap_or_default();
        edit(&mut spec);
        lease.spec = Some(spec);
        // `lease` keeps the resourceVersion it was read with: a stale one is a 409.
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map_err(WriteError::from)?;
        Ok(())
    }
}

/// Each call a conditional write on the API server.
#[async_trait::async_trait]
impl LeaseStore for KubeLease {
    type Lease = Lease;

    fn record(lease: &Lease) -> LeaseRecord {
        record(lease)
    }

    async fn read(&self) -> Result<Option<Lease>, WriteError> {
        match self.api.get(&self.name).await {
            Ok(l) => Ok(Some(l)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn create(&self, me: &str, duration: Duration) -> Result<(), WriteError> {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(me.into()),
                lease_duration_seconds: Some(duration.as_secs() as i32),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        self.api.create(&PostParams::default(), &lease).await.map_err(WriteError::from)?;
        Ok(())
    }

    async fn take(
        &self,
        current: Lease,
        me: &str,
        duration: Duration,
        transitions: i32,
    ) -> Result<(), WriteError> {
        self.replace(current, |s| {
            s.holder_identity = Some(me.into());
            s.lease_duration_seconds = Some(duration.as_secs() as i32);
            s.acquire_time = Some(now());
            s.renew_time = Some(now());
            s.lease_transitions = Some(transitions);
        })
        .await
    }

    async fn renew(&self, current: Lease) -> Result<(), WriteError> {
        self.replace(current, |s| s.renew_time = Some(now())).await
    }

    /// Gives it up (on shutdown), so another candidate takes it at once.
    async fn release(&self, current: Lease) -> Result<(), WriteError> {
        self.replace(current, |s| {
            s.holder_identity = None;
            s.lease_duration_seconds = Some(1);
            s.renew_time = Some(now());
        })
        .await
    }
}

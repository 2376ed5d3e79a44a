//! The operator's writes to the API server, all with server-side apply (field manager
//! `tideway-operator`, forced: within its class it owns these fields) except deletions and
//! Events:
//!
//! | action | request |
//! |---|---|
//! | `SetIngress` | apply `services/{name}/status` (`status.loadBalancer.ingress`, ipMode VIP) |
//! | `Announce` | apply `l2announcements/{name}`, owned by the Service |
//! | `Withdraw` | delete `l2announcements/{name}` (already gone is fine) |
//! | `ProxyConfigStatus` | apply `proxyconfigs/{name}/status` |
//! | `PoolStatus` | apply `loadbalancerpools/{name}/status` |
//! | `Event` | an `events.k8s.io/v1` Event (kube's recorder, which folds repeats into a series) |
//!
//! A ProxyConfig change asked for over REST is a JSON merge patch of `proxyconfigs/{name}`
//! (field manager `tideway-api`), the patch the caller sent, as `kubectl patch --type merge`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::json;
use tideway_api::crd::{self, L2Announcement, LoadBalancerPool, ProxyConfig, SpecChange};
use tideway_core::model::ServiceName;
use tideway_core::operator::{Action, Event};
use tokio::sync::Mutex;

use crate::status::{ClusterWriter, WriteError};

/// Field manager of every operator write.
pub const OPERATOR_MANAGER: &str = "tideway-operator";
/// Field manager of the changes users make over the operator's REST API.
pub const API_MANAGER: &str = "tideway-api";

/// Writes the operator's decisions to the API server.
pub struct KubeWriter {
    client: Client,
    recorder: Recorder,
    /// Conditions last written per (kind, name), for their transition times.
    conditions: Mutex<BTreeMap<(&'static str, String), Vec<Condition>>>,
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl KubeWriter {
    /// A writer over `client`; Events name `instance` (the pod) as their reporter.
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: OPERATOR_MANAGER.into(), instance };
        KubeWriter { recorder: Recorder::new(client.clone(), reporter), client, conditions: Mutex::default() }
    }

    fn apply() -> PatchParams {
        PatchParams::apply(OPERATOR_MANAGER).force()
    }

    async fn set_ingress(&self, svc: &ServiceName, ips: &[std::net::IpAddr]) -> Result<(), WriteError> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &svc.namespace);
        let ingress: Vec<_> = ips.iter().map(|ip| json!({"ip": ip.to_string(), "ipMode": "VIP"})).collect();
        let body = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc.name, "namespace": svc.namespace},
            "status": {"loadBalancer": {"ingress": ingress}},
        });
        api.patch_status(&svc.name, &Self::apply(), &Patch::Apply(&body)).await.map_err(WriteError::from)?;
        Ok(())
    }

    async fn announce(&self, a: &tideway_core::model::L2Announcement) -> Result<(), WriteError> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), &a.service.namespace);
        // The Service owns its announcement, so deleting it removes the announcement too.
        let uid = match services.get(&a.service.name).await {
            Ok(meta) => meta.uid(),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let obj = crd::l2_announcement_object(a, uid.as_deref());
        let api: Api<L2Announcement> = Api::namespaced(self.client.clone(), &a.service.namespace);
        api.patch(&a.service.name, &Self::apply(), &Patch::Apply(&obj)).await.map_err(WriteError::from)?;
        Ok(())
    }

    async fn withdraw(&self, svc: &ServiceName) -> Result<(), WriteError> {
        let api: Api<L2Announcement> = Api::namespaced(self.client.clone(), &svc.namespace);
        match api.delete(&svc.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn previous(&self, kind: &'static str, name: &str) -> Vec<Condition> {
        self.conditions.lock().await.get(&(kind, name.to_string())).cloned().unwrap_or_default()
    }

    async fn remember(&self, kind: &'static str, name: &str, conditions: &[Condition]) {
        self.conditions.lock().await.insert((kind, name.to_string()), conditions.to_vec());
    }

    /// Applies `status` to the status subresource of the cluster-scoped `kind` object `name`
    /// (an object already gone is fine: a rejected config may be deleted meanwhile).
    async fn apply_status<K>(&self, name: &str, status: serde_json::Value) -> Result<(), WriteError>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let body = json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()),
            "metadata": {"name": name}, "status": status});
        let api: Api<K> = Api::all(self.client.clone());
        match api.patch_status(name, &Self::apply(), &Patch::Apply(&body)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn config_status(
        &self,
        name: &str,
        status: &tideway_core::operator::rollout::ConfigStatus,
    ) -> Result<(), WriteError> {
        let status = crd::proxy_config_status(status, &self.previous("ProxyConfig", name).await, &now());
        let conditions = status.conditions.clone();
        self.apply_status::<ProxyConfig>(name, serde_json::to_value(status).unwrap_or_default()).await?;
        self.remember("ProxyConfig", name, &conditions).await;
        Ok(())
    }

    async fn pool_status(
        &self,
        name: &str,
        report: &tideway_core::operator::PoolReport,
    ) -> Result<(), WriteError> {
        let status =
            crd::load_balancer_pool_status(report, &self.previous("LoadBalancerPool", name).await, &now());
        let conditions = status.conditions.clone();
        self.apply_status::<LoadBalancerPool>(name, serde_json::to_value(status).unwrap_or_default()).await?;
        self.remember("LoadBalancerPool", name, &conditions).await;
        Ok(())
    }

    async fn event(&self, e: &Event) -> Result<(), WriteError> {
        let api_version = match e.object.kind {
            "Service" => "v1",
            "IPAddressPool" => "metallb.io/v1beta1",
            _ => "tideway.io/v1alpha1",
        };
        let reference = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(e.object.kind.into()),
            name: Some(e.object.name.clone()),
            namespace: e.object.namespace.clone(),
            ..Default::default()
        };
        // The related object (the node that now announces) keeps a move to another node from
        // being folded into the series of an earlier Event, whose note would hide the new one.
        let secondary = e.related.as_ref().map(|r| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(r.kind.into()),
            name: Some(r.name.clone()),
            namespace: r.namespace.clone(),
            ..Default::default()
        });
        let event = KubeEvent {
            type_: if e.warning { EventType::Warning } else { EventType::Normal },
            reason: e.reason.into(),
            note: Some(e.message.chars().take(1024).collect()),
            action: "Reconcile".into(),
            secondary,
        };
        self.recorder.publish(&event, &reference).await.map_err(WriteError::from)
    }
}

#[async_trait::async_trait]
impl ClusterWriter for KubeWriter {
    async fn write(&self, action: &Action) -> Result<(), WriteError> {
        match action {
            Action::SetIngress { service, ips } => self.set_ingress(service, ips).await,
            Action::Announce(a) => self.announce(a).await,
            Action::Withdraw(s) => self.withdraw(s).await,
            Action::ProxyConfigStatus { name, status } => self.config_status(name, status).await,
            Action::PoolStatus { name, status } => self.pool_status(name, status).await,
            Action::Event(e) => self.event(e).await,
        }
    }

    async fn patch_proxy_config(&self, name: &str, change: &SpecChange) -> Result<(), WriteError> {
        let api: Api<ProxyConfig> = Api::all(self.client.clone());
        let params = PatchParams { field_manager: Some(API_MANAGER.into()), ..PatchParams::default() };
        api.patch(name, &params, &Patch::Merge(&change.patch)).await.map_err(WriteError::from)?;
        Ok(())
    }
}

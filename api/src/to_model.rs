//! Each Kubernetes type Tideway reads, with its model type and its conversion: the one table
//! the file loader ([`crate::manifest`]) and the watches both go through.

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use serde::de::DeserializeOwned;
use tideway_core::cluster::{BgpObject, BgpSecret, StateKind};
use tideway_core::model;

use crate::convert;
use crate::crd::{self, BgpResource};
use crate::error::ConvertError;

/// A Kubernetes type Tideway reads.
pub trait ToModel: DeserializeOwned {
    /// The model type its objects become.
    type Model: StateKind;

    /// Converts an object; `Ok(None)` for objects the model ignores (an FQDN EndpointSlice, a
    /// slice of no Service, a Secret that is not `kubernetes.io/basic-auth`).
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError>;
}

/// `Kubernetes type => model type, conversion` (returning the model, or an option of it).
macro_rules! to_model {
    ($($t:ty => $model:ty, $convert:expr;)*) => {$(
        impl ToModel for $t {
            type Model = $model;
            fn convert(&self) -> Result<Option<$model>, ConvertError> {
                ($convert)(self)
            }
        }
    )*};
}

to_model! {
    Service => model::Service, |o| convert::service(o).map(Some);
    EndpointSlice => model::EndpointSlice, convert::endpoint_slice;
    Node => model::Node, |o| convert::node(o).map(Some);
    Pod => model::Pod, |o| convert::pod(o).map(Some);
    Namespace => model::Namespace, |o| convert::namespace(o).map(Some);
    ServiceCIDR => model::ServiceCidr, |o| convert::service_cidr(o).map(Some);
    Secret => BgpSecret, convert::bgp_secret;
    crd::ProxyConfig => tideway_core::config::ProxyConfig, |o| crd::proxy_config(o).map(Some);
    crd::NodeProxyState => model::NodeProxyState, |o| crd::node_state_from(o).map(Some);
    crd::L2Announcement => model::L2Announcement, |o| crd::l2_announcement(o).map(Some);
    crd::LoadBalancerPool => model::LoadBalancerPool, |o| crd::load_balancer_pool(o).map(Some);
    crd::IPAddressPool => model::MetalLbPool, |o| crd::ip_address_pool(o).map(Some);
    crd::L2Advertisement => model::L2Advertisement, |o| crd::l2_advertisement(o).map(Some);
    crd::ServiceL2Status => model::ServiceL2Status, crd::service_l2_status;
}

/// The BGP kinds, Tideway's and MetalLB's: one object each of the BGP set.
macro_rules! bgp_to_model {
    ($($t:ty),*) => {$(
        impl ToModel for $t {
            type Model = BgpObject;
            fn convert(&self) -> Result<Option<BgpObject>, ConvertError> {
                self.bgp_object().map(Some)
            }
        }
    )*};
}

/// Calls `$then!` with every BGP kind, Tideway's and MetalLB's (the list kept once: the
/// watches implement theirs with it too).
#[macro_export]
macro_rules! for_each_bgp_kind {
    ($then:ident) => {
        $then!(
            $crate::crd::BGPPeer,
            $crate::crd::BGPAdvertisement,
            $crate::crd::BFDProfile,
            $crate::crd::Community,
            $crate::crd::MetalLbBgpPeer,
            $crate::crd::MetalLbBgpAdvertisement,
            $crate::crd::MetalLbBfdProfile,
            $crate::crd::MetalLbCommunity
        );
    };
}

for_each_bgp_kind!(bgp_to_model);

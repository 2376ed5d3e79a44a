//! The domain model: Kubernetes objects reduced to the parts that matter, validated at the edge.

mod endpoint;
mod node;
mod service;

pub use endpoint::{Endpoint, EndpointPort, EndpointSlice, LABEL_SERVICE_NAME};
pub use node::{LABEL_ZONE, Node, Pod};
pub use service::{
    DEFAULT_AFFINITY_TIMEOUT, IpMode, LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME, LoadBalancerIngress, Service,
    ServiceName, ServicePort, ServicePortName, ServiceType, SessionAffinity, TargetPort, TrafficDistribution,
    TrafficPolicy,
};

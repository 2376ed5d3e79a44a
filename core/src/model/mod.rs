//! The domain model: Kubernetes objects reduced to the parts that matter, validated at the edge.

pub(crate) mod addr_range;
pub mod bgp;
mod endpoint;
mod metallb;
mod metallb_status;
mod node;
mod pool;
mod report;
mod service;
mod status;

pub use addr_range::{AddrRange, PoolAddress, RangeError, is_buggy};
pub use endpoint::{Addresses, Endpoint, EndpointHints, EndpointPort, EndpointSlice, LABEL_SERVICE_NAME};
pub use metallb::{L2Advertisement, MetalLbPool, PoolConflict, l2_of, merge_pools};
pub use metallb_status::ServiceL2Status;
pub use node::{
    AgentLiveness, LABEL_EXCLUDE_FROM_EXTERNAL_LB, LABEL_ZONE, Namespace, Node, Pod, TAINT_TO_BE_DELETED,
    Taint,
};
pub use pool::{L2Settings, LoadBalancerPool, Pool, PoolOrigin, ServiceAllocation};
pub use report::{ReportPolicy, report_due, report_jitter};
pub use service::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_LOAD_BALANCER_IPS,
    ANNOTATION_LOAD_BALANCING, DEFAULT_AFFINITY_TIMEOUT, IpMode, LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME,
    LOAD_BALANCER_ANNOTATIONS, LoadBalancerIngress, LoadBalancerRequest, Service, ServiceCidr, ServiceName,
    ServicePort, ServicePortName, ServiceType, SessionAffinity, TargetPort, TrafficDistribution,
    TrafficPolicy, service_watch_selector,
};
pub use status::{BgpReport, L2Announcement, NodeProxyState, programmed};

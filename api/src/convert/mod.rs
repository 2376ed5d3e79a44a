//! One conversion per Kubernetes kind into the core model, done once at the edge.

mod endpoint_slice;
mod node;
mod secret;
mod service;

pub use endpoint_slice::{ANNOTATION_TRIGGER_TIME, endpoint_slice};
pub use node::{namespace, node, pod};
pub use secret::{BASIC_AUTH, bgp_secret};
pub use service::{service, service_cidr};

//! iptables backend: kube-proxy's chain layout ([`lower`]) and `iptables-restore` text ([`text`]).

mod lower;
pub mod text;

pub use lower::{FILTER, LARGE_CLUSTER_ENDPOINTS, NAT, base, is_large, lower, lower_plan};

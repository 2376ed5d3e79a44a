//! IPVS backend: virtual servers, ipsets and kube-proxy's IPVS-mode rules ([`lower_plan`]), printed
//! as ipset/iptables-restore/ipvsadm text ([`text`]).

mod lower;
pub mod text;

pub use lower::{DUMMY_INTERFACE, IPVS_IPS, base, lower_plan, set_name};

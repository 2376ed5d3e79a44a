//! The planner: every kube-proxy decision, made once, deterministically, per node.
//!
//! ```text
//! ClusterState + NodeContext --compile--> Ruleset (one ServicePortPlan per family x port)
//!                                             \--> render::{nftables, iptables, ipvs}
//! ```
//! A [`Ruleset`] is backend-neutral: it says which frontends exist (ClusterIP, externalIPs,
//! LB IPs, NodePort), which endpoints serve internal and external traffic, and whether traffic
//! is rejected or dropped. Renderers only translate these decisions.

mod balancing;
mod categorize;
mod compile;
mod node;
mod replan;
mod ruleset;
mod tally;

pub use balancing::{Balancing, BalancingChoice, choose as choose_balancing};
pub use categorize::{Categorized, categorize_endpoints};
pub use compile::{compile, plan_service};
pub use node::{LocalTraffic, NODE_DNS_MARK, NodeContext, NodeDns, NodeDnsPlan, NodePortDestinations};
pub use ruleset::{
    Backend, Changed, Frontend, HealthCheck, NodePlan, PlanKey, PlanWarning, Plans, Ruleset, ServicePortPlan,
    Target,
};
pub use tally::Tally;

//! The Tideway node agent: kube-proxy's job, on nftables, iptables or IPVS.
//!
//! ```text
//!  source (Kubernetes or file) --> SharedCluster --changes--> agent::Agent (sync loop)
//!      core: Ruleset::update (plans before and after) -> render::update (both sides'
//!            fragments rendered, diffed against the kept ProgramState) -> ChangeSet
//!      --> dataplane::{Nftables, Iptables, Ipvs}::apply(Desired, ..)  (one transaction where
//!          possible; whole programs rendered only for a full apply, a check or a repair)
//!      --> conntrack cleanup (UDP), health-check NodePort servers, status + metrics
//!      every syncPeriod: dataplane.verify -> drift -> full resync
//!  status --report::run--> NodeProxyState (server-side apply, when its content changes)
//!  L2Announcements naming this node --l2_speaker (own task)--> ARP replies, gratuitous ARP
//!  rendered BGP decisions --bgp_speaker (own task)--> frr::FrrReload --> the node's FRR
//! ```
//! Decisions live in `tideway_core`; this crate only moves them into the kernel and reports.

#![forbid(unsafe_code)]

pub mod agent;
pub mod announcer;
pub mod api;
pub mod bgp_speaker;
pub mod caps;
pub mod cli;
pub mod conntrack;
pub mod dataplane;
pub mod effects;
pub mod exec;
pub mod fencing;
pub mod frr;
pub mod health;
pub mod http;
pub mod l2_speaker;
pub mod metrics;
pub mod netlink;
pub mod node_dns;
pub mod report;
pub mod sysctl;

//! The Tideway node agent: kube-proxy's job, on nftables, iptables or IPVS.
//!
//! ```text
//!  source (Kubernetes or file) --> SharedCluster --changes--> agent::Agent (sync loop)
//!      core: Ruleset::update -> render::lower_fragment -> ProgramState::replace_all
//!      --> dataplane::{Nftables, Iptables, Ipvs}::apply  (one transaction where possible)
//!      --> conntrack cleanup (UDP), health-check NodePort servers, status + metrics
//!      every syncPeriod: dataplane.verify -> drift -> full resync
//!  status --report::run--> NodeProxyState (server-side apply, when its content changes)
//!  L2Announcements naming this node --announcer--> ARP replies and gratuitous ARP
//! ```
//! Decisions live in `tideway_core`; this crate only moves them into the kernel and reports.

#![forbid(unsafe_code)]

pub mod agent;
pub mod announcer;
pub mod api;
pub mod caps;
pub mod cli;
pub mod conntrack;
pub mod conntrack_netlink;
pub mod dataplane;
pub mod exec;
pub mod health;
pub mod http;
pub mod metrics;
pub mod report;
pub mod sysctl;

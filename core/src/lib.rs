//! Tideway's pure core: the domain model, the planner, the renderers and the packet tracer.
//!
//! ```text
//!  sources (YAML file, Kubernetes watchers, lab)
//!        | apply/delete/reset (event-shaped, no-op changes dropped)
//!        v
//!  cluster::ClusterState --take_changes--> changed Services
//!        |
//!        v   plan::compile / Ruleset::update          (every kube-proxy decision)
//!  plan::Ruleset  (backend-neutral: frontends, endpoint sets, reject/drop, masquerade)
//!        |
//!        v   render::{nftables, iptables, ipvs}::lower
//!  program::Program  (tables, chains, rules, sets/maps, IPVS services; per-Service fragments)
//!        |-- render::*::text  -> `nft -f` script / iptables-restore input / IPVS operations
//!        |-- program::diff     -> minimal change between two programs
//!        `-- trace::trace      -> path + verdict of a packet through the program
//! ```
//!
//! The operator's side reads the same state: `operator::Reconciler` turns it into addresses
//! (`ipam`) and announcers (`announce`). An announcer needs its Node Ready *and* its agent
//! alive; the agent's liveness is not in the API (kubelet keeps a Node Ready when only the
//! agent died), so the operator's failure detector feeds it in with
//! `ClusterState::set_agent_liveness(node, AgentLiveness::{Alive, Dead, Unknown})`. `Unknown`
//! (nothing known yet, as after an operator restart) counts as alive and moves nothing; `Dead`
//! makes the node ineligible (`announce::Ineligible::AgentDown`). For BGP, `bgp::decide`
//! applies the same node rules to say which prefixes each node advertises to which peer, and
//! `bgp::frr::render` writes that as the node's FRR configuration.
//!
//! Nothing here performs I/O, spawns tasks or talks to a kernel or an API server: edges do
//! that behind narrow traits, and feed this crate plain values.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod announce;
pub mod bgp;
pub mod cluster;
pub mod config;
pub mod conntrack;
pub mod drain;
pub mod drift;
pub mod ipam;
pub mod l2;
pub mod liveness;
pub mod maglev;
pub mod model;
pub mod net;
pub mod operator;
pub mod plan;
pub mod program;
pub mod render;
pub mod trace;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

//! `tideway lab`: the whole system on one Linux host, in network namespaces, with no
//! Kubernetes cluster.
//!
//! ```text
//!  lab file (Kubernetes YAML + LabHost, LabRouter)
//!     | spec::LabSpec
//!     v
//!  control::build (pure: addresses, ports, EndpointSlices, node/pod status, the cluster DNS)
//!     | + control::Writes (what the operator and agents wrote back)
//!     v
//!  <dir>/cluster.yaml  <-- every component reads it (`--source lab:<dir>`), writes to <dir>/writes
//!
//!  topology (pure plan of namespaces, links, addresses, routes) --netns--> the kernel:
//!    a LAN namespace with the node-network bridge and gateway, one namespace per node (its
//!    own agent and rules), per pod (a whoami server; the DNS pod runs `tideway dns`), per host
//!  router (pure) + frr: upstream routers running FRR, peering with every node's FRR (which
//!    the node's agent drives), with hosts behind them on an outside network
//!  runner: starts and supervises the processes, forwards their HTTP APIs to 127.0.0.1
//! ```
//! Nothing is added to the host's own network namespace but listeners on 127.0.0.1.

#![forbid(unsafe_code)]
// `lab` is a command-line tool: printing progress, tours and tables is its job.
#![allow(clippy::print_stdout)]

pub mod certs;
pub mod cli;
pub mod control;
pub mod faults;
pub mod frr;
pub mod images;
pub mod kube;
pub mod kubelet;
pub mod name_lock;
pub mod netns;
pub mod procs;
pub mod proxy;
pub mod router;
pub mod runner;
pub mod server;
pub mod spec;
pub mod token;
pub mod topology;
pub mod tour;
pub mod up;

//! Tideway cluster DNS: the Kubernetes DNS specification (schema 1.1.0) and the CoreDNS
//! behaviours clusters rely on, served by hickory-server, with forwarding and a cache for
//! every other name.
//!
//! ```text
//!  source (file, lab, Kubernetes API) --> SharedCluster<ClusterView> (facts + changes)
//!                                                    |  changed() -> update the parts of the
//!                                                    v  Services touched, or rebuild all
//!                                  records::RecordIndex  (compact, label-indexed, in parts)
//!                                                    |  ArcSwap
//!  UDP: worker threads -----+                        v
//!       (recvmmsg/sendmmsg) +--> handler::Core::decide --> answer::answer(index, query)
//!  TCP: tcp::serve ---------+        |  (checks: opcode, class,   |-> Answer (authoritative)
//!       (capped, length-prefixed)    |   EDNS, ANY/AXFR, loop)    |-> Chase (ExternalName)
//!                                    |                            '-> Forward
//!                                    v
//!                       Core::complete (async): forward::cache -> forward::Forwarder
//!                                    |                            (UDP, TCP on TC)
//!                                    v
//!                       handler::wire::encode (TC for oversize UDP) --> client
//!
//!  ops: /health :8080, /ready :8181 (after sync, every UDP worker up), /metrics :9153 (CoreDNS names)
//! ```
//!
//! * [`view`]: what the server keeps of the cluster: per object the facts its records read,
//!   written by the sources directly (no cluster model beside the index).
//! * [`follow`]: a view that follows a cluster model someone else keeps (the node agent's
//!   node-local listener).
//! * [`records`]: the index built from the view: every lookup is O(1) or O(log n),
//!   positive or negative; in parts that a few Services' change rebuilds alone.
//! * [`answer`]: the pure decision function holding every spec and CoreDNS rule.
//! * [`handler`]: hickory requests in, replies out; [`handler::DnsHandler`] is the
//!   hickory-server `RequestHandler`.
//! * [`forward`]: upstreams from a resolv.conf, their health, limits per client and in all,
//!   coalescing, 0x20, and the success/denial cache (bounded in bytes, served stale).
//! * [`server`]: sockets, UDP workers, tasks, index updates, reload, lameduck, loop detection.
//! * [`tcp`]: the TCP listener, its connection cap and its pause when descriptors run out.
//! * [`config`], [`ops`], [`metrics`], [`cli`]: settings, health/ready, Prometheus, `tideway dns`.

#![forbid(unsafe_code)]

pub mod answer;
pub mod api;
pub mod cli;
pub mod config;
pub mod follow;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod ops;
pub mod records;
pub mod server;
pub mod tcp;
mod udp;
pub mod view;
#[cfg(test)]
mod walk;

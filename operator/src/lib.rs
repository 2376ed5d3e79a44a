//! The Tideway operator (not implemented yet).
//!
//! Its place in the system: a leader-elected Deployment that reconciles `ProxyConfig`
//! objects into the configuration each node must run (the resolution rule already lives in
//! `tideway_core::config::resolve_proxy_config`, so agents and the operator agree), allocates
//! LoadBalancer IPs from pools, decides which nodes may receive external traffic under each
//! Service's `externalTrafficPolicy`, and rolls node reports up into CRD status.

#![forbid(unsafe_code)]

//! Tideway's public contract: the custom resources and the conversions from Kubernetes objects
//! into the core model. No client, no runtime: sources (the `tideway-sources` crate) feed
//! objects through these conversions.
//!
//! ```text
//!  YAML file / kube watcher / lab --> k8s-openapi objects --convert--> tideway_core::model
//!                                     tideway.io CRDs --crd::*--> core config and status types
//! ```
//! * [`crd`]: custom resource types; their OpenAPI schemas are generated from these structs.
//! * [`convert`]: one conversion per kind, returning a [`ConvertError`] naming object and field.
//! * [`manifest`]: multi-document YAML into a [`tideway_core::cluster::Snapshot`].
//! * [`http`]: the `/metrics` route and server helper every component mounts.
//! * [`listen`]: the accept loop of every HTTP listener: header-read and idle timeouts, a cap
//!   on connections.
//! * [`problem`], [`openapi`]: REST errors as problem details, and OpenAPI documents built
//!   from the handlers' types.
//! * [`bodies`]: REST request bodies beyond merge patches (a packet to trace), checked into
//!   core types.
//! * [`auth`]: bearer tokens for REST changes, and who checks them.
//! * [`tls`]: HTTPS on the REST and metrics ports, the certificate re-read when renewed.
//! * [`validation`]: the valid values of every ProxyConfig and LoadBalancerPool field, read by
//!   the conversions, the REST PATCH check and the generated CRD schema.
//! * [`merge_patch`]: RFC 7386 merge patches (REST changes of a ProxyConfig,
//!   [`crd::patch_proxy_config`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod bodies;
pub mod convert;
pub mod crd;
pub mod duration;
mod error;
pub mod http;
pub mod listen;
pub mod manifest;
pub mod merge_patch;
pub mod openapi;
pub mod problem;
pub mod tls;
pub mod validation;

pub use error::ConvertError;

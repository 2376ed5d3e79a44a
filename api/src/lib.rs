//! Tideway's public contract: the custom resources and the conversions from Kubernetes objects
//! into the core model. No client, no runtime, no server: sources (the `tideway-sources` crate)
//! feed objects through these conversions; how the components serve HTTP is `tideway-serve`'s.
//!
//! ```text
//!  YAML file / kube watcher / lab --> k8s-openapi objects --convert--> tideway_core::model
//!                                     tideway.io CRDs --crd::*--> core config and status types
//! ```
//! * [`crd`]: custom resource types; their OpenAPI schemas are generated from these structs.
//! * [`convert`]: one conversion per kind, returning a [`ConvertError`] naming object and field.
//! * [`manifest`]: multi-document YAML into a [`tideway_core::cluster::Snapshot`].
//! * [`validation`]: the valid values of every ProxyConfig and LoadBalancerPool field, read by
//!   the conversions, the REST PATCH check and the generated CRD schema.
//! * [`merge_patch`]: RFC 7386 merge patches (REST changes of a ProxyConfig,
//!   [`crd::patch_proxy_config`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod convert;
pub mod crd;
pub mod duration;
mod error;
pub mod manifest;
pub mod merge_patch;
mod to_model;
pub mod validation;

pub use error::ConvertError;
pub use to_model::ToModel;

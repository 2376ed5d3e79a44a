//! Tideway's public contract and Kubernetes edge.
//!
//! ```text
//!  YAML file / kube watcher --> k8s-openapi objects --convert--> tideway_core::model
//!                                       ProxyConfig CRD --crd::proxy_config--> core settings
//! ```
//! * [`crd`]: custom resource types; their OpenAPI schemas are generated from these structs.
//! * [`convert`]: one conversion per kind, returning a [`ConvertError`] naming object and field.
//! * [`manifest`]: multi-document YAML into a [`tideway_core::cluster::Snapshot`].
//! * [`http`]: the `/metrics` route and server helper every component mounts.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod convert;
pub mod crd;
pub mod duration;
mod error;
pub mod http;
pub mod manifest;
pub mod source;

pub use error::ConvertError;

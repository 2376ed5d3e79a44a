//! Custom resources (schemas generated from these types by `tideway crdgen`).

mod proxy_config;

pub use proxy_config::{IpvsSpec, ProxyConfig, ProxyConfigSpec, ProxyConfigStatus, proxy_config};

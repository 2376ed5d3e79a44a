//! The chart values the inputs call for.

use serde_json::{Map, Value, json};

/// Chart values the inputs call for.
#[derive(Debug, Default)]
pub(crate) struct Values {
    /// `proxyConfig.create`.
    pub(crate) proxy_config_create: Option<bool>,
    /// `agent.extraArgs`.
    pub(crate) agent_args: Vec<String>,
    /// `dns.*` scalar values.
    pub(crate) dns: Map<String, Value>,
    /// `dns.extraArgs`.
    pub(crate) dns_args: Vec<String>,
}

impl Values {
    /// As a values file.
    pub(crate) fn to_value(&self) -> Value {
        let mut out = Map::new();
        if let Some(create) = self.proxy_config_create {
            out.insert("proxyConfig".into(), json!({"create": create}));
        }
        if !self.agent_args.is_empty() {
            out.insert("agent".into(), json!({"extraArgs": self.agent_args}));
        }
        let mut dns = self.dns.clone();
        if !self.dns_args.is_empty() {
            dns.insert("extraArgs".into(), json!(self.dns_args));
        }
        if !dns.is_empty() {
            out.insert("dns".into(), Value::Object(dns));
        }
        Value::Object(out)
    }
}

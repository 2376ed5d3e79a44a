//! One setting not carried over: a row of the table `tideway migrate` prints.

use serde_json::Value;

/// One setting not carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Left {
    /// kube-proxy, CoreDNS or MetalLB.
    pub(crate) source: &'static str,
    /// The field, plugin or object.
    pub(crate) setting: String,
    /// Its value.
    pub(crate) value: String,
    /// Why it is not carried, and what to do instead.
    pub(crate) why: String,
}

impl Left {
    /// A row for `setting` = `value`.
    pub(crate) fn new(source: &'static str, setting: &str, value: &Value, why: &str) -> Left {
        let value = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Left { source, setting: setting.to_string(), value, why: why.to_string() }
    }
}

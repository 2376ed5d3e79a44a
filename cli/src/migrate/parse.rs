//! Reading an input: one YAML (or JSON) document, and every setting it sets.

use serde_json::Value;

use super::error::MigrateError;

/// Parses one YAML (or JSON) document.
pub(crate) fn parse_yaml(what: &str, text: &str) -> Result<Value, MigrateError> {
    serde_saphyr::from_str(text).map_err(|e| MigrateError::Input(what.into(), format!("invalid YAML: {e}")))
}

/// True for a value that means "unset" in a Go-written configuration.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0" || s == "0s",
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Every set leaf of `v` with its path (`iptables.masqueradeBit`, `nodePortAddresses[0]`).
pub(crate) fn leaves(v: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(v, p, out);
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(v, format!("{path}[{i}]"), out);
                }
            }
            leaf if !is_zero(leaf) => out.push((path, leaf.clone())),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out
}

//! Label and field selectors, as lists and watches apply them.

use std::collections::BTreeMap;

use serde_json::Value;

/// Label selector terms: `k`, `!k`, `k=v`, `k==v`, `k!=v`.
pub(super) fn labels_match(selector: &str, labels: &Value) -> bool {
    selector.split(',').map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        if let Some(k) = term.strip_prefix('!') {
            get(k).is_none()
        } else if let Some((k, v)) = term.split_once("!=") {
            get(k) != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k) == Some(v)
        } else {
            get(term).is_some()
        }
    })
}

/// Field selector terms: `metadata.name=x`, `metadata.namespace=y`.
fn fields_match(selector: &str, obj: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| match term.split_once('=') {
        Some(("metadata.name", v)) => obj["metadata"]["name"].as_str() == Some(v),
        Some(("metadata.namespace", v)) => obj["metadata"]["namespace"].as_str() == Some(v),
        // Secrets' type, as the API server selects it.
        Some(("type", v)) => obj["type"].as_str() == Some(v),
        _ => false,
    })
}

/// Whether `obj` matches the `labelSelector` and `fieldSelector` of query `q`.
pub(super) fn selected(q: &BTreeMap<String, String>, obj: &Value) -> bool {
    q.get("labelSelector").is_none_or(|s| labels_match(s, &obj["metadata"]["labels"]))
        && q.get("fieldSelector").is_none_or(|s| fields_match(s, obj))
}

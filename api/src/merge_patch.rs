//! JSON Merge Patch (RFC 7386), the `application/merge-patch+json` body `kubectl patch
//! --type merge` sends: an object in the patch merges into the target key by key, `null`
//! removes a key, anything else replaces the target's value whole (arrays included).

use serde_json::{Map, Value};

/// `target` with `patch` merged in.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(changes) = patch else { return patch.clone() };
    let mut out = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    for (key, change) in changes {
        if change.is_null() {
            out.remove(key);
        } else {
            let merged = merge_patch(out.get(key).unwrap_or(&Value::Null), change);
            out.insert(key.clone(), merged);
        }
    }
    Value::Object(out)
}

/// The paths of `given`'s keys that `known` lacks, recursing into objects both have: the
/// fields a lenient deserializer dropped (`known` is the value read back and written out
/// again). Empty arrays and objects are not counted: a type may leave them out when writing.
pub fn unknown_fields(given: &Value, known: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_unknown("", given, known, &mut out);
    out
}

fn collect_unknown(prefix: &str, given: &Value, known: &Value, out: &mut Vec<String>) {
    let (Value::Object(given), Value::Object(known)) = (given, known) else { return };
    for (key, value) in given {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match known.get(key) {
            Some(k) => collect_unknown(&path, value, k, out),
            None if is_empty(value) => {}
            None => out.push(path),
        }
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// RFC 7386, appendix A, every example.
    #[test]
    fn the_rfc_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "b"}), json!({"b": "c"}), json!({"a": "b", "b": "c"})),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": "b", "b": "c"}), json!({"a": null}), json!({"b": "c"})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (json!({"a": {"b": "c"}}), json!({"a": {"b": "d", "c": null}}), json!({"a": {"b": "d"}})),
            (json!({"a": [{"b": "c"}]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (json!({"e": null}), json!({"a": 1}), json!({"e": null, "a": 1})),
            (json!([1, 2]), json!({"a": "b", "c": null}), json!({"a": "b"})),
            (json!({}), json!({"a": {"bb": {"ccc": null}}}), json!({"a": {"bb": {}}})),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch), want, "{target} + {patch}");
        }
    }

    #[test]
    fn unknown_fields_are_named_by_path() {
        let given =
            json!({"mode": "iptables", "mdoe": "x", "ipvs": {"scheduler": "rr", "shceduler": 1}, "list": []});
        let known = json!({"mode": "iptables", "ipvs": {"scheduler": "rr"}});
        assert_eq!(unknown_fields(&given, &known), vec!["ipvs.shceduler", "mdoe"]);
        assert!(unknown_fields(&known, &known).is_empty());
    }
}

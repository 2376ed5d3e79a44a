//! Every bad value of `refused.yaml` is refused by the conversion, with an error naming the
//! field, and never panics it; at admission by the OpenAPI schema (`schema`), a CEL rule
//! (`cel`), or by neither (`conversion`: what no standard schema keyword or CEL function says).

use serde_json::Value;
use support::{cel_check, schema_of};

mod support;
use tideway_api::crd::{CHECKED_KINDS, check};

/// One refused object: its name, the field it names, what in the schema refuses it, the object.
struct Refused {
    name: String,
    field: String,
    by: String,
    object: Value,
}

fn refused() -> Vec<Refused> {
    let text = include_str!("refused.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("refused.yaml parses");
    let annotation =
        |v: &Value, key: &str| v["metadata"]["annotations"][key].as_str().unwrap_or_default().to_string();
    let out: Vec<Refused> = docs
        .into_iter()
        .map(|object| Refused {
            name: object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            field: annotation(&object, "test.tideway.io/field"),
            by: annotation(&object, "test.tideway.io/refused-by"),
            object,
        })
        .collect();
    assert!(out.len() >= 30, "{} objects", out.len());
    out
}

/// The conversion's error for `object`, as (field, message).
fn conversion_error(object: &Value) -> Option<(String, String)> {
    assert!(CHECKED_KINDS.iter().any(|k| object["kind"] == *k), "unexpected kind {}", object["kind"]);
    check(object).err().map(|e| (e.field, e.message))
}

#[test]
fn the_conversion_refuses_each_bad_value_naming_its_field() {
    for r in refused() {
        assert!(
            matches!(r.by.as_str(), "schema" | "cel" | "conversion"),
            "{}: refused-by {:?}",
            r.name,
            r.by
        );
        let (field, message) =
            conversion_error(&r.object).unwrap_or_else(|| panic!("{}: the conversion accepts it", r.name));
        assert!(field.starts_with(&r.field), "{}: names {field:?} ({message}), not {:?}", r.name, r.field);
    }
}

#[test]
fn each_object_is_valid_once_its_bad_field_is_removed() {
    // The list tests one value each: without it the object converts.
    for r in refused() {
        let mut object = r.object.clone();
        let top =
            r.field.trim_start_matches("spec.").split(['.', '[']).next().unwrap_or_default().to_string();
        object["spec"].as_object_mut().expect("spec").remove(&top);
        if object["kind"] == "LoadBalancerPool" && top == "addresses" {
            object["spec"]["addresses"] = serde_json::json!(["10.0.0.0/24"]);
        }
        assert_eq!(conversion_error(&object), None, "{}", r.name);
    }
}

/// The objects of `accepted.yaml` and the examples' ProxyConfigs and pools.
fn accepted() -> Vec<Value> {
    let mut out = Vec::new();
    for text in [
        include_str!("accepted.yaml"),
        include_str!("../../examples/cluster.yaml"),
        include_str!("../../examples/demo.yaml"),
    ] {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("parses");
        out.extend(docs.into_iter().filter(|d| CHECKED_KINDS.iter().any(|k| d["kind"] == *k)));
    }
    assert!(out.len() >= 12, "{} objects", out.len());
    out
}

#[test]
fn accepted_objects_convert() {
    for object in accepted() {
        assert_eq!(conversion_error(&object), None, "{}", object["metadata"]["name"]);
    }
}

#[test]
fn the_cel_rules_refuse_each_bad_value_marked_cel_and_take_every_accepted_object() {
    let rules = ["ProxyConfig", "LoadBalancerPool"]
        .map(|k| schema_of(k).to_string().matches("\"rule\"").count())
        .iter()
        .sum::<usize>();
    assert!(rules >= 8, "{rules} rules");
    let mut cel = 0;
    for r in refused().into_iter().filter(|r| r.by == "cel") {
        let failures = cel_check(&r.object);
        assert!(!failures.is_empty(), "{}: no CEL rule refuses it", r.name);
        cel += 1;
    }
    assert!(cel >= 10, "{cel} refused by CEL");
    // What only the conversion refuses passes every rule (a rule that learns to refuse it must
    // mark it `cel`).
    for r in refused().into_iter().filter(|r| r.by == "conversion") {
        assert_eq!(cel_check(&r.object), Vec::<String>::new(), "{}", r.name);
    }
    for object in accepted() {
        assert_eq!(cel_check(&object), Vec::<String>::new(), "{}", object["metadata"]["name"]);
    }
}

//! Every bad value of `refused.yaml` is refused by the conversion, with an error naming the
//! field, and never panics it.

use serde_json::Value;
use tideway_api::crd::{LoadBalancerPool, ProxyConfig, load_balancer_pool, proxy_config};

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
    let err = match object["kind"].as_str() {
        Some("ProxyConfig") => {
            let pc: ProxyConfig = serde_json::from_value(object.clone()).expect("decodes");
            proxy_config(&pc).err()
        }
        Some("LoadBalancerPool") => {
            let pool: LoadBalancerPool = serde_json::from_value(object.clone()).expect("decodes");
            load_balancer_pool(&pool).err()
        }
        other => panic!("unexpected kind {other:?}"),
    };
    err.map(|e| (e.field, e.message))
}

#[test]
fn the_conversion_refuses_each_bad_value_naming_its_field() {
    for r in refused() {
        assert!(matches!(r.by.as_str(), "schema" | "cel"), "{}: refused-by {:?}", r.name, r.by);
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
        out.extend(
            docs.into_iter().filter(|d| d["kind"] == "ProxyConfig" || d["kind"] == "LoadBalancerPool"),
        );
    }
    assert!(out.len() >= 8, "{} objects", out.len());
    out
}

#[test]
fn accepted_objects_convert() {
    for object in accepted() {
        assert_eq!(conversion_error(&object), None, "{}", object["metadata"]["name"]);
    }
}

/// The generated `openAPIV3Schema` of `kind`.
fn schema_of(kind: &str) -> Value {
    let crd = tideway_api::crd::all().into_iter().find(|c| c.spec.names.kind == kind).expect("a CRD");
    serde_json::to_value(&crd.spec.versions[0].schema.as_ref().expect("schema").open_api_v3_schema)
        .expect("json")
}

/// Functions the rules may call: CEL's standard ones (the API server has more, an
/// implementation of the standard alone need not).
const STANDARD_FUNCTIONS: &[&str] =
    &["has", "size", "contains", "startsWith", "endsWith", "matches", "duration", "exists", "all"];

/// Every `x-kubernetes-validations` rule of `schema` that `object` breaks, evaluated with the
/// `cel-interpreter` crate: `self` is the value at the rule's place, as the API server binds it.
fn cel_failures(schema: &Value, object: &Value, at: &str, out: &mut Vec<String>) {
    for rule in schema["x-kubernetes-validations"].as_array().into_iter().flatten() {
        let text = rule["rule"].as_str().expect("rule text");
        let program = cel_interpreter::Program::compile(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        for f in program.references().functions() {
            // Operators are named by their shape (`_&&_`, `!_`, `@in`).
            let operator = f.contains('_') || f.starts_with('@');
            assert!(operator || STANDARD_FUNCTIONS.contains(&f), "{text}: calls {f}");
        }
        let mut context = cel_interpreter::Context::default();
        context.add_variable("self", object).expect("binds self");
        match program.execute(&context) {
            Ok(cel_interpreter::Value::Bool(true)) => {}
            other => out.push(format!("{at}: {} ({other:?})", rule["message"].as_str().unwrap_or_default())),
        }
    }
    if let (Some(props), Some(fields)) = (schema["properties"].as_object(), object.as_object()) {
        for (name, sub) in props {
            if let Some(v) = fields.get(name).filter(|v| !v.is_null()) {
                cel_failures(sub, v, &format!("{at}.{name}"), out);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), object.as_array()) {
        for (i, v) in list.iter().enumerate() {
            cel_failures(items, v, &format!("{at}[{i}]"), out);
        }
    }
}

fn cel_check(object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    cel_failures(&schema_of(object["kind"].as_str().expect("kind")), object, "", &mut out);
    out
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
    for object in accepted() {
        assert_eq!(cel_check(&object), Vec::<String>::new(), "{}", object["metadata"]["name"]);
    }
}

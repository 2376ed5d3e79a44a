//! The generated CRD schemas as the API server applies them, for tests: the OpenAPI
//! keywords the validation constraints use, and the CEL rules through `cel-interpreter`.
#![allow(dead_code)] // Each test binary uses a part.

use serde_json::Value;

/// The generated `openAPIV3Schema` of `kind` (built once).
pub(crate) fn schema_of(kind: &str) -> Value {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        tideway_api::crd::all()
            .into_iter()
            .map(|c| {
                let schema = &c.spec.versions[0].schema.as_ref().expect("schema").open_api_v3_schema;
                (c.spec.names.kind.clone(), serde_json::to_value(schema).expect("json"))
            })
            .collect()
    });
    all.iter().find(|(k, _)| k == kind).map(|(_, s)| s.clone()).expect("a CRD")
}

thread_local! {
    static PATTERNS: std::cell::RefCell<std::collections::HashMap<String, regex::Regex>> = Default::default();
    static PROGRAMS: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<cel_interpreter::Program>>> =
        Default::default();
}

fn matches(pattern: &str, s: &str) -> bool {
    PATTERNS.with_borrow_mut(|p| {
        p.entry(pattern.to_string())
            .or_insert_with(|| regex::Regex::new(pattern).expect("pattern compiles"))
            .is_match(s)
    })
}

/// `text` compiled (once per thread), its functions checked against [`STANDARD_FUNCTIONS`].
fn program(text: &str) -> std::rc::Rc<cel_interpreter::Program> {
    PROGRAMS.with_borrow_mut(|p| {
        p.entry(text.to_string())
            .or_insert_with(|| {
                let program =
                    cel_interpreter::Program::compile(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
                for f in program.references().functions() {
                    // Operators are named by their shape (`_&&_`, `!_`, `@in`).
                    let operator = f.contains('_') || f.starts_with('@');
                    assert!(operator || STANDARD_FUNCTIONS.contains(&f), "{text}: calls {f}");
                }
                std::rc::Rc::new(program)
            })
            .clone()
    })
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
        let program = program(text);
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

/// Every CEL rule of the schema of `object`'s kind that it breaks.
pub(crate) fn cel_check(object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    cel_failures(&schema_of(object["kind"].as_str().expect("kind")), object, "", &mut out);
    out
}

/// Every OpenAPI keyword of `schema` that `object` breaks, of those the constraints use
/// (`pattern`, `maxLength`, `maxItems`, `minimum`, `maximum`, `enum`, `required`); types are
/// serde's.
fn openapi_failures(schema: &Value, object: &Value, at: &str, out: &mut Vec<String>) {
    if object.is_null() {
        // A null is a type error unless the field is nullable.
        if schema["nullable"] != Value::Bool(true) && schema.get("type").is_some() {
            out.push(format!("{at}: null"));
        }
        return;
    }
    if let (Some(p), Some(s)) = (schema["pattern"].as_str(), object.as_str())
        && !matches(p, s)
    {
        out.push(format!("{at}: pattern"));
    }
    if let (Some(max), Some(s)) = (schema["maxLength"].as_u64(), object.as_str())
        && s.chars().count() as u64 > max
    {
        out.push(format!("{at}: maxLength"));
    }
    if let (Some(max), Some(a)) = (schema["maxItems"].as_u64(), object.as_array())
        && a.len() as u64 > max
    {
        out.push(format!("{at}: maxItems"));
    }
    if let Some(n) = object.as_f64()
        && (schema["minimum"].as_f64().is_some_and(|m| n < m)
            || schema["maximum"].as_f64().is_some_and(|m| n > m))
    {
        out.push(format!("{at}: bounds"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(object)
    {
        out.push(format!("{at}: enum"));
    }
    if let (Some(required), Some(fields)) = (schema["required"].as_array(), object.as_object()) {
        for name in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                out.push(format!("{at}.{name}: required"));
            }
        }
    }
    if let (Some(props), Some(fields)) = (schema["properties"].as_object(), object.as_object()) {
        for (name, sub) in props {
            if let Some(v) = fields.get(name) {
                openapi_failures(sub, v, &format!("{at}.{name}"), out);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), object.as_array()) {
        for (i, v) in list.iter().enumerate() {
            openapi_failures(items, v, &format!("{at}[{i}]"), out);
        }
    }
}

/// What the generated schema refuses in `object`: its OpenAPI keywords, then its CEL rules
/// (only when the OpenAPI part passes, as the API server runs them).
pub(crate) fn admission_failures(object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    openapi_failures(&schema_of(object["kind"].as_str().expect("kind")), object, "", &mut out);
    if out.is_empty() {
        out = cel_check(object);
    }
    out
}

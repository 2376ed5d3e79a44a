//! OpenAPI 3.1 documents built from the code: each operation names its path, method, summary
//! and the Rust types of its body and answers, whose JSON Schemas `schemars` derives (the
//! same types the handlers (de)serialise).

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
pub use serde_json::Value;
use serde_json::{Map, json};

/// A document under construction.
pub struct OpenApi {
    title: String,
    paths: Map<String, Value>,
    schemas: SchemaGenerator,
}

/// What an operation answers with one status.
pub enum Answer {
    /// JSON of a type (its schema is derived).
    Json(Value),
    /// Text (a ruleset, metrics).
    Text,
}

impl OpenApi {
    /// An empty document.
    pub fn new(title: &str) -> OpenApi {
        let settings =
            SchemaSettings::draft2020_12().with(|s| s.definitions_path = "/components/schemas".into());
        OpenApi { title: title.into(), paths: Map::new(), schemas: settings.into_generator() }
    }

    /// The schema of `T` (a reference into the components).
    pub fn schema<T: JsonSchema>(&mut self) -> Value {
        self.schemas.subschema_for::<T>().to_value()
    }

    /// Adds an operation: `body` is the request body's schema, `answers` the status codes.
    pub fn operation(
        &mut self,
        method: &str,
        path: &str,
        summary: &str,
        parameters: Vec<Value>,
        body: Option<Value>,
        answers: Vec<(u16, &str, Answer)>,
    ) -> &mut Self {
        let problem = self.schema::<crate::problem::Problem>();
        let mut responses = Map::new();
        for (status, description, answer) in answers {
            let content = match answer {
                Answer::Json(schema) => json!({"application/json": {"schema": schema}}),
                Answer::Text => json!({"text/plain": {"schema": {"type": "string"}}}),
            };
            responses.insert(status.to_string(), json!({"description": description, "content": content}));
        }
        responses.insert(
            "default".into(),
            json!({"description": "a problem", "content": {"application/problem+json": {"schema": problem}}}),
        );
        let mut op = json!({"summary": summary, "parameters": parameters, "responses": responses});
        if let Some(schema) = body {
            op["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": schema}}});
        }
        let entry = self.paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[method] = op;
        self
    }

    /// The document.
    pub fn build(mut self) -> Value {
        let schemas = self.schemas.take_definitions(true);
        json!({
            "openapi": "3.1.0",
            "info": {"title": self.title, "version": env!("CARGO_PKG_VERSION")},
            "paths": self.paths,
            "components": {"schemas": schemas},
        })
    }
}

/// `GET /openapi.json` serving `doc`.
pub fn router<S: Clone + Send + Sync + 'static>(doc: Value) -> axum::Router<S> {
    let doc = std::sync::Arc::new(doc);
    axum::Router::new()
        .route("/openapi.json", axum::routing::get(move || async move { axum::Json((*doc).clone()) }))
}

/// The schema of an IP address field (`IpAddr`): IPv4 or IPv6 text.
pub fn ip_address(_: &mut SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]})
}

/// A required path parameter.
pub fn path_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

/// A free-form query parameter.
pub fn query_string(name: &str, description: &str, required: bool) -> Value {
    json!({"name": name, "in": "query", "required": required, "description": description,
           "schema": {"type": "string"}})
}

/// An optional query parameter of `values`.
pub fn query_parameter(name: &str, description: &str, values: &[&str]) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": {"type": "string", "enum": values}})
}

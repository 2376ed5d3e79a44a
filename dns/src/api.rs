//! The DNS server's REST API (its own listener, loopback by default): what the server would
//! answer for a name and why, and what it serves. Answers come from the same pure function
//! the query path uses ([`crate::answer`]), on the index in use; errors are problem details;
//! `/openapi.json` describes the operations.
//!
//! * `GET /api/v1/records?name=&type=`: rcode, the three sections, and the reason (answered
//!   from the cluster zone, a CNAME chased upstream, or forwarded).
//! * `GET /api/v1/stats`: zone, synced, Services and endpoints indexed.

use std::str::FromStr;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query as UrlQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hickory_proto::op::{LowerQuery, Query, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_serve::openapi::{Answer as Doc, OpenApi, Value, query_parameter, query_string};
use tideway_serve::problem::{Problem, query_params};

use crate::answer::{Answer, Outcome, answer};
use crate::records::RecordIndex;

/// Where the index in use comes from (the server's core; a fixed index in tests).
pub type IndexSource = Arc<dyn Fn() -> Arc<RecordIndex> + Send + Sync>;

/// `?name=&type=`.
#[derive(Debug, Deserialize)]
struct RecordsParams {
    name: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// One record, as `dig` prints it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RecordView {
    /// Owner name.
    pub name: String,
    /// Type (`A`, `SRV`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// TTL in seconds.
    pub ttl: u32,
    /// The data, in presentation format.
    pub data: String,
}

/// What the server would answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RecordsAnswer {
    /// The name asked.
    pub name: String,
    /// The type asked.
    #[serde(rename = "type")]
    pub kind: String,
    /// `NOERROR`, `NXDOMAIN`, `SERVFAIL`; absent when the query is forwarded.
    pub rcode: Option<String>,
    /// Why: answered from the cluster zone, chased upstream, or forwarded.
    pub why: String,
    /// Answer section.
    pub answers: Vec<RecordView>,
    /// Authority section.
    pub authority: Vec<RecordView>,
    /// Additional section.
    pub additionals: Vec<RecordView>,
}

/// What the server serves.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Stats {
    /// The cluster zone.
    pub zone: String,
    /// True once the index was built from a complete view of the cluster (before that the
    /// zone answers SERVFAIL).
    pub synced: bool,
    /// Services indexed.
    pub services: usize,
    /// Endpoints indexed.
    pub endpoints: usize,
    /// The SOA serial (moves with every rebuild).
    pub serial: u32,
}

fn views(records: &[Record]) -> Vec<RecordView> {
    records
        .iter()
        .map(|r| RecordView {
            name: r.name.to_string(),
            kind: r.record_type().to_string(),
            ttl: r.ttl,
            data: r.data.to_string(),
        })
        .collect()
}

/// The rcode as `dig` spells it.
fn rcode(code: ResponseCode) -> String {
    match code {
        ResponseCode::NoError => "NOERROR".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::Refused => "REFUSED".into(),
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        other => format!("{other:?}").to_ascii_uppercase(),
    }
}

fn records_answer(
    name: &Name,
    kind: RecordType,
    rcode: Option<String>,
    why: String,
    a: &Answer,
) -> RecordsAnswer {
    RecordsAnswer {
        name: name.to_string(),
        kind: kind.to_string(),
        rcode,
        why,
        answers: views(&a.answers),
        authority: views(&a.authority),
        additionals: views(&a.additionals),
    }
}

/// The record types the OpenAPI document lists (the server takes any type name).
const RECORD_TYPES: &[&str] = &["A", "AAAA", "SRV", "PTR", "CNAME", "TXT", "NS", "SOA", "MX", "ANY"];

async fn records(
    State(index): State<IndexSource>,
    p: Result<UrlQuery<RecordsParams>, QueryRejection>,
) -> Result<Response, Problem> {
    let p = query_params(p)?;
    let name = p.name.ok_or_else(|| Problem::bad_field("name", "required: the name to look up"))?;
    let name = Name::from_str(&name)
        .map_err(|e| Problem::bad_field("name", format!("{name:?} is not a DNS name: {e}")))?;
    let name = if name.is_fqdn() { name } else { Name::root().append_domain(&name).unwrap_or(name) };
    let kind = p.kind.as_deref().unwrap_or("A");
    let kind = RecordType::from_str(&kind.to_ascii_uppercase())
        .map_err(|_| Problem::bad_field("type", format!("{kind:?} is not a record type")))?;
    let index = (index)();
    let outcome = answer(&index, &LowerQuery::query(Query::query(name.clone(), kind)));
    let answer = match outcome {
        Outcome::Answer(a) => {
            let why = if index.is_synced() {
                "answered from the cluster zone".to_string()
            } else {
                "the cluster zone has not synced yet: SERVFAIL, as CoreDNS does".to_string()
            };
            records_answer(&name, kind, Some(rcode(a.rcode)), why, &a)
        }
        Outcome::Chase { answer: a, target } => {
            let why = format!(
                "an ExternalName: the CNAME chain is completed with {target}'s records, looked up upstream"
            );
            records_answer(&name, kind, Some(rcode(a.rcode)), why, &a)
        }
        Outcome::Forward => {
            let lower = name.to_lowercase();
            let why = if index.cluster_zone_labels(&lower).is_some() {
                "not in the cluster zone, which falls through (--fallthrough): forwarded to the upstreams"
            } else {
                "not a name the server is authoritative for: forwarded to the upstreams"
            };
            let why = why.to_string();
            records_answer(&name, kind, None, why, &Answer::default())
        }
    };
    Ok(axum::Json(answer).into_response())
}

async fn stats(State(index): State<IndexSource>) -> axum::Json<Stats> {
    let index = (index)();
    axum::Json(Stats {
        zone: index.zone().to_string(),
        synced: index.is_synced(),
        services: index.service_count(),
        endpoints: index.endpoint_count(),
        serial: index.serial(),
    })
}

/// The OpenAPI document of this API.
pub fn openapi() -> Value {
    let mut doc = OpenApi::new("tideway dns");
    let answer = doc.schema::<RecordsAnswer>();
    let stats = doc.schema::<Stats>();
    let name = query_string("name", "the name to look up", true);
    let kind = query_parameter("type", "record type (default A; any type name is taken)", RECORD_TYPES);
    doc.operation(
        "get",
        "/api/v1/records",
        "what the server would answer, and why",
        vec![name, kind],
        None,
        vec![(200, "the answer", Doc::Json(answer))],
    );
    doc.operation(
        "get",
        "/api/v1/stats",
        "what the server serves",
        vec![],
        None,
        vec![(200, "zone, sync state and counts", Doc::Json(stats))],
    );
    doc.build()
}

/// The API over the index `index` gives.
pub fn router(index: IndexSource) -> Router {
    let router = Router::new()
        .route("/api/v1/records", get(records))
        .route("/api/v1/stats", get(stats))
        .merge(tideway_serve::openapi::router(openapi()))
        .fallback(tideway_serve::problem::not_found)
        .with_state(index);
    tideway_serve::http::with_timeout(router)
}

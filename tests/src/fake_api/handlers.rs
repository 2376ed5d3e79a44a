//! The REST surface: routing, authentication and authorization, list, watch, get, create,
//! replace, apply, delete.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::rbac::{Attributes, forbidden_message};
use super::recorded::Recorded;
use super::selectors::selected;
use super::state::Inner;
use super::status::status;
use super::writes::Write;

/// A request path: collection, namespace, name, subresource.
type Route = (String, Option<String>, Option<String>, Option<String>);

/// `/api/v1/...` or `/apis/g/v/...` split into its [`Route`].
fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let prefix_len = match *segs.first()? {
        "api" => 2,
        "apis" => 3,
        _ => return None,
    };
    let prefix = format!("/{}", segs.get(..prefix_len)?.join("/"));
    let mut rest = &segs[prefix_len..];
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        namespace = Some(rest[1].to_string());
        rest = &rest[2..];
    }
    let plural = rest.first()?;
    Some((
        format!("{prefix}/{plural}"),
        namespace,
        rest.get(1).map(|s| s.to_string()),
        rest.get(2).map(|s| s.to_string()),
    ))
}

pub(super) async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).map(str::to_string);
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let user = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let (hung, account) = {
        let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
        let hung = user.as_ref().and_then(|u| guard.hanging.get(u)).map(|h| h.subscribe());
        let account = user.as_ref().and_then(|u| guard.accounts.get(u)).copied();
        guard.requests.push(Recorded {
            at: std::time::Instant::now(),
            user,
            account,
            method: method.to_string(),
            path: uri.path().to_string(),
            query: query.clone(),
            content_type: content_type.clone(),
            body: parsed.clone(),
        });
        (hung, account)
    };
    if let Some(mut released) = hung {
        let _ = released.wait_for(|hanging| !*hanging).await;
        return status(503, "ServiceUnavailable", "the request was lost while the server hung");
    }
    let Some(account) = account else {
        return status(401, "Unauthorized", "Unauthorized");
    };
    let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(attrs) = attributes(&method, uri.path(), &query) {
        let res = route(uri.path()).and_then(|r| guard.resources.get(&r.0));
        let exists =
            res.is_some_and(|r| r.objects.contains_key(&(attrs.namespace.clone(), attrs.name.clone())));
        let withdrawn = res.is_some_and(|r| r.forbidden);
        let mut asked = vec![attrs.clone()];
        // An apply that would create the object needs `create` too, as the API server checks
        // (through a subresource it creates nothing: a 404).
        if content_type.as_deref() == Some("application/apply-patch+yaml")
            && !exists
            && attrs.subresource.is_empty()
        {
            asked.push(Attributes { verb: "create".into(), ..attrs });
        }
        for a in &asked {
            if withdrawn || !guard.rbac.allows(account, a) {
                return status(403, "Forbidden", &forbidden_message(&guard.rbac.user(account), a));
            }
        }
        for a in &asked {
            guard.usage.record(account, a);
        }
    }
    respond(&mut guard, method, &uri, query, content_type, parsed)
}

/// What a request asks for, as the API server's authorizer sees it (`None`: not a resource).
fn attributes(method: &Method, path: &str, q: &BTreeMap<String, String>) -> Option<Attributes> {
    let (collection, namespace, name, sub) = route(path)?;
    let segs: Vec<&str> = collection.trim_matches('/').split('/').collect();
    let group = if segs[0] == "api" { "" } else { segs.get(1).copied().unwrap_or_default() };
    let verb = match (method.as_str(), &name) {
        ("GET" | "HEAD", None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        ("GET" | "HEAD", None) => "list",
        ("GET" | "HEAD", Some(_)) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", None) => "deletecollection",
        ("DELETE", Some(_)) => "delete",
        _ => return None,
    };
    Some(Attributes {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: segs.last().copied().unwrap_or_default().to_string(),
        subresource: sub.unwrap_or_default(),
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
    })
}

/// Answers a request that is not hung.
fn respond(
    guard: &mut Inner,
    method: Method,
    uri: &Uri,
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    parsed: Value,
) -> Response {
    if let Some(code) = guard.outage {
        return status(code, "ServiceUnavailable", "the API server is unavailable");
    }
    if let Some(i) = guard.failures.iter().position(|(m, p, _)| *m == method.as_str() && *p == uri.path()) {
        let (_, _, code) = guard.failures.remove(i);
        let reason = if code == 409 { "Conflict" } else { "InternalError" };
        return status(code, reason, "injected failure");
    }
    if method == Method::POST
        && let Some(answer) = guard.reviews.answer(uri.path(), &parsed)
    {
        return (StatusCode::CREATED, axum::Json(answer)).into_response();
    }
    let Some((collection, namespace, name, sub)) = route(uri.path()) else {
        return status(404, "NotFound", "no such path");
    };
    let Some(res) = guard.resources.get(&collection) else {
        return status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource {collection}"),
        );
    };
    match (method, name) {
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            super::watch::watch(guard, &collection, namespace, &query)
        }
        (Method::GET, None) => list(guard, &collection, namespace, &query),
        (Method::GET, Some(name)) => {
            let key = (namespace.unwrap_or_default(), name);
            match res.objects.get(&key) {
                Some(obj) => axum::Json(obj.clone()).into_response(),
                None => status(404, "NotFound", &format!("{} {:?} not found", res.kind, key.1)),
            }
        }
        (Method::PATCH, Some(name)) => {
            let w = Write { collection, namespace, name, sub, query };
            match content_type.as_deref() {
                Some("application/apply-patch+yaml") => w.apply(guard, parsed),
                // A strategic merge patch of Tideway's objects merges as a JSON merge patch does.
                Some("application/merge-patch+json" | "application/strategic-merge-patch+json") => {
                    w.merge_patch(guard, parsed)
                }
                _ => status(415, "UnsupportedMediaType", "not a patch type the test API server speaks"),
            }
        }
        (Method::POST, None) => {
            Write { collection, namespace, name: String::new(), sub, query }.create(guard, parsed)
        }
        (Method::PUT, Some(name)) => Write { collection, namespace, name, sub, query }.replace(guard, parsed),
        (Method::DELETE, Some(name)) => Write { collection, namespace, name, sub, query }.delete(guard),
        _ => status(405, "MethodNotAllowed", "not supported by the fake API"),
    }
}

fn list(
    inner: &Inner,
    collection: &str,
    namespace: Option<String>,
    q: &BTreeMap<String, String>,
) -> Response {
    let res = &inner.resources[collection];
    let items: Vec<&Value> = res
        .objects
        .iter()
        .filter(|((ns, _), _)| namespace.as_ref().is_none_or(|n| n == ns))
        .map(|(_, o)| o)
        .filter(|o| selected(q, o))
        .collect();
    // From the watch cache (`resourceVersion=0`) a list comes whole, whatever the limit.
    let cached = q.get("resourceVersion").is_some_and(|v| v == "0");
    let limit: usize =
        q.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0 && !cached).unwrap_or(usize::MAX);
    let start: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let page: Vec<&Value> = items.iter().skip(start).take(limit).copied().collect();
    let next = (start + page.len() < items.len()).then(|| (start + page.len()).to_string());
    let mut meta = json!({"resourceVersion": inner.rv.to_string()});
    if let Some(next) = next {
        meta["continue"] = json!(next);
    }
    // Serialised by hand: a large list is one allocation, not a tree of Values.
    let mut out = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        res.kind, res.api_version, meta
    );
    for (i, item) in page.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item.to_string());
    }
    out.push_str("]}");
    ([("content-type", "application/json")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::super::selectors::labels_match;
    use super::*;

    #[test]
    fn routes_and_selectors() {
        assert_eq!(route("/api/v1/services"), Some(("/api/v1/services".into(), None, None, None)));
        assert_eq!(
            route("/apis/tideway.io/v1alpha1/nodeproxystates/node-a/status"),
            Some((
                "/apis/tideway.io/v1alpha1/nodeproxystates".into(),
                None,
                Some("node-a".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            route("/api/v1/namespaces/kube-system/services/kube-dns"),
            Some(("/api/v1/services".into(), Some("kube-system".into()), Some("kube-dns".into()), None))
        );
        assert_eq!(route("/api/v1/namespaces"), Some(("/api/v1/namespaces".into(), None, None, None)));
        let labels = json!({"a": "1", "b": "2"});
        assert!(labels_match("a=1,!c", &labels));
        assert!(!labels_match("!a", &labels));
        assert!(labels_match("b!=3,b", &labels));
        assert!(!labels_match("a==2", &labels));
    }
}

//! Watches as the API server serves them: a stream of JSON lines from a resourceVersion on.
//!
//! * The history is bounded ([`super::FakeApi::keep_history`], [`super::FakeApi::compact`]): a
//!   watch from a version older than what is kept gets one `ERROR` event with code 410 (too old
//!   resource version), and the client must list again.
//! * A watch from version 0 (or none) starts with an `ADDED` event per object, then streams.
//! * A streamed list (`sendInitialEvents=true`, with `resourceVersionMatch=NotOlderThan` and
//!   bookmarks, as the API server requires) sends an `ADDED` event per object, then a
//!   `BOOKMARK` annotated `k8s.io/initial-events-end`, then streams; unless the server is told
//!   not to stream lists ([`super::FakeApi::stream_lists`]), when it is refused `422 Invalid`.
//! * A watch ends after its `timeoutSeconds` (capped by [`super::FakeApi::cap_watches`], as the
//!   server's request timeout), after a `BOOKMARK` with the version it got to when the client
//!   allows bookmarks; the client resumes from there.
//! * [`super::FakeApi::drop_watches`] cuts the connections mid-stream (no clean end), and a
//!   watcher too slow to keep up is cut the same way, as the API server does.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::selectors::selected;
use super::state::Inner;
use super::status::status;

/// The type of the internal event that ends a watch without a word (never sent to a client).
pub(super) const CLOSE: &str = "CLOSE";

/// The type of the internal event that cuts a watch's connection (never sent to a client).
pub(super) const DROP: &str = "DROP";

/// The event that ends a watch from a version compacted away: `410 Gone`, too old resource
/// version.
pub(super) fn gone() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410}})
}

/// How long a watch lasts when the client names no `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// The most a run of owed events holds before it is sent.
const FLUSH_AT: usize = 64 << 10;

type Keep = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// An open watch.
struct Stream {
    /// What is owed from before the watch started: (version reached once sent, event line).
    backlog: std::vec::IntoIter<(u64, String)>,
    rx: broadcast::Receiver<(u64, Value)>,
    keep: Keep,
    from: u64,
    /// The version every event up to which this watch has seen (sent or filtered out).
    seen: u64,
    /// The version the backlog brings the watch to.
    listed: u64,
    deadline: Instant,
    /// (kind, apiVersion) of the bookmark, when the client allows bookmarks.
    bookmark: Option<(String, String)>,
    done: bool,
}

fn line(event: &Value) -> Result<Bytes, std::io::Error> {
    Ok(Bytes::from(format!("{event}\n")))
}

/// A watch answered with a single event (then the end).
fn single(event: Value) -> Response {
    ([("content-type", "application/json")], format!("{event}\n")).into_response()
}

pub(super) fn watch(
    inner: &mut Inner,
    collection: &str,
    namespace: Option<String>,
    q: &BTreeMap<String, String>,
) -> Response {
    let (now_rv, cap) = (inner.rv, inner.watch_cap);
    let streamed = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    if streamed && let Err(why) = streamed_list_allowed(inner.watch_list, q) {
        return status(422, "Invalid", &format!("ListOptions.meta.k8s.io \"\" is invalid: {why}"));
    }
    let res = inner.resources.get_mut(collection).expect("resource");
    if std::mem::take(&mut res.gone_next_watch) {
        return single(gone());
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    // A streamed list sends the state as it is now, which is never older than asked for.
    if from != 0 && from < res.compacted && !streamed {
        return single(gone());
    }
    let q2 = q.clone();
    let admits = move |obj: &Value| {
        namespace.as_ref().is_none_or(|n| obj["metadata"]["namespace"].as_str() == Some(n))
            && selected(&q2, obj)
    };
    // What is owed, written out now (a consistent view, and no copy of the objects to drop).
    let mut backlog: Vec<(u64, String)> = if from == 0 || streamed {
        let objects = res.objects.values().filter(|o| admits(o));
        objects.map(|o| (now_rv, format!("{{\"type\":\"ADDED\",\"object\":{o}}}"))).collect()
    } else {
        let events =
            res.log.iter().filter(|(rv, e)| *rv > from && (e["type"] == "ERROR" || admits(&e["object"])));
        events.map(|(rv, e)| (*rv, e.to_string())).collect()
    };
    if streamed {
        let end = json!({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version,
            "metadata": {"resourceVersion": now_rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"}}}});
        backlog.push((now_rv, end.to_string()));
    }
    let keep: Keep = Box::new(move |event: &Value| event["type"] == "ERROR" || admits(&event["object"]));
    let asked = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).map(Duration::from_secs);
    let timeout = asked.unwrap_or(DEFAULT_TIMEOUT).min(cap.unwrap_or(Duration::MAX));
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let stream = Stream {
        backlog: backlog.into_iter(),
        rx: res.events.subscribe(),
        keep,
        from,
        seen: from,
        listed: now_rv,
        deadline: Instant::now() + timeout,
        bookmark: bookmarks.then(|| (res.kind.clone(), res.api_version.clone())),
        done: false,
    };
    let body = futures::stream::unfold(stream, next);
    ([("content-type", "application/json")], Body::from_stream(body)).into_response()
}

/// Whether a watch may stream its list: the server must stream lists, and the watch must ask
/// for bookmarks and for a state not older than its version, as the API server checks.
fn streamed_list_allowed(watch_list: bool, q: &BTreeMap<String, String>) -> Result<(), &'static str> {
    if !watch_list {
        return Err("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the \
                    WatchList feature gate is enabled");
    }
    if q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
        return Err("resourceVersionMatch: Forbidden: sendInitialEvents requires setting \
                    resourceVersionMatch to NotOlderThan");
    }
    if q.get("allowWatchBookmarks").map(String::as_str) != Some("true") {
        return Err("allowWatchBookmarks: Forbidden: sendInitialEvents requires allowWatchBookmarks=true");
    }
    Ok(())
}

async fn next(mut s: Stream) -> Option<(Result<Bytes, std::io::Error>, Stream)> {
    if s.done {
        return None;
    }
    // What is owed goes out in runs, as the API server flushes a watch only when no further
    // event is waiting.
    let mut run = String::new();
    for (rv, e) in s.backlog.by_ref() {
        s.seen = s.seen.max(rv);
        run.push_str(&e);
        run.push('\n');
        if run.len() >= FLUSH_AT {
            break;
        }
    }
    if !run.is_empty() {
        return Some((Ok(Bytes::from(run)), s));
    }
    s.seen = s.seen.max(s.listed);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(s.deadline) => {
                s.done = true;
                let (kind, api_version) = s.bookmark.take()?;
                let mark = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": s.seen.to_string()}}});
                return Some((line(&mark), s));
            }
            got = s.rx.recv() => match got {
                Ok((_, e)) if e["type"] == CLOSE => return None,
                Ok((_, e)) if e["type"] == DROP => {
                    s.done = true;
                    return Some((Err(std::io::Error::other("the watch connection was cut")), s));
                }
                Ok((rv, e)) => {
                    s.seen = s.seen.max(rv);
                    if rv > s.from && (s.keep)(&e) {
                        s.done = e["type"] == "ERROR";
                        return Some((line(&e), s));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    s.done = true;
                    return Some((Err(std::io::Error::other("the watcher fell behind")), s));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::{Account, FakeApi};

    /// The raw answer to a GET of `path` as the DNS server's account.
    async fn get(api: &FakeApi, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(api.addr).await.expect("connect");
        let token = Account::Dns.token();
        let req = format!(
            "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.expect("send");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    fn svc(name: &str) -> serde_json::Value {
        serde_json::json!({"kind": "Service", "metadata": {"name": name, "namespace": "ns1"}})
    }

    #[tokio::test]
    async fn history_is_bounded_and_watches_end_with_a_bookmark() {
        let api = FakeApi::start().await;
        api.keep_history(2);
        // Watches asking for a second last a fifth of it, as under a shorter server timeout.
        api.cap_watches(Some(std::time::Duration::from_millis(200)));
        for name in ["a", "b", "c", "d"] {
            api.upsert(svc(name));
        }
        let rv = |name: &str| {
            api.get("Service", Some("ns1"), name).unwrap()["metadata"]["resourceVersion"].clone()
        };
        let (b, c) = (rv("b"), rv("c"));
        let b = b.as_str().unwrap();
        // c and d are kept: from b (after which both came) the watch replays them...
        let from_b =
            get(&api, &format!("/api/v1/services?watch=true&resourceVersion={b}&timeoutSeconds=1")).await;
        assert!(from_b.contains("\"name\":\"c\"") && from_b.contains("\"name\":\"d\""), "{from_b}");
        assert!(!from_b.contains("BOOKMARK"), "no bookmark unless allowed");
        // ...from before b it would need b: compacted away, 410.
        let old = b.parse::<u64>().unwrap() - 1;
        let gone = get(&api, &format!("/api/v1/services?watch=true&resourceVersion={old}")).await;
        assert!(gone.contains("\"code\":410") && !gone.contains("\"name\""), "{gone}");
        // A watch that times out says with a bookmark how far it got.
        let q = format!(
            "/api/v1/services?watch=true&resourceVersion={}&timeoutSeconds=1&allowWatchBookmarks=true",
            c.as_str().unwrap()
        );
        let marked = get(&api, &q).await;
        let d = rv("d");
        let last = marked.lines().rfind(|l| l.contains("BOOKMARK")).expect("a bookmark");
        assert!(last.contains(&format!("\"resourceVersion\":{d}")), "{marked}");
        // From version 0: every object, as ADDED.
        let all = get(&api, "/api/v1/services?watch=true&resourceVersion=0&timeoutSeconds=1").await;
        assert_eq!(all.matches("\"ADDED\"").count(), 4, "{all}");
    }

    #[tokio::test]
    async fn a_streamed_list_ends_its_objects_with_a_bookmark_unless_the_server_cannot_stream() {
        let api = FakeApi::start().await;
        for name in ["a", "b", "c"] {
            api.upsert(svc(name));
        }
        let path = "/api/v1/services?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                    &allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=1";
        let streamed = get(&api, path).await;
        let lines: Vec<&str> = streamed.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(lines.len(), 5, "three objects, the end of the list, the timeout's bookmark: {streamed}");
        assert!(lines[..3].iter().all(|l| l.contains("\"ADDED\"")), "{streamed}");
        assert!(
            lines[3].contains("BOOKMARK") && lines[3].contains("k8s.io/initial-events-end"),
            "{streamed}"
        );
        assert!(!lines[4].contains("initial-events-end"), "{streamed}");
        // The server checks the parameters a streamed list needs...
        let unmarked = get(&api, &path.replace("&allowWatchBookmarks=true", "")).await;
        assert!(
            unmarked.starts_with("HTTP/1.1 422") && unmarked.contains("allowWatchBookmarks"),
            "{unmarked}"
        );
        // ...and one without the feature refuses them all.
        api.stream_lists(false);
        let refused = get(&api, path).await;
        assert!(refused.starts_with("HTTP/1.1 422") && refused.contains("WatchList"), "{refused}");
        assert!(!refused.contains("ADDED"), "{refused}");
    }
}

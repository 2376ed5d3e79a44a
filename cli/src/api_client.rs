//! A small HTTP/1.1 client for the components' REST APIs (`http://host:port`, JSON in and
//! out, one request per connection): what `tideway status`, `explain` and `trace --agent`
//! speak. Answers that are problem details become errors carrying their detail.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// The URL is not `http://host:port[/path]`.
    #[error("{0:?} is not an http:// URL")]
    BadUrl(String),
    /// No connection, or it broke.
    #[error("{url}: {source}")]
    Io {
        /// The URL.
        url: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The answer is not HTTP or not JSON.
    #[error("{url}: unreadable answer: {why}")]
    Unreadable {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The server answered with an error status.
    #[error("{url}: {status} {detail}")]
    Status {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The problem's detail (or the body).
        detail: String,
    },
}

/// A REST API at a base URL, with an optional bearer token.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    base: String,
    token: Option<String>,
    timeout: Duration,
}

/// `http://host:port/path` split into (`host:port`, `/path`).
fn split_url(url: &str) -> Result<(&str, &str), CallError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| CallError::BadUrl(url.into()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(CallError::BadUrl(url.into()));
    }
    Ok((authority, path))
}

/// A chunked body, decoded.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// An HTTP answer: status, headers (names lowercased), body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A raw HTTP/1.1 answer, parsed.
fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = &raw[head_end + 4..];
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Some((status, headers, body))
}

impl ApiClient {
    /// A client of the API at `base` (`http://127.0.0.1:8080`).
    pub(crate) fn new(base: &str, token: Option<String>) -> ApiClient {
        ApiClient { base: base.trim_end_matches('/').to_string(), token, timeout: Duration::from_secs(30) }
    }

    /// `GET path` as JSON.
    pub(crate) fn get(&self, path: &str) -> Result<Value, CallError> {
        self.call("GET", path, None)
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call("POST", path, Some(("application/json", body)))
    }

    /// `PATCH path` with a JSON merge patch.
    pub(crate) fn patch(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call("PATCH", path, Some(("application/merge-patch+json", body)))
    }

    fn call(&self, method: &str, path: &str, body: Option<(&str, &Value)>) -> Result<Value, CallError> {
        let url = format!("{}{path}", self.base);
        let (authority, target) = split_url(&url)?;
        let io = |source| CallError::Io { url: url.clone(), source };
        let addr =
            authority.to_socket_addrs().map_err(io)?.next().ok_or_else(|| CallError::BadUrl(url.clone()))?;
        let mut stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(io)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(io)?;
        let mut req = format!(
            "{method} {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nAccept: application/json\r\n"
        );
        if let Some(t) = &self.token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        let payload = body.map(|(ct, v)| (ct, v.to_string()));
        match &payload {
            Some((ct, text)) => {
                req.push_str(&format!("Content-Type: {ct}\r\nContent-Length: {}\r\n\r\n{text}", text.len()))
            }
            None => req.push_str("\r\n"),
        }
        stream.write_all(req.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(io)?;
        let unreadable = |why: &str| CallError::Unreadable { url: url.clone(), why: why.into() };
        let (status, _, body) = parse_answer(&raw).ok_or_else(|| unreadable("not an HTTP answer"))?;
        let value: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        if status >= 400 {
            let detail = value["detail"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            let fields: Vec<String> = value["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| Some(format!("{}: {}", e["field"].as_str()?, e["message"].as_str()?)))
                .collect();
            let detail = if fields.is_empty() || detail.contains(&fields[0]) {
                detail
            } else {
                format!("{detail} ({})", fields.join("; "))
            };
            return Err(CallError::Status { url, status, detail });
        }
        if value.is_string() && !body.is_empty() && serde_json::from_slice::<Value>(&body).is_err() {
            return Err(unreadable("not JSON"));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(
            split_url("http://127.0.0.1:8080/api/v1/nodes").unwrap(),
            ("127.0.0.1:8080", "/api/v1/nodes")
        );
        assert_eq!(split_url("http://localhost:1").unwrap(), ("localhost:1", "/"));
        assert!(split_url("https://x:1/").is_err());
        assert!(split_url("http:///x").is_err());
    }

    #[test]
    fn answers_plain_and_chunked() {
        let plain =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}";
        let (status, headers, body) = parse_answer(plain).unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"{\"a\":1}"[..]));
        assert_eq!(headers[0], ("content-type".into(), "application/json".into()));
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        let (status, _, body) = parse_answer(chunked).unwrap();
        assert_eq!((status, body.as_slice()), (404, &b"{\"a\":1}"[..]));
        assert!(parse_answer(b"garbage").is_none());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_none());
    }
}

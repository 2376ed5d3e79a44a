//! A minimal HTTP/1.1 client over a plain TCP connection, one request per connection, for
//! `http://` endpoints only: what the OTLP exporter and the CLI's REST calls need, without an
//! HTTP stack or an async runtime (the exporter calls it from its own thread).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Http1Error {
    /// The URL is not `http://host:port[/path]`.
    #[error("{0:?} is not an http:// URL (https is not supported here)")]
    BadUrl(String),
    /// No connection, or it broke.
    #[error("{url}: {source}")]
    Io {
        /// The URL.
        url: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The answer is not HTTP.
    #[error("{0}: not an HTTP answer")]
    Unreadable(String),
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

/// `http://host:port/path` split into (`host:port`, `/path`).
pub fn split_url(url: &str) -> Result<(&str, &str), Http1Error> {
    let rest = url.strip_prefix("http://").ok_or_else(|| Http1Error::BadUrl(url.into()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(Http1Error::BadUrl(url.into()));
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

/// A raw HTTP/1.1 answer, parsed.
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
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
    Some(Answer { status, headers, body })
}

/// Sends `method url` with `headers` and `body`; waits up to `timeout` for each step.
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<Answer, Http1Error> {
    let (authority, target) = split_url(url)?;
    let io = |source| Http1Error::Io { url: url.to_string(), source };
    let addr =
        authority.to_socket_addrs().map_err(io)?.next().ok_or_else(|| Http1Error::BadUrl(url.into()))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse_answer(&raw).ok_or_else(|| Http1Error::Unreadable(url.into()))
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
        let a = parse_answer(plain).unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"{\"a\":1}"[..]));
        assert_eq!(a.headers[0], ("content-type".into(), "application/json".into()));
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        let a = parse_answer(chunked).unwrap();
        assert_eq!((a.status, a.body.as_slice()), (404, &b"{\"a\":1}"[..]));
        assert!(parse_answer(b"garbage").is_none());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_none());
    }

    #[test]
    fn a_request_reaches_a_server_and_its_answer_comes_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request (head and its 3-byte body) before answering: a server that
            // closes with unread bytes resets the connection.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"\r\n\r\nxyz") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok").unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let url = format!("http://{addr}/v1/traces");
        let a = request(
            "POST",
            &url,
            &[("Content-Type", "application/x-protobuf")],
            b"xyz",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!((a.status, a.body.as_slice()), (201, &b"ok"[..]));
        let seen = server.join().unwrap();
        assert!(seen.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{seen}");
        assert!(
            seen.contains("Content-Type: application/x-protobuf\r\n") && seen.ends_with("\r\n\r\nxyz"),
            "{seen}"
        );
    }
}

//! The HTTP client of the CLI's REST calls and the OTLP exporter: hyper's pooled HTTP/1.1 client
//! with rustls (the stack kube already brings), for `http://` and `https://` URLs. HTTPS trusts
//! the CA file given (a lab's CA, a cluster's cert-manager issuer), else the system's roots;
//! answers are read up to a size limit and every request is bounded in time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The largest answer read by default (the REST APIs' largest, a full status, is well under).
pub const ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA file cannot be read or holds no certificate.
    #[error("the CA file {path}: {reason}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `--tls-server-name` is not a DNS name or an IP address.
    #[error("--tls-server-name {0:?}: {1}")]
    ServerName(String, String),
    /// Not an `http://` or `https://` URL.
    #[error("{0:?} is not an http:// or https:// URL")]
    BadUrl(String),
    /// No connection, a refused certificate, a broken answer.
    #[error("{url}: {reason}")]
    Failed {
        /// The URL.
        url: String,
        /// What went wrong, causes included.
        reason: String,
    },
    /// No complete answer in time.
    #[error("{url}: no answer within {} s", .timeout.as_secs_f64())]
    Timeout {
        /// The URL.
        url: String,
        /// The bound.
        timeout: Duration,
    },
    /// The answer is larger than the client's limit ([`ANSWER_LIMIT`] unless set).
    #[error("{url}: the answer is larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// How an HTTPS server is checked: the CA that signed its certificate, and the name the
/// certificate must carry when it is not the URL's host (an agent reached at a node address
/// whose certificate names the agents' Service).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerCheck {
    /// Verify HTTPS certificates with this CA (PEM; default: a lab's own CA, else the
    /// system's roots).
    #[arg(long, env = "TIDEWAY_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// The name the server's certificate must carry, when not the URL's host (agents are
    /// reached at node addresses; their certificate names the Service).
    #[arg(long)]
    pub tls_server_name: Option<String>,
}

/// The certificates HTTPS trusts: the PEM file's, else the system's.
fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    let Some(path) = ca_file else {
        // Unreadable system certificates leave fewer roots, and HTTPS then says it cannot verify.
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        return Ok(roots);
    };
    let ca = |reason: String| ClientError::Ca { path: path.to_path_buf(), reason };
    let pem = std::fs::read(path).map_err(|e| ca(e.to_string()))?;
    let certs =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| ca(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca("no PEM CERTIFICATE block in it".into()));
    }
    for cert in certs {
        roots.add(cert).map_err(|e| ca(e.to_string()))?;
    }
    Ok(roots)
}

/// An `http://` and `https://` connector checking servers as `check` says.
fn connector(check: &ServerCheck) -> Result<HttpsConnector<HttpConnector>, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots(check.ca_file.as_deref())?)
        .with_no_client_auth();
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
    let builder = match &check.tls_server_name {
        Some(name) => {
            let bad = |e: rustls::pki_types::InvalidDnsNameError| {
                ClientError::ServerName(name.clone(), e.to_string())
            };
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(bad)?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    Ok(builder.enable_http1().build())
}

/// The error and its causes, one after another (hyper's own says only "client error (Connect)").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A client; cheap to clone (one connection pool). Needs a Tokio runtime to send.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    limit: usize,
}

impl HttpClient {
    /// A client checking HTTPS servers as `check` says, each request bounded by `timeout`.
    pub fn new(check: &ServerCheck, timeout: Duration) -> Result<HttpClient, ClientError> {
        let inner = Client::builder(TokioExecutor::new()).build(connector(check)?);
        Ok(HttpClient { inner, timeout, limit: ANSWER_LIMIT })
    }

    /// The same, reading answers up to `limit` bytes.
    pub fn with_answer_limit(self, limit: usize) -> HttpClient {
        HttpClient { limit, ..self }
    }

    /// Sends `method url` with `headers` and `body`; the answer whatever its status.
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Answer, ClientError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ClientError::BadUrl(url.into()));
        }
        let failed = |reason: String| ClientError::Failed { url: url.to_string(), reason };
        let mut req = hyper::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| failed(chain(&e)))?;
        let exchange = async {
            let answer = self.inner.request(req).await.map_err(|e| failed(chain(&e)))?;
            let status = answer.status().as_u16();
            let body = Limited::new(answer.into_body(), self.limit).collect().await.map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    ClientError::TooLarge { url: url.to_string(), limit: self.limit }
                } else {
                    failed(chain(&*e))
                }
            })?;
            Ok(Answer { status, body: body.to_bytes().to_vec() })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout { url: url.to_string(), timeout: self.timeout }),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A server answering one connection with `answer` after reading the request head.
    pub(crate) fn answer_once(answer: Vec<u8>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&answer);
        });
        format!("http://{addr}/x")
    }

    #[tokio::test]
    async fn answers_are_read_up_to_the_limit() {
        let client = HttpClient::new(&ServerCheck::default(), Duration::from_secs(20)).unwrap();
        let url = answer_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\n{\"a\":1}".to_vec());
        let a = client.request("GET", &url, &[], Vec::new()).await.unwrap();
        assert_eq!((a.status, a.body.as_slice()), (404, &b"{\"a\":1}"[..]));

        let mut big = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", ANSWER_LIMIT + 1).into_bytes();
        big.resize(big.len() + ANSWER_LIMIT + 1, b'x');
        let url = answer_once(big);
        let e = client.request("GET", &url, &[], Vec::new()).await.unwrap_err();
        assert!(matches!(e, ClientError::TooLarge { .. }), "{e}");
    }

    #[tokio::test]
    async fn refusals_say_why() {
        let client = HttpClient::new(&ServerCheck::default(), Duration::from_secs(20)).unwrap();
        let e = client.request("GET", "ftp://x/", &[], Vec::new()).await.unwrap_err();
        assert!(e.to_string().contains("not an http:// or https:// URL"), "{e}");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e =
            client.request("GET", &format!("http://127.0.0.1:{port}/"), &[], Vec::new()).await.unwrap_err();
        assert!(e.to_string().to_lowercase().contains("connection refused"), "{e}");
        let missing = ServerCheck { ca_file: Some("/nonexistent/ca.crt".into()), tls_server_name: None };
        let e = HttpClient::new(&missing, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().starts_with("the CA file /nonexistent/ca.crt"), "{e}");
    }
}

//! The OTLP/HTTP exporter of opentelemetry-otlp: protobuf bodies POSTed by the SDK's batch
//! processor through [`crate::client`] (hyper with rustls): `http://` and `https://`
//! endpoints, answers over 4 MiB refused. The endpoint, headers and timeout come
//! from the standard `OTEL_EXPORTER_OTLP_*` variables (the exporter reads them and appends
//! `/v1/traces`); `OTEL_EXPORTER_OTLP_CERTIFICATE` names the CA an HTTPS collector is verified
//! with (default: the system's roots).
//!
//! The batch processor exports from a thread of its own with a plain executor, and hyper needs
//! Tokio: each request runs on a one-thread runtime the exporter owns while the processor's
//! thread waits, so no component's async code ever blocks on an export. Failed exports (no
//! connection, a refused certificate, an answer other than 2xx) are logged as
//! [`crate::export_log`] says.

use std::path::{Path, PathBuf};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::error::TelemetryError;

/// The largest collector answer read (a partial-success message is a few hundred bytes).
const ANSWER_LIMIT: usize = 4 * 1024 * 1024;

/// Runs each export on the exporter's own runtime.
#[derive(Debug)]
pub(crate) struct OtlpClient {
    client: crate::client::HttpClient,
    /// Present until dropped (then shut down without waiting, from whatever thread drops it).
    runtime: Option<tokio::runtime::Runtime>,
    /// Failures in a row, for the log.
    log: crate::export_log::ExportLog,
}

impl OtlpClient {
    /// A client trusting `ca_file` (else the system's roots), each export bounded by `timeout`.
    pub(crate) fn new(ca_file: Option<&Path>, timeout: Duration) -> Result<OtlpClient, TelemetryError> {
        let exporter = |e: String| TelemetryError::Exporter(e);
        let check =
            crate::client::ServerCheck { ca_file: ca_file.map(Path::to_path_buf), tls_server_name: None };
        let client = crate::client::HttpClient::new(&check, timeout).map_err(|e| exporter(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(|e| exporter(format!("starting the exporter's runtime: {e}")))?;
        Ok(OtlpClient {
            client: client.with_answer_limit(ANSWER_LIMIT),
            runtime: Some(runtime),
            log: Default::default(),
        })
    }
}

impl Drop for OtlpClient {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let runtime = self.runtime.as_ref().ok_or("the exporter is stopped")?;
        let url = request.uri().to_string();
        let target = url.clone();
        let sent = runtime
            .spawn(async move {
                let (parts, body) = request.into_parts();
                let headers: Vec<(&str, &str)> =
                    parts.headers.iter().filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))).collect();
                client.request(parts.method.as_str(), &target, &headers, body.to_vec()).await
            })
            .await;
        let answer = match sent {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                self.log.record(&url, Some(&e.to_string()));
                return Err(e.into());
            }
            Err(e) => {
                self.log.record(&url, Some(&e.to_string()));
                return Err(e.into());
            }
        };
        let refused = (!(200..300).contains(&answer.status))
            .then(|| format!("the collector answered HTTP {}", answer.status));
        self.log.record(&url, refused.as_deref());
        Ok(Response::builder().status(answer.status).body(Bytes::from(answer.body))?)
    }
}

/// The CA file of the environment, if one is named.
fn ca_file() -> Option<PathBuf> {
    std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
        .or_else(|| std::env::var_os("OTEL_EXPORTER_OTLP_CERTIFICATE"))
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A tracer provider exporting to the endpoint of the environment, as `service` (unless
/// `OTEL_SERVICE_NAME` says otherwise).
pub(crate) fn provider(service: &'static str) -> Result<SdkTracerProvider, TelemetryError> {
    provider_with(service, None, ca_file().as_deref())
}

/// The same, to `endpoint` (the full traces URL) when given, trusting `ca` for HTTPS.
pub(crate) fn provider_with(
    service: &'static str,
    endpoint: Option<&str>,
    ca: Option<&Path>,
) -> Result<SdkTracerProvider, TelemetryError> {
    let timeout = Duration::from_secs(10);
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_http_client(OtlpClient::new(ca, timeout)?);
    if let Some(e) = endpoint {
        builder = builder.with_endpoint(e);
    }
    let exporter = builder.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// A span reaches a collector as an OTLP/HTTP protobuf POST to /v1/traces.
    #[test]
    fn spans_are_posted_to_the_collector() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let collector = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            // Read the head, then as much body as Content-Length says.
            loop {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if got.len() >= end + 4 + len || n == 0 {
                        break;
                    }
                }
            }
            s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            )
            .unwrap();
            got
        });
        let endpoint = format!("http://{addr}/v1/traces");
        let provider = provider_with("tideway-test", Some(&endpoint), None).unwrap();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tideway")));
        tracing::subscriber::with_default(subscriber, || {
            let _s = tracing::info_span!("sync", mode = "nftables").entered();
        });
        provider.force_flush().unwrap();
        let got = collector.join().unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{text}");
        assert!(text.to_ascii_lowercase().contains("content-type: application/x-protobuf"), "{text}");
        for want in ["sync", "nftables", "tideway-test", "mode"] {
            assert!(text.contains(want), "{want} in the protobuf body: {text}");
        }
        let _ = provider.shutdown();
    }

    /// An answer larger than 4 MiB is refused, not read into memory whole.
    #[test]
    fn answers_over_the_limit_are_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let size = 5 * 1024 * 1024;
            let _ = s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n").as_bytes());
            let _ = s.write_all(&vec![b'x'; size]);
        });
        let client = OtlpClient::new(None, Duration::from_secs(20)).unwrap();
        let request =
            Request::post(format!("http://{addr}/v1/traces")).body(Bytes::from_static(b"spans")).unwrap();
        // The batch processor's side: a plain executor on a thread without a Tokio runtime.
        let answer = std::thread::spawn(move || {
            let waiter = tokio::runtime::Builder::new_current_thread().build().unwrap();
            waiter.block_on(client.send_bytes(request)).map(|_| ()).map_err(|e| e.to_string())
        });
        let e = answer.join().unwrap().unwrap_err();
        assert!(e.contains("larger than 4194304 bytes"), "{e}");
    }

    /// Log lines written while `f` runs on this thread.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber =
            tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    /// Failed exports reach the log (the SDK's own errors do not): the first of a streak, the
    /// 10th, and the first success after them; an answer other than 2xx is a failure too.
    #[test]
    fn failed_exports_are_logged_without_flooding() {
        let client = OtlpClient::new(None, Duration::from_secs(20)).unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let post = |url: &str| Request::post(url).body(Bytes::from_static(b"spans")).unwrap();
        // The batch processor's side: a plain executor on a thread without a Tokio runtime.
        let waiter = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let down = logged(|| {
            for _ in 0..11 {
                let url = format!("http://{closed}/v1/traces");
                assert!(waiter.block_on(client.send_bytes(post(&url))).is_err());
            }
        });
        let failed: Vec<&str> = down.lines().filter(|l| l.contains("exporting traces failed")).collect();
        assert_eq!(failed.len(), 2, "the 1st and the 10th of 11: {down}");
        assert!(failed[0].contains("WARN") && failed[0].contains("failed_in_a_row=1"), "{down}");
        assert!(failed[0].to_lowercase().contains("connection refused"), "{down}");
        assert!(failed[0].contains(&format!("http://{closed}/v1/traces")), "{down}");
        assert!(failed[1].contains("failed_in_a_row=10"), "{down}");

        let ok = crate::client::tests::answer_once(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec());
        let back =
            logged(|| assert_eq!(waiter.block_on(client.send_bytes(post(&ok))).unwrap().status(), 200));
        assert!(back.contains("exporting traces again") && back.contains("failed_before=11"), "{back}");
        let ok = crate::client::tests::answer_once(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec());
        let quiet = logged(|| assert!(waiter.block_on(client.send_bytes(post(&ok))).is_ok()));
        assert_eq!(quiet, "", "a success after a success says nothing");

        let refused = crate::client::tests::answer_once(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_vec(),
        );
        let busy =
            logged(|| assert_eq!(waiter.block_on(client.send_bytes(post(&refused))).unwrap().status(), 503));
        assert!(
            busy.contains("exporting traces failed") && busy.contains("the collector answered HTTP 503"),
            "{busy}"
        );
    }
}

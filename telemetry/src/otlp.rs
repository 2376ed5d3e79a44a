//! The OTLP/HTTP exporter: protobuf bodies POSTed by the SDK's batch processor through
//! [`crate::http1`]. The endpoint, headers and timeout come from the standard
//! `OTEL_EXPORTER_OTLP_*` variables (the exporter reads them and appends `/v1/traces`).

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::TelemetryError;

/// Sends each export with a blocking request (the batch processor's thread waits for it).
#[derive(Debug, Clone)]
pub(crate) struct Http1Client {
    pub(crate) timeout: Duration,
}

#[async_trait::async_trait]
impl HttpClient for Http1Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let method = request.method().as_str().to_string();
        let answer = crate::http1::request(&method, &url, &headers, request.body(), self.timeout)?;
        let mut response = Response::builder().status(answer.status);
        for (k, v) in &answer.headers {
            response = response.header(k.as_str(), v.as_str());
        }
        Ok(response.body(Bytes::from(answer.body))?)
    }
}

/// A tracer provider exporting to the endpoint of the environment, as `service` (unless
/// `OTEL_SERVICE_NAME` says otherwise).
pub(crate) fn provider(service: &'static str) -> Result<SdkTracerProvider, TelemetryError> {
    provider_with(service, None)
}

/// The same, to `endpoint` (the full traces URL) when given.
pub(crate) fn provider_with(
    service: &'static str,
    endpoint: Option<&str>,
) -> Result<SdkTracerProvider, TelemetryError> {
    let timeout = Duration::from_secs(10);
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_http_client(Http1Client { timeout });
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
        let provider = provider_with("tideway-test", Some(&endpoint)).unwrap();
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
}

//! Tideway's logs and traces, set up the same way by every component.
//!
//! ```text
//!  tracing spans and events (sync > plan/render/apply, reconcile, dns.query)
//!     | EnvFilter (RUST_LOG)
//!     +--> stderr: text, or JSON lines with --log-format json
//!     +--> OpenTelemetry (only when OTEL_EXPORTER_OTLP_ENDPOINT is set):
//!          batch processor thread --> OTLP/HTTP protobuf POST <endpoint>/v1/traces
//! ```
//! * [`init`] installs it; [`Telemetry::shutdown`] flushes what is left on exit.
//! * The exporter posts through [`client`], hyper with rustls (`http://` and `https://`
//!   endpoints, `OTEL_EXPORTER_OTLP_CERTIFICATE` for a private CA, answers over 4 MiB
//!   refused), on a runtime of its own: the batch processor's thread waits for it, never a
//!   component's async code. Failed exports are logged (`export_log`: at the start of a streak
//!   and at each power of ten), and the first success after them.
//! * [`client`] is also the CLI's HTTP client for the components' REST APIs.
//! * [`sampled`] says whether to trace this one of many frequent operations (DNS queries):
//!   none while nothing is exported, else one in `1 / OTEL_TRACES_SAMPLER_ARG` (default 1 %).
//! * [`testing`] (feature `testing`) captures spans in memory for tests.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
mod error;
mod export_log;
mod otlp;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use error::TelemetryError;

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The logging flags every component takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// Log lines as `text` or `json` (filtered by `RUST_LOG`). Traces go over OTLP when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`OTEL_TRACES_SAMPLER_ARG`: the share of DNS
    /// queries traced, default 0.01).
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
}

/// The installed telemetry; flush it on exit.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// One traced operation in `SAMPLE_EVERY` (0: none).
static SAMPLE_EVERY: AtomicU64 = AtomicU64::new(0);
static SAMPLE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether to trace this occurrence of a frequent operation.
pub fn sampled() -> bool {
    match SAMPLE_EVERY.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        n => SAMPLE_COUNTER.fetch_add(1, Ordering::Relaxed).is_multiple_of(n),
    }
}

/// Traces one in `every` frequent operations (0: none).
pub fn set_sample_every(every: u64) {
    SAMPLE_EVERY.store(every, Ordering::Relaxed);
}

/// `1 / ratio` rounded, for a sampler ratio in (0, 1]; 100 (1 %) when unset or unreadable.
fn sample_every(ratio: Option<&str>) -> u64 {
    match ratio.and_then(|r| r.trim().parse::<f64>().ok()) {
        Some(r) if r > 0.0 && r <= 1.0 => (1.0 / r).round().max(1.0) as u64,
        Some(r) if r <= 0.0 => 0,
        _ => 100,
    }
}

/// The OTLP endpoint from the environment, when set.
fn otlp_endpoint() -> Option<String> {
    std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .ok()
        .filter(|e| !e.trim().is_empty())
}

/// An endpoint this exporter can reach: an `http://` or `https://` URL.
fn check_endpoint(endpoint: &str) -> Result<(), TelemetryError> {
    let endpoint = endpoint.trim();
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        Ok(())
    } else {
        Err(TelemetryError::Exporter(format!(
            "OTEL_EXPORTER_OTLP_ENDPOINT {endpoint:?}: not an http:// or https:// URL"
        )))
    }
}

/// Installs the global subscriber for `service`: stderr logs filtered by `RUST_LOG` (else
/// `default_filter`) in `format`, and OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
/// A second call (tests) keeps the first subscriber.
pub fn init(
    service: &'static str,
    format: LogFormat,
    default_filter: &str,
) -> Result<Telemetry, TelemetryError> {
    let provider = match otlp_endpoint() {
        Some(endpoint) => {
            check_endpoint(&endpoint)?;
            Some(otlp::provider(service)?)
        }
        None => None,
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("tideway")));
    let (text, json) = match format {
        // Colours only on a terminal: a container's log file keeps plain text.
        LogFormat::Text => {
            let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
            (Some(tracing_subscriber::fmt::layer().with_ansi(colour).with_writer(std::io::stderr)), None)
        }
        LogFormat::Json => (None, Some(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr))),
    };
    let installed = tracing_subscriber::registry().with(filter).with(text).with(json).with(otel).try_init();
    if installed.is_ok() && provider.is_some() {
        set_sample_every(sample_every(std::env::var("OTEL_TRACES_SAMPLER_ARG").ok().as_deref()));
        tracing::info!(
            endpoint = %otlp_endpoint().unwrap_or_default(),
            sample_every = SAMPLE_EVERY.load(Ordering::Relaxed),
            "exporting traces over OTLP"
        );
    }
    Ok(Telemetry { provider })
}

impl Telemetry {
    /// Exports the spans still queued (waits up to half a second: a component must stop
    /// promptly even when the collector is gone), then stops the exporter.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown_with_timeout(std::time::Duration::from_millis(500))
        {
            tracing::warn!(error = %e, "flushing traces");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_ratio_becomes_one_in_n() {
        assert_eq!(sample_every(None), 100);
        assert_eq!(sample_every(Some("1")), 1);
        assert_eq!(sample_every(Some("0.25")), 4);
        assert_eq!(sample_every(Some("0")), 0);
        assert_eq!(sample_every(Some("lots")), 100);
        assert_eq!(sample_every(Some("7")), 100, "a ratio above 1 is not one");
    }

    #[test]
    fn http_and_https_endpoints_are_taken() {
        assert!(check_endpoint("http://otel-collector.monitoring:4318").is_ok());
        assert!(check_endpoint("https://collector:4318").is_ok());
        let e = check_endpoint("collector:4318").unwrap_err().to_string();
        assert!(e.contains("not an http:// or https:// URL"), "{e}");
    }

    #[test]
    fn one_in_n_is_sampled() {
        set_sample_every(0);
        assert!(!(0..10).any(|_| sampled()), "nothing while nothing is exported");
        set_sample_every(4);
        assert_eq!((0..100).filter(|_| sampled()).count(), 25);
        set_sample_every(1);
        assert!((0..10).all(|_| sampled()));
    }
}

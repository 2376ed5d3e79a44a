//! Why telemetry could not be set up.

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (a bad endpoint, say).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
}

//! Spans captured in memory, for tests of what a component traces.

use std::collections::BTreeMap;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt as _;

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedSpan {
    /// Its name.
    pub name: String,
    /// Its attributes, as strings.
    pub attributes: BTreeMap<String, String>,
    /// Its parent's name, when the parent was captured too.
    pub parent: Option<String>,
}

/// An in-memory OpenTelemetry pipeline.
pub struct Capture {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl Default for Capture {
    fn default() -> Self {
        Self::new()
    }
}

impl Capture {
    /// A pipeline exporting each span as it ends; frequent operations are all sampled.
    pub fn new() -> Capture {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        crate::set_sample_every(1);
        Capture { exporter, provider }
    }

    /// Makes this pipeline the current thread's subscriber until the guard drops.
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(self.provider.tracer("tideway")));
        tracing::subscriber::set_default(subscriber)
    }

    /// The spans finished so far.
    pub fn spans(&self) -> Vec<CapturedSpan> {
        let _ = self.provider.force_flush();
        let data = self.exporter.get_finished_spans().unwrap_or_default();
        let names: std::collections::HashMap<_, _> =
            data.iter().map(|s| (s.span_context.span_id(), s.name.to_string())).collect();
        data.iter()
            .map(|s| CapturedSpan {
                name: s.name.to_string(),
                attributes: s
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect(),
                parent: names.get(&s.parent_span_id).cloned(),
            })
            .collect()
    }
}

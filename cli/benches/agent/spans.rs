//! How long the agent's spans of a sync lasted: `plan` (the ruleset), `apply` (lowering,
//! encoding and the commit) and, inside it, `nftables.commit` (the kernel's part: sending the
//! batch and reading the answers).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The spans timed, in [`Parts`] order.
const TIMED: [&str; 3] = ["plan", "apply", "nftables.commit"];

/// What the spans timed since the last [`Spans::take`] add up to.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Parts {
    /// Planning the ruleset.
    pub(crate) plan: Duration,
    /// Applying: lowering, encoding and committing.
    pub(crate) apply: Duration,
    /// Committing: the batch sent and answered (a sync commits once per batch).
    pub(crate) commit: Duration,
}

/// The spans timed since the last [`Spans::take`].
#[derive(Clone, Default)]
pub(crate) struct Spans(Arc<Mutex<Parts>>);

impl Spans {
    /// Times the spans from now on (the process's tracing subscriber).
    pub(crate) fn install() -> Spans {
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry().with(Timer(spans.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("a tracing subscriber");
        spans
    }

    /// The parts timed since the last call.
    pub(crate) fn take(&self) -> Parts {
        std::mem::take(&mut *self.0.lock().expect("spans"))
    }
}

struct Timer(Spans);

/// Which timed span this is, and when it was last entered.
struct Timed(usize, Option<Instant>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Timer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(which) = TIMED.iter().position(|n| *n == attrs.metadata().name())
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(Timed(which, None));
        }
    }

    // Time inside the span (entered to exited), not its life: a span handle may outlive the
    // work it names.
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(timed) = span.extensions_mut().get_mut::<Timed>()
        {
            timed.1 = Some(Instant::now());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(Timed(which, entered)) = ext.get_mut::<Timed>() else { return };
        let Some(at) = entered.take() else { return };
        let mut parts = self.0.0.lock().expect("spans");
        let part = match which {
            0 => &mut parts.plan,
            1 => &mut parts.apply,
            _ => &mut parts.commit,
        };
        *part += at.elapsed();
    }
}

//! How long the agent's `nftables.commit` spans lasted: the kernel's part of a full sync
//! (sending the batch and reading the answers), apart from planning, rendering and encoding.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The span the netlink backend opens around each commit.
const COMMIT: &str = "nftables.commit";

/// The commits timed since the last [`Commits::take`].
#[derive(Clone, Default)]
pub(crate) struct Commits(Arc<Mutex<Vec<Duration>>>);

impl Commits {
    /// Records commit spans from now on (the process's tracing subscriber).
    pub(crate) fn install() -> Commits {
        let commits = Commits::default();
        let subscriber = tracing_subscriber::registry().with(Timer(commits.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("a tracing subscriber");
        commits
    }

    /// The commits timed since the last call, summed (a sync commits once per batch).
    pub(crate) fn take(&self) -> Duration {
        self.0.lock().expect("commits").drain(..).sum()
    }
}

struct Timer(Commits);

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Timer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == COMMIT
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(Instant::now());
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(start) = span.extensions().get::<Instant>()
        {
            self.0.0.lock().expect("commits").push(start.elapsed());
        }
    }
}

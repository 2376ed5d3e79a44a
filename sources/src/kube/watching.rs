//! One kind's watch: how it lists, and what each event and error does to the shared state.
//!
//! How a watch gets its first complete view:
//! * agents and DNS servers **stream** it (`sendInitialEvents`, the API server's `WatchList`
//!   feature, on by default since Kubernetes 1.32): the objects arrive one watch event at a
//!   time from the watch cache and are converted as they come, so a node never holds the raw
//!   list. A list from the watch cache would come whole (the server ignores a limit there):
//!   100,000 EndpointSlices decoded at once;
//! * a server without the feature refuses such a watch (`422 Invalid`): the watch then lists
//!   the latest in pages instead (`resourceVersion` unset, a `limit`), converting each page's
//!   objects before the next page is asked for, and says so once. A list from the watch cache
//!   (`resourceVersion=0`) would come whole: the server ignores a limit there;
//! * the operator, which decides addresses from what it lists, reads the latest in pages.
//!
//! A kind watched as optional ([`WatchSpec::optional`]) that the API server does not serve
//! (`404 Not Found`: its CRD is not installed) is listed as empty at once, said once, so the
//! state syncs without it; the watch keeps retrying with its backoff and lists it once served.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, InitialListStrategy, ListSemantic, watcher};

use super::adapter::{KindAdapter, Outcome};
use super::errors::{ErrorLog, classify};
use super::kinds::Kind;
use super::landing::Landing;
use super::sync_barrier::SyncBarrier;
use super::watch_spec::WatchSpec;
use crate::metrics::{SourceMetrics, WatchErrorLabels};

/// Objects per list page. A page is decoded whole before its objects are converted, so a
/// smaller page keeps fewer raw objects alive at once (less transient memory, and less
/// fragmentation left behind among the converted objects) for a few more round trips.
const LIST_PAGE_SIZE: u32 = 500;

/// Whether a watch of this process fell back to listing (the warning is given once).
static SAID_LISTING: AtomicBool = AtomicBool::new(false);

/// How a watch with `config`'s list semantic gets its first complete view (see the module
/// documentation): streamed from the watch cache, or listed in pages of the latest.
pub(super) fn first_view(config: watcher::Config) -> watcher::Config {
    match config.list_semantic {
        ListSemantic::Any => config.streaming_lists(),
        ListSemantic::MostRecent => config.page_size(LIST_PAGE_SIZE),
    }
}

/// The same watch listing instead of streaming: the latest in pages, since a list from the
/// watch cache (`resourceVersion=0`) comes whole whatever its limit. The API server reads
/// each page of the latest from etcd (the churn benchmark's first view counts them there).
fn listed(config: watcher::Config) -> watcher::Config {
    watcher::Config {
        initial_list_strategy: InitialListStrategy::ListWatch,
        list_semantic: ListSemantic::MostRecent,
        page_size: Some(LIST_PAGE_SIZE),
        ..config
    }
}

/// True when the API server refused to stream a list: it does not have the feature (or
/// refuses its parameters) and answers the watch that asks for one `400` or `422`.
fn refuses_streaming(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(status)) if matches!(status.code, 400 | 422))
}

/// Runs one kind's watcher until dropped, feeding `cluster`.
pub(super) async fn watch_kind<K: Kind, L: Landing<K>>(
    api: Api<K>,
    spec: WatchSpec,
    cluster: L,
    barrier: SyncBarrier,
    metrics: SourceMetrics,
) {
    let kind = K::watch_name();
    let mut feed = Feed {
        adapter: Some(KindAdapter::<K, L>::for_reader(cluster.clone(), spec.reader)),
        errors: ErrorLog::default(),
        label: SourceMetrics::kind(&kind),
        kind,
        cluster,
        barrier,
        metrics,
        notify: spec.notify,
        optional: spec.optional,
        absent: false,
    };
    let mut config = first_view(spec.config);
    loop {
        let streaming = config.initial_list_strategy == InitialListStrategy::StreamingList;
        let mut stream = watcher(api.clone(), config.clone()).default_backoff().boxed();
        let refused = loop {
            match stream.next().await {
                Some(Ok(event)) => feed.event(event).await,
                Some(Err(e)) if streaming && refuses_streaming(&e) => break true,
                Some(Err(e)) if feed.optional && classify(&e).reason == "not_found" => {
                    feed.not_served().await
                }
                Some(Err(e)) => feed.error(&e),
                None => break false,
            }
        };
        if !refused {
            return;
        }
        // Every kind's watch meets the refusal: said once.
        if SAID_LISTING.swap(true, Ordering::Relaxed) {
            tracing::debug!(kind = %feed.kind, "listing instead of streaming");
        } else {
            tracing::warn!(
                "the API server does not stream lists (the WatchList feature, on by default since \
                Kubernetes 1.32); every watch lists the latest in pages instead"
            );
        }
        config = listed(config);
    }
}

/// What one kind's watch feeds: the state (through its adapter), the sync barrier, the
/// counters, and the watches that depend on this kind.
struct Feed<K: Kind, L: Landing<K>> {
    /// Out only while a complete list is handed over on a blocking thread.
    adapter: Option<KindAdapter<K, L>>,
    errors: ErrorLog,
    kind: String,
    label: crate::metrics::KindLabel,
    cluster: L,
    barrier: SyncBarrier,
    metrics: SourceMetrics,
    /// Bumped after every change, for watches that depend on this kind.
    notify: Option<tokio::sync::watch::Sender<u64>>,
    /// The kind may not be served ([`WatchSpec::optional`]).
    optional: bool,
    /// It is not served: listed as empty until it is.
    absent: bool,
}

impl<K: Kind, L: Landing<K>> Feed<K, L> {
    async fn event(&mut self, event: watcher::Event<K>) {
        self.cluster.signals().set_api_reachable(true);
        if std::mem::take(&mut self.absent) {
            tracing::info!(kind = %self.kind, "served now: its objects are read");
        }
        if let Some(cause) = self.errors.recovered() {
            tracing::info!(kind = %self.kind, reason = cause.reason, "watch recovered");
        }
        const BACK: &str = "the adapter is back after every complete list";
        let outcome = if matches!(event, watcher::Event::InitDone) {
            // A complete list replaces the whole kind, comparing every object under the
            // state's lock: that runs on a blocking thread, not the runtime's.
            let (adapter, outcome) = complete_list(self.adapter.take().expect(BACK)).await;
            self.adapter = Some(adapter);
            outcome
        } else {
            self.adapter.as_mut().expect(BACK).handle(event)
        };
        match outcome {
            Outcome::Listed { first } => {
                self.cluster.signals().clear_fault(&self.kind);
                if first {
                    self.barrier.done(&self.kind);
                } else {
                    self.metrics.relists.get_or_create(&self.label).inc();
                }
            }
            Outcome::Changed => {
                self.metrics.events.get_or_create(&self.label).inc();
            }
            Outcome::Invalid => {
                self.metrics.invalid.get_or_create(&self.label).inc();
            }
            Outcome::Listing => return,
        }
        if let Some(n) = &self.notify {
            n.send_modify(|v| *v += 1);
        }
    }

    /// An optional kind the API server does not serve: an empty list, said once while it
    /// lasts (the barrier counts it listed; objects held from before are gone).
    async fn not_served(&mut self) {
        self.cluster.signals().set_api_reachable(true);
        if self.absent {
            return;
        }
        tracing::info!(kind = %self.kind, "not served (its CustomResourceDefinition is not installed): \
            taken as empty until it is");
        self.event(watcher::Event::Init).await;
        self.event(watcher::Event::InitDone).await;
        self.absent = true;
    }

    fn error(&mut self, e: &watcher::Error) {
        let cause = classify(e);
        self.cluster.signals().set_api_reachable(!cause.unreachable());
        let code = cause.code.map_or(0, u16::from);
        let labels = WatchErrorLabels {
            kind: self.kind.clone(),
            reason: cause.reason.to_string(),
            code: code.to_string(),
        };
        self.metrics.watch_errors.get_or_create(&labels).inc();
        if self.errors.failed(&cause) {
            tracing::warn!(kind = %self.kind, status = code, reason = cause.reason, error = %e, hint = cause.hint(),
                "watch failed; the last good state keeps serving");
        }
    }
}

/// Hands a complete list to `adapter` on a blocking thread; a panic there is the watch's own.
async fn complete_list<K: Kind, L: Landing<K>>(
    mut adapter: KindAdapter<K, L>,
) -> (KindAdapter<K, L>, Outcome) {
    let done = tokio::task::spawn_blocking(move || {
        let outcome = adapter.handle(watcher::Event::InitDone);
        (adapter, outcome)
    })
    .await;
    match done {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("the complete list was not handled: {e}"),
    }
}

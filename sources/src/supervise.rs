//! Supervised tasks: a watch or writer task that panics is started again after a backoff
//! instead of leaving its component on a frozen view (a watch) or silent (a writer).
//!
//! ```text
//!  supervise(name, restart, make, report)
//!     spawn(make()) --ends--> done
//!                   --panics--> error log + report(panic) --sleep(backoff)--> spawn(make()) ...
//! ```
//! The backoff doubles from `first` to `max` and starts again from `first` after a run that
//! lasted `healthy_after`. Dropping the supervisor aborts the task it runs.

use std::future::Future;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

/// When a panicked task is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    /// The first restart waits this long.
    pub first: Duration,
    /// Each further one twice as long as the one before, up to this.
    pub max: Duration,
    /// A run that lasted this long resets the wait to `first`.
    pub healthy_after: Duration,
}

impl Default for Restart {
    fn default() -> Self {
        Restart {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
            healthy_after: Duration::from_secs(300),
        }
    }
}

/// Aborts the task when the supervisor is dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the task `make` builds until it ends; each time it panics, logs the panic, tells
/// `report` (metrics, readiness) and starts a new one after the backoff of `restart`.
pub async fn supervise<F, Fut>(name: &str, restart: Restart, mut make: F, mut report: impl FnMut(&str))
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut wait = restart.first;
    loop {
        let started = Instant::now();
        let task = tokio::spawn(make());
        let guard = AbortOnDrop(task.abort_handle());
        let ended = task.await;
        drop(guard);
        let panic = match ended {
            Ok(()) => return,
            Err(e) if e.is_cancelled() => return,
            Err(e) => panic_message(e.into_panic()),
        };
        if started.elapsed() >= restart.healthy_after {
            wait = restart.first;
        }
        tracing::error!(task = name, %panic, restart_in = ?wait, "task panicked; starting it again");
        report(&panic);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(restart.max);
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "a panic without a message".into(), |s| s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A task that panics on its first `panics` runs, then ends after `runs_for`; every start
    /// is recorded.
    fn flaky(
        panics: usize,
        runs_for: Duration,
        starts: Arc<Mutex<Vec<Instant>>>,
    ) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        let n = Arc::new(AtomicUsize::new(0));
        move || {
            let (n, starts) = (n.clone(), starts.clone());
            Box::pin(async move {
                starts.lock().unwrap().push(Instant::now());
                let run = n.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(runs_for).await;
                assert!(run >= panics, "run {run} fails");
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicked_task_starts_again_with_a_doubling_backoff_and_is_reported() {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let seen = reports.clone();
        let t0 = Instant::now();
        let restart =
            Restart { first: Duration::from_secs(1), max: Duration::from_secs(4), ..Restart::default() };
        supervise("watch", restart, flaky(4, Duration::ZERO, starts.clone()), |p| {
            seen.lock().unwrap().push(p.to_string())
        })
        .await;
        let offsets: Vec<u64> = starts.lock().unwrap().iter().map(|t| (*t - t0).as_secs()).collect();
        assert_eq!(offsets, vec![0, 1, 3, 7, 11], "waits 1, 2, 4 s, then capped at 4 s");
        let reports = reports.lock().unwrap().clone();
        assert_eq!(reports.len(), 4);
        assert!(reports[0].contains("run 0 fails"), "{reports:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_lasted_resets_the_backoff() {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let restart = Restart {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
            healthy_after: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        // Every run lasts 10 s: each panic is the first after a healthy run.
        supervise("writer", restart, flaky(3, Duration::from_secs(10), starts.clone()), |_| {}).await;
        let offsets: Vec<u64> = starts.lock().unwrap().iter().map(|t| (*t - t0).as_secs()).collect();
        assert_eq!(offsets, vec![0, 11, 22, 33]);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_supervisor_stops_its_task() {
        let alive = Arc::new(());
        let held = alive.clone();
        let make = move || {
            let held = held.clone();
            async move {
                let _held = held;
                std::future::pending::<()>().await;
            }
        };
        let supervisor =
            tokio::spawn(async move { supervise("watch", Restart::default(), make, |_| {}).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(Arc::strong_count(&alive), 3, "the task runs");
        supervisor.abort();
        let _ = supervisor.await;
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&alive), 1, "the task was aborted with its supervisor");
    }
}

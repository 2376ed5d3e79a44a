//! The memory the UDP workers' replayed copies may take, together.
//!
//! One budget for every worker of a server, because the workers are one per CPU (the chart
//! sets no CPU limit) and the pod's memory limit is not. A worker takes room before it grows
//! and gives it back when it sweeps, starts over or stops. No worker holds more than twice an
//! even share, so that a busy worker cannot starve the others for long; one alone may take
//! it all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of replayed copies, for all workers.
#[derive(Debug)]
pub struct ReplayBudget {
    limit: usize,
    per_worker: usize,
    used: AtomicUsize,
}

impl ReplayBudget {
    /// `limit` bytes for `workers` workers.
    pub fn new(limit: usize, workers: usize) -> Arc<Self> {
        let per_worker = if workers <= 1 { limit } else { (limit / workers).saturating_mul(2).min(limit) };
        Arc::new(ReplayBudget { limit, per_worker, used: AtomicUsize::new(0) })
    }

    /// Takes `bytes` more for a worker already holding `held`; false (and nothing taken)
    /// when that goes past the budget or the worker's share.
    pub(crate) fn take(&self, bytes: usize, held: usize) -> bool {
        if held.saturating_add(bytes) > self.per_worker {
            return false;
        }
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// About how much more a worker holding `held` may take now.
    pub(crate) fn room(&self, held: usize) -> usize {
        let left = self.limit.saturating_sub(self.used.load(Ordering::Relaxed));
        self.per_worker.saturating_sub(held).min(left)
    }

    /// Takes `bytes` whatever is left: what a worker already allocated.
    pub(crate) fn force(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Gives `bytes` back.
    pub(crate) fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes taken now, by every worker.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_share_one_budget_and_none_holds_more_than_twice_its_share() {
        let budget = ReplayBudget::new(1000, 4);
        assert!(budget.take(500, 0), "twice an even share");
        assert!(!budget.take(1, 500), "not more");
        assert!(budget.take(400, 0) && budget.take(100, 0));
        assert!(!budget.take(1, 100), "the budget is used up");
        assert_eq!(budget.used(), 1000);
        budget.give(500);
        assert!(budget.take(300, 100));
        assert_eq!(budget.used(), 800);
        let alone = ReplayBudget::new(1000, 1);
        assert!(alone.take(1000, 0), "one worker may take it all");
    }
}

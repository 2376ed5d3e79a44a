//! What the log says about trace exports. The SDK keeps its own errors to itself (its internal
//! logs are off), so a collector that is down, refuses the spans or cannot be verified would
//! otherwise lose every batch in silence. A failure is told when a streak of failures starts and
//! again at its 10th, 100th, 1000th... export, so a collector gone for hours writes a handful of
//! lines rather than one per batch; the first success after a streak says how many failed.

use std::sync::atomic::{AtomicU64, Ordering};

/// Export outcomes in a row.
#[derive(Debug, Default)]
pub(crate) struct ExportLog {
    failed_in_a_row: AtomicU64,
}

/// What to tell after one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tell {
    /// Nothing new.
    Nothing,
    /// This export failed, the n-th in a row.
    Failed(u64),
    /// This export succeeded after n failed.
    Recovered(u64),
}

impl ExportLog {
    /// Records one export and says what to tell of it.
    pub(crate) fn outcome(&self, ok: bool) -> Tell {
        if ok {
            match self.failed_in_a_row.swap(0, Ordering::Relaxed) {
                0 => Tell::Nothing,
                n => Tell::Recovered(n),
            }
        } else {
            let n = self.failed_in_a_row.fetch_add(1, Ordering::Relaxed).saturating_add(1);
            if is_power_of_ten(n) { Tell::Failed(n) } else { Tell::Nothing }
        }
    }

    /// Records one export to `endpoint` (`failure`: why it failed) and logs what is news.
    pub(crate) fn record(&self, endpoint: &str, failure: Option<&str>) {
        match (self.outcome(failure.is_none()), failure) {
            (Tell::Failed(n), Some(error)) => tracing::warn!(
                endpoint,
                error,
                failed_in_a_row = n,
                "exporting traces failed: the batch is lost (told again at 10, 100, ... failures in a row)"
            ),
            (Tell::Recovered(n), _) => tracing::info!(endpoint, failed_before = n, "exporting traces again"),
            _ => {}
        }
    }
}

/// 1, 10, 100, ...
fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_is_told_at_its_start_and_each_power_of_ten_then_its_end() {
        let log = ExportLog::default();
        assert_eq!(log.outcome(true), Tell::Nothing, "successes alone say nothing");
        let told: Vec<u64> = (1..=1000)
            .filter_map(|_| match log.outcome(false) {
                Tell::Failed(n) => Some(n),
                Tell::Nothing => None,
                Tell::Recovered(n) => panic!("recovered after {n} without a success"),
            })
            .collect();
        assert_eq!(told, [1, 10, 100, 1000]);
        assert_eq!(log.outcome(true), Tell::Recovered(1000));
        assert_eq!(log.outcome(true), Tell::Nothing);
        assert_eq!(log.outcome(false), Tell::Failed(1), "a new streak is told at once");
    }

    #[test]
    fn powers_of_ten() {
        let found: Vec<u64> = (0..=20_000).filter(|n| is_power_of_ten(*n)).collect();
        assert_eq!(found, [1, 10, 100, 1000, 10_000]);
    }
}

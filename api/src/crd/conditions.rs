//! Conditions as the API wants them: `lastTransitionTime` moves only when a condition's status
//! changes, `observedGeneration` says which generation it describes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tideway_core::operator::rollout::Condition as CoreCondition;

/// `new` as API conditions, keeping each one's transition time from `previous` while its
/// status is unchanged.
pub fn conditions(
    new: &[CoreCondition],
    previous: &[Condition],
    generation: i64,
    now: &Time,
) -> Vec<Condition> {
    new.iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let since = previous
                .iter()
                .find(|p| p.type_ == c.kind && p.status == status)
                .map_or_else(|| now.clone(), |p| p.last_transition_time.clone());
            Condition {
                type_: c.kind.to_string(),
                status: status.to_string(),
                reason: c.reason.to_string(),
                message: c.message.clone(),
                observed_generation: Some(generation),
                last_transition_time: since,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let ready = |s: bool, msg: &str| CoreCondition::new("Ready", s, "R", msg);
        let first = conditions(&[ready(false, "0 of 2")], &[], 1, &at(10));
        let same = conditions(&[ready(false, "1 of 2")], &first, 1, &at(20));
        assert_eq!(same[0].last_transition_time, at(10));
        assert_eq!(same[0].message, "1 of 2");
        let flipped = conditions(&[ready(true, "2 of 2")], &same, 2, &at(30));
        assert_eq!((flipped[0].last_transition_time.clone(), flipped[0].status.as_str()), (at(30), "True"));
        assert_eq!(flipped[0].observed_generation, Some(2));
    }
}

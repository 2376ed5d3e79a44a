//! Address shuffling (CoreDNS's `loadbalance round_robin`).

use hickory_proto::rr::{Record, RecordType};

/// Randomizes the order of the address records after any leading CNAMEs (CoreDNS's
/// `loadbalance round_robin`: CNAMEs stay first, glibc depends on it).
pub fn shuffle_addresses(answers: &mut [Record]) {
    if let Some(start) = shuffled_from(answers, Record::record_type) {
        rand::seq::SliceRandom::shuffle(&mut answers[start..], &mut rand::rng());
    }
}

/// Where the records that [`shuffle_addresses`] reorders start in `answers` (of type
/// `rtype`): after the leading CNAMEs, when more than one follow and all are A, AAAA or MX.
pub(crate) fn shuffled_from<T>(answers: &[T], rtype: impl Fn(&T) -> RecordType) -> Option<usize> {
    let start = answers.iter().position(|r| rtype(r) != RecordType::CNAME).unwrap_or(answers.len());
    let tail = &answers[start..];
    let shuffled = tail.len() > 1
        && tail.iter().all(|r| matches!(rtype(r), RecordType::A | RecordType::AAAA | RecordType::MX));
    shuffled.then_some(start)
}

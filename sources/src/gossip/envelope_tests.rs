use super::*;

const A: &str = "0123456789abcdef0123456789abcdef";
const B: &str = "fedcba9876543210fedcba9876543210";
const NOW: u64 = 1_800_000_000_000;

fn keys(text: &str) -> Keys {
    Keys::parse(text).expect("keys")
}

fn stamp(epoch: u64, counter: u64) -> Stamp {
    Stamp { epoch, counter, sent_ms: NOW }
}

fn sender() -> SocketAddr {
    "10.0.0.1:7946".parse().unwrap()
}

#[test]
fn key_files() {
    assert_eq!(Keys::parse("").unwrap_err(), KeyError::Empty);
    assert_eq!(Keys::parse("# only a comment\n\n").unwrap_err(), KeyError::Empty);
    assert_eq!(Keys::parse("short").unwrap_err(), KeyError::TooShort { line: 1, len: 5 });
    assert_eq!(Keys::parse(&format!("{A}\n\nshort\n")).unwrap_err(), KeyError::TooShort { line: 3, len: 5 });
    assert_eq!(Keys::parse(&format!("{A}\n{B}\n{A}")).unwrap_err(), KeyError::TooMany(3));
    assert_eq!(keys(&format!("  {A}  \n")).0.len(), 1);
    assert_eq!(keys(&format!("# new first\n{A}\n{B}\n")).0.len(), 2);
    assert!(!format!("{:?}", keys(A)).contains(A), "Debug shows no secret");
}

#[test]
fn a_sealed_message_opens_with_the_same_key() {
    let k = keys(A);
    let sealed = seal(&k, stamp(7, 1), b"swim");
    assert_eq!(sealed.len(), 4 + OVERHEAD);
    assert_eq!(open(&k, &sealed, NOW), Ok((stamp(7, 1), &b"swim"[..])));
}

#[test]
fn forged_altered_or_foreign_messages_are_refused() {
    let k = keys(A);
    let sealed = seal(&k, stamp(7, 1), b"swim");
    assert_eq!(open(&k, b"swim", NOW), Err(Refused::Malformed));
    assert_eq!(open(&k, &[0u8; OVERHEAD + 4], NOW), Err(Refused::Malformed));
    assert_eq!(open(&keys(B), &sealed, NOW), Err(Refused::UnknownKey));
    for at in [8, 20, 30, HEADER, sealed.len() - 1] {
        let mut altered = sealed.clone();
        altered[at] ^= 1;
        assert_eq!(open(&k, &altered, NOW), Err(Refused::BadTag), "byte {at} altered");
    }
    // The right key id with another key behind it (a forger who read the id off the wire).
    let mut forged = seal(&keys(B), stamp(7, 1), b"swim");
    forged[4..8].copy_from_slice(&sealed[4..8]);
    assert_eq!(open(&k, &forged, NOW), Err(Refused::BadTag));
}

#[test]
fn during_a_rotation_both_keys_open_and_the_first_seals() {
    let old = keys(A);
    let rotating = keys(&format!("{B}\n{A}"));
    let new = keys(B);
    assert!(open(&rotating, &seal(&old, stamp(1, 1), b"m"), NOW).is_ok(), "an old member is heard");
    assert!(open(&old, &seal(&rotating, stamp(1, 1), b"m"), NOW).is_err(), "sealed with the new key");
    assert!(open(&new, &seal(&rotating, stamp(1, 1), b"m"), NOW).is_ok());
}

#[test]
fn only_messages_within_the_window_open() {
    let k = keys(A);
    let at = |sent_ms| seal(&k, Stamp { epoch: 1, counter: 1, sent_ms }, b"m");
    assert!(open(&k, &at(NOW - WINDOW), NOW).is_ok());
    assert!(open(&k, &at(NOW + WINDOW), NOW).is_ok());
    assert_eq!(open(&k, &at(NOW - WINDOW - 1), NOW), Err(Refused::Stale));
    assert_eq!(open(&k, &at(NOW + WINDOW + 1), NOW), Err(Refused::Stale));
}

#[test]
fn each_stamp_is_taken_once() {
    let mut r = Replay::default();
    let s = sender();
    assert_eq!(r.check(s, stamp(5, 10), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(5, 10), NOW), Err(Refused::Replayed), "the same again");
    assert_eq!(r.check(s, stamp(5, 12), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(5, 11), NOW), Ok(()), "reordered, not seen");
    assert_eq!(r.check(s, stamp(5, 11), NOW), Err(Refused::Replayed));
    assert_eq!(r.check(s, stamp(5, 10), NOW), Err(Refused::Replayed), "seen before the jump");
    assert_eq!(r.check(s, stamp(5, 100), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(5, 36), NOW), Ok(()), "64 back: still remembered");
    assert_eq!(r.check(s, stamp(5, 35), NOW), Err(Refused::Replayed), "65 back: too old to tell");
    assert_eq!(r.check(s, stamp(5, 12), NOW), Err(Refused::Replayed));
    // Another sender has a sequence of its own.
    assert_eq!(r.check("10.0.0.2:7946".parse().unwrap(), stamp(5, 10), NOW), Ok(()));
}

#[test]
fn a_restarted_sender_starts_over_and_its_former_self_is_refused() {
    let mut r = Replay::default();
    let s = sender();
    assert_eq!(r.check(s, stamp(5, 1000), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(6, 1), NOW), Ok(()), "a higher epoch: a restart");
    assert_eq!(r.check(s, stamp(5, 1001), NOW), Err(Refused::Replayed), "the former epoch");
    assert_eq!(r.check(s, stamp(6, 1), NOW), Err(Refused::Replayed));
    assert_eq!(r.check(s, stamp(6, 2), NOW), Ok(()));
}

#[test]
fn a_jump_past_the_window_forgets_what_lies_below() {
    let mut r = Replay::default();
    let s = sender();
    assert_eq!(r.check(s, stamp(1, 1), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(1, 1000), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(1, 999), NOW), Ok(()));
    assert_eq!(r.check(s, stamp(1, 999), NOW), Err(Refused::Replayed));
}

#[test]
fn the_senders_remembered_are_bounded() {
    let mut r = Replay::default();
    for i in 0..(MAX_SENDERS as u32 + 10) {
        let a = SocketAddr::new(std::net::Ipv4Addr::from(i).into(), 7946);
        let now = NOW + u64::from(i);
        assert_eq!(r.check(a, stamp(1, 1), now), Ok(()));
    }
    assert!(r.len() <= MAX_SENDERS);
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::future::join_all;

use super::*;

/// Admits `good`, refuses other tokens, lets `u` do everything but `delete`, or is
/// unreachable; each review takes 50 ms; counts the reviews and the most in flight at once.
#[derive(Default)]
struct Counting {
    tokens: AtomicUsize,
    accesses: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    down: AtomicBool,
}

impl Counting {
    async fn review(&self, counter: &AtomicUsize) -> Result<(), Denied> {
        counter.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) { Err(Denied::Unavailable("down".into())) } else { Ok(()) }
    }
}

#[async_trait::async_trait]
impl Reviewer for Counting {
    async fn token(&self, token: &str) -> Result<Subject, Denied> {
        self.review(&self.tokens).await?;
        match token {
            "good" => Ok(Subject { username: "u".into(), ..Default::default() }),
            t if t.starts_with("user-") => Ok(Subject { username: t.into(), ..Default::default() }),
            _ => Err(Denied::BadToken(String::new())),
        }
    }

    async fn access(&self, who: &Subject, access: &Access) -> Result<(), Denied> {
        self.review(&self.accesses).await?;
        if access.verb == "delete" {
            return Err(Denied::Forbidden {
                user: who.username.clone(),
                verb: access.verb,
                resource: access.resource,
                reason: String::new(),
            });
        }
        Ok(())
    }
}

fn access(verb: &'static str, name: Option<&str>) -> Access {
    Access {
        verb,
        group: "tideway.io",
        resource: "proxyconfigs",
        namespace: None,
        name: name.map(Into::into),
    }
}

fn counts(c: &CachedReview<Counting>) -> (usize, usize) {
    (c.inner.tokens.load(Ordering::SeqCst), c.inner.accesses.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn a_bad_token_is_reviewed_once_whatever_the_object_named() {
    let cached = CachedReview::new(Counting::default());
    let names: Vec<String> = (0..2000).map(|i| format!("obj-{i}")).collect();
    let accesses: Vec<Access> = names.iter().map(|n| access("get", Some(n))).collect();
    let calls = accesses.iter().map(|a| cached.authorize("bad", a));
    let answers = join_all(calls).await;
    assert!(answers.iter().all(|a| matches!(a, Err(Denied::BadToken(_)))));
    assert_eq!(counts(&cached), (1, 0), "one TokenReview for 2,000 calls in flight together");
    tokio::time::advance(NEGATIVE_TTL - Duration::from_millis(100)).await;
    assert!(cached.authorize("bad", &access("get", Some("x"))).await.is_err());
    assert_eq!(counts(&cached).0, 1, "the refusal is reused");
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(cached.authorize("bad", &access("get", None)).await.is_err());
    assert_eq!(counts(&cached).0, 2, "asked again once the refusal expired");
    assert_eq!(cached.tokens_cached(), 1);
    let kept = format!("{:?}", lock(&cached.tokens).keys().collect::<Vec<_>>());
    assert!(!kept.contains("bad") && !kept.contains("98, 97, 100"), "no token kept: {kept}");
}

#[tokio::test(start_paused = true)]
async fn a_good_token_is_reviewed_once_and_each_access_once() {
    let cached = CachedReview::new(Counting::default());
    let get = access("get", Some("default"));
    for _ in 0..3 {
        let calls = (0..100).map(|_| cached.authorize("good", &get));
        assert!(join_all(calls).await.iter().all(Result::is_ok));
    }
    assert_eq!(counts(&cached), (1, 1));
    assert!(matches!(
        cached.authorize("good", &access("delete", Some("default"))).await,
        Err(Denied::Forbidden { .. })
    ));
    assert!(cached.authorize("good", &access("delete", Some("default"))).await.is_err());
    assert_eq!(counts(&cached), (1, 2), "another access, reviewed once");
    tokio::time::advance(REVIEW_TTL).await;
    assert!(cached.authorize("good", &access("get", Some("default"))).await.is_ok());
    assert_eq!(counts(&cached), (2, 3), "both reviewed again once expired");
}

#[tokio::test(start_paused = true)]
async fn at_most_four_reviews_are_in_flight() {
    let cached = CachedReview::new(Counting::default());
    let tokens: Vec<String> = (0..40).map(|i| format!("user-{i}")).collect();
    let get = access("get", None);
    let calls = tokens.iter().map(|t| cached.authorize(t, &get));
    assert!(join_all(calls).await.iter().all(Result::is_ok));
    assert_eq!(counts(&cached), (40, 40), "each token and subject reviewed once");
    assert_eq!(cached.inner.most_in_flight.load(Ordering::SeqCst), MAX_IN_FLIGHT);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_reviewer_is_asked_again() {
    let cached = CachedReview::new(Counting::default());
    cached.inner.down.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        assert!(matches!(cached.authorize("good", &access("get", None)).await, Err(Denied::Unavailable(_))));
    }
    assert_eq!(counts(&cached).0, 2);
    cached.inner.down.store(false, Ordering::SeqCst);
    assert!(cached.authorize("good", &access("get", None)).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_asks_in_place_of_an_asker_that_gave_up() {
    let cached = Arc::new(CachedReview::new(Counting::default()));
    let first = {
        let c = cached.clone();
        tokio::spawn(async move { c.authorize("good", &access("get", None)).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = {
        let c = cached.clone();
        tokio::spawn(async move { c.authorize("good", &access("get", None)).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    first.abort();
    assert!(second.await.unwrap().is_ok(), "the waiter is answered");
    assert_eq!(counts(&cached).0, 2, "the waiter asked itself");
}

//! [`CachedReview`]: a token's check costs the API server a TokenReview per token (not per
//! call, nor per object named in the URL) and a SubjectAccessReview per subject and access,
//! each reused for a while; identical questions in flight are asked once, and at most
//! [`MAX_IN_FLIGHT`] reviews are in flight at all, so no client can make the component
//! flood the API server.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tideway_serve::auth::{Access, Authorizer, Caller, Denied};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::cache::TtlLru;
use super::reviewer::{Reviewer, Subject};

/// How long an admitting answer is reused.
pub const REVIEW_TTL: Duration = Duration::from_secs(10);
/// How long a refusal (a bad token, a forbidden access) is reused.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// Answers kept per cache; past it, the one used longest ago goes.
const MAX_CACHED: usize = 4096;
/// Reviews in flight at once, all questions together.
pub(super) const MAX_IN_FLIGHT: usize = 4;

type TokenKey = [u8; 32];
type AccessKey = (Subject, Access);

/// An authorizer over a [`Reviewer`] whose answers are reused ([`REVIEW_TTL`] when they
/// admit, [`NEGATIVE_TTL`] when they refuse). Tokens are keyed by their SHA-256, so no token is
/// kept; a reviewer that could not be asked ([`Denied::Unavailable`]) is asked again next time.
pub struct CachedReview<R> {
    inner: R,
    tokens: Mutex<TtlLru<TokenKey, Result<Subject, Denied>>>,
    accesses: Mutex<TtlLru<AccessKey, Result<(), Denied>>>,
    token_flights: Flights<TokenKey, Result<Subject, Denied>>,
    access_flights: Flights<AccessKey, Result<(), Denied>>,
    in_flight: Semaphore,
}

impl<R: Reviewer> CachedReview<R> {
    /// Caches `inner`'s answers.
    pub fn new(inner: R) -> CachedReview<R> {
        CachedReview {
            inner,
            tokens: Mutex::new(TtlLru::new(MAX_CACHED)),
            accesses: Mutex::new(TtlLru::new(MAX_CACHED)),
            token_flights: Flights::default(),
            access_flights: Flights::default(),
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// The reviewer asked.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    async fn subject(&self, token: &str) -> Result<Subject, Denied> {
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        let cached = || lock(&self.tokens).get(&key, Instant::now().into_std());
        if let Some(answer) = cached() {
            return answer;
        }
        self.token_flights
            .once(&key, || async {
                if let Some(answer) = cached() {
                    return answer;
                }
                let answer = self.bounded(self.inner.token(token)).await;
                remember(&self.tokens, key, &answer);
                answer
            })
            .await
    }

    async fn may(&self, who: Subject, access: &Access) -> Result<(), Denied> {
        let key: AccessKey = (who, access.clone());
        let cached = || lock(&self.accesses).get(&key, Instant::now().into_std());
        if let Some(answer) = cached() {
            return answer;
        }
        self.access_flights
            .once(&key, || async {
                if let Some(answer) = cached() {
                    return answer;
                }
                let answer = self.bounded(self.inner.access(&key.0, access)).await;
                remember(&self.accesses, key.clone(), &answer);
                answer
            })
            .await
    }

    /// `review` once a place among the reviews in flight is free.
    async fn bounded<T>(&self, review: impl Future<Output = Result<T, Denied>>) -> Result<T, Denied> {
        let _permit = self.in_flight.acquire().await.map_err(|e| Denied::Unavailable(e.to_string()))?;
        review.await
    }

    /// How many token answers are kept (for tests).
    pub fn tokens_cached(&self) -> usize {
        lock(&self.tokens).len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `answer` as long as its kind deserves; an unreachable reviewer's is not kept.
fn remember<K: Clone + Hash + Eq, V: Clone>(
    cache: &Mutex<TtlLru<K, Result<V, Denied>>>,
    key: K,
    answer: &Result<V, Denied>,
) {
    let ttl = match answer {
        Ok(_) => REVIEW_TTL,
        Err(Denied::Unavailable(_)) => return,
        Err(_) => NEGATIVE_TTL,
    };
    lock(cache).insert(key, answer.clone(), (Instant::now() + ttl).into_std());
}

#[async_trait::async_trait]
impl<R: Reviewer> Authorizer for CachedReview<R> {
    async fn authorize(&self, token: &str, access: &Access) -> Result<Caller, Denied> {
        let who = self.subject(token).await?;
        let user = who.username.clone();
        self.may(who, access).await?;
        Ok(Caller { user })
    }
}

/// Questions in flight: the first asker of a question asks it, later ones wait for its answer.
struct Flights<K, V> {
    asking: Mutex<HashMap<K, watch::Receiver<Option<V>>>>,
}

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Flights { asking: Mutex::new(HashMap::new()) }
    }
}

enum Turn<V> {
    Wait(watch::Receiver<Option<V>>),
    Ask(watch::Sender<Option<V>>),
}

impl<K: Clone + Hash + Eq, V: Clone> Flights<K, V> {
    /// `ask()`'s answer, asked once for all callers of the same `key` meanwhile. If the asker
    /// is dropped before answering (its call timed out), a waiter asks in its place.
    async fn once<F, Fut>(&self, key: &K, ask: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let mut ask = Some(ask);
        loop {
            let turn = {
                let mut asking = lock(&self.asking);
                match asking.get(key) {
                    Some(rx) => Turn::Wait(rx.clone()),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        asking.insert(key.clone(), rx);
                        Turn::Ask(tx)
                    }
                }
            };
            match turn {
                Turn::Wait(mut rx) => {
                    if let Ok(answer) = rx.wait_for(Option::is_some).await
                        && let Some(v) = answer.clone()
                    {
                        return v;
                    }
                }
                Turn::Ask(tx) => {
                    let _done = Landed { flights: self, key };
                    let ask = ask.take().expect("a caller asks at most once: it returns after");
                    let answer = ask().await;
                    tx.send_replace(Some(answer.clone()));
                    return answer;
                }
            }
        }
    }
}

/// Takes a question off the list when its asker answers or is dropped.
struct Landed<'a, K: Hash + Eq, V> {
    flights: &'a Flights<K, V>,
    key: &'a K,
}

impl<K: Hash + Eq, V> Drop for Landed<'_, K, V> {
    fn drop(&mut self) {
        lock(&self.flights.asking).remove(self.key);
    }
}

#[cfg(test)]
#[path = "cached_tests.rs"]
mod tests;

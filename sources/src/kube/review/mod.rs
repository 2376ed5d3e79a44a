//! Bearer tokens checked by the API server, as an aggregated API or kubelet does: a
//! TokenReview says who holds the token, then a SubjectAccessReview says whether that user
//! may perform the verb on the resource (RBAC decides, e.g. `patch` on
//! `proxyconfigs.tideway.io`). The operator's ServiceAccount needs `create` on both reviews
//! (the `system:auth-delegator` ClusterRole grants it). [`CachedReview`] reuses answers briefly.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tideway_api::auth::{Access, Authorizer, Caller, Denied};
use tokio::time::Instant;

/// Checks tokens with the API server.
#[derive(Clone)]
pub struct KubeReview {
    client: Client,
    audiences: Vec<String>,
}

impl KubeReview {
    /// Reviews over `client`, of tokens for any audience (API-server credentials too).
    pub fn new(client: Client) -> KubeReview {
        KubeReview { client, audiences: Vec::new() }
    }

    /// Only tokens issued for one of `audiences` (`kubectl create token SA --audience A`): a
    /// leaked API-server token is not accepted, and a token minted for Tideway is no API
    /// credential. Empty: any audience.
    pub fn with_audiences(mut self, audiences: Vec<String>) -> KubeReview {
        self.audiences = audiences;
        self
    }
}

fn unavailable(e: kube::Error) -> Denied {
    Denied::Unavailable(e.to_string())
}

/// `": reason"`, or nothing for an empty reason.
fn because(reason: Option<String>) -> String {
    reason.filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default()
}

#[async_trait::async_trait]
impl Authorizer for KubeReview {
    async fn authorize(&self, token: &str, access: &Access) -> Result<Caller, Denied> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let status = reviews.create(&PostParams::default(), &review).await.map_err(unavailable)?.status;
        let status = status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Denied::BadToken(because(status.error)));
        }
        // The API server answers with the audiences the token is valid for; an authenticator
        // that ignores the request's audiences answers none of ours.
        let audiences = status.audiences.unwrap_or_default();
        if !self.audiences.is_empty() && !audiences.iter().any(|a| self.audiences.contains(a)) {
            return Err(Denied::BadToken(format!(
                ": not issued for audience {}",
                self.audiences.join(" or ")
            )));
        }
        let username = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(username.clone()),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes: Some(ResourceAttributes {
                    group: Some(access.group.into()),
                    resource: Some(access.resource.into()),
                    verb: Some(access.verb.into()),
                    namespace: access.namespace.clone(),
                    name: access.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let sars: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let status = sars.create(&PostParams::default(), &sar).await.map_err(unavailable)?.status;
        let status = status.unwrap_or_default();
        if !status.allowed {
            let reason = because(status.reason.or(status.evaluation_error));
            return Err(Denied::Forbidden {
                user: username,
                verb: access.verb,
                resource: access.resource,
                reason,
            });
        }
        Ok(Caller { user: username })
    }
}

/// How long an answer is reused for the same token and access.
pub const REVIEW_TTL: Duration = Duration::from_secs(10);

/// Answers kept at most; past it, expired ones go, then all.
const MAX_CACHED: usize = 4096;

type Key = ([u8; 32], Access);
/// Answers by key, with when each was given.
type Answers = HashMap<Key, (Instant, Result<Caller, Denied>)>;

/// An authorizer whose answers are reused for [`REVIEW_TTL`]: a client polling the API costs
/// two reviews per token and access every ten seconds, not two per call. Entries are keyed by
/// the token's SHA-256, so no token is kept; an authorizer that could not be asked
/// ([`Denied::Unavailable`]) is asked again next time.
pub struct CachedReview<A> {
    inner: A,
    answers: Mutex<Answers>,
}

impl<A: Authorizer> CachedReview<A> {
    /// Caches `inner`'s answers.
    pub fn new(inner: A) -> CachedReview<A> {
        CachedReview { inner, answers: Mutex::default() }
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait::async_trait]
impl<A: Authorizer> Authorizer for CachedReview<A> {
    async fn authorize(&self, token: &str, access: &Access) -> Result<Caller, Denied> {
        let key: Key = (Sha256::digest(token.as_bytes()).into(), access.clone());
        let now = Instant::now();
        if let Some((at, answer)) = self.answers().get(&key)
            && now < *at + REVIEW_TTL
        {
            return answer.clone();
        }
        let answer = self.inner.authorize(token, access).await;
        if !matches!(answer, Err(Denied::Unavailable(_))) {
            let mut answers = self.answers();
            if answers.len() >= MAX_CACHED {
                answers.retain(|_, (at, _)| now < *at + REVIEW_TTL);
                if answers.len() >= MAX_CACHED {
                    answers.clear();
                }
            }
            answers.insert(key, (now, answer.clone()));
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Admits `good`, refuses other tokens, or is unreachable; counts the questions.
    struct Counting {
        asked: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl Authorizer for Counting {
        async fn authorize(&self, token: &str, _access: &Access) -> Result<Caller, Denied> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(Denied::Unavailable("down".into()));
            }
            match token {
                "good" => Ok(Caller { user: "u".into() }),
                _ => Err(Denied::BadToken(String::new())),
            }
        }
    }

    fn access(verb: &'static str) -> Access {
        Access { verb, group: "tideway.io", resource: "proxyconfigs", namespace: None, name: None }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_reused_per_token_and_access_for_a_while() {
        let cached = CachedReview::new(Counting { asked: AtomicUsize::new(0), down: Default::default() });
        let asked = || cached.inner.asked.load(Ordering::SeqCst);
        for _ in 0..3 {
            assert!(cached.authorize("good", &access("list")).await.is_ok());
            assert!(cached.authorize("bad", &access("list")).await.is_err());
        }
        assert_eq!(asked(), 2, "one review per token");
        assert!(cached.authorize("good", &access("patch")).await.is_ok());
        assert_eq!(asked(), 3, "another access is reviewed");
        tokio::time::advance(REVIEW_TTL).await;
        assert!(cached.authorize("good", &access("list")).await.is_ok());
        assert_eq!(asked(), 4, "reviewed again once expired");
        cached.inner.down.store(true, Ordering::SeqCst);
        assert!(cached.authorize("other", &access("list")).await.is_err());
        assert!(cached.authorize("other", &access("list")).await.is_err());
        assert_eq!(asked(), 6, "an unreachable reviewer is asked again");
        assert!(
            !format!("{:?}", cached.answers().keys().collect::<Vec<_>>()).contains("good"),
            "no token kept"
        );
    }
}

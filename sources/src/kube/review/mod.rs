//! Bearer tokens checked by the API server, as an aggregated API or kubelet does: a
//! TokenReview says who holds the token, then a SubjectAccessReview says whether that user
//! may perform the verb on the resource (RBAC decides, e.g. `patch` on
//! `proxyconfigs.tideway.io`). The operator's ServiceAccount needs `create` on both reviews
//! (the `system:auth-delegator` ClusterRole grants it). [`CachedReview`] reuses answers briefly.
//!
//! ```text
//!  token --sha256--> token answers (10 s admitted, 5 s refused) --miss--> one TokenReview
//!                    per token in flight, at most 4 reviews in flight in all --> Subject
//!  (Subject, Access) --> access answers (LRU, same lifetimes) --miss--> one SubjectAccessReview
//! ```
//!
//! * [`cache`]: the bounded, expiring map of answers (pure).
//! * [`cached`]: [`CachedReview`]: the two caches, one review in flight per question, the
//!   bound on reviews in flight.

pub mod cache;
mod cached;
mod reviewer;

pub use cached::{CachedReview, NEGATIVE_TTL, REVIEW_TTL};
pub use reviewer::{Reviewer, Subject};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use tideway_serve::auth::{Access, Authorizer, Caller, Denied};

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
impl Reviewer for KubeReview {
    async fn token(&self, token: &str) -> Result<Subject, Denied> {
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
        Ok(Subject {
            username: user.username.unwrap_or_default(),
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        })
    }

    async fn access(&self, who: &Subject, access: &Access) -> Result<(), Denied> {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.username.clone()),
                groups: (!who.groups.is_empty()).then(|| who.groups.clone()),
                uid: who.uid.clone(),
                extra: (!who.extra.is_empty()).then(|| who.extra.clone()),
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
                user: who.username.clone(),
                verb: access.verb,
                resource: access.resource,
                reason,
            });
        }
        Ok(())
    }
}

/// Every call reviewed afresh (no cache): a TokenReview, then a SubjectAccessReview.
#[async_trait::async_trait]
impl Authorizer for KubeReview {
    async fn authorize(&self, token: &str, access: &Access) -> Result<Caller, Denied> {
        let who = Reviewer::token(self, token).await?;
        Reviewer::access(self, &who, access).await?;
        Ok(Caller { user: who.username })
    }
}

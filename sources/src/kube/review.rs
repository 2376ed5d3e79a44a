//! Bearer tokens checked by the API server, as an aggregated API or kubelet does: a
//! TokenReview says who holds the token, then a SubjectAccessReview says whether that user
//! may perform the verb on the resource (RBAC decides, e.g. `patch` on
//! `proxyconfigs.tideway.io`). The operator's ServiceAccount needs `create` on both reviews
//! (the `system:auth-delegator` ClusterRole grants it).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use tideway_api::auth::{Access, Authorizer, Caller, Denied};

/// Checks tokens with the API server.
#[derive(Clone)]
pub struct KubeReview {
    client: Client,
}

impl KubeReview {
    /// Reviews over `client`.
    pub fn new(client: Client) -> KubeReview {
        KubeReview { client }
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
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let status = reviews.create(&PostParams::default(), &review).await.map_err(unavailable)?.status;
        let status = status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Denied::BadToken(because(status.error)));
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

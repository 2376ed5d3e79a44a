//! The two questions a token's check asks the API server (who holds the token, may they do
//! this), and who holds a token as a TokenReview says.

use std::collections::BTreeMap;

use tideway_serve::auth::{Access, Denied};

/// Who holds a token, as a TokenReview says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Subject {
    /// The user name (`system:serviceaccount:ns:sa`).
    pub username: String,
    /// The user's UID, if the authenticator gives one.
    pub uid: Option<String>,
    /// The user's groups.
    pub groups: Vec<String>,
    /// What else the authenticator says about the user.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The two questions a token's check asks the API server: each edge of
/// [`CachedReview`](super::CachedReview).
#[async_trait::async_trait]
pub trait Reviewer: Send + Sync {
    /// Who holds `token` ([`Denied::BadToken`] for nobody).
    async fn token(&self, token: &str) -> Result<Subject, Denied>;
    /// Whether `who` may perform `access` ([`Denied::Forbidden`] if not).
    async fn access(&self, who: &Subject, access: &Access) -> Result<(), Denied>;
}

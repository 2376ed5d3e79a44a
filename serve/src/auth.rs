//! Who may change things over REST: every mutating call carries a bearer token, and an
//! [`Authorizer`] decides whether the token's holder may perform the verb on the resource.
//! In a cluster that is the API server's TokenReview and SubjectAccessReview (the
//! `tideway-sources` crate's `KubeReview`); in the lab and for a single operator, a token
//! read from a file ([`StaticToken`]). With neither, [`NoTokens`] refuses every change.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::problem::Problem;

/// What a request asks to do, in Kubernetes RBAC terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Access {
    /// `get`, `list`, `patch`, ...
    pub verb: &'static str,
    /// API group of the resource (`tideway.io`).
    pub group: &'static str,
    /// The resource (`proxyconfigs`).
    pub resource: &'static str,
    /// The object's namespace, for a namespaced resource (a Service).
    pub namespace: Option<String>,
    /// The object, when one is named.
    pub name: Option<String>,
}

/// Who is calling, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User name (`system:serviceaccount:ns:sa`, `lab-admin`).
    pub user: String,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No `Authorization: Bearer` header.
    #[error("this call needs a bearer token (Authorization: Bearer TOKEN)")]
    NoToken,
    /// The token is not valid.
    #[error("the token is not valid{0}")]
    BadToken(String),
    /// The caller may not do this.
    #[error("{user} may not {verb} {resource}{reason}")]
    Forbidden {
        /// Who asked.
        user: String,
        /// The verb.
        verb: &'static str,
        /// The resource.
        resource: &'static str,
        /// The authorizer's reason, if it gave one (with its leading separator).
        reason: String,
    },
    /// No way to check tokens is configured: nothing can be changed.
    #[error("changes over this API are off: no token is configured (start with --api-token-file)")]
    NotConfigured,
    /// The checker could not be asked (the API server is down).
    #[error("cannot check the token: {0}")]
    Unavailable(String),
}

impl Denied {
    /// The HTTP status of this refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Denied::NoToken | Denied::BadToken(_) | Denied::NotConfigured => StatusCode::UNAUTHORIZED,
            Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
            Denied::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut r = Problem::new(status, self.to_string()).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// Decides whether a token's holder may do something.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync {
    /// The caller behind `token`, if it may perform `access`.
    async fn authorize(&self, token: &str, access: &Access) -> Result<Caller, Denied>;
}

/// The token of an `Authorization: Bearer` header.
pub fn bearer(headers: &HeaderMap) -> Result<&str, Denied> {
    let value = headers.get(header::AUTHORIZATION).ok_or(Denied::NoToken)?;
    let value = value.to_str().map_err(|_| Denied::BadToken(String::new()))?;
    let (scheme, token) = value.split_once(' ').ok_or(Denied::NoToken)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(Denied::NoToken);
    }
    Ok(token.trim())
}

/// Checks the request's bearer token with `auth`.
pub async fn check(auth: &dyn Authorizer, headers: &HeaderMap, access: &Access) -> Result<Caller, Denied> {
    auth.authorize(bearer(headers)?, access).await
}

/// What a request needs a token for: `None` when it needs none.
pub type AccessOf = fn(&Method, &str) -> Option<Access>;

#[derive(Clone)]
struct Guard {
    auth: Arc<dyn Authorizer>,
    access_of: AccessOf,
}

async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let Some(access) = (g.access_of)(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    match check(g.auth.as_ref(), req.headers(), &access).await {
        Ok(_) => next.run(req).await,
        Err(denied) => denied.into_response(),
    }
}

/// `router` with every request `access_of` names checked by `auth` first: an API served off
/// loopback (reads included) answers only to tokens the authorizer admits. The check runs
/// inside the call's time bound ([`crate::http::with_timeout`]): an authorizer that hangs
/// (an API server that does not answer a review) cannot hold a call open.
pub fn require_tokens(router: axum::Router, auth: Arc<dyn Authorizer>, access_of: AccessOf) -> axum::Router {
    crate::http::with_timeout(
        router.layer(axum::middleware::from_fn_with_state(Guard { auth, access_of }, guard)),
    )
}

/// True for the methods that read (`GET`, `HEAD`, `OPTIONS`): each is under the read check.
pub fn is_safe_method(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD || method == Method::OPTIONS
}

/// One shared secret: its holder may do anything.
pub struct StaticToken {
    token: String,
    user: String,
}

impl StaticToken {
    /// Accepts `token` (surrounding whitespace ignored) for the user `user`.
    pub fn new(token: &str, user: &str) -> StaticToken {
        StaticToken { token: token.trim().to_string(), user: user.into() }
    }

    /// Accepts the token in file `path` (as `api-token`); an empty file is an error.
    pub fn from_file(path: &std::path::Path) -> std::io::Result<StaticToken> {
        let text = std::fs::read_to_string(path)?;
        if text.trim().is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is empty", path.display()),
            ));
        }
        Ok(StaticToken::new(&text, "api-token"))
    }
}

/// The flags that say who may call a component's REST API, the same in the agent and the
/// operator (each words their help for itself, with `mut_arg`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ApiAuthArgs {
    /// A file holding the bearer token the REST API (`/api/v1/...`) needs, on loopback too.
    /// Without it, `--source kubernetes` checks tokens with TokenReview and
    /// SubjectAccessReview (verb `get` on `nodeproxystates`); with neither, the API answers
    /// no one (unless `--api-anonymous-reads`).
    #[arg(long)]
    pub api_token_file: Option<std::path::PathBuf>,
    /// With `--source kubernetes`: accept only tokens issued for this audience (mint one with
    /// `kubectl create token SA --audience AUDIENCE`); without it, any token the API server
    /// accepts, API-server credentials included.
    #[arg(long)]
    pub api_audience: Option<String>,
    /// Serve `/api/v1/...` without a token (any local process, or anyone who reaches a
    /// non-loopback address, may then read the rules and trace packets). Off by default.
    #[arg(long)]
    pub api_anonymous_reads: bool,
}

impl ApiAuthArgs {
    /// The audiences tokens must be issued for (any, when empty).
    pub fn audiences(&self) -> Vec<String> {
        self.api_audience.iter().cloned().collect()
    }

    /// Who checks tokens ([`choose`]): the token file, else `review`.
    pub fn authorizer(&self, review: Option<Arc<dyn Authorizer>>) -> std::io::Result<Arc<dyn Authorizer>> {
        choose(self.api_token_file.as_deref(), review)
    }
}

/// Who checks tokens: a token file first, else the cluster's reviews, else nobody
/// ([`NoTokens`]).
pub fn choose(
    token_file: Option<&std::path::Path>,
    review: Option<Arc<dyn Authorizer>>,
) -> std::io::Result<Arc<dyn Authorizer>> {
    Ok(match (token_file, review) {
        (Some(path), _) => Arc::new(StaticToken::from_file(path)?),
        (None, Some(review)) => review,
        (None, None) => Arc::new(NoTokens),
    })
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticToken").field("user", &self.user).finish_non_exhaustive()
    }
}

/// Compares in time independent of where the strings differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[async_trait::async_trait]
impl Authorizer for StaticToken {
    async fn authorize(&self, token: &str, _access: &Access) -> Result<Caller, Denied> {
        if self.token.is_empty() || !same_secret(token.as_bytes(), self.token.as_bytes()) {
            return Err(Denied::BadToken(String::new()));
        }
        Ok(Caller { user: self.user.clone() })
    }
}

/// No tokens configured: every change is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTokens;

#[async_trait::async_trait]
impl Authorizer for NoTokens {
    async fn authorize(&self, _token: &str, _access: &Access) -> Result<Caller, Denied> {
        Err(Denied::NotConfigured)
    }
}

/// A new random token (32 bytes from the kernel, hex): what the lab prints for its API.
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, a.parse().unwrap());
        }
        h
    }

    fn patch() -> Access {
        Access {
            verb: "patch",
            group: "tideway.io",
            resource: "proxyconfigs",
            namespace: None,
            name: Some("default".into()),
        }
    }

    #[tokio::test]
    async fn a_static_token_admits_its_holder_only() {
        let auth = StaticToken::new("s3cret\n", "lab-admin");
        let ok = check(&auth, &headers(Some("Bearer s3cret")), &patch()).await;
        assert_eq!(ok, Ok(Caller { user: "lab-admin".into() }));
        assert_eq!(check(&auth, &headers(Some("bearer s3cret")), &patch()).await.unwrap().user, "lab-admin");
        for (h, want) in [
            (None, StatusCode::UNAUTHORIZED),
            (Some("Bearer wrong"), StatusCode::UNAUTHORIZED),
            (Some("Bearer s3cre"), StatusCode::UNAUTHORIZED),
            (Some("Basic czNjcmV0"), StatusCode::UNAUTHORIZED),
            (Some("Bearer "), StatusCode::UNAUTHORIZED),
        ] {
            let e = check(&auth, &headers(h), &patch()).await.unwrap_err();
            assert_eq!(e.status(), want, "{h:?}");
        }
        let empty = StaticToken::new("", "x");
        assert!(
            check(&empty, &headers(Some("Bearer x")), &patch()).await.is_err(),
            "an empty secret admits nobody"
        );
    }

    #[tokio::test]
    async fn without_tokens_nothing_changes() {
        let e = check(&NoTokens, &headers(Some("Bearer anything")), &patch()).await.unwrap_err();
        assert_eq!(e, Denied::NotConfigured);
        let r = e.into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[tokio::test]
    async fn guarded_routes_need_a_token_and_others_do_not() {
        use tower::ServiceExt;
        fn access_of(_: &Method, path: &str) -> Option<Access> {
            path.starts_with("/api/").then_some(Access {
                verb: "get",
                group: "",
                resource: "x",
                namespace: None,
                name: None,
            })
        }
        let router = axum::Router::new()
            .route("/api/v1/x", axum::routing::get(|| async { "x" }))
            .route("/metrics", axum::routing::get(|| async { "m" }));
        let router = require_tokens(router, Arc::new(StaticToken::new("t0k", "me")), access_of);
        let status = |path: &str, token: Option<&str>| {
            let router = router.clone();
            let mut req = axum::http::Request::builder().uri(path);
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let req = req.body(axum::body::Body::empty()).unwrap();
            async move { router.oneshot(req).await.unwrap().status() }
        };
        assert_eq!(status("/api/v1/x", None).await, StatusCode::UNAUTHORIZED);
        assert_eq!(status("/api/v1/x", Some("nope")).await, StatusCode::UNAUTHORIZED);
        assert_eq!(status("/api/v1/x", Some("t0k")).await, StatusCode::OK);
        assert_eq!(status("/metrics", None).await, StatusCode::OK);
    }

    /// An authorizer that never answers (an API server that takes the review and hangs).
    struct Hangs;

    #[async_trait::async_trait]
    impl Authorizer for Hangs {
        async fn authorize(&self, _token: &str, _access: &Access) -> Result<Caller, Denied> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_check_is_bounded_by_the_call_timeout() {
        use tower::ServiceExt;
        fn access_of(method: &Method, _: &str) -> Option<Access> {
            is_safe_method(method).then_some(Access {
                verb: "get",
                group: "",
                resource: "x",
                namespace: None,
                name: None,
            })
        }
        let router = axum::Router::new().route("/api/v1/x", axum::routing::get(|| async { "x" }));
        let router = require_tokens(router, Arc::new(Hangs), access_of);
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            let req = axum::http::Request::builder()
                .method(method.clone())
                .uri("/api/v1/x")
                .header("authorization", "Bearer t")
                .body(axum::body::Body::empty())
                .unwrap();
            let r = router.clone().oneshot(req).await.unwrap();
            assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{method} waits for the check, bounded");
        }
    }

    #[test]
    fn tokens_are_random_and_long() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}

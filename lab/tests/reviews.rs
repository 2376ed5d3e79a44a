//! Token and access reviews by the real API server (root; needs `make kube`): the reviewer the
//! components' HTTP APIs use (`KubeReview`) asks the lab's control plane's TokenReview and
//! SubjectAccessReview APIs about tokens the server itself mints (TokenRequest, with and
//! without Tideway's audience) for a ServiceAccount that RBAC lets read NodeProxyStates and
//! nothing else.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use tideway_lab::kube::standalone::Standalone;
use tideway_serve::auth::{Access, Authorizer, Denied};
use tideway_sources::kube::KubeReview;

/// Creates `object` (any kind) as the admin.
async fn create(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
    object: serde_json::Value,
) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
}

/// A token for ServiceAccount `tw/alice`, minted by the API server for `audiences` (none: the
/// API server's own).
async fn token(accounts: &Api<ServiceAccount>, audiences: &[&str]) -> String {
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": audiences}})).unwrap();
    let minted: TokenRequest =
        accounts.create_subresource("token", "alice", &PostParams::default(), &request).await.unwrap();
    minted.status.expect("a token").token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_reviews_tokens_by_audience_and_access_by_rbac() {
    let standalone = Standalone::start("rev", |_| {}).await.expect("a control plane (root; make kube)");
    let cp = &standalone.cp;
    let admin = standalone.admin().await.unwrap();

    create(&admin, "v1", "Namespace", "namespaces", None, json!({"metadata": {"name": "tw"}})).await;
    create(
        &admin,
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        Some("tw"),
        json!({"metadata": {"name": "alice"}}),
    )
    .await;
    create(&admin, "rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", None, json!({
        "metadata": {"name": "tideway-test-read-states"},
        "rules": [{"apiGroups": ["tideway.io"], "resources": ["nodeproxystates"], "verbs": ["get", "list"]}],
    }))
    .await;
    create(&admin, "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", None, json!({
        "metadata": {"name": "tideway-test-read-states"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-test-read-states"},
        "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "tw"}],
    }))
    .await;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "tw");
    let tideway_token = token(&accounts, &["tideway"]).await;
    let api_token = token(&accounts, &[]).await;

    let get =
        Access { verb: "get", group: "tideway.io", resource: "nodeproxystates", namespace: None, name: None };
    let delete = Access { verb: "delete", ..get.clone() };
    let alice = "system:serviceaccount:tw:alice".to_string();

    // Scoped to Tideway's audience: its token is taken, an API-server token is not.
    let scoped = KubeReview::new(admin.clone()).with_audiences(vec!["tideway".into()]);
    assert_eq!(scoped.authorize(&tideway_token, &get).await.map(|c| c.user), Ok(alice.clone()));
    let leaked = scoped.authorize(&api_token, &get).await;
    assert!(matches!(leaked, Err(Denied::BadToken(_))), "an API-server token is refused: {leaked:?}");
    // RBAC decides the rest: a verb the role does not grant is forbidden, the reason given.
    let refused = scoped.authorize(&tideway_token, &delete).await;
    assert!(matches!(&refused, Err(Denied::Forbidden { user, .. }) if *user == alice), "{refused:?}");
    // No audience: the API server's own tokens only; a Tideway token is no API credential.
    let any = KubeReview::new(admin.clone());
    assert_eq!(any.authorize(&api_token, &get).await.map(|c| c.user), Ok(alice));
    let scoped_elsewhere = any.authorize(&tideway_token, &get).await;
    assert!(matches!(scoped_elsewhere, Err(Denied::BadToken(_))), "{scoped_elsewhere:?}");
    // A token that was never minted.
    let forged = scoped.authorize("eyJhbGciOiJSUzI1NiJ9.e30.c2ln", &get).await;
    assert!(matches!(forged, Err(Denied::BadToken(_))), "{forged:?}");

    // The reviews reached the real server: its audit log has them.
    let audit = std::fs::read_to_string(cp.layout().audit_log()).unwrap();
    for resource in ["tokenreviews", "subjectaccessreviews"] {
        assert!(audit.contains(&format!("\"resource\":\"{resource}\"")), "{resource} not in the audit log");
    }
}

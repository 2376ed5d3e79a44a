//! REST changes reviewed by the real server.

use super::*;

/// PATCH of a ProxyConfig over the operator's REST API: the token reviewed by the server's
/// TokenReview, the verb by its SubjectAccessReview, the change a merge patch by `tideway-api`.
pub(super) async fn rest(cluster: &mut Cluster) {
    use axum::body::Body;
    use tideway_operator::api::ApiState;
    use tideway_serve::auth::Authorizer;
    use tideway_sources::kube::KubeReview;
    use tower::ServiceExt;

    let admin = cluster.admin.clone();
    let since = SystemTime::now();
    let objects = vec![
        namespace("tw"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice", "namespace": "tw"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bob", "namespace": "tw"}}),
        // The chart's own role for who may switch proxy modes (aggregated to `admin`).
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "alice-switches-modes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-proxy-mode-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "tw"}]}),
    ];
    cluster.applier.apply_all(objects).await.unwrap();
    let standalone = &cluster.standalone;
    let (alice, bob) =
        (standalone.token("tw", "alice").await.unwrap(), standalone.token("tw", "bob").await.unwrap());
    let c = client(Some(&cluster.operator)).await.unwrap();
    let mut tasks = Tasks::default();
    let view = SharedCluster::new();
    tasks.spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(view.clone()));
    tideway_tests::eventually("the ProxyConfig in the view", || {
        view.lock().proxy_configs().next().map(|_| ())
    })
    .await;
    let before = view.lock().proxy_configs().find(|c| c.name == "default").expect("default").generation;
    let state = ApiState {
        cluster: view.clone(),
        writer: Arc::new(KubeWriter::new(c.clone(), None)),
        auth: Arc::new(KubeReview::new(c.clone())) as Arc<dyn Authorizer>,
        open_reads: true,
    };
    let router = tideway_operator::api::router(state);
    let patch = |token: &str| {
        http::Request::builder()
            .method("PATCH")
            .uri("/api/v1/proxyconfigs/default")
            .header("content-type", "application/merge-patch+json")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(r#"{"spec": {"mode": "iptables"}}"#))
            .unwrap()
    };
    let code = |r: axum::response::Response| r.status().as_u16();
    let pc_path = "/apis/tideway.io/v1alpha1/proxyconfigs/default";
    assert_eq!(code(router.clone().oneshot(patch("nobody")).await.unwrap()), 401, "unknown token");
    assert_eq!(code(router.clone().oneshot(patch(&bob)).await.unwrap()), 403, "bob may not patch");
    assert_eq!(get(&admin, pc_path).await.unwrap()["spec"]["mode"], "nftables", "unchanged");
    assert_eq!(code(router.clone().oneshot(patch(&alice)).await.unwrap()), 202);
    let pc = get(&admin, pc_path).await.unwrap();
    assert_eq!(pc["spec"]["mode"], "iptables");
    assert_eq!(pc["metadata"]["generation"].as_i64(), Some(before + 1));
    let managers: Vec<(String, String)> = pc["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"]["f:spec"]["f:mode"].is_object())
        .map(|m| (m["manager"].as_str().unwrap().to_string(), m["operation"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(managers, [("tideway-api".to_string(), "Update".to_string())], "who owns the mode");
    let asked: BTreeSet<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| {
            r.starts_with("create /apis/authentication") || r.starts_with("create /apis/authorization")
        })
        .map(|r| r.trim_end_matches('?').to_string())
        .collect();
    assert_eq!(
        asked,
        BTreeSet::from([
            "create /apis/authentication.k8s.io/v1/tokenreviews".to_string(),
            "create /apis/authorization.k8s.io/v1/subjectaccessreviews".to_string(),
        ])
    );
    // The operator's view follows the watch.
    tideway_tests::eventually("the new generation in the view", || {
        view.lock().proxy_configs().find(|c| c.generation == before + 1).map(|_| ())
    })
    .await;
    merge(&admin, pc_path, json!({"spec": {"mode": "nftables"}})).await;
}

//! What the operator writes: addresses, announcements, statuses and Events; a write RBAC
//! refuses; an Event repeated.

use super::*;

pub(super) async fn writes(cluster: &mut Cluster) {
    let (admin, since) = (cluster.admin.clone(), SystemTime::now());
    let objects = [
        namespace("demo"),
        pool("default", &["172.18.255.200-172.18.255.250"], true),
        json!({"apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig", "metadata": {"name": "default"},
            "spec": {"mode": "nftables"}}),
        load_balancer("demo", "web", json!({}), json!({})),
        slice("demo", "web", "10.10.1.5"),
    ];
    cluster.applier.apply_all(objects.to_vec()).await.unwrap();
    let mut tasks = Tasks::default();
    let (_, status) = run_operator(&mut tasks, &cluster.operator, None).await;

    let ip = eventually("web's address", || ingress(&admin, "demo", "web")).await;
    assert_eq!(ip, json!({"ip": "172.18.255.200", "ipMode": "VIP"}));
    let status_writes: Vec<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| r.contains("/namespaces/demo/services/web/status"))
        .collect();
    assert!(
        status_writes.iter().all(|r| r.starts_with("patch ") && r.contains("fieldManager=tideway-operator")),
        "{status_writes:?}"
    );
    let ann_path = announcement_path("demo", "web");
    let ann = eventually("the announcement", || get(&admin, &ann_path)).await;
    assert_eq!(ann["metadata"]["labels"]["tideway.io/node"], ann["spec"]["node"]);
    assert_eq!(ann["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert_eq!(ann["spec"]["eligibleNodes"], json!(["node-a", "node-b"]));
    let pool_path = "/apis/tideway.io/v1alpha1/loadbalancerpools/default";
    let p = eventually("the pool's status", || async {
        get(&admin, pool_path).await.filter(|p| p["status"]["assignedIPv4"] == 1)
    })
    .await;
    assert_eq!(p["status"]["availableIPv4"], 50);
    assert_eq!(p["status"]["conditions"][0]["type"], "Valid");
    let pc_path = "/apis/tideway.io/v1alpha1/proxyconfigs/default";
    let pc = eventually("the ProxyConfig's status", || async {
        get(&admin, pc_path).await.filter(|p| p["status"]["nodesSelected"] == 2)
    })
    .await;
    assert_eq!(
        (&pc["status"]["conditions"][0]["type"], &pc["status"]["conditions"][0]["status"]),
        (&json!("Ready"), &json!("False"))
    );
    let allocated = eventually("an IPAllocated Event", || async {
        events(&admin, "demo", "IPAllocated").await.into_iter().next()
    })
    .await;
    assert_eq!(allocated["regarding"]["name"], "web");
    assert_eq!(allocated["reportingController"], "tideway-operator");

    // The nodes report their rules (status through its subresource): the rollout is Ready.
    let generation = pc["metadata"]["generation"].clone();
    for node in ["node-a", "node-b"] {
        let status = json!({"mode": "nftables", "proxyConfig": "default",
            "proxyConfigGeneration": generation, "ready": true});
        report(cluster, node, status).await;
    }
    eventually("the rollout", || async {
        get(&admin, pc_path).await.filter(|p| {
            p["status"]["nodesProgrammed"] == 2 && p["status"]["conditions"][0]["status"] == "True"
        })
    })
    .await;

    // The Service is deleted: its announcement goes and the address is free again.
    cluster.applier.delete(&objects[3]).await.unwrap();
    eventually("the withdrawal", || async {
        get(&admin, &announcement_path("demo", "web")).await.is_none().then_some(())
    })
    .await;
    eventually("the pool's count", || async {
        get(&admin, pool_path).await.filter(|p| p["status"]["assignedIPv4"] == 0)
    })
    .await;
    assert!(status.read().unwrap().leader && status.read().unwrap().writes > 4);
    drop(tasks);
    cluster.applier.delete(&objects[1]).await.unwrap();
    for node in ["node-a", "node-b"] {
        cluster.applier.delete(&node_state(node)).await.unwrap();
    }
}

/// The chart's operator role without its Events grant, for ServiceAccount `no-events/tideway-operator`.
pub(super) async fn forbidden(cluster: &mut Cluster) {
    let admin = cluster.admin.clone();
    let role = get(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterroles/tideway-operator").await.unwrap();
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["apiGroups"] != json!(["events.k8s.io"]))
        .cloned()
        .collect();
    assert_eq!(rules.len() + 1, role["rules"].as_array().unwrap().len(), "one Events rule");
    let objects = vec![
        namespace("no-events"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "tideway-operator", "namespace": "no-events"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "tideway-operator-no-events"}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "tideway-operator-no-events"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-operator-no-events"},
            "subjects": [{"kind": "ServiceAccount", "name": "tideway-operator", "namespace": "no-events"}]}),
        pool("shadowed", &["172.18.254.200-172.18.254.210"], true),
        load_balancer("no-events", "web", json!({}), json!({})),
        slice("no-events", "web", "10.10.1.7"),
    ];
    cluster.applier.apply_all(objects.clone()).await.unwrap();
    let kubeconfig = cluster.standalone.token_kubeconfig("no-events", "tideway-operator").await.unwrap();
    let mut tasks = Tasks::default();
    let (_, status) = run_operator(&mut tasks, &kubeconfig, None).await;
    eventually("the Service's address", || ingress(&admin, "no-events", "web")).await;
    let ann_path = announcement_path("no-events", "web");
    eventually("the announcement", || get(&admin, &ann_path)).await;
    let err = eventually("the refusal in the status", || async {
        let s = status.read().unwrap();
        s.last_error.clone().filter(|e| e.contains("403") && s.write_errors >= 1)
    })
    .await;
    assert!(err.contains("forbidden"), "{err}");
    assert!(err.contains("system:serviceaccount:no-events:tideway-operator"), "{err}");
    assert!(events(&admin, "no-events", "IPAllocated").await.is_empty());
    drop(tasks);
    for object in objects[4..].iter().rev() {
        cluster.applier.delete(object).await.unwrap();
    }
}

pub(super) async fn event_series(cluster: &Cluster) {
    use tideway_core::operator::{Action, Event, ObjectRef};
    use tideway_sources::status::ClusterWriter;
    let since = SystemTime::now();
    let c = client(Some(&cluster.operator)).await.unwrap();
    let writer = KubeWriter::new(c, Some("op-0".into()));
    let event = Action::Event(Event {
        object: ObjectRef { kind: "Service", namespace: Some("demo".into()), name: "web".into() },
        warning: true,
        reason: "LoadBalancingUnavailable",
        message: "node-a runs iptables, which has no maglev; it balances at random".into(),
        related: None,
    });
    writer.write(&event).await.expect("the first Event");
    writer.write(&event).await.expect("the repeat");
    let found = events(&cluster.admin, "demo", "LoadBalancingUnavailable").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["series"]["count"], 2, "{:?}", found[0]);
    let sent: Vec<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| r.contains("/events"))
        .map(|r| r.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["create", "patch"]);
}

//! MetalLB's own objects, read with `--metallb-compat`.

use super::*;

/// MetalLB's objects as MetalLB left them, then the operator with `--metallb-compat`.
pub(super) async fn metallb(cluster: &mut Cluster) {
    let admin = cluster.admin.clone();
    let since = SystemTime::now();
    let mut objects = vec![namespace("metallb-system"), namespace("elsewhere"), namespace("shop")];
    for mut object in tideway_tests::metallb::example_objects() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.retain(|k, _| ["name", "namespace", "labels", "annotations"].contains(&k.as_str()));
        }
        objects.push(object);
    }
    let none = json!({});
    objects.extend([
        // Tideway's own pool with the name of a MetalLB pool: it is the one used.
        pool("staging", &["192.168.31.0/24"], false),
        load_balancer(
            "demo",
            "nginx",
            json!({"metallb.universe.tf/loadBalancerIPs": "192.168.10.100"}),
            none.clone(),
        ),
        load_balancer("demo", "kept", none.clone(), none.clone()),
        load_balancer("demo", "auto", none.clone(), none.clone()),
        load_balancer(
            "shop",
            "checkout",
            json!({"metallb.io/address-pool": "expensive"}),
            json!({"app": "checkout"}),
        ),
        slice("demo", "nginx", "10.10.1.5"),
        slice("shop", "checkout", "10.10.1.6"),
    ]);
    cluster.applier.apply_all(objects).await.unwrap();
    // The address MetalLB gave `kept` earlier, in its status.
    let kept = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.168.9.3", "ipMode": "VIP"}]}}});
    merge(&admin, "/api/v1/namespaces/demo/services/kept/status", kept).await;

    let mut tasks = Tasks::default();
    run_operator(&mut tasks, &cluster.operator, Some("metallb-system")).await;
    // Pinned in MetalLB's annotation, assigned by MetalLB earlier, and a pool named: kept.
    for (ns, name, want) in [
        ("demo", "nginx", "192.168.10.100"),
        ("demo", "kept", "192.168.9.3"),
        ("shop", "checkout", "203.0.113.64"),
    ] {
        let got = eventually(&format!("{ns}/{name}'s address"), || ingress(&admin, ns, name)).await;
        assert_eq!(got["ip"], want, "{ns}/{name}");
    }
    // A new Service gets an address of the one auto-assigned IPAddressPool read: not the
    // shadowed `staging`, nor a pool of another namespace.
    let auto = eventually("demo/auto's address", || ingress(&admin, "demo", "auto")).await;
    let ip: std::net::Ipv4Addr = auto["ip"].as_str().unwrap().parse().expect("IPv4");
    assert!(
        ip.octets()[..3] == [192, 168, 10] || ip.octets()[..3] == [192, 168, 9],
        "{ip} is not first-pool's"
    );

    // The advertisements decide who may announce: `example` admits node-a only for first-pool,
    // `gold` (by label, no node selector) every node for `expensive`.
    let eligible = |ns: &'static str, name: &'static str, want: Value| {
        let admin = admin.clone();
        async move {
            let ann = get(&admin, &announcement_path(ns, name)).await?;
            (ann["spec"]["eligibleNodes"] == want).then_some(())
        }
    };
    eventually("nginx announced from node-a", || eligible("demo", "nginx", json!(["node-a"]))).await;
    eventually("checkout from both", || eligible("shop", "checkout", json!(["node-a", "node-b"]))).await;

    // The clash of `staging` is a Warning on both objects, naming both.
    let clash = eventually("the PoolConflict Events", || async {
        let mut found = events(&admin, "metallb-system", "PoolConflict").await;
        found.extend(events(&admin, "default", "PoolConflict").await);
        (found.len() == 2).then_some(found)
    })
    .await;
    let on = |kind: &str| clash.iter().find(|e| e["regarding"]["kind"] == kind).expect(kind).clone();
    let metallb = on("IPAddressPool");
    assert_eq!(metallb["regarding"]["apiVersion"], "metallb.io/v1beta1");
    assert_eq!(metallb["regarding"]["namespace"], "metallb-system");
    assert_eq!(metallb["type"], "Warning");
    assert_eq!(on("LoadBalancerPool")["regarding"]["name"], "staging");
    let note = metallb["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("IPAddressPool metallb-system/staging") && note.contains("LoadBalancerPool staging"),
        "{note}"
    );

    // An advertisement changed live moves who may announce.
    let example = "/apis/metallb.io/v1beta1/namespaces/metallb-system/l2advertisements/example";
    let moved = json!({"spec": {"nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-b"}}]}});
    merge(&admin, example, moved).await;
    eventually("nginx announced from node-b only", || eligible("demo", "nginx", json!(["node-b"]))).await;

    // MetalLB's objects are read in their namespace only, and never written; only the
    // LoadBalancerPool gets a status.
    let requests = audited(cluster, OPERATOR, since);
    let metallbs: Vec<&String> = requests.iter().filter(|r| r.contains("/apis/metallb.io/")).collect();
    assert!(!metallbs.is_empty());
    for r in &metallbs {
        let (verb, uri) = r.split_once(' ').unwrap();
        assert!(["list", "watch"].contains(&verb), "{r}");
        assert!(uri.starts_with("/apis/metallb.io/v1beta1/namespaces/metallb-system/"), "{r}");
    }
    let pool_writes: Vec<&String> =
        requests.iter().filter(|r| r.contains("/loadbalancerpools/") && !r.starts_with("watch ")).collect();
    assert!(pool_writes.iter().all(|r| r.contains("/loadbalancerpools/staging/status")), "{pool_writes:?}");
}

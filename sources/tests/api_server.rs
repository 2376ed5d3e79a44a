//! The test API server enforces what an API server does, seen through `kube::Client`: field
//! ownership per manager with server-side apply (409 conflicts unless forced, fields a
//! manager stops applying removed, no-op applies free), and `resourceVersion` preconditions:
//! the same assertions `lab/tests/server_side_apply.rs` makes of the real API server, so that
//! the tests still on the imitation meet the answers a cluster gives.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tideway_sources::kube::client;
use tideway_tests::fake_api::{Account, FakeApi};

fn configs(c: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("tideway.io", "v1alpha1", "ProxyConfig");
    Api::all_with(c, &ApiResource::from_gvk_with_plural(&gvk, "proxyconfigs"))
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_conflicts_ownership_and_preconditions() {
    let api = FakeApi::start().await;
    let dir = std::env::temp_dir().join(format!("tideway-ssa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcs = configs(client(Some(&api.kubeconfig(&dir, Account::ClusterAdmin))).await.unwrap());
    // The client holds the token now; the file with it goes.
    std::fs::remove_dir_all(&dir).unwrap();
    let obj = |spec: serde_json::Value| json!({"apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig", "metadata": {"name": "default"}, "spec": spec});
    let apply = |m: &str| PatchParams::apply(m);

    let first = pcs
        .patch("default", &apply("ops"), &Patch::Apply(obj(json!({"mode": "nftables", "syncPeriod": "30s"}))))
        .await
        .unwrap();
    assert_eq!(first.metadata.generation, Some(1));
    let rv = first.metadata.resource_version.clone();
    // The same configuration again changes nothing: same resourceVersion.
    let again = pcs
        .patch("default", &apply("ops"), &Patch::Apply(obj(json!({"mode": "nftables", "syncPeriod": "30s"}))))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, rv, "a no-op apply writes nothing");

    // Another manager: the same mode is shared, a different one a conflict unless forced.
    pcs.patch("default", &apply("gitops"), &Patch::Apply(obj(json!({"mode": "nftables"})))).await.unwrap();
    let refused = pcs
        .patch("default", &apply("gitops"), &Patch::Apply(obj(json!({"mode": "iptables"}))))
        .await
        .unwrap_err();
    assert_eq!(code(refused), 409);
    let forced = pcs
        .patch("default", &apply("gitops").force(), &Patch::Apply(obj(json!({"mode": "iptables"}))))
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["mode"], "iptables");
    assert_eq!(forced.metadata.generation, Some(2));
    let managers: Vec<_> =
        forced.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert_eq!(managers, ["gitops", "ops"]);

    // ops stops applying syncPeriod: it goes (nobody else owns it); mode stays with gitops.
    let dropped = pcs.patch("default", &apply("ops"), &Patch::Apply(obj(json!({})))).await.unwrap();
    assert_eq!(dropped.data["spec"], json!({"mode": "iptables"}));

    // A stale resourceVersion is refused by replace, merge patch and apply alike.
    let mut stale = first.clone();
    stale.data["spec"] = json!({"mode": "ipvs"});
    assert_eq!(code(pcs.replace("default", &PostParams::default(), &stale).await.unwrap_err()), 409);
    let merge = json!({"metadata": {"resourceVersion": rv}, "spec": {"mode": "ipvs"}});
    assert_eq!(
        code(pcs.patch("default", &PatchParams::default(), &Patch::Merge(&merge)).await.unwrap_err()),
        409
    );
    let mut with_rv = obj(json!({"mode": "ipvs"}));
    with_rv["metadata"]["resourceVersion"] = json!(rv);
    assert_eq!(
        code(pcs.patch("default", &apply("gitops").force(), &Patch::Apply(with_rv)).await.unwrap_err()),
        409
    );
    // With the current one, replace goes through.
    let mut fresh = pcs.get("default").await.unwrap();
    fresh.data["spec"] = json!({"mode": "ipvs"});
    assert_eq!(
        pcs.replace("default", &PostParams::default(), &fresh).await.unwrap().data["spec"]["mode"],
        "ipvs"
    );
    assert_eq!(
        api.get("ProxyConfig", None, "default").unwrap()["metadata"]["generation"],
        4,
        "each spec change counted"
    );
}

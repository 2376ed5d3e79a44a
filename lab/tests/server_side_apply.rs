//! Server-side apply as the real API server does it (root; needs `make kube`), on a
//! ProxyConfig: field ownership per manager (409 conflicts unless forced, fields a manager
//! stops applying removed, a no-op apply writes nothing), `resourceVersion` preconditions, and
//! a real `kubectl edit`, which takes the field it changes from its owner, so that the owner's
//! next apply without force is a conflict naming `kubectl-edit`. The imitation API server's
//! version of these assertions (`sources/tests/api_server.rs`) is held to the same answers.

use std::path::Path;
use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;

fn configs(c: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("tideway.io", "v1alpha1", "ProxyConfig");
    Api::all_with(c, &ApiResource::from_gvk_with_plural(&gvk, "proxyconfigs"))
}

/// The answer's code and message.
fn refusal(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other}"),
    }
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig", "metadata": {"name": "default"}, "spec": spec})
}

fn managers(o: &DynamicObject) -> Vec<String> {
    let mut m: Vec<String> =
        o.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    m.sort();
    m
}

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_ownership_preconditions_and_kubectl_edit() {
    let standalone = Standalone::start("ssa", |_| {}).await.expect("a control plane (root; make kube)");
    let dir = standalone.dir.clone();
    let cp = &standalone.cp;
    let admin = standalone.admin().await.unwrap();
    let crd_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds/proxyconfigs.tideway.io.yaml");
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(crd_file).unwrap()).unwrap();
    Applier::new(admin.clone(), "tideway-test").apply(&crd).await.unwrap();
    let pcs = configs(admin.clone());
    let apply = |m: &str| PatchParams::apply(m);

    let first = pcs
        .patch("default", &apply("ops"), &Patch::Apply(obj(json!({"mode": "nftables", "syncPeriod": "30s"}))))
        .await;
    let first = first.unwrap();
    assert_eq!(first.metadata.generation, Some(1));
    let rv = first.metadata.resource_version.clone();
    let again = pcs
        .patch("default", &apply("ops"), &Patch::Apply(obj(json!({"mode": "nftables", "syncPeriod": "30s"}))))
        .await;
    assert_eq!(again.unwrap().metadata.resource_version, rv, "a no-op apply writes nothing");

    // Another manager: the same mode is shared, a different one a conflict unless forced.
    pcs.patch("default", &apply("gitops"), &Patch::Apply(obj(json!({"mode": "nftables"})))).await.unwrap();
    let refused =
        pcs.patch("default", &apply("gitops"), &Patch::Apply(obj(json!({"mode": "iptables"})))).await;
    let (code, message) = refusal(refused.unwrap_err());
    assert_eq!(code, 409, "{message}");
    assert!(message.contains(".spec.mode") && message.contains("\"ops\""), "{message}");
    let (force, iptables) = (apply("gitops").force(), Patch::Apply(obj(json!({"mode": "iptables"}))));
    let forced = pcs.patch("default", &force, &iptables).await.unwrap();
    assert_eq!(forced.data["spec"]["mode"], "iptables");
    assert_eq!(forced.metadata.generation, Some(2));
    assert_eq!(managers(&forced), ["gitops", "ops"]);

    // ops stops applying syncPeriod: it goes (nobody else owns it); mode stays with gitops.
    let dropped = pcs.patch("default", &apply("ops"), &Patch::Apply(obj(json!({})))).await.unwrap();
    assert_eq!(dropped.data["spec"], json!({"mode": "iptables"}));

    // A stale resourceVersion is refused by replace, merge patch and apply alike.
    let mut stale = first.clone();
    stale.data["spec"] = json!({"mode": "ipvs"});
    assert_eq!(refusal(pcs.replace("default", &PostParams::default(), &stale).await.unwrap_err()).0, 409);
    let merge = json!({"metadata": {"resourceVersion": rv}, "spec": {"mode": "ipvs"}});
    let merged = pcs.patch("default", &PatchParams::default(), &Patch::Merge(&merge)).await;
    assert_eq!(refusal(merged.unwrap_err()).0, 409);
    let mut with_rv = obj(json!({"mode": "ipvs"}));
    with_rv["metadata"]["resourceVersion"] = json!(rv);
    let applied = pcs.patch("default", &apply("gitops").force(), &Patch::Apply(with_rv)).await;
    assert_eq!(refusal(applied.unwrap_err()).0, 409);
    let mut fresh = pcs.get("default").await.unwrap();
    fresh.data["spec"] = json!({"mode": "ipvs"});
    let replaced = pcs.replace("default", &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(replaced.data["spec"]["mode"], "ipvs");
    assert_eq!(replaced.metadata.generation, Some(4), "each spec change counted");

    // kubectl edit (the editor a script): an update, which takes spec.mode from gitops.
    let kubeconfig = dir.join("admin.conf");
    cp.write_host_kubeconfig(&kubeconfig).unwrap();
    let out = Command::new(kubectl())
        .args(["edit", "proxyconfig", "default", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("KUBE_EDITOR", "sed -i s/mode:\\ ipvs/mode:\\ nftables/")
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let edited = pcs.get("default").await.unwrap();
    assert_eq!(edited.data["spec"]["mode"], "nftables");
    assert!(managers(&edited).contains(&"kubectl-edit".to_string()), "{:?}", managers(&edited));
    // The owner it took the field from applies again without force: a conflict naming it.
    let back = pcs.patch("default", &apply("gitops"), &Patch::Apply(obj(json!({"mode": "ipvs"})))).await;
    let (code, message) = refusal(back.unwrap_err());
    assert_eq!(code, 409, "{message}");
    assert!(message.contains("kubectl-edit") && message.contains(".spec.mode"), "{message}");
}

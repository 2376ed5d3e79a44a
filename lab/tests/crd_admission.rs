//! CRD admission on the real API server (root; needs `make kube`): the chart's CRDs are
//! accepted (the server computes their CEL rules' cost and refuses a CRD over its budget), and
//! then, object by object, what `api/tests/refused.yaml` says of each bad value holds there:
//! `schema` and `cel` entries are refused by the server with a message naming the field;
//! `conversion` entries are stored by the server, and what the server gives back is refused by
//! the components' conversion, naming the field. `accepted.yaml` and the examples' objects are
//! accepted by both. `api/tests/refused.rs` checks the same list against the conversion and a
//! CEL interpreter without a server.
//!
//! And the operator's `--manage-crds` there: an older release's CRD (installed from a chart's
//! `crds/`, which Helm never upgrades) is brought to this release, so the agent's write of a
//! status field the older schema refused is kept; a missing CRD is made; a newer release's CRD
//! is left alone.

use std::path::{Path, PathBuf};

use kube::Error;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tideway_api::crd::{CHECKED_KINDS, check};
use tideway_lab::kube::apply::{Applier, ApplyError};
use tideway_lab::kube::standalone::Standalone;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    text.split("\n---")
        .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .map(|d| serde_saphyr::from_str::<Value>(d.trim_start_matches("---")).unwrap())
        .filter(Value::is_object)
        .collect()
}

fn annotation(object: &Value, key: &str) -> String {
    object["metadata"]["annotations"][key].as_str().unwrap_or_default().to_string()
}

fn name(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

/// The server's refusal of `object`, if it refused it: (HTTP code, message).
async fn admitted(applier: &mut Applier, object: &Value) -> Result<(), (u16, String)> {
    match applier.apply(object).await {
        Ok(()) => Ok(()),
        Err(ApplyError::Refused { error, .. }) => match *error {
            Error::Api(s) => Err((s.code, s.message)),
            other => panic!("{}: {other}", name(object)),
        },
        Err(other) => panic!("{}: {other}", name(object)),
    }
}

/// What the server stored of `object`, as JSON.
async fn stored(client: &kube::Client, object: &Value) -> Value {
    let (group, version) = object["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    let kind = object["kind"].as_str().unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(client.clone(), "default", &resource),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    serde_json::to_value(api.get(&name(object)).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_admits_as_the_crds_say() {
    let standalone = Standalone::start("adm", |_| {}).await.expect("a control plane (root; make kube)");
    let admin = standalone.admin().await.unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-admission-test");

    // The chart's CRDs: accepted (structural, CEL within the cost budget) and Established.
    let crds = standalone
        .apply_crds(&repo("helm/tideway/crds"))
        .await
        .unwrap_or_else(|e| panic!("the server refused a CRD: {e}"));
    assert!(crds >= 8, "{crds} CRDs");

    let mut wrong = Vec::new();
    let (mut by_schema, mut by_cel, mut by_conversion) = (0, 0, 0);
    for object in documents("api/tests/refused.yaml") {
        let (field, by) =
            (annotation(&object, "test.tideway.io/field"), annotation(&object, "test.tideway.io/refused-by"));
        let answer = admitted(&mut applier, &object).await;
        match (by.as_str(), answer) {
            ("schema" | "cel", Err((422, message))) if message.contains(&field) => {
                if by == "schema" {
                    by_schema += 1
                } else {
                    by_cel += 1
                }
            }
            ("schema" | "cel", answer) => wrong.push(format!(
                "{} ({by}): the server answered {answer:?}, naming not {field}",
                name(&object)
            )),
            ("conversion", Ok(())) => {
                let back = stored(&admin, &object).await;
                match check(&back) {
                    Err(e) if e.field.starts_with(&field) => by_conversion += 1,
                    other => {
                        wrong.push(format!("{}: stored, then the conversion said {other:?}", name(&object)))
                    }
                }
            }
            (_, answer) => wrong.push(format!("{} ({by}): the server answered {answer:?}", name(&object))),
        }
    }
    eprintln!(
        "refused by the server's schema: {by_schema}, by its CEL rules: {by_cel}; stored and refused by the conversion: {by_conversion}"
    );
    assert!(wrong.is_empty(), "{} of refused.yaml:\n{}", wrong.len(), wrong.join("\n"));
    assert!(by_schema >= 10 && by_cel >= 10 && by_conversion >= 1, "{by_schema} {by_cel} {by_conversion}");

    let mut accepted = 0;
    for path in ["api/tests/accepted.yaml", "examples/cluster.yaml", "examples/demo.yaml"] {
        for object in documents(path).into_iter().filter(|d| CHECKED_KINDS.iter().any(|k| d["kind"] == *k)) {
            if let Err(answer) = admitted(&mut applier, &object).await {
                panic!("{path}: {}: the server refused it: {answer:?}", name(&object));
            }
            let back = stored(&admin, &object).await;
            assert!(check(&back).is_ok(), "{path}: {}: {:?}", name(&object), check(&back));
            accepted += 1;
        }
    }
    assert!(accepted >= 12, "{accepted} accepted");
    eprintln!("accepted by the server and the conversion: {accepted}");
}

/// This release's CRD `name`, as JSON.
fn current_crd(name: &str) -> Value {
    let crd = tideway_api::crd::all().into_iter().find(|c| c.metadata.name.as_deref() == Some(name)).unwrap();
    serde_json::to_value(crd).unwrap()
}

/// NodeProxyState `node` written as the agent writes it, with `status.cleanedUp`: what the
/// server kept of that field, or how it refused the write.
async fn write_cleaned_up(admin: &kube::Client, node: &str) -> Result<Option<String>, String> {
    use kube::api::{Patch, PatchParams};
    let api: Api<tideway_api::crd::NodeProxyState> = Api::all(admin.clone());
    let object = |status: Value| {
        serde_json::json!({"apiVersion": "tideway.io/v1alpha1", "kind": "NodeProxyState",
            "metadata": {"name": node}, "spec": {"nodeName": node}, "status": status})
    };
    let params = PatchParams::apply("tideway-agent").force();
    api.patch(node, &params, &Patch::Apply(&object(serde_json::json!({})))).await.unwrap();
    let status = object(serde_json::json!({"cleanedUp": "7"}));
    match api.patch_status(node, &params, &Patch::Apply(&status)).await {
        Ok(written) => Ok(written.status.and_then(|s| s.cleaned_up)),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_brings_older_crds_to_its_release_and_leaves_newer_ones() {
    use tideway_api::crd::CRDS_VERSION_ANNOTATION;
    use tideway_sources::kube::crds::{Outcome, apply_all};
    let standalone = Standalone::start("crdup", |_| {}).await.expect("a control plane (root; make kube)");
    let admin = standalone.admin().await.unwrap();
    let mut installer = Applier::new(admin.clone(), "helm");
    // An older release's NodeProxyState, without the field this one added.
    let mut old = current_crd("nodeproxystates.tideway.io");
    old["metadata"]["annotations"][CRDS_VERSION_ANNOTATION] = "0.0.1".into();
    let status =
        &mut old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert!(status.as_object_mut().unwrap().remove("cleanedUp").is_some(), "this release has the field");
    // A newer release's BFDProfile.
    let mut newer = current_crd("bfdprofiles.tideway.io");
    newer["metadata"]["annotations"][CRDS_VERSION_ANNOTATION] = "99.0.0".into();
    for crd in [&old, &newer] {
        installer.apply(crd).await.unwrap();
    }
    let refused = write_cleaned_up(&admin, "node-a").await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains(".status.cleanedUp: field not declared in schema")),
        "the older schema refuses the new field: {refused:?}"
    );

    let outcomes = apply_all(&admin).await.unwrap();
    let of = |name: &str| outcomes.iter().find(|(n, _)| n == name).map(|(_, o)| o.clone());
    assert_eq!(of("nodeproxystates.tideway.io"), Some(Outcome::Applied), "{outcomes:?}");
    assert_eq!(of("proxyconfigs.tideway.io"), Some(Outcome::Applied), "made: {outcomes:?}");
    assert_eq!(of("bfdprofiles.tideway.io"), Some(Outcome::Newer("99.0.0".into())), "{outcomes:?}");
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(admin.clone());
    let bfd = crds.get("bfdprofiles.tideway.io").await.unwrap();
    assert_eq!(bfd.metadata.annotations.unwrap()[CRDS_VERSION_ANNOTATION], "99.0.0", "never downgraded");
    // The server takes a moment to serve the new schema.
    let mut kept = write_cleaned_up(&admin, "node-a").await;
    for _ in 0..50 {
        if kept.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        kept = write_cleaned_up(&admin, "node-a").await;
    }
    assert_eq!(kept, Ok(Some("7".into())), "the upgraded schema keeps the agent's new field");
}

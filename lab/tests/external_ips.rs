//! `examples/restrict-external-ips.yaml` (the ValidatingAdmissionPolicy against CVE-2020-8554)
//! admitted by the real API server and enforced by it (root; needs `make kube`): externalIPs
//! are refused in a namespace not labelled for them and outside the listed addresses, taken
//! where both hold, and a Service that had them before keeps them through an update that
//! leaves them as they were.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;

fn service(name: &str, external_ips: &[&str]) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "externalIPs": external_ips}}))
    .unwrap()
}

/// Creates `svc` in `ns`: Ok, or the server's refusal (code, message).
async fn create(client: &kube::Client, ns: &str, svc: &Service) -> Result<(), (u16, String)> {
    match Api::<Service>::namespaced(client.clone(), ns).create(&PostParams::default(), svc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_enforces_the_external_ips_policy_example() {
    let standalone = Standalone::start("eip", |_| {}).await.expect("a control plane (root; make kube)");
    let admin = standalone.admin().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for (name, labels) in [("plain", json!({})), ("allowed", json!({"tideway.io/external-ips": "allowed"}))] {
        let ns = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
    }
    // A Service that had externalIPs before the policy.
    create(&admin, "plain", &service("before", &["198.51.100.1"])).await.unwrap();

    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/restrict-external-ips.yaml");
    let text = std::fs::read_to_string(example).unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-test");
    for doc in text.split("\n---").filter(|d| d.contains("kind:")) {
        let object: Value = serde_saphyr::from_str(doc.trim_start_matches("---")).unwrap();
        applier.apply(&object).await.unwrap_or_else(|e| panic!("the server refused the example: {e}"));
    }

    // The policy takes effect a moment after it is stored: until then a probe goes through.
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        match create(&admin, "plain", &service("probe", &["192.0.2.10"])).await {
            Err(refusal) => break refusal,
            Ok(()) => {
                Api::<Service>::namespaced(admin.clone(), "plain")
                    .delete("probe", &Default::default())
                    .await
                    .unwrap();
                assert!(Instant::now() < deadline, "the policy never took effect");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert!(
        refused.1.contains("spec.externalIPs: 192.0.2.10 refused") && refused.1.contains("CVE-2020-8554"),
        "{refused:?}"
    );
    // A labelled namespace: the listed addresses only.
    create(&admin, "allowed", &service("listed", &["192.0.2.10"])).await.expect("a listed address, labelled");
    let unlisted = create(&admin, "allowed", &service("unlisted", &["203.0.113.5"])).await;
    assert!(unlisted.as_ref().is_err_and(|(_, m)| m.contains("203.0.113.5 refused")), "{unlisted:?}");
    // No externalIPs: nothing to say.
    create(&admin, "plain", &service("none", &[])).await.expect("no externalIPs");
    // The Service that had them: an update leaving them as they were passes; changing them not.
    let services: Api<Service> = Api::namespaced(admin.clone(), "plain");
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}}));
    services.patch("before", &PatchParams::default(), &relabel).await.expect("an update keeping them");
    let moved = Patch::Merge(json!({"spec": {"externalIPs": ["198.51.100.2"]}}));
    let changed = services.patch("before", &PatchParams::default(), &moved).await;
    assert!(changed.is_err(), "changing them is refused: {changed:?}");
}

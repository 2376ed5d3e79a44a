//! A kind defined in this test and nowhere else — its Kubernetes type (a CRD the test installs),
//! its model kept by type in the cluster state (`tideway_core::extra_kind!`), its conversion
//! and its watch's landing (`tideway_sources::watched_kind!`) — and one registry line
//! (`tideway_sources::kube::register`). With nothing else added, the operator's, an agent's and
//! the DNS server's sources watch it on the real API server (root; needs `make kube`) and the
//! file source reads it from a manifest, into the cluster state and into the DNS server's own
//! view; each keeps an invalid new version's last valid one, as for every kind, and drops an
//! object that is gone.

use std::io::Write;
use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_api::{ConvertError, ToModel};
use tideway_core::cluster::{ClusterState, StateKind};
use tideway_dns::view::ClusterView;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;
use tideway_sources::kube::{KubeSource, Role};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::{FileSource, SharedCluster, Store};
use tideway_tests::until;

/// The test's kind as the API serves it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "test.tideway.io", version = "v1", kind = "Widget", namespaced)]
pub struct WidgetSpec {
    size: u32,
}

/// The test's kind in the model.
#[derive(Debug, Clone, PartialEq)]
pub struct WidgetModel {
    namespace: String,
    name: String,
    size: u32,
}

tideway_core::extra_kind!(WidgetModel, "Widget", namespace: namespace, name: name);
tideway_sources::watched_kind!(Widget;);

impl ToModel for Widget {
    type Model = WidgetModel;

    /// A widget of size 0 is refused.
    fn convert(&self) -> Result<Option<WidgetModel>, ConvertError> {
        let namespace = self.metadata.namespace.clone().unwrap_or_default();
        let name = self.metadata.name.clone().unwrap_or_default();
        if self.spec.size == 0 {
            let object = format!("{namespace}/{name}");
            let (field, message) = ("spec.size".into(), "must be at least 1".into());
            return Err(ConvertError { kind: "Widget", object, field, message });
        }
        Ok(Some(WidgetModel { namespace, name, size: self.spec.size }))
    }
}

/// A store the test reads widgets from: the cluster state, or the DNS server's view.
trait Widgets: Store {
    fn state(&self) -> &ClusterState;
    /// Takes the changes: true when they name the widgets.
    fn widgets_changed(&mut self) -> bool;
}

impl Widgets for ClusterState {
    fn state(&self) -> &ClusterState {
        self
    }
    fn widgets_changed(&mut self) -> bool {
        self.take_changes().extra.contains("Widget")
    }
}

impl Widgets for ClusterView {
    fn state(&self) -> &ClusterState {
        self.registered()
    }
    /// The view's changes count objects its records read; a widget's change wakes its
    /// consumer and is taken with them.
    fn widgets_changed(&mut self) -> bool {
        let woken = self.has_changes();
        woken && self.take_changes().objects == 0 && !self.has_changes()
    }
}

/// The widgets `cluster` holds, by name, with their sizes.
fn held<S: Widgets>(cluster: &SharedCluster<S>) -> Vec<(String, u32)> {
    let store = cluster.lock();
    WidgetModel::held(store.state()).map(|w| (w.name.clone(), w.size)).collect()
}

fn sizes(list: &[(&str, u32)]) -> Vec<(String, u32)> {
    list.iter().map(|(name, size)| (name.to_string(), *size)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_defined_in_a_test_is_watched_and_read_from_files() {
    // The one registry line.
    tideway_sources::kube::register::<Widget>();
    read_from_files::<ClusterState>();
    read_from_files::<ClusterView>();
    watched_on_the_real_api_server().await;
}

fn widget_yaml(name: &str, size: u32) -> String {
    format!(
        "apiVersion: test.tideway.io/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: default}}\nspec: {{size: {size}}}\n"
    )
}

fn read_from_files<S: Widgets>() {
    let name = std::any::type_name::<S>().rsplit("::").next().unwrap_or("store");
    let dir = std::env::temp_dir().join(format!("tideway-extra-kind-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    let write = |docs: &[String]| {
        let mut f = std::fs::File::create(&path).expect("file");
        f.write_all(docs.join("---\n").as_bytes()).expect("write");
    };
    let (source, cluster) = (FileSource::new(&path, Duration::from_secs(1)), SharedCluster::<S>::default());

    write(&[widget_yaml("a", 1), widget_yaml("b", 2)]);
    let errors = source.load_once(&cluster).expect("the file loads");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(held(&cluster), sizes(&[("a", 1), ("b", 2)]));
    assert!(cluster.lock().widgets_changed(), "the consumer is woken for the widgets");

    // b's new version is invalid: its last valid one stays, named among the errors.
    write(&[widget_yaml("a", 3), widget_yaml("b", 0)]);
    let errors = source.load_once(&cluster).expect("the file loads");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].to_string().contains("spec.size: must be at least 1"), "{}", errors[0]);
    assert_eq!(held(&cluster), sizes(&[("a", 3), ("b", 2)]));

    // Gone from the file, gone from the state.
    write(&[widget_yaml("b", 4)]);
    source.load_once(&cluster).expect("the file loads");
    assert_eq!(held(&cluster), sizes(&[("b", 4)]));
    let _ = std::fs::remove_dir_all(&dir);
}

fn widget(name: &str, size: u32) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size });
    w.metadata.namespace = Some("default".into());
    w
}

async fn watched_on_the_real_api_server() {
    let standalone = Standalone::start("xk", |_| {}).await.expect("a control plane (root; make kube)");
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway");
    standalone.apply_crds(&chart.join("crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let crd = serde_json::to_value(Widget::crd()).unwrap();
    Applier::new(admin.clone(), "tideway-test").apply(&crd).await.expect("the Widget CRD");
    let widgets: Api<Widget> = Api::namespaced(admin.clone(), "default");
    // The CRD is served once it is established: a's creation is tried until it is.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while let Err(e) = widgets.create(&PostParams::default(), &widget("a", 1)).await {
        assert!(std::time::Instant::now() < deadline, "the Widget CRD is not served: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    widgets.create(&PostParams::default(), &widget("b", 2)).await.expect("b");

    // The operator's source and an agent's, each into its own cluster state; the DNS
    // server's into its own view.
    let agent = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let mut views = Vec::new();
    for role in [Role::Operator, agent] {
        let view = SharedCluster::new();
        let source = KubeSource::new(admin.clone(), role.clone(), SourceMetrics::default());
        let task = tokio::spawn(source.run(view.clone()));
        synced(&view, &role).await;
        views.push((view, task));
    }
    let dns_role = Role::Dns { pods: false, node_states: false };
    let dns = SharedCluster::<ClusterView>::default();
    let source = KubeSource::new(admin.clone(), dns_role.clone(), SourceMetrics::default());
    let dns_task = tokio::spawn(source.run_dns(dns.clone()));
    synced(&dns, &dns_role).await;
    for (view, _) in &views {
        assert_eq!(held(view), sizes(&[("a", 1), ("b", 2)]));
    }
    assert_eq!(held(&dns), sizes(&[("a", 1), ("b", 2)]));

    // b's new version is refused by the conversion (the API server's schema takes it): the
    // last valid one stays, and b is named invalid.
    let zero = serde_json::json!({"spec": {"size": 0}});
    widgets.patch("b", &PatchParams::default(), &Patch::Merge(&zero)).await.expect("b patched");
    for (view, _) in &views {
        invalid_kept(view).await;
    }
    invalid_kept(&dns).await;

    let three = serde_json::json!({"spec": {"size": 3}});
    widgets.patch("a", &PatchParams::default(), &Patch::Merge(&three)).await.expect("a patched");
    widgets.delete("b", &DeleteParams::default()).await.expect("b deleted");
    for (view, task) in views {
        until("a changed and b gone", || held(&view) == sizes(&[("a", 3)])).await;
        task.abort();
    }
    until("a changed and b gone from the DNS view", || held(&dns) == sizes(&[("a", 3)])).await;
    dns_task.abort();
}

async fn synced<S: Widgets>(view: &SharedCluster<S>, role: &Role) {
    tokio::time::timeout(Duration::from_secs(15), view.wait_synced())
        .await
        .unwrap_or_else(|_| panic!("{role:?} synced, Widgets listed too"));
}

/// b, refused, is named invalid and keeps its last valid version.
async fn invalid_kept<S: Widgets>(view: &SharedCluster<S>) {
    until("b named invalid", || view.invalid_objects().keys().any(|k| k.kind == "Widget" && k.name == "b"))
        .await;
    assert_eq!(held(view), sizes(&[("a", 1), ("b", 2)]));
}

//! [`KubeSide`]: what a kube lab (`lab up --kube`) holds beside the network, once its control
//! plane runs.

use serde_json::Value;

use crate::kube::ControlPlane;
use crate::kube::view::KubeView;

/// The kube lab's state beside the network.
pub(super) struct KubeSide {
    pub(super) control_plane: ControlPlane,
    pub(super) client: kube::Client,
    pub(super) view: KubeView,
    pub(super) chart_applied: bool,
    /// The file's tideway.io objects whose CRDs are not served yet (`--no-components`, before
    /// `helm install`), and when they are tried again.
    pub(super) held: Vec<Value>,
    pub(super) held_retry_at: std::time::Instant,
}

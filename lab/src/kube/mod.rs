//! The kube lab (`tideway lab up --kube`): the same network, with a real Kubernetes control
//! plane in place of the lab's own.
//!
//! ```text
//!  lab file ──objects::api_objects──> Applier (server-side apply, manager tideway-lab) ─┐
//!  chart ──helm template──> Applier (manager tideway-lab-chart) ─────────────────────────┤
//!                                                                                         v
//!      kube-apiserver + etcd + kube-controller-manager + kube-scheduler (the control-plane
//!      node's namespace)  <── one lab kubelet per node (its node's namespace and credentials)
//!                                                                                         │
//!  KubeView (reflectors) ──> lab status                                                   │
//!  the kubelets run the Pods: the file's whoami pods, and Tideway's own from the chart <──┘
//! ```

pub mod apply;
pub mod chart;
pub mod objects;
pub mod view;

/// The field manager of the lab file's objects (`lab apply` is its server-side apply).
pub const MANAGER: &str = "tideway-lab";

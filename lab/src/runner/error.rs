//! Why the lab could not do what it was asked, and why the kube lab's control plane, objects or
//! chart could not.

use crate::control::ControlError;
use crate::kube::KubeError;
use crate::kube::apply::ApplyError;
use crate::kube::chart::ChartError;
use crate::netns::NetError;

/// Why the lab could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The lab file is wrong.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// The control plane refused it.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The network could not be built.
    #[error(transparent)]
    Net(#[from] NetError),
    /// A file or a process.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The kube lab's control plane or objects.
    #[error(transparent)]
    Kube(#[from] KubeLabError),
    /// FRR could not be set up.
    #[error(transparent)]
    Frr(#[from] crate::frr::FrrError),
    /// A fault named a node the lab does not have.
    #[error("the lab has no node {0:?}")]
    NoSuchNode(String),
    /// `lab kill agent` found no agent container on the node (a kube lab).
    #[error("no agent container runs on {0} (is Tideway installed, and its Pod there started?)")]
    NoAgent(String),
    /// `lab kill speaker` found no such container on the node (a kube lab).
    #[error(
        "no {container} container runs on {node} (does the lab run MetalLB, `--peers metallb`, with its speaker there?)"
    )]
    NoContainer {
        /// The node.
        node: String,
        /// The container.
        container: String,
    },
    /// `lab kill speaker` in a file-fed lab.
    #[error("MetalLB's speaker runs only in a kube lab (`lab up --kube --peers metallb`)")]
    NoSpeaker,
    /// `lab start agent` in a kube lab, where the kubelet restarts what was killed.
    #[error(
        "in a kube lab the node's kubelet restarts a killed agent itself (at once, then with its back-off): `lab start agent` is the file-fed lab's"
    )]
    KubeletRestarts,
}

/// Why the kube lab could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum KubeLabError {
    /// The control plane.
    #[error(transparent)]
    ControlPlane(#[from] KubeError),
    /// An object.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The chart.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// The peers (`--peers`) cannot run as asked.
    #[error("--peers: {0}")]
    Peers(String),
}

//! [`Lab`]: a running lab's state, which the files beside this one act on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use tideway_sources::lab::LabDir;

use super::kube_side::KubeSide;
use crate::control::{Allocations, Health, Plan, ResourceVersions, World, Writes};
use crate::faults::Faults;
use crate::procs::Procs;
use crate::spec::LabSpec;
use crate::topology::Names;

/// A running lab.
pub struct Lab {
    /// Namespace names.
    pub names: Names,
    /// Address plan.
    pub plan: Plan,
    /// Exchange directory.
    pub dir: LabDir,
    pub(super) bin: PathBuf,
    pub(super) mode: Option<String>,
    pub(super) spec: LabSpec,
    pub(super) alloc: Allocations,
    /// The cluster as built.
    pub world: World,
    pub(super) health: Health,
    pub(super) procs: Procs,
    pub(super) writes: Writes,
    pub(super) seen_writes: BTreeMap<String, (SystemTime, u64)>,
    pub(super) published: String,
    /// The objects' `resourceVersion`s.
    pub(super) versions: ResourceVersions,
    pub(super) departure: Option<Departure>,
    pub(super) faults: Faults,
    /// The components' APIs on the host: label -> address.
    pub apis: BTreeMap<String, SocketAddr>,
    /// Each router's FRR configuration as last applied.
    pub(super) routers_applied: BTreeMap<String, String>,
    /// When to try a router's configuration again after a failure.
    pub(super) routers_retry_at: Option<Instant>,
    /// A kube lab (`lab up --kube`): a real control plane in place of the lab's own.
    pub(super) kube_mode: bool,
    /// The kube lab's control plane and view, once started.
    pub(super) kube: Option<KubeSide>,
    /// How often the kubelets rewrite projected tokens (tests; none: at 80 % of their life).
    pub(super) token_rotation: Option<Duration>,
    /// A kube lab without Tideway (`--no-components`): the chart is left to `helm install`.
    pub(super) no_components: bool,
    /// The peers run as Pods from their own images (`--peers`).
    pub(super) peers: Vec<crate::kube::peers::Peer>,
}

/// What an apply removed, and when it goes.
pub(super) struct Departure {
    pub(super) old: World,
    pub(super) due: Instant,
}

//! A stand-in for the Kubernetes API server, for tests and benchmarks of the Kubernetes edge.
//!
//! The real API server runs in the test bed (the lab's control plane, built from Kubernetes'
//! own modules: `make kube`), and every Kubernetes-facing test that it can serve runs there:
//! * CRD admission with the real schema and CEL (`lab/tests/crd_admission.rs`);
//! * watches, streamed first views, 410 Gone after a real compaction, a server without
//!   WatchList (`lab/tests/watches.rs`, with [`crate::fault_proxy`] for cut and hung connections);
//! * the Kubernetes source's selectors, streamed views, ServiceCIDRs, synced signal, BGP kinds
//!   of both groups (MetalLB's own CRDs), the NodeProxyState's server-side apply, RBAC denials
//!   and the reviews' cost (`lab/tests/source_api.rs`);
//! * TokenReviews and SubjectAccessReviews by audience and RBAC (`lab/tests/reviews.rs`);
//!   server-side apply's conflicts and a real `kubectl edit` (`lab/tests/server_side_apply.rs`);
//! * a killed API server, a stopped etcd (504s), an RBAC denial (`lab/tests/api_faults.rs`);
//!   fenced leadership over real Leases (`lab/tests/fencing.rs`); 429s from API Priority and
//!   Fairness (`lab/tests/throttled.rs`);
//! * the operator's writes, Events, election, reviewed REST changes, failover and MetalLB's
//!   objects (`lab/tests/operator_api/`);
//! * `tideway dns` and `tideway agent` with `--source kubernetes` (`cli/tests/kubernetes_api.rs`),
//!   the operator and two agents failing over as processes (`cli/tests/failover.rs`),
//!   `tideway migrate --from-cluster` (`cli/tests/migrate_cluster.rs`), and the lab in kube
//!   mode (`cli/tests/lab_kube.rs`).
//!
//! The components run there as the chart's ServiceAccounts, and the server's audit log
//! ([`crate::audit`]) is `make check-rbac`'s evidence. What still runs here, and why:
//! * what a real server does not do on cue: an object changed or removed with no watch event
//!   (`remove_silently`, the relist's diff) and a 410 at once, watches that time out every
//!   200 ms, a server that cannot stream lists answering 410 after a list, an invalid object
//!   (`sources/tests/kube_source.rs`, with the operator's reading of MetalLB's
//!   `ServiceL2Status`es on a server that serves them, and on one that serves them only once
//!   their CRD comes, [`FakeApi::unserve`] then [`FakeApi::serve`]); a 409 answered to one
//!   status write (`operator/tests/kube.rs`); a 410 answered to the agent's watch and an invalid Service
//!   (`cli/tests/kubernetes.rs`); an outage answering 503 to every request and closing
//!   watches at once, and a silent server (`sources/tests/api_reach.rs`: the real one, etcd
//!   stopped, keeps watches open and lists from its cache);
//! * `sources/tests/api_server.rs`, which holds this server to the real one's answers
//!   (`lab/tests/server_side_apply.rs`'s assertions) for as long as tests run here;
//! * the benchmarks that count requests (`node-agent/benches/report.rs`,
//!   `cli/benches/agent/process.rs`): the real server beside them on two cores would measure
//!   itself.
//!
//! Its requests authorized by the chart's roles are recorded for `make check-rbac` too.
//!
//! It speaks just enough of the REST protocol for
//! kube-rs: paginated lists with label and field selectors, watches as streams of JSON lines
//! ([`watch`]: a bounded history with `410 Gone` past it, timeouts with bookmarks, connections
//! cut on demand, streamed lists), GET, server-side-apply and merge PATCH of objects and their
//! status, TokenReviews and SubjectAccessReviews of tokens and grants the test sets. Every
//! request is authenticated (a kubeconfig names an [`Account`]; any other token is a 401) and
//! authorized by the chart's own RBAC ([`rbac`]): what the chart does not grant a component's
//! ServiceAccount is a `403 Forbidden`, as in a cluster. It records every request for
//! assertions.
//!
//! Objects are plain JSON; the test adds, changes and deletes them, and open watches see it.

mod apply;
mod background;
mod handlers;
pub mod rbac;
mod recorded;
mod resources;
mod reviews;
mod selectors;
mod server;
mod state;
mod status;
mod watch;
mod writes;

pub use background::BackgroundApi;
pub use rbac::Account;
pub use recorded::Recorded;
pub use resources::{RESOURCES, path_of};
pub use server::{FakeApi, HISTORY};
pub use state::TEST_MANAGER;

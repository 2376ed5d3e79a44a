//! Which source feeds a component, wired once. The agent, the operator and the DNS server
//! differ only in what they watch and where they write: [`connect`] starts a file or lab
//! source, or makes the API client and the REST API's token checks; the component then starts
//! the watches of its role on the client, and picks its writer from the [`Connected`] source.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tideway_serve::auth::Authorizer;

use crate::file::FileSource;
use crate::kube::{CachedReview, ClientError, KubeReview};
use crate::lab::LabDir;
use crate::shared::{SharedCluster, Store};
use crate::spec::SourceSpec;

/// How a component reads its source.
#[derive(Debug, Clone, Default)]
pub struct Connect<'a> {
    /// `--kubeconfig`.
    pub kubeconfig: Option<&'a Path>,
    /// How often a source file is checked for changes.
    pub file_poll: Duration,
    /// `--api-audience`: the audiences the REST API accepts tokens for (any, when empty).
    pub audiences: Vec<String>,
    /// The client gives up on an API server that does not answer, and the component says what
    /// to check meanwhile ([`crate::kube::unanswered`]): the agent's, which may run where the
    /// API server is reached only through the rules it has not programmed yet.
    pub fail_fast: bool,
    /// The lab node the component runs on (its lab source then reaches the API as that node).
    pub lab_node: Option<&'a str>,
}

/// A source, connected.
pub enum Connected {
    /// A file, its source started (nothing is written back).
    File,
    /// A lab's exchange directory, its source started; writes go back into it.
    Lab(LabDir),
    /// The API server: the component starts the watches of its role on `client`; `review`
    /// checks the REST API's tokens (TokenReview and SubjectAccessReview, cached).
    Kubernetes {
        /// The API client.
        client: kube::Client,
        /// The token checks.
        review: Arc<dyn Authorizer>,
    },
}

impl Connected {
    /// The REST API's token checks, when the source is the API server.
    pub fn review(&self) -> Option<Arc<dyn Authorizer>> {
        match self {
            Connected::Kubernetes { review, .. } => Some(review.clone()),
            _ => None,
        }
    }
}

/// Connects `spec` for a component whose objects land in `cluster`: a file or lab source is
/// started at once; for the API server, the client and the token checks are made.
pub async fn connect<S: Store>(
    spec: SourceSpec,
    how: Connect<'_>,
    cluster: &SharedCluster<S>,
) -> Result<Connected, ClientError> {
    match spec {
        SourceSpec::File(path) => {
            tokio::spawn(FileSource::new(path, how.file_poll).run(cluster.clone()));
            Ok(Connected::File)
        }
        SourceSpec::Lab(dir) => {
            let dir = match how.lab_node {
                Some(node) => LabDir::new(dir).on_node(node),
                None => LabDir::new(dir),
            };
            tokio::spawn(dir.source().run(cluster.clone()));
            Ok(Connected::Lab(dir))
        }
        SourceSpec::Kubernetes => {
            let client = match how.fail_fast {
                true => {
                    let client = crate::kube::failing_fast_client(how.kubeconfig).await?;
                    let url = crate::kube::server_url(how.kubeconfig).await?;
                    let in_cluster = how.kubeconfig.is_none() && SourceSpec::in_pod();
                    cluster.describe_unanswered(crate::kube::unanswered(&url, in_cluster));
                    client
                }
                false => crate::kube::client(how.kubeconfig).await?,
            };
            let review = KubeReview::new(client.clone()).with_audiences(how.audiences);
            Ok(Connected::Kubernetes { client, review: Arc::new(CachedReview::new(review)) })
        }
    }
}

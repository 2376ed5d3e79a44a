//! The operator keeps the cluster's CRDs at its own release (`tideway operator --manage-crds`): Helm installs a chart's `crds/`
//! once and never upgrades them (helm#6581), so an upgraded chart would run new components
//! against old schemas (the API server then prunes or refuses their new fields). At start,
//! before it campaigns, every replica server-side applies the CRDs it was built with
//! ([`tideway_api::crd::all`]) as field manager `tideway-operator`, except over CRDs a newer
//! release wrote ([`tideway_api::crd::replaces_crds_of`]). It costs `get`, `create` and `patch`
//! on the eight `tideway.io` CRDs, by name. A refusal is logged and the operator runs on: the
//! CRDs are then the installer's to upgrade.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use tideway_api::crd::{CRDS_VERSION_ANNOTATION, replaces_crds_of};

/// The field manager of the operator's CRD writes.
pub const MANAGER: &str = "tideway-operator";

/// What happened to one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (created, or brought to this release).
    Applied,
    /// Left alone: a newer release wrote it (the version it carries).
    Newer(String),
}

/// Why a CRD could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("CustomResourceDefinition {name}: {source}")]
pub struct CrdError {
    /// The CRD.
    pub name: String,
    /// The API server's answer.
    #[source]
    pub source: kube::Error,
}

/// Applies every CRD of this release not newer in the cluster; each one's outcome, by name.
pub async fn apply_all(client: &kube::Client) -> Result<Vec<(String, Outcome)>, CrdError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for crd in tideway_api::crd::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let failed = |source| CrdError { name: name.clone(), source };
        let existing = api.get_opt(&name).await.map_err(failed)?;
        let version = existing
            .as_ref()
            .and_then(|c| c.metadata.annotations.as_ref()?.get(CRDS_VERSION_ANNOTATION).cloned());
        if !replaces_crds_of(version.as_deref()) {
            out.push((name, Outcome::Newer(version.unwrap_or_default())));
            continue;
        }
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd)).await.map_err(failed)?;
        out.push((name, Outcome::Applied));
    }
    Ok(out)
}

/// [`apply_all`], its outcome logged; never fails the operator.
pub async fn keep_current(client: &kube::Client) {
    match apply_all(client).await {
        Ok(outcomes) => {
            let newer: Vec<_> = outcomes.iter().filter(|(_, o)| *o != Outcome::Applied).collect();
            tracing::info!(
                applied = outcomes.len() - newer.len(),
                ?newer,
                "CustomResourceDefinitions at this release"
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot apply the CustomResourceDefinitions; they stay as installed")
        }
    }
}

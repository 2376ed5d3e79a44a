//! `--source` values: `kubernetes` (the default inside a pod), `file:PATH`, or `lab:DIR` (the
//! exchange directory of a running `tideway lab`).

use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Which source a component reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// The Kubernetes API (in-cluster config, `--kubeconfig` or `KUBECONFIG`).
    Kubernetes,
    /// A YAML file, re-read when it changes.
    File(PathBuf),
    /// A `tideway lab` exchange directory ([`crate::lab`]): its cluster file, and writes back.
    Lab(PathBuf),
}

/// A `--source` value that names no known source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not `kubernetes` nor `file:PATH`.
    #[error("unsupported source {0:?} (expected `kubernetes`, `file:PATH` or `lab:DIR`)")]
    Unknown(String),
    /// No `--source`, no `--kubeconfig`, and not running in a pod.
    #[error(
        "no --source given and not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE, --source kubernetes or --source file:PATH"
    )]
    Missing,
    /// `--kubeconfig` with a source that is not Kubernetes.
    #[error("--kubeconfig applies to the Kubernetes source, not to --source {0}")]
    KubeconfigElsewhere(String),
}

impl FromStr for SourceSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s.split_once(':') {
            _ if s == "kubernetes" => Ok(SourceSpec::Kubernetes),
            Some(("file", path)) if !path.is_empty() => Ok(SourceSpec::File(PathBuf::from(path))),
            Some(("lab", dir)) if !dir.is_empty() => Ok(SourceSpec::Lab(PathBuf::from(dir))),
            _ => Err(SpecError::Unknown(s.to_string())),
        }
    }
}

impl SourceSpec {
    /// The source to use: the given one, else Kubernetes when a kubeconfig is given (as every
    /// Kubernetes tool reads `--kubeconfig`: talk to that cluster) or when running in a pod (the
    /// API server's address is in the environment, as the kubelet puts it in every pod).
    pub fn resolve(given: Option<&str>, in_pod: bool, kubeconfig: bool) -> Result<SourceSpec, SpecError> {
        match given {
            Some(s) => {
                let spec: SourceSpec = s.parse()?;
                if kubeconfig && spec != SourceSpec::Kubernetes {
                    return Err(SpecError::KubeconfigElsewhere(s.to_string()));
                }
                Ok(spec)
            }
            None if in_pod || kubeconfig => Ok(SourceSpec::Kubernetes),
            None => Err(SpecError::Missing),
        }
    }

    /// True when this process runs in a pod.
    pub fn in_pod() -> bool {
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_default_to_kubernetes_in_a_pod() {
        assert_eq!("kubernetes".parse(), Ok(SourceSpec::Kubernetes));
        assert_eq!("file:c.yaml".parse(), Ok(SourceSpec::File("c.yaml".into())));
        assert!(matches!("file:".parse::<SourceSpec>(), Err(SpecError::Unknown(_))));
        assert!(matches!("etcd".parse::<SourceSpec>(), Err(SpecError::Unknown(_))));
        assert_eq!("lab:/run/x".parse(), Ok(SourceSpec::Lab("/run/x".into())));
        assert_eq!(SourceSpec::resolve(None, true, false), Ok(SourceSpec::Kubernetes));
        assert_eq!(SourceSpec::resolve(None, false, false), Err(SpecError::Missing));
        assert_eq!(SourceSpec::resolve(Some("file:x"), true, false), Ok(SourceSpec::File("x".into())));
    }

    #[test]
    fn a_kubeconfig_means_the_kubernetes_source() {
        assert_eq!(SourceSpec::resolve(None, false, true), Ok(SourceSpec::Kubernetes));
        assert_eq!(SourceSpec::resolve(Some("kubernetes"), false, true), Ok(SourceSpec::Kubernetes));
        assert_eq!(
            SourceSpec::resolve(Some("file:x"), false, true),
            Err(SpecError::KubeconfigElsewhere("file:x".into()))
        );
    }
}

/// The flags that name a component's source, the same in every component (each may word
/// `--source`'s help for what it reads, with `mut_arg`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SourceArgs {
    /// Where objects come from: `kubernetes` (the default in a pod), `file:CLUSTER.yaml`
    /// (re-read when it changes) or `lab:DIR` (a running `tideway lab`).
    #[arg(long)]
    pub source: Option<String>,
    /// kubeconfig for `--source kubernetes`, which it implies (default: `KUBECONFIG`,
    /// `~/.kube/config`, then the in-cluster ServiceAccount).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl SourceArgs {
    /// The source these flags name ([`SourceSpec::resolve`]).
    pub fn spec(&self) -> Result<SourceSpec, SpecError> {
        SourceSpec::resolve(self.source.as_deref(), SourceSpec::in_pod(), self.kubeconfig.is_some())
    }

    /// `--kubeconfig`.
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }
}

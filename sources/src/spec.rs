//! `--source` values: `kubernetes` (the default inside a pod), `file:PATH`, or `lab:DIR` (the
//! exchange directory of a running `tideway lab`).

use std::path::PathBuf;
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
    /// No `--source` and not running in a pod.
    #[error(
        "no --source given and not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --source kubernetes or --source file:PATH"
    )]
    Missing,
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
    /// The source to use: the given one, else Kubernetes when running in a pod (the API
    /// server's address is in the environment, as the kubelet puts it in every pod).
    pub fn resolve(given: Option<&str>, in_pod: bool) -> Result<SourceSpec, SpecError> {
        match given {
            Some(s) => s.parse(),
            None if in_pod => Ok(SourceSpec::Kubernetes),
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
        assert_eq!(SourceSpec::resolve(None, true), Ok(SourceSpec::Kubernetes));
        assert_eq!(SourceSpec::resolve(None, false), Err(SpecError::Missing));
        assert_eq!(SourceSpec::resolve(Some("file:x"), true), Ok(SourceSpec::File("x".into())));
    }
}

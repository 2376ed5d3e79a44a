//! How a source names the objects it read, and the ones it skipped as invalid.

use std::collections::BTreeMap;
use std::fmt;

/// Identifies an object a source read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Kind (`Service`, `ProxyConfig`, ...).
    pub kind: String,
    /// Namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// A key.
    pub fn new(kind: impl Into<String>, namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectKey { kind: kind.into(), namespace: namespace.map(str::to_string), name: name.into() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Objects skipped as invalid, with why. The state keeps each one's last valid version.
pub type InvalidObjects = BTreeMap<ObjectKey, String>;

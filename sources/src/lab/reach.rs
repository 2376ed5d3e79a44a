//! Whether a lab component reaches the lab's control plane: the flags under `<dir>/cutoff`.

use std::path::PathBuf;

use crate::status::WriteError;

/// Whether a lab component reaches the lab's control plane: the flags under `<dir>/cutoff`.
#[derive(Debug, Clone)]
pub struct Reach {
    pub(super) cutoff: PathBuf,
    pub(super) node: Option<String>,
}

impl Reach {
    /// True unless the API is down, or this component's node is cut off.
    pub fn reachable(&self) -> bool {
        !self.cutoff.join("api").exists()
            && self.node.as_ref().is_none_or(|n| !self.cutoff.join(format!("node_{n}")).exists())
    }

    pub(super) fn check(&self) -> Result<(), WriteError> {
        if self.reachable() {
            Ok(())
        } else {
            Err(WriteError::Transport("the lab's control plane is unreachable from here".into()))
        }
    }
}

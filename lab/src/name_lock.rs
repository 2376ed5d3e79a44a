//! One lab per name. `lab up` takes an exclusive lock on the name before it clears a crashed
//! lab's leftovers, and the lab's process holds it for as long as it runs, so that a second
//! `lab up` of the same name is refused while the first one is still starting (when its control
//! socket does not answer yet) instead of removing the first one's directory under it.
//!
//! The lock is `flock(2)` on a file under `/run/lock`: the kernel releases it when its holder
//! exits, however it exits, so a crashed lab never leaves its name taken.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use anyhow::{Context, bail};

const LOCK_DIR: &str = "/run/lock";

/// The lock on one lab name, held until dropped.
#[derive(Debug)]
pub struct NameLock {
    _file: File,
}

impl NameLock {
    /// Takes the lock on lab `name`, or says who has it.
    pub fn take(name: &str) -> anyhow::Result<NameLock> {
        NameLock::take_in(Path::new(LOCK_DIR), name)
    }

    fn take_in(dir: &Path, name: &str) -> anyhow::Result<NameLock> {
        let path = dir.join(format!("tideway-lab-{name}.lock"));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(NameLock { _file: file }),
            Err(TryLockError::WouldBlock) => bail!(
                "lab {name} is starting or running in another process (`tideway lab status --name {name}`, `tideway lab down --name {name}`)"
            ),
            Err(TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_taken_once_until_its_holder_lets_go() {
        let dir = std::env::temp_dir().join(format!("tideway-name-lock-{}", std::process::id()));
        let first = NameLock::take_in(&dir, "demo").unwrap();
        let refused = NameLock::take_in(&dir, "demo").unwrap_err().to_string();
        assert!(refused.contains("lab demo is starting or running"), "{refused}");
        NameLock::take_in(&dir, "other").expect("another name is free");
        drop(first);
        NameLock::take_in(&dir, "demo").expect("free once its holder let go");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

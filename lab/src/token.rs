//! The lab's bearer token: made at `lab up`, readable by root only, passed to the operator and
//! the agents (`--api-token-file`), shown by `lab status` and the tour. REST changes, and reads
//! of APIs that listen off loopback, need it. Beside it, the key every member of the liveness
//! gossip seals its datagrams with (`--gossip-key-file`), made the same way.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the token of the lab in `dir` is.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("api-token")
}

/// Where the gossip key of the lab in `dir` is.
pub fn gossip_key_path(dir: &Path) -> PathBuf {
    dir.join("gossip-key")
}

/// Writes a new random token and a new gossip key for the lab in `dir`, mode 0600.
pub fn make(dir: &Path) -> std::io::Result<()> {
    write_secret(&path(dir))?;
    write_secret(&gossip_key_path(dir))
}

fn write_secret(to: &Path) -> std::io::Result<()> {
    let secret = tideway_serve::auth::new_token()?;
    let _ = std::fs::remove_file(to);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to)?;
    writeln!(f, "{secret}")
}

/// The token of the lab in `dir`, if made.
pub fn read(dir: &Path) -> Option<String> {
    std::fs::read_to_string(path(dir)).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_new_token_is_private_and_replaces_the_old() {
        let dir = std::env::temp_dir().join(format!("tideway-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir).unwrap();
        let first = read(&dir).unwrap();
        assert_eq!(std::fs::metadata(path(&dir)).unwrap().permissions().mode() & 0o777, 0o600);
        make(&dir).unwrap();
        assert_ne!(read(&dir).unwrap(), first);
        let key = std::fs::read_to_string(gossip_key_path(&dir)).unwrap();
        assert!(tideway_sources::gossip::Keys::parse(&key).is_ok(), "a gossip key the members take");
        assert_eq!(std::fs::metadata(gossip_key_path(&dir)).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read(&dir), None);
    }
}

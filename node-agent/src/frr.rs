//! The node's FRR, driven as MetalLB's FRR mode drives it: the agent renders the whole
//! integrated configuration ([`tideway_core::bgp::frr::render`]) and FRR's own `frr-reload.py`
//! applies its difference from the running one, so a session that stays in the configuration
//! is not reset when a prefix, a community or another peer changes.

use std::path::{Path, PathBuf};

use crate::exec::{self, CommandError};

/// Applies a rendered FRR configuration (the side effect behind a trait, faked in tests).
pub trait Routing: Send + Sync {
    /// Makes FRR run `config`, keeping what stays the same.
    fn apply(&self, config: &str) -> Result<(), FrrError>;
}

/// Why a configuration was not applied.
#[derive(Debug, thiserror::Error)]
pub enum FrrError {
    /// The file for `frr-reload.py` could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `frr-reload.py` refused it or could not reach the daemons.
    #[error(transparent)]
    Reload(#[from] CommandError),
}

/// FRR reached through `frr-reload.py` (Debian's `frr-pythontools`) and vtysh.
#[derive(Debug, Clone)]
pub struct FrrReload {
    /// `frr-reload.py`.
    pub program: PathBuf,
    /// Where the rendered configuration is written (and `frr-reload.py`'s temporary files).
    pub dir: PathBuf,
    /// FRR's path space (`-N`), when it runs under one.
    pub pathspace: Option<String>,
}

impl FrrReload {
    /// FRR in its default place, the files under `dir`.
    pub fn new(dir: &Path) -> FrrReload {
        FrrReload { program: "/usr/lib/frr/frr-reload.py".into(), dir: dir.to_path_buf(), pathspace: None }
    }

    /// The file each configuration is written to before it is applied.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("tideway-frr.conf")
    }

    /// zebra's forwarding lines as FRR shows them now (`ip forwarding`, `no ipv6 forwarding`):
    /// a reload removes every line the new configuration lacks, and removing `ip forwarding`
    /// would switch the node's forwarding off. They are kept as they are.
    fn forwarding(&self) -> Result<String, FrrError> {
        let mut args = Vec::new();
        if let Some(ns) = &self.pathspace {
            args.extend(["-N", ns.as_str()]);
        }
        args.extend(["-c", "show running-config"]);
        let running = exec::run("vtysh", &args, None)?;
        Ok(running.lines().filter(|l| is_forwarding(l)).map(|l| format!("{}\n", l.trim())).collect())
    }
}

/// `ip forwarding`, `ipv6 forwarding`, or either with `no`.
fn is_forwarding(line: &str) -> bool {
    let line = line.trim();
    let line = line.strip_prefix("no ").unwrap_or(line);
    line == "ip forwarding" || line == "ipv6 forwarding"
}

impl Routing for FrrReload {
    fn apply(&self, config: &str) -> Result<(), FrrError> {
        let path = self.config_path();
        let forwarding = self.forwarding()?;
        let written = std::fs::create_dir_all(&self.dir).and_then(|()| {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, format!("{config}{forwarding}"))?;
            std::fs::rename(&tmp, &path)
        });
        written.map_err(|source| FrrError::Write { path: path.clone(), source })?;
        let (file, rundir) = (path.display().to_string(), self.dir.display().to_string());
        let mut args = vec!["--reload", "--stdout", "--rundir", rundir.as_str()];
        if let Some(ns) = &self.pathspace {
            args.extend(["--pathspace", ns.as_str()]);
        }
        args.push(&file);
        exec::run(&self.program.display().to_string(), &args, None)?;
        Ok(())
    }
}

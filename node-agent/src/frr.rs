//! The node's FRR, driven as MetalLB's FRR mode drives it: the agent renders the whole
//! integrated configuration ([`tideway_core::bgp::frr::render`]) and FRR's own `frr-reload.py`
//! applies its difference from the running one, so a session that stays in the configuration
//! is not reset when a prefix, a community or another peer changes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::exec::{self, CommandError};

/// FRR as the agent drives it (the side effect behind a trait, faked in tests).
pub trait Routing: Send + Sync {
    /// Makes FRR run `config`, keeping what stays the same.
    fn apply(&self, config: &str) -> Result<(), FrrError>;
    /// Each BGP session's state, by peer address, as FRR says now.
    fn sessions(&self) -> Result<BTreeMap<IpAddr, PeerState>, FrrError>;
}

/// One session as FRR says it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerState {
    /// BGP is established.
    pub established: bool,
    /// Its BFD session's state (`up`, `down`, `init`); None without BFD.
    pub bfd: Option<String>,
}

/// The sessions `show bgp neighbors json` and `show bfd peers json` describe.
pub fn peer_states(neighbors: &Value, bfd: &Value) -> BTreeMap<IpAddr, PeerState> {
    let mut out: BTreeMap<IpAddr, PeerState> = BTreeMap::new();
    for (peer, n) in neighbors.as_object().into_iter().flatten() {
        if let Ok(addr) = peer.parse() {
            out.insert(addr, PeerState { established: n["bgpState"] == "Established", bfd: None });
        }
    }
    for p in bfd.as_array().into_iter().flatten() {
        let addr = p["peer"].as_str().and_then(|a| a.parse().ok());
        if let (Some(state), Some(status)) = (addr.and_then(|a| out.get_mut(&a)), p["status"].as_str()) {
            state.bfd = Some(status.to_string());
        }
    }
    out
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
    /// `frr-reload.py` or vtysh refused, or could not reach the daemons.
    #[error(transparent)]
    Reload(#[from] CommandError),
    /// vtysh answered something that is not the JSON asked for.
    #[error("vtysh -c {command:?}: {message}")]
    Answer {
        /// The command.
        command: String,
        /// What is wrong with the answer.
        message: String,
    },
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

    /// `vtysh -c command`, under the path space when there is one.
    fn vtysh(&self, command: &str) -> Result<String, FrrError> {
        let mut args = Vec::new();
        if let Some(ns) = &self.pathspace {
            args.extend(["-N", ns.as_str()]);
        }
        args.extend(["-c", command]);
        Ok(exec::run("vtysh", &args, None)?)
    }

    /// zebra's forwarding lines as FRR shows them now (`ip forwarding`, `no ipv6 forwarding`):
    /// a reload removes every line the new configuration lacks, and removing `ip forwarding`
    /// would switch the node's forwarding off. They are kept as they are.
    fn forwarding(&self) -> Result<String, FrrError> {
        let running = self.vtysh("show running-config")?;
        Ok(running.lines().filter(|l| is_forwarding(l)).map(|l| format!("{}\n", l.trim())).collect())
    }
}

/// `e` with every password of `config` masked.
fn masked(mut e: CommandError, config: &str) -> CommandError {
    e.stderr = tideway_core::bgp::frr::mask_passwords(&e.stderr, config);
    e.lines = e.lines.iter().map(|l| tideway_core::bgp::frr::mask_passwords(l, config)).collect();
    e
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
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let tmp = path.with_extension("tmp");
            let _ = std::fs::remove_file(&tmp);
            // It holds the peers' passwords: readable by root only.
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(format!("{config}{forwarding}").as_bytes())?;
            std::fs::rename(&tmp, &path)
        });
        written.map_err(|source| FrrError::Write { path: path.clone(), source })?;
        let (file, rundir) = (path.display().to_string(), self.dir.display().to_string());
        let mut args = vec!["--reload", "--stdout", "--rundir", rundir.as_str()];
        if let Some(ns) = &self.pathspace {
            args.extend(["--pathspace", ns.as_str()]);
        }
        args.push(&file);
        // What frr-reload.py says may echo a password line: masked before a status or a log.
        exec::run(&self.program.display().to_string(), &args, None).map_err(|e| masked(e, config))?;
        Ok(())
    }

    fn sessions(&self) -> Result<BTreeMap<IpAddr, PeerState>, FrrError> {
        let json = |command: &str| -> Result<Value, FrrError> {
            let text = self.vtysh(command)?;
            serde_json::from_str(&text)
                .map_err(|e| FrrError::Answer { command: command.into(), message: e.to_string() })
        };
        Ok(peer_states(&json("show bgp neighbors json")?, &json("show bfd peers json")?))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// FRR 8.4's answers, cut to the fields read.
    #[test]
    fn sessions_are_read_from_frrs_answers() {
        let neighbors = json!({
            "172.30.0.1": {"remoteAs": 64513, "bgpState": "Established", "bgpTimerUpMsec": 5061},
            "172.30.0.2": {"remoteAs": 64513, "bgpState": "Active"},
            "bgpNoSuchNeighbor": true
        });
        let bfd = json!([
            {"multihop": false, "peer": "172.30.0.1", "local": "172.30.0.11", "status": "up"},
            {"multihop": false, "peer": "172.30.0.9", "status": "down"}
        ]);
        let states = peer_states(&neighbors, &bfd);
        let up: IpAddr = "172.30.0.1".parse().unwrap();
        let active: IpAddr = "172.30.0.2".parse().unwrap();
        assert_eq!(states.len(), 2, "{states:?}");
        assert_eq!(states[&up], PeerState { established: true, bfd: Some("up".into()) });
        assert_eq!(states[&active], PeerState { established: false, bfd: None });
        assert!(peer_states(&Value::Null, &Value::Null).is_empty());
    }

    /// frr-reload.py echoing the line it refused: the error a status and a log carry shows no
    /// password.
    #[test]
    fn a_refused_configuration_is_reported_without_its_passwords() {
        let config = "router bgp 64512\n neighbor 172.30.0.1 password s3cret!x\n";
        let e = CommandError {
            command: "frr-reload.py --reload /x".into(),
            status: exec::CommandStatus::Exited(1),
            stderr: "line 2: % Unknown command: neighbor 172.30.0.1 password s3cret!x".into(),
            lines: vec![">     2:  neighbor 172.30.0.1 password s3cret!x".into()],
        };
        let said = FrrError::from(masked(e, config)).to_string();
        assert!(!said.contains("s3cret!x"), "{said}");
        assert!(said.contains("password ***"), "{said}");
    }
}

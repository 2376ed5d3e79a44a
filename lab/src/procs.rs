//! The lab's processes (agents, pod servers, the DNS pod, the operator): started, watched and
//! restarted with kubelet's backoff (10 s, doubling to 5 min) when they exit on their own, each
//! logging to its own file. A process the lab was told to kill (`lab kill agent`) stays down
//! until told to start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One supervised process.
struct Proc {
    argv: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    restart_at: Option<Instant>,
    backoff: Duration,
    restarts: u32,
    held: bool,
}

/// Kubelet's first restart delay of a crashed container (CrashLoopBackOff then doubles it).
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// Kubelet's longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What happened to a process since the last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited (it will be restarted).
    Exited {
        /// Its label.
        label: String,
        /// How.
        status: String,
    },
    /// It was restarted.
    Restarted {
        /// Its label.
        label: String,
    },
}

/// Every process of a lab, by label (`agent/node-a`, `pod/default/web:80`, ...).
#[derive(Default)]
pub struct Procs {
    procs: BTreeMap<String, Proc>,
}

fn start(argv: &[String], log: &PathBuf) -> std::io::Result<Child> {
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err).spawn()
}

impl Procs {
    /// Runs `argv` under `label` unless it already runs with the same arguments (a process
    /// whose arguments changed is restarted).
    pub fn ensure(&mut self, label: &str, argv: Vec<String>, log: PathBuf) -> std::io::Result<()> {
        if self.procs.get(label).is_some_and(|p| p.argv == argv) {
            return Ok(());
        }
        self.remove(label);
        let child = start(&argv, &log)?;
        self.procs.insert(
            label.to_string(),
            Proc {
                argv,
                log,
                child: Some(child),
                restart_at: None,
                backoff: FIRST_BACKOFF,
                restarts: 0,
                held: false,
            },
        );
        Ok(())
    }

    /// Stops and forgets `label` (SIGKILL: the lab's processes keep no state worth saving).
    pub fn remove(&mut self, label: &str) {
        if let Some(mut p) = self.procs.remove(label)
            && let Some(c) = p.child.as_mut()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops and forgets `label` gracefully: SIGTERM, then SIGKILL if it still runs `within`
    /// later (for processes that keep state: the control plane's).
    pub fn terminate(&mut self, label: &str, within: Duration) {
        let Some(mut p) = self.procs.remove(label) else { return };
        let Some(c) = p.child.as_mut() else { return };
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if !matches!(c.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Stops every process whose label starts with `prefix`.
    pub fn remove_prefixed(&mut self, prefix: &str) {
        let labels: Vec<String> = self.procs.keys().filter(|l| l.starts_with(prefix)).cloned().collect();
        for l in labels {
            self.remove(&l);
        }
    }

    /// Kills `label` (SIGKILL) and keeps it down until [`Procs::release`]; false if no such
    /// process.
    pub fn hold(&mut self, label: &str) -> bool {
        let Some(p) = self.procs.get_mut(label) else { return false };
        if let Some(mut c) = p.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        p.held = true;
        p.restart_at = None;
        true
    }

    /// Starts `label` again now if it is down (held or waiting out its backoff); false if no
    /// such process.
    pub fn release(&mut self, label: &str) -> std::io::Result<bool> {
        let Some(p) = self.procs.get_mut(label) else { return Ok(false) };
        p.held = false;
        p.restart_at = None;
        p.backoff = FIRST_BACKOFF;
        if p.child.is_none() {
            p.child = Some(start(&p.argv, &p.log)?);
        }
        Ok(true)
    }

    /// True while `label` is held down by [`Procs::hold`].
    pub fn held(&self, label: &str) -> bool {
        self.procs.get(label).is_some_and(|p| p.held)
    }

    /// The pid of `label` while it runs.
    pub fn pid(&self, label: &str) -> Option<u32> {
        self.procs.get(label)?.child.as_ref().map(Child::id)
    }

    /// True while `label` runs.
    pub fn running(&self, label: &str) -> bool {
        self.procs.get(label).is_some_and(|p| p.child.is_some())
    }

    /// Every label.
    pub fn labels(&self) -> impl Iterator<Item = &String> {
        self.procs.keys()
    }

    /// Reaps exited processes and restarts those whose backoff ran out.
    pub fn supervise(&mut self) -> Vec<Exit> {
        let mut out = Vec::new();
        for (label, p) in &mut self.procs {
            if let Some(c) = p.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                p.child = None;
                p.restart_at = Some(Instant::now() + p.backoff);
                p.backoff = (p.backoff * 2).min(MAX_BACKOFF);
                out.push(Exit::Exited { label: label.clone(), status: status.to_string() });
            }
            if p.child.is_none() && !p.held && p.restart_at.is_some_and(|t| Instant::now() >= t) {
                p.restart_at = None;
                if let Ok(c) = start(&p.argv, &p.log) {
                    p.child = Some(c);
                    p.restarts += 1;
                    out.push(Exit::Restarted { label: label.clone() });
                }
            }
        }
        out
    }

    /// Stops everything.
    pub fn stop_all(&mut self) {
        let labels: Vec<String> = self.procs.keys().cloned().collect();
        for l in labels {
            self.remove(&l);
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

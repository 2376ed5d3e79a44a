//! One container's life in a pod: started through the helper, watched, probed, restarted under
//! the pod's `restartPolicy` with kubelet's back-off (the first restart at once, then 10 s
//! doubling to 5 min; reset after 10 min of running), and seen as kubelet reports it.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::probe::{self, Kind};
use super::runtime::{ExitInfo, Process, Record};
use super::status::{ContainerView, State, Terminated};

/// Kubelet's longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// kubelet's first delay after a restart.
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// A container that ran this long starts its back-off afresh.
const BACKOFF_RESET: Duration = Duration::from_secs(600);
/// How long a stopped container gets between SIGTERM and SIGKILL.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// A probe's verdict, routed back to its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeMsg {
    /// The pod's UID.
    pub uid: String,
    /// The container.
    pub container: String,
    /// The container's restart count when the probe started (older verdicts are dropped).
    pub generation: i32,
    /// Which probe.
    pub kind: Kind,
    /// Passed.
    pub ok: bool,
}

/// A container of a pod.
#[derive(Debug)]
pub struct Ctr {
    /// Its spec.
    pub spec: Container,
    /// Its process while it runs.
    pub process: Option<Process>,
    /// What kubelet reports now.
    pub state: State,
    /// How it last ended.
    pub last: Option<Terminated>,
    /// Restarts.
    pub restart_count: i32,
    backoff: Duration,
    /// When it may start again.
    pub restart_at: Option<Instant>,
    /// Its readiness probe's verdict (no probe: ready once started).
    pub probe_ready: bool,
    /// Started (its startup probe passed, or it runs and has none).
    pub started: bool,
    /// It ran to completion and stays down (restartPolicy).
    pub done: bool,
    probes: Vec<(Kind, JoinHandle<()>)>,
    ran_since: Option<Instant>,
    /// When a refused image was first reported (ErrImagePull, then ImagePullBackOff).
    pub refused_since: Option<Instant>,
}

/// Where a pod's probes look.
#[derive(Debug, Clone)]
pub struct ProbeSite {
    /// The pod's UID.
    pub uid: String,
    /// Its address (the node's on the host network).
    pub ip: IpAddr,
    /// The `tideway` binary (the lab's probe helper).
    pub tideway: String,
    /// The file `lab pod unready` writes to fail its readiness.
    pub flag: PathBuf,
}

impl Ctr {
    /// A container not started yet.
    pub fn new(spec: Container, waiting: &str) -> Ctr {
        Ctr {
            spec,
            process: None,
            state: State::Waiting { reason: waiting.into(), message: String::new() },
            last: None,
            restart_count: 0,
            backoff: Duration::ZERO,
            restart_at: None,
            probe_ready: false,
            started: false,
            done: false,
            probes: Vec::new(),
            ran_since: None,
            refused_since: None,
        }
    }

    /// The container ID kubelet reports for restart `n`.
    pub fn container_id(uid: &str, name: &str, n: i32) -> String {
        format!("lab://{uid}/{name}/{n}")
    }

    /// Takes over a process a previous kubelet started.
    pub fn adopt(&mut self, p: Process) {
        self.restart_count = p.record.restart_count;
        self.state = State::Running { started_at: p.record.started_at.clone() };
        self.started = self.spec.startup_probe.is_none();
        self.ran_since = Some(Instant::now());
        self.process = Some(p);
    }

    /// Whether it may be started now (not running, not finished, its back-off over).
    pub fn due(&self) -> bool {
        self.process.is_none() && !self.done && self.restart_at.is_none_or(|t| Instant::now() >= t)
    }

    /// It runs `p` now.
    pub fn running(&mut self, p: Process, now: &str) {
        if self.last.is_some() || matches!(self.state, State::Terminated(_)) {
            self.restart_count += 1;
        }
        self.state = State::Running { started_at: now.to_string() };
        self.started = self.spec.startup_probe.is_none();
        self.probe_ready = false;
        self.restart_at = None;
        self.ran_since = Some(Instant::now());
        self.process = Some(p);
    }

    /// Notices an exit: the termination is recorded, and a restart planned when `restart` says.
    pub fn poll(&mut self, uid: &str, restart: impl Fn(i32) -> bool, now: &str) -> Option<ExitInfo> {
        let exit = self.process.as_mut()?.poll()?;
        let p = self.process.take().expect("polled");
        self.stop_probes();
        let started_at = match &self.state {
            State::Running { started_at } => started_at.clone(),
            _ => p.record.started_at.clone(),
        };
        let reason = if exit.unknown {
            "ContainerStatusUnknown"
        } else if exit.code == 0 {
            "Completed"
        } else {
            "Error"
        };
        let t = Terminated {
            exit_code: exit.code,
            signal: exit.signal,
            reason: reason.into(),
            started_at,
            finished_at: now.to_string(),
            container_id: Ctr::container_id(uid, &self.spec.name, self.restart_count),
        };
        self.started = false;
        self.probe_ready = false;
        if self.ran_since.is_some_and(|s| s.elapsed() >= BACKOFF_RESET) {
            self.backoff = Duration::ZERO;
        }
        if restart(exit.code) {
            self.restart_at = Some(Instant::now() + self.backoff);
            let message = format!(
                "back-off {}s restarting failed container={}",
                self.backoff.as_secs(),
                self.spec.name
            );
            self.backoff =
                if self.backoff.is_zero() { FIRST_BACKOFF } else { (self.backoff * 2).min(MAX_BACKOFF) };
            self.state = State::Waiting { reason: "CrashLoopBackOff".into(), message };
            self.last = Some(t);
        } else {
            self.done = true;
            self.state = State::Terminated(t);
        }
        Some(exit)
    }

    /// Starts its probes (readiness and liveness at once, or after a startup probe passes).
    pub fn start_probes(&mut self, site: &ProbeSite, out: &UnboundedSender<ProbeMsg>) {
        let ProbeSite { uid, ip, tideway, flag } = site;
        let Some(p) = &self.process else { return };
        let target = p.view_pid();
        let kinds: Vec<(Kind, Option<&k8s_openapi::api::core::v1::Probe>)> = if self.started {
            vec![
                (Kind::Readiness, self.spec.readiness_probe.as_ref()),
                (Kind::Liveness, self.spec.liveness_probe.as_ref()),
            ]
        } else {
            vec![(Kind::Startup, self.spec.startup_probe.as_ref())]
        };
        for (kind, spec) in kinds {
            let Some(spec) = spec else { continue };
            let Some(check) = probe::check(spec, &self.spec, *ip, tideway) else {
                tracing::warn!(container = %self.spec.name, ?kind, "a probe the lab's kubelet cannot run");
                continue;
            };
            let (out, uid, container, generation) =
                (out.clone(), uid.to_string(), self.spec.name.clone(), self.restart_count);
            let send = move |ok| {
                out.send(ProbeMsg { uid: uid.clone(), container: container.clone(), generation, kind, ok })
                    .is_ok()
            };
            let task = probe::worker(kind, check, probe::schedule(spec), target.clone(), flag.clone(), send);
            self.probes.push((kind, tokio::spawn(task)));
        }
    }

    /// Stops its probes.
    pub fn stop_probes(&mut self) {
        for (_, t) in self.probes.drain(..) {
            t.abort();
        }
    }

    /// A graceful deletion's stop: SIGTERM now, SIGKILL `within` later if it still runs (a
    /// second call changes nothing). Its readiness probe keeps running, as kubelet's does while
    /// a pod terminates (kubernetes#110191, v1.25): a server that fails its readiness as it
    /// drains turns its endpoint not serving before it exits. The other probes stop.
    pub fn terminate_within(&mut self, within: Duration) {
        self.probes.retain(|(kind, t)| {
            let keep = *kind == Kind::Readiness;
            if !keep {
                t.abort();
            }
            keep
        });
        if let Some(p) = &mut self.process {
            p.stop(within);
        }
    }

    /// Ready: running, started, and its readiness probe passing (or none), unless `flagged`.
    pub fn ready(&self, flagged: bool) -> bool {
        let running = self.process.is_some() && matches!(self.state, State::Running { .. });
        let probe = if self.spec.readiness_probe.is_some() { self.probe_ready } else { !flagged };
        running && self.started && probe
    }

    /// What kubelet reports.
    pub fn view(&self, uid: &str, flagged: bool) -> ContainerView {
        ContainerView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            state: self.state.clone(),
            last: self.last.clone(),
            ready: self.ready(flagged),
            started: self.started && self.process.is_some(),
            restart_count: self.restart_count,
            container_id: self
                .process
                .as_ref()
                .map(|_| Ctr::container_id(uid, &self.spec.name, self.restart_count)),
        }
    }

    /// Asks its process to stop (SIGKILL [`STOP_WAIT`] later).
    pub fn stop(&mut self) {
        self.stop_within(STOP_WAIT);
    }

    /// SIGTERM now, SIGKILL `within` later if it still runs (a second call changes nothing).
    pub fn stop_within(&mut self, within: Duration) {
        self.stop_probes();
        if let Some(p) = &mut self.process {
            p.stop(within);
        }
    }

    /// The record of its running process.
    pub fn record(&self) -> Option<&Record> {
        self.process.as_ref().map(|p| &p.record)
    }
}

impl Drop for Ctr {
    fn drop(&mut self) {
        self.stop_probes();
    }
}

/// Whether a container that exited with `code` restarts under `policy` (init containers:
/// `Always` counts as `OnFailure`).
pub fn restarts(policy: &str, code: i32, init: bool) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => code != 0,
        _ if init => code != 0,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policies_decide_as_kubelets_do() {
        assert!(restarts("Always", 0, false));
        assert!(!restarts("Always", 0, true), "an init container that succeeded is done");
        assert!(restarts("Always", 1, true));
        assert!(restarts("OnFailure", 2, false) && !restarts("OnFailure", 0, false));
        assert!(!restarts("Never", 1, false));
    }

    #[test]
    fn a_crashing_container_backs_off_as_kubelet_does() {
        let dir = std::env::temp_dir().join(format!("tideway-ctr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let mut c = Ctr::new(spec, "ContainerCreating");
        assert!(c.due());
        let argv: Vec<String> = ["sh", "-c", "exit 1"].iter().map(|s| s.to_string()).collect();
        let mut delays = Vec::new();
        for round in 0..3 {
            let p = Process::spawn(&argv, &dir.join("log"), "u", "t".into(), c.restart_count).unwrap();
            c.running(p, "t");
            assert_eq!(c.restart_count, round);
            let deadline = Instant::now() + Duration::from_secs(10);
            while c.poll("u", |code| restarts("Always", code, false), "t2").is_none() {
                assert!(Instant::now() < deadline, "the process ended");
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(matches!(&c.state, State::Waiting { reason, .. } if reason == "CrashLoopBackOff"));
            assert_eq!(c.last.as_ref().unwrap().exit_code, 1);
            delays
                .push(c.restart_at.unwrap().saturating_duration_since(Instant::now()).as_secs_f64().round()
                    as u64);
            c.restart_at = None;
        }
        assert_eq!(delays, [0, 10, 20], "at once, then 10 s doubling");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! A Pod's status as kubelet writes it (pure): phase (kubelet's `getPhase`), podIP(s),
//! hostIP(s), startTime, the conditions kubelet owns (PodReadyToStartContainers, Initialized,
//! ContainersReady, Ready; others such as the scheduler's PodScheduled are kept), and a status
//! per container (state, lastState, ready, started, restartCount).

use serde_json::{Value, json};

/// A terminated container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code.
    pub exit_code: i32,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `ContainerStatusUnknown`.
    pub reason: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// Its container ID.
    pub container_id: String,
}

/// A container's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not running: why (`ContainerCreating`, `ErrImagePull`, `CrashLoopBackOff`, ...).
    Waiting {
        /// kubelet's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Running since then.
    Running {
        /// When it started.
        started_at: String,
    },
    /// Ended.
    Terminated(Terminated),
}

/// What kubelet knows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Now.
    pub state: State,
    /// How it last ended.
    pub last: Option<Terminated>,
    /// Ready (readiness probe, or started when it has none).
    pub ready: bool,
    /// Started (startup probe passed, or running when it has none).
    pub started: bool,
    /// Restarts so far.
    pub restart_count: i32,
    /// Its container ID while it has one.
    pub container_id: Option<String>,
}

/// What kubelet knows of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// `spec.restartPolicy`.
    pub restart_policy: String,
    /// The sandbox (network namespace, address, volumes) is set up.
    pub sandbox_ready: bool,
    /// Init containers, in order.
    pub init: Vec<ContainerView>,
    /// Containers, in order.
    pub containers: Vec<ContainerView>,
    /// Its address.
    pub pod_ip: Option<String>,
    /// The node's address.
    pub host_ip: String,
    /// When the kubelet took it.
    pub start_time: String,
}

fn init_done(c: &ContainerView) -> bool {
    matches!(&c.state, State::Terminated(t) if t.exit_code == 0)
}

/// kubelet's phase of `view`.
pub fn phase(view: &PodView) -> &'static str {
    let never = view.restart_policy == "Never";
    if view.init.iter().any(|c| matches!(&c.state, State::Terminated(t) if t.exit_code != 0) && never) {
        return "Failed";
    }
    if !view.init.iter().all(init_done) {
        return "Pending";
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.containers {
        match &c.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            State::Waiting { .. } if c.last.is_some() => stopped += 1,
            State::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if view.restart_policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if never {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    }
}

fn terminated_json(t: &Terminated) -> Value {
    let mut v = json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": t.started_at,
        "finishedAt": t.finished_at,
        "containerID": t.container_id,
    });
    if let Some(s) = t.signal {
        v["signal"] = json!(s);
    }
    v
}

/// One `containerStatuses` entry.
pub fn container_status(c: &ContainerView) -> Value {
    let state = match &c.state {
        State::Waiting { reason, message } => json!({"waiting": {"reason": reason, "message": message}}),
        State::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        State::Terminated(t) => json!({"terminated": terminated_json(t)}),
    };
    let last = c.last.as_ref().map_or_else(|| json!({}), |t| json!({"terminated": terminated_json(t)}));
    let mut v = json!({
        "name": c.name,
        "image": c.image,
        "imageID": "",
        "ready": c.ready,
        "started": c.started,
        "restartCount": c.restart_count,
        "state": state,
        "lastState": last,
    });
    if let Some(id) = &c.container_id {
        v["containerID"] = json!(id);
    }
    v
}

/// The conditions kubelet owns.
const OWNED: [&str; 4] = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"];

fn condition(kind: &str, ok: bool, reason: &str, message: &str, existing: &[Value], now: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    let prev = existing.iter().find(|c| c["type"] == kind);
    let since = match prev {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut v = json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    if !ok {
        v["reason"] = json!(reason);
        v["message"] = json!(message);
    }
    v
}

fn names(list: &[&ContainerView]) -> String {
    format!("[{}]", list.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(" "))
}

/// The status to write for `view` at time `now`, given the pod's `current` status as last
/// read from the API (the conditions others own are kept) and the status this kubelet last
/// wrote, `ours`, if any: the transition times of the conditions it owns come from `ours`, as
/// kubelet's status manager keeps them in its own cache. Taken from a watch event that lags
/// behind the writes, they would alternate between two versions and every tick write again.
pub fn pod_status(view: &PodView, current: &Value, ours: Option<&Value>, now: &str) -> Value {
    let existing: Vec<Value> = current["conditions"].as_array().cloned().unwrap_or_default();
    let owned: Vec<Value> =
        ours.map_or_else(|| existing.clone(), |o| o["conditions"].as_array().cloned().unwrap_or_default());
    let phase = phase(view);
    let incomplete: Vec<&ContainerView> = view.init.iter().filter(|c| !init_done(c)).collect();
    let unready: Vec<&ContainerView> = view.containers.iter().filter(|c| !c.ready).collect();
    let initialized = incomplete.is_empty();
    let ready = initialized && unready.is_empty() && !view.containers.is_empty();
    let (reason, message) = if phase == "Succeeded" || phase == "Failed" {
        ("PodCompleted", String::new())
    } else if !initialized {
        ("ContainersNotInitialized", format!("containers with incomplete status: {}", names(&incomplete)))
    } else {
        ("ContainersNotReady", format!("containers with unready status: {}", names(&unready)))
    };
    let mut conditions = vec![
        condition("PodReadyToStartContainers", view.sandbox_ready, "", "", &owned, now),
        condition(
            "Initialized",
            initialized,
            "ContainersNotInitialized",
            &format!("containers with incomplete status: {}", names(&incomplete)),
            &owned,
            now,
        ),
        condition("Ready", ready, reason, &message, &owned, now),
        condition("ContainersReady", ready, reason, &message, &owned, now),
    ];
    for c in existing.iter().filter(|c| !OWNED.iter().any(|o| c["type"] == *o)) {
        conditions.push(c.clone());
    }
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": view.host_ip,
        "hostIPs": [{"ip": view.host_ip}],
        "startTime": view.start_time,
        "containerStatuses": view.containers.iter().map(container_status).collect::<Vec<_>>(),
    });
    if let Some(ip) = &view.pod_ip {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    if !view.init.is_empty() {
        status["initContainerStatuses"] = json!(view.init.iter().map(container_status).collect::<Vec<_>>());
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, state: State, ready: bool) -> ContainerView {
        ContainerView {
            name: name.into(),
            image: "traefik/whoami".into(),
            started: matches!(state, State::Running { .. }),
            state,
            last: None,
            ready,
            restart_count: 0,
            container_id: Some(format!("lab://u/{name}/0")),
        }
    }

    fn running() -> State {
        State::Running { started_at: "2026-01-01T00:00:01Z".into() }
    }

    fn ended(code: i32) -> State {
        State::Terminated(Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed".into() } else { "Error".into() },
            started_at: "t0".into(),
            finished_at: "t1".into(),
            container_id: "lab://u/x/0".into(),
        })
    }

    fn view(containers: Vec<ContainerView>, policy: &str) -> PodView {
        PodView {
            restart_policy: policy.into(),
            sandbox_ready: true,
            init: vec![],
            containers,
            pod_ip: Some("10.10.1.2".into()),
            host_ip: "172.18.0.4".into(),
            start_time: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_phase_follows_kubelets_rules() {
        let waiting = State::Waiting { reason: "ErrImagePull".into(), message: String::new() };
        assert_eq!(phase(&view(vec![c("a", running(), true)], "Always")), "Running");
        assert_eq!(
            phase(&view(vec![c("a", running(), true), c("b", waiting.clone(), false)], "Always")),
            "Pending"
        );
        assert_eq!(phase(&view(vec![c("a", ended(0), false)], "Never")), "Succeeded");
        assert_eq!(phase(&view(vec![c("a", ended(0), false), c("b", ended(1), false)], "Never")), "Failed");
        assert_eq!(phase(&view(vec![c("a", ended(1), false)], "OnFailure")), "Running");
        assert_eq!(phase(&view(vec![c("a", ended(0), false)], "Always")), "Running", "restarting");
        let mut crashing =
            c("a", State::Waiting { reason: "CrashLoopBackOff".into(), message: String::new() }, false);
        crashing.last = Some(match ended(1) {
            State::Terminated(t) => t,
            _ => unreachable!(),
        });
        assert_eq!(phase(&view(vec![crashing], "Always")), "Running", "a crash loop is a stopped container");
        let mut v = view(vec![c("a", waiting, false)], "Always");
        v.init = vec![c("init", running(), false)];
        assert_eq!(phase(&v), "Pending");
        v.init = vec![c("init", ended(1), false)];
        v.restart_policy = "Never".into();
        assert_eq!(phase(&v), "Failed");
    }

    #[test]
    fn the_status_keeps_others_conditions_and_transition_times() {
        let current = json!({"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t-scheduled"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "t-ready"},
        ]});
        let s = pod_status(&view(vec![c("a", running(), true)], "Always"), &current, None, "now");
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.10.1.2");
        assert_eq!(s["podIPs"], json!([{"ip": "10.10.1.2"}]));
        assert_eq!(s["hostIPs"], json!([{"ip": "172.18.0.4"}]));
        let cond = |s: &Value, t: &str| {
            s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).cloned().unwrap()
        };
        assert_eq!(cond(&s, "Ready")["lastTransitionTime"], "t-ready", "unchanged, so the same time");
        assert_eq!(cond(&s, "PodScheduled")["lastTransitionTime"], "t-scheduled");
        assert_eq!(cond(&s, "ContainersReady")["status"], "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers")["status"], "True");
        assert_eq!(s["containerStatuses"][0]["state"]["running"]["startedAt"], "2026-01-01T00:00:01Z");
        assert_eq!(s["containerStatuses"][0]["lastState"], json!({}));
        let s = pod_status(&view(vec![c("a", running(), false)], "Always"), &current, None, "now");
        assert_eq!(cond(&s, "Ready")["status"], "False");
        assert_eq!(cond(&s, "Ready")["lastTransitionTime"], "now");
        assert_eq!(cond(&s, "Ready")["message"], "containers with unready status: [a]");
        assert!(s.get("initContainerStatuses").is_none());
    }

    #[test]
    fn a_lagging_watch_event_does_not_change_what_was_written() {
        let v = view(vec![c("a", running(), true)], "Always");
        let before =
            json!({"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "t0"}]});
        let written = pod_status(&v, &before, None, "t1");
        // The API's copy of what was written, with the scheduler's condition beside it.
        let mut echoed = written.clone();
        echoed["conditions"].as_array_mut().unwrap().push(json!({"type": "PodScheduled", "status": "True"}));
        // Whichever copy the kubelet holds when it next looks, the same status: nothing to write.
        for current in [&before, &echoed] {
            let again = pod_status(&v, current, Some(&written), "t2");
            let ready = |s: &Value| {
                s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").cloned()
            };
            assert_eq!(ready(&again), ready(&written), "{current}");
        }
        assert_eq!(pod_status(&v, &before, Some(&written), "t2"), written);
    }
}

//! Container processes: started through the container helper (`ip netns exec NS tideway lab
//! container --spec FILE`) in a process group of their own, so a stop reaches every process
//! of the container; recorded (pid and kernel start time) in the pod's directory, so a
//! restarted kubelet finds the ones still running and adopts them instead of starting them
//! again: containers outlive their kubelet, as they do under a real one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::mounts::ContainerSpec;
use super::runc::Runc;

/// What the kubelet records of a running container (`containers/NAME.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The pod's UID (a record of another pod of the same name is not adopted).
    pub pod_uid: String,
    /// The process (and process group) id.
    pub pid: i32,
    /// Its start time in clock ticks since boot (`/proc/PID/stat`'s 22nd field): a reused pid
    /// is told apart by it.
    pub start_ticks: u64,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// The container's restarts so far.
    pub restart_count: i32,
    /// The runc container, for a container from a loaded image (`pid` is then runc's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runc: Option<Runc>,
}

/// How a container process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code (128 + signal for a signal).
    pub code: i32,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Unknown: an adopted process ended (kubelet says `ContainerStatusUnknown`, 137).
    pub unknown: bool,
}

/// A running container's process: started here, or adopted.
#[derive(Debug)]
pub struct Process {
    /// Its record.
    pub record: Record,
    child: Option<Child>,
    stop: Option<Stop>,
}

#[derive(Debug, Clone, Copy)]
struct Stop {
    kill_at: Instant,
}

/// The kernel start time of `pid`, if it runs (zombies count as gone).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    // Field 22 of the whole line is the 20th after the command's closing parenthesis.
    fields.get(19)?.parse().ok()
}

/// The argv that runs the helper for `spec_file` in namespace `netns`.
pub fn helper_argv(netns: &str, tideway: &Path, spec_file: &Path) -> Vec<String> {
    vec![
        "ip".into(),
        "netns".into(),
        "exec".into(),
        netns.into(),
        tideway.display().to_string(),
        "lab".into(),
        "container".into(),
        "--spec".into(),
        spec_file.display().to_string(),
    ]
}

impl Process {
    /// Starts `argv`, its output appended to `log`.
    pub fn spawn(
        argv: &[String],
        log: &Path,
        pod_uid: &str,
        started_at: String,
        restart_count: i32,
    ) -> std::io::Result<Process> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()?;
        let pid = child.id() as i32;
        let record = Record {
            pod_uid: pod_uid.to_string(),
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            started_at,
            restart_count,
            runc: None,
        };
        Ok(Process { record, child: Some(child), stop: None })
    }

    /// The process `record` names, if it still runs.
    pub fn adopt(record: Record) -> Option<Process> {
        (start_ticks(record.pid)? == record.start_ticks).then_some(Process {
            record,
            child: None,
            stop: None,
        })
    }

    /// Whether it ended, and how; sends SIGKILL once a stop's wait is over. A runc container
    /// that ended is deleted.
    pub fn poll(&mut self) -> Option<ExitInfo> {
        if let Some(stop) = self.stop
            && Instant::now() >= stop.kill_at
        {
            self.signal(Signal::SIGKILL);
        }
        let exit = self.exit();
        if exit.is_some()
            && let Some(r) = &self.record.runc
        {
            r.delete();
        }
        exit
    }

    /// The pid that sees what the container sees (for exec probes): a runc container's first
    /// process once runc wrote it, else the process itself.
    pub fn view_pid(&self) -> super::probe::Target {
        match &self.record.runc {
            Some(r) => super::probe::Target::PidFile(r.pid_file()),
            None => super::probe::Target::Pid(self.record.pid),
        }
    }

    fn exit(&mut self) -> Option<ExitInfo> {
        match &mut self.child {
            Some(c) => {
                use std::os::unix::process::ExitStatusExt;
                let status = c.try_wait().ok()??;
                let signal = status.signal();
                let code = status.code().unwrap_or_else(|| 128 + signal.unwrap_or(0));
                Some(ExitInfo { code, signal, unknown: false })
            }
            None => match start_ticks(self.record.pid) {
                Some(t) if t == self.record.start_ticks => None,
                _ => Some(ExitInfo { code: 137, signal: None, unknown: true }),
            },
        }
    }

    /// Sends `sig` to the container's process group (SIGKILL also to a runc container's
    /// processes, in whichever session they are).
    pub fn signal(&self, sig: Signal) {
        if let (Signal::SIGKILL, Some(r)) = (sig, &self.record.runc) {
            r.kill();
        }
        let _ = killpg(Pid::from_raw(self.record.pid), sig);
    }

    /// Asks it to stop (SIGTERM); [`Process::poll`] sends SIGKILL `within` later.
    pub fn stop(&mut self, within: Duration) {
        if self.stop.is_none() {
            self.signal(Signal::SIGTERM);
            self.stop = Some(Stop { kill_at: Instant::now() + within });
        }
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.is_some()
    }
}

/// SIGKILLs container `name` of every pod in the kubelet state directory `state_dir`, as a
/// crash would end it (`lab kill agent` in a kube lab): the kubelet then sees the exit and
/// restarts it under the pod's policy. How many were running.
pub fn kill_running(state_dir: &Path, name: &str) -> usize {
    let pods = std::fs::read_dir(state_dir.join("pods")).into_iter().flatten().flatten();
    let records = pods.filter_map(|pod| std::fs::read_to_string(files(&pod.path(), name).record).ok());
    let running =
        records.filter_map(|text| serde_json::from_str::<Record>(&text).ok()).filter_map(Process::adopt);
    let mut killed = 0;
    for p in running {
        p.signal(Signal::SIGKILL);
        killed += 1;
    }
    killed
}

/// The files of container `name` in pod directory `pod_dir`.
pub struct Files {
    /// Its record.
    pub record: PathBuf,
    /// The helper's spec.
    pub spec: PathBuf,
    /// Its output.
    pub log: PathBuf,
    /// The overlays' scratch directory.
    pub scratch: PathBuf,
}

/// Where container `name`'s files are.
pub fn files(pod_dir: &Path, name: &str) -> Files {
    let d = pod_dir.join("containers");
    Files {
        record: d.join(format!("{name}.json")),
        spec: d.join(format!("{name}.spec.json")),
        log: d.join(format!("{name}.log")),
        scratch: d.join(format!("{name}.scratch")),
    }
}

/// The container helper: sets up the mount namespace of `spec_file`'s container and runs its
/// processes; returns only on failure (one process is executed in place) or when the first of
/// several ends (the others are then stopped).
pub fn run_helper(spec_file: &Path) -> anyhow::Result<i32> {
    use std::os::unix::process::CommandExt;
    let spec: ContainerSpec = serde_json::from_str(&std::fs::read_to_string(spec_file)?)?;
    super::mounts::enter(&spec)?;
    std::env::set_current_dir(spec.working_dir.as_deref().unwrap_or("/"))?;
    let command = |argv: &Vec<String>| {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).env_clear().envs(spec.env.iter().map(|(k, v)| (k, v)));
        if !spec.env.iter().any(|(k, _)| k == "PATH") {
            c.env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        }
        c
    };
    match spec.processes.as_slice() {
        [] => anyhow::bail!("the container has nothing to run"),
        [one] => Err(command(one).exec().into()),
        many => {
            let mut children: Vec<Child> =
                many.iter().map(|a| command(a).spawn()).collect::<Result<_, _>>()?;
            let status = nix::sys::wait::wait()?;
            for c in &mut children {
                let _ = c.kill();
            }
            Ok(match status {
                nix::sys::wait::WaitStatus::Exited(_, code) => code,
                nix::sys::wait::WaitStatus::Signaled(_, sig, _) => 128 + sig as i32,
                _ => 1,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_is_found_again_and_a_gone_one_is_not() {
        let me = std::process::id() as i32;
        let ticks = start_ticks(me).expect("this process runs");
        let record = |start_ticks| Record {
            pod_uid: "u".into(),
            pid: me,
            start_ticks,
            started_at: String::new(),
            restart_count: 0,
            runc: None,
        };
        let mut p = Process::adopt(record(ticks)).expect("adopted");
        assert_eq!(p.poll(), None, "still running");
        assert!(Process::adopt(record(ticks + 1)).is_none(), "another process with a reused pid");
        assert_eq!(
            helper_argv("tw-t-p-n-a", Path::new("/b/tideway"), Path::new("/s/c.spec.json")).join(" "),
            "ip netns exec tw-t-p-n-a /b/tideway lab container --spec /s/c.spec.json"
        );
    }

    #[test]
    fn a_started_process_reports_its_exit_code() {
        let dir = std::env::temp_dir().join(format!("tideway-runtime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let argv: Vec<String> = ["sh", "-c", "exit 3"].iter().map(|s| s.to_string()).collect();
        let mut p = Process::spawn(&argv, &dir.join("log"), "u", String::new(), 0).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let exit = loop {
            if let Some(e) = p.poll() {
                break e;
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(exit, ExitInfo { code: 3, signal: None, unknown: false });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

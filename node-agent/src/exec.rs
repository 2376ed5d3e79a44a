//! Running the kernel tools (`nft`, `iptables-restore`, `ipset`, `ip`, `conntrack`, FRR's
//! `vtysh` and `frr-reload.py`) with errors that carry the command, its exit status and the
//! input lines it complained about.
//!
//! Every child has a deadline (`--command-deadline`, 60 s): past it, the child's process group
//! is killed and the error names the command. `iptables-restore --wait` otherwise waits for
//! the xtables lock for ever. [`stuck`] says what `/livez` reports: a child running past its
//! deadline, or a command killed at it that has not succeeded since.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// A command that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` failed ({status}): {stderr}{}", render_lines(.lines))]
pub struct CommandError {
    /// The command line.
    pub command: String,
    /// How it ended.
    pub status: CommandStatus,
    /// Its standard error, trimmed.
    pub stderr: String,
    /// The input lines the tool pointed at (with their numbers), when it named one.
    pub lines: Vec<String>,
}

/// How a command that did not succeed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
    /// It could not be started (the tool is missing, or not executable).
    NotStarted(std::io::ErrorKind),
    /// Waiting for it failed.
    Lost(std::io::ErrorKind),
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Killed(i32),
    /// It ran past its deadline and was killed.
    Deadline(Duration),
}

impl std::fmt::Display for CommandStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandStatus::NotStarted(kind) => write!(f, "cannot start: {kind}"),
            CommandStatus::Lost(kind) => write!(f, "wait failed: {kind}"),
            CommandStatus::Exited(code) => write!(f, "exit status {code}"),
            CommandStatus::Killed(signal) => write!(f, "killed by signal {signal}"),
            CommandStatus::Deadline(d) => write!(f, "killed at its deadline of {}", secs(*d)),
        }
    }
}

impl CommandStatus {
    fn of(status: std::process::ExitStatus) -> CommandStatus {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => CommandStatus::Exited(code),
            (None, Some(signal)) => CommandStatus::Killed(signal),
            (None, None) => CommandStatus::Exited(-1),
        }
    }
}

fn render_lines(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("\n  input around the error:\n    {}", lines.join("\n    "))
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The deadline of every child, in milliseconds.
static DEADLINE_MS: AtomicU64 = AtomicU64::new(60_000);

/// Sets every child's deadline (`--command-deadline`).
pub fn set_deadline(d: Duration) {
    DEADLINE_MS.store(u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1), Ordering::Relaxed);
}

/// Every child's deadline.
pub fn deadline() -> Duration {
    Duration::from_millis(DEADLINE_MS.load(Ordering::Relaxed))
}

/// The children running now (pid -> command line, start), so that a stop can cancel them
/// instead of waiting them out and `/livez` can name one that hangs.
static RUNNING: Mutex<BTreeMap<u32, (String, Instant)>> = Mutex::new(BTreeMap::new());

/// Per program, the last run killed at its deadline (command line, how long it ran, when),
/// until the program next succeeds.
static OVERRUN: Mutex<BTreeMap<String, (String, Duration, SystemTime)>> = Mutex::new(BTreeMap::new());

/// A child's entry in [`RUNNING`], removed when the wait for it ends.
struct Running(u32);

impl Running {
    fn register(pid: u32, command: &str) -> Running {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).insert(pid, (command.to_string(), Instant::now()));
        Running(pid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.0);
    }
}

/// Kills `pid`'s process group (the child and what it started).
fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Kills every child still running (`iptables-restore`, `ipset`, ...). Their writes are
/// transactions: a killed one changes nothing.
pub fn kill_running() {
    for pid in RUNNING.lock().unwrap_or_else(|e| e.into_inner()).keys() {
        kill_group(*pid);
    }
}

/// What keeps the agent from being live, for `/livez`: a child running past its deadline
/// (one the kill did not end), or a command killed at its deadline whose program has not
/// succeeded since.
pub fn stuck() -> Option<String> {
    let limit = deadline();
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let longest = running.values().max_by_key(|(_, t)| t.elapsed()).filter(|(_, t)| t.elapsed() > limit);
    if let Some((command, started)) = longest {
        return Some(format!(
            "`{command}` has run for {} (deadline {})",
            secs(started.elapsed()),
            secs(limit)
        ));
    }
    drop(running);
    let overrun = OVERRUN.lock().unwrap_or_else(|e| e.into_inner());
    overrun.values().max_by_key(|(_, _, at)| *at).map(|(command, ran, at)| {
        let ago = at.elapsed().unwrap_or_default();
        format!(
            "`{command}` ran {} and was killed at its deadline {} ago; it has not succeeded since",
            secs(*ran),
            secs(ago)
        )
    })
}

/// Runs `program args`, feeding `input` on stdin; returns stdout. Past [`deadline`] the child
/// (and its process group) is killed.
pub fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<String, CommandError> {
    let command = std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let fail = |status: CommandStatus, stderr: String| CommandError {
        lines: input.map(|i| offending_lines(&stderr, i)).unwrap_or_default(),
        command: command.clone(),
        status,
        stderr,
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| fail(CommandStatus::NotStarted(e.kind()), e.to_string()))?;
    let pid = child.id();
    let _running = Running::register(pid, &command);
    if let (Some(text), Some(mut stdin)) = (input.map(str::to_owned), child.stdin.take()) {
        // On a thread of its own: a child that reads nothing must not hold us past the deadline.
        // A tool that rejects its input early closes stdin: its exit status tells why.
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let limit = deadline();
    let started = Instant::now();
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.map_err(|e| fail(CommandStatus::Lost(e.kind()), e.to_string()))?,
        Err(_) => {
            kill_group(pid);
            // The pipes close once the group is gone; what it said so far is worth keeping.
            let said = rx.recv_timeout(Duration::from_secs(2)).ok().and_then(Result::ok);
            let stderr =
                said.map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string()).unwrap_or_default();
            let ran = started.elapsed();
            OVERRUN
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(program.to_string(), (command.clone(), ran, SystemTime::now()));
            tracing::error!(%command, ran = ?ran, deadline = ?limit, "command killed at its deadline");
            return Err(fail(CommandStatus::Deadline(limit), stderr));
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        OVERRUN.lock().unwrap_or_else(|e| e.into_inner()).remove(program);
        Ok(stdout)
    } else {
        Err(fail(CommandStatus::of(out.status), String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// Finds the line numbers a tool reported (`line 5 failed`, `/dev/stdin:5:3-9: Error`) and
/// returns those input lines with one line of context on each side.
pub fn offending_lines(stderr: &str, input: &str) -> Vec<String> {
    let mut numbers: Vec<usize> = Vec::new();
    for part in stderr.split(|c: char| c.is_whitespace() || c == ',') {
        if let Some(n) =
            part.strip_prefix("/dev/stdin:").and_then(|r| r.split(':').next()).and_then(|n| n.parse().ok())
        {
            numbers.push(n);
        }
    }
    let words: Vec<&str> = stderr.split_whitespace().collect();
    for w in words.windows(2) {
        if w[0] == "line"
            && let Ok(n) = w[1].trim_end_matches(':').parse::<usize>()
        {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    let lines: Vec<&str> = input.lines().collect();
    let mut out = Vec::new();
    for n in numbers.into_iter().take(3) {
        for i in n.saturating_sub(1).max(1)..=(n + 1).min(lines.len()) {
            let marker = if i == n { ">" } else { " " };
            out.push(format!("{marker}{i:>6}: {}", lines[i - 1]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_iptables_and_nft_line_numbers() {
        let input = "a\nb\nc\nd\n";
        assert_eq!(
            offending_lines("iptables-restore: line 3 failed", input),
            vec!["      2: b", ">     3: c", "      4: d"]
        );
        assert_eq!(offending_lines("/dev/stdin:2:1-4: Error: syntax error", input)[1], ">     2: b");
        assert!(offending_lines("no numbers here", input).is_empty());
    }

    #[test]
    fn reports_command_status_and_stderr() {
        let e = run("sh", &["-c", "echo boom >&2; exit 3"], Some("x\n")).unwrap_err();
        assert_eq!(e.command, "sh -c echo boom >&2; exit 3");
        assert_eq!((e.status, e.stderr.as_str()), (CommandStatus::Exited(3), "boom"), "{e}");
        assert!(e.to_string().contains("(exit status 3)"), "{e}");
        assert_eq!(run("sh", &["-c", "cat"], Some("hello")).unwrap(), "hello");
        let missing = run("/nonexistent/tool", &[], None).unwrap_err();
        assert_eq!(missing.status, CommandStatus::NotStarted(std::io::ErrorKind::NotFound));
        assert_eq!(run("sh", &["-c", "kill -9 $$"], None).unwrap_err().status, CommandStatus::Killed(9));
    }
}

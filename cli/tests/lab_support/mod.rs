//! A running lab for the end-to-end tests: `tideway lab up --detach` of a file, `lab exec`,
//! `lab status`, curls and waits, and `lab down` when dropped.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) mod lookups;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_tideway");

/// `secs` seconds, longer in a slow VM (`TIDEWAY_TEST_TIME_SCALE`).
pub(crate) fn patience(secs: f64) -> Duration {
    let scale =
        std::env::var("TIDEWAY_TEST_TIME_SCALE").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(1.0);
    Duration::from_secs_f64(secs * scale.max(1.0))
}

pub(crate) struct TestLab {
    pub(crate) name: String,
    pub(crate) dir: std::path::PathBuf,
}

/// `tideway ARGS`; in a slow VM the lab's agents and operator run their failure detector
/// slower by the same scale (`TIDEWAY_GOSSIP_TIME_SCALE`, inherited by the lab's processes), so
/// that a stalled but living agent is not declared down.
pub(crate) fn tideway(args: &[&str]) -> Output {
    let scale = patience(1.0).as_secs_f64();
    Command::new(BIN)
        .args(args)
        .env("TIDEWAY_GOSSIP_TIME_SCALE", scale.clamp(1.0, 100.0).to_string())
        .stdin(Stdio::null())
        .output()
        .expect("tideway runs")
}

pub(crate) fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl TestLab {
    /// A lab of `text` (in `mode` when given), up and working.
    pub(crate) fn up(name: &str, text: &str, mode: Option<&str>) -> TestLab {
        let mode_args = mode.map(|m| vec!["--mode", m]).unwrap_or_default();
        TestLab::up_with(name, text, &mode_args)
    }

    /// A lab of `text` started with `lab up`'s `extra` arguments, up and working.
    pub(crate) fn up_with(name: &str, text: &str, extra: &[&str]) -> TestLab {
        tideway_tests::netns::require_root("the lab");
        let dir = std::env::temp_dir().join(format!("tideway-lab-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lab.yaml");
        std::fs::write(&file, text).unwrap();
        let lab = TestLab { name: name.to_string(), dir };
        let file = file.display().to_string();
        let mut args = vec!["lab", "up", "--detach", "--name", name, "-f", &file];
        args.extend(extra);
        ok(tideway(&args), "lab up");
        lab
    }

    pub(crate) fn exec(&self, target: &str, cmd: &[&str]) -> Output {
        let mut args = vec!["lab", "exec", "--name", &self.name, target, "--"];
        args.extend(cmd);
        tideway(&args)
    }

    /// The `Hostname:` a curl from `from` to `url` got, or why not.
    pub(crate) fn curl(&self, from: &str, url: &str) -> Result<String, String> {
        let out = self.exec(from, &["curl", "-s", "--max-time", "2", url]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("Hostname: ").map(str::to_string))
            .ok_or_else(|| format!("curl {url} from {from}: exit {:?} {text}", out.status.code()))
    }

    /// The whole whoami answer.
    pub(crate) fn curl_body(&self, from: &str, url: &str) -> String {
        String::from_utf8_lossy(&self.exec(from, &["curl", "-s", "--max-time", "2", url]).stdout).into_owned()
    }

    /// `lab apply` (`how`: also `delete` or `replace`) of `text`.
    pub(crate) fn change(&self, how: &str, text: &str) {
        let file = self.dir.join(format!("{how}-{}.yaml", Instant::now().elapsed().as_nanos()));
        std::fs::write(&file, text).unwrap();
        ok(tideway(&["lab", how, "--name", &self.name, "-f", &file.display().to_string()]), how);
    }

    pub(crate) fn apply(&self, text: &str) {
        self.change("apply", text);
    }

    pub(crate) fn status(&self) -> Value {
        serde_json::from_str(&ok(tideway(&["lab", "status", "--json", "--name", &self.name]), "lab status"))
            .unwrap()
    }

    /// The first LoadBalancer address of Service `svc`, once assigned.
    pub(crate) fn lb_ip(&self, svc: &str) -> String {
        eventually(patience(10.0), || {
            let s = self.status();
            let svc = s["services"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == svc)
                .cloned()
                .ok_or("no such Service")?;
            svc["externalIPs"][0].as_str().map(str::to_string).ok_or_else(|| format!("no address yet: {svc}"))
        })
        .unwrap()
    }

    pub(crate) fn announcer(&self, svc: &str) -> Option<String> {
        let s = self.status();
        s["services"].as_array()?.iter().find(|x| x["name"] == svc)?["announcer"].as_str().map(str::to_string)
    }

    /// What the lab looked like: its status, and each node's connection-tracking table.
    pub(crate) fn diagnose(&self) -> String {
        let mut out = format!("lab status: {}\n", self.status());
        for n in self.status()["nodes"].as_array().into_iter().flatten() {
            let name = n["name"].as_str().unwrap_or_default();
            let ct = self.exec(name, &["conntrack", "-L"]);
            out += &format!("conntrack on {name}:\n{}\n", String::from_utf8_lossy(&ct.stdout));
        }
        // Each agent's own status (the lab shows their last NodeProxyState), asked with a
        // time limit: an agent whose sync loop is stuck does not answer.
        let status = self.status();
        let token = format!("authorization: Bearer {}", status["apiToken"].as_str().unwrap_or_default());
        for label in status["apis"].as_object().into_iter().flat_map(|a| a.keys()) {
            if label.starts_with("agent/") && !label.ends_with("/healthz") {
                let url = api_url(&status, label, "/api/v1/status");
                let got = curl_api(&status).args(["-s", "--max-time", "5", "-H", &token, &url]).output();
                let text = got.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
                out += &format!("{label} says: {}\n", if text.is_empty() { "(no answer)" } else { &text });
            }
        }
        // What every process is doing (a child that hangs, a thread waiting in the kernel).
        let ps = Command::new("ps").args(["-eLo", "pid,tid,stat,wchan:32,etime,args"]).output();
        let ps = ps.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let busy = ps.lines().filter(|l| ["tideway", "iptables", "nft", "ip "].iter().any(|w| l.contains(w)));
        out += &format!("processes:\n{}\n", busy.collect::<Vec<_>>().join("\n"));
        // What the components warned of (an address that moved, a member thought dead), and
        // the last lines of each log whatever they say.
        let dir = std::path::Path::new(status["dir"].as_str().unwrap_or_default()).to_path_buf();
        let logs = std::fs::read_dir(dir.join("logs")).into_iter().flatten().flatten().map(|e| e.path());
        for path in logs.chain([dir.join("lab.log")]) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let notable: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("announc"))
                .collect();
            let last = &notable[notable.len().saturating_sub(20)..];
            let tail = &lines[lines.len().saturating_sub(15)..];
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            out +=
                &format!("{name}, notable:\n{}\n{name}, last lines:\n{}\n", last.join("\n"), tail.join("\n"));
        }
        out
    }

    pub(crate) fn mac_of(&self, node: &str) -> String {
        let out = ok(self.exec(node, &["cat", "/sys/class/net/eth0/address"]), "read a MAC");
        out.trim().to_string()
    }

    pub(crate) fn neighbour(&self, from: &str, ip: &str) -> String {
        String::from_utf8_lossy(&self.exec(from, &["ip", "neigh", "show", ip]).stdout).into_owned()
    }
}

impl Drop for TestLab {
    fn drop(&mut self) {
        // A kube lab's API server recorded what the components did: `make check-rbac` counts it.
        let status = tideway(&["lab", "status", "--json", "--name", &self.name]);
        if let Ok(s) = serde_json::from_slice::<Value>(&status.stdout)
            && let Some(dir) = s["dir"].as_str()
        {
            tideway_tests::audit::record_usage(&std::path::Path::new(dir).join("kube/audit.log"));
            if std::thread::panicking() {
                keep_logs(std::path::Path::new(dir), &self.name);
            }
        }
        let _ = tideway(&["lab", "down", "--name", &self.name]);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A failed test's lab logs (the components', the pods' and the API server's audit), kept
/// under the target's scratch directory for reading after the lab is gone.
fn keep_logs(dir: &std::path::Path, name: &str) {
    let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("failed-labs").join(name);
    let _ = std::fs::remove_dir_all(&kept);
    let _ = std::fs::create_dir_all(&kept);
    let copied = Command::new("sh")
        .args(["-c", "find . -name '*.log' -size -100M -exec cp --parents {} \"$0\" \\;"])
        .arg(&kept)
        .current_dir(dir)
        .status();
    match copied {
        Ok(_) => eprintln!("the lab's logs are kept in {}", kept.display()),
        Err(e) => eprintln!("the lab's logs not kept: {e}"),
    }
}

pub(crate) fn eventually<T>(within: Duration, mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Which pods answered `n` curls from `from` to `url`, one after another; any curl that fails
/// fails the test. The curls run in one `lab exec`: a process start of the test's own binary
/// costs seconds in an emulated VM, and 40 of them were most of the IPVS scenario's time there.
pub(crate) fn split(lab: &TestLab, from: &str, url: &str, n: usize) -> BTreeMap<String, usize> {
    assert!(!url.contains('\''), "{url}");
    let script = format!(
        "for i in $(seq {n}); do curl -s --max-time 2 '{url}' || echo \"curl $i failed: exit $?\"; done"
    );
    let out = lab.exec(from, &["sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("curl ") && line.contains(" failed: exit ") {
            panic!("{line}: curl {url} from {from}\n{}", lab.diagnose());
        }
        if let Some(who) = line.strip_prefix("Hostname: ") {
            *seen.entry(who.to_string()).or_default() += 1;
        }
    }
    let answered: usize = seen.values().sum();
    assert_eq!(
        answered,
        n,
        "{n} curls of {url} from {from} gave {answered} answers: {text}\n{}",
        lab.diagnose()
    );
    seen
}

/// Waits until curls from `from` to `url` were answered by `pods` different pods. `lab up`
/// returns once every agent synced and every pod started, which can be before the pods'
/// readiness probes pass and their endpoints are programmed: a curl right then may be
/// refused, as it would be by kube-proxy for a Service without ready endpoints.
pub(crate) fn wait_serving(lab: &TestLab, from: &str, url: &str, pods: usize) {
    wait_serving_within(lab, from, url, pods, patience(30.0));
}

/// [`wait_serving`] with a patience of its own.
pub(crate) fn wait_serving_within(lab: &TestLab, from: &str, url: &str, pods: usize, within: Duration) {
    let mut seen = std::collections::BTreeSet::new();
    eventually(within, || {
        if let Ok(who) = lab.curl(from, url) {
            seen.insert(who);
        }
        if seen.len() >= pods {
            Ok(())
        } else {
            Err(format!("{url} from {from}: answered by {seen:?} so far"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// curl trusting the lab's CA (its REST APIs are HTTPS).
pub(crate) fn curl_api(status: &Value) -> Command {
    let mut curl = Command::new("curl");
    if let Some(ca) = status["caFile"].as_str() {
        curl.args(["--cacert", ca]);
    }
    curl
}

/// The URL of `path` on the lab's API `label` (`operator`, `agent/NODE`, `dns`).
pub(crate) fn api_url(status: &Value, label: &str, path: &str) -> String {
    let addr = status["apis"][label].as_str().unwrap_or_else(|| panic!("no API {label}: {status}"));
    tideway_lab::certs::url(label, addr, path)
}

/// A TCP connection to whoami's line protocol: one line out, its name back.
pub(crate) struct Conn {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Conn {
    pub(crate) fn open(lab: &TestLab, from: &str, ip: &str) -> Conn {
        let mut child = Command::new(BIN)
            .args(["lab", "exec", "--name", &lab.name, from, "--", "python3", "-u", "-c", PY_CLIENT, ip])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("client");
        let out = BufReader::new(child.stdout.take().unwrap());
        Conn { child, out }
    }

    pub(crate) fn ask(&mut self) -> String {
        writeln!(self.child.stdin.as_mut().unwrap(), "hello").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Relays stdin lines over one TCP connection to port 80 and prints each answer.
const PY_CLIENT: &str = "import socket,sys\ns=socket.create_connection((sys.argv[1],80),timeout=5)\nf=s.makefile('rw')\nfor l in sys.stdin:\n  f.write(l);f.flush();print(f.readline().strip() or 'closed',flush=True)\n";

/// Tideway's iptables lines and whether its nftables table is there. kubelet's `KUBE-FIREWALL`
/// (the martian drop that iptables mode writes for localhost NodePorts) stays after a switch,
/// as kube-proxy leaves it: it guards `route_localnet`, which stays on too.
pub(crate) fn leftovers(lab: &TestLab, node: &str) -> (usize, bool) {
    let saved = String::from_utf8_lossy(&lab.exec(node, &["iptables-save"]).stdout).into_owned();
    let ipt = saved.lines().filter(|l| l.contains("KUBE-") && !l.contains("KUBE-FIREWALL")).count();
    let nft = String::from_utf8_lossy(&lab.exec(node, &["nft", "list", "tables"]).stdout).contains("tideway");
    (ipt, nft)
}

/// Waits until every node of the lab runs `mode` and has synced, and `node` keeps nothing of
/// the other mode (the switch is done).
pub(crate) fn wait_switched(lab: &TestLab, node: &str, mode: &str) {
    wait_all_in_mode(lab, mode, patience(30.0));
    eventually(patience(15.0), || {
        let (ipt, nft) = leftovers(lab, node);
        match mode {
            "nftables" if ipt == 0 && nft => Ok(()),
            "iptables" if ipt > 0 && !nft => Ok(()),
            _ => Err(format!("{mode}: {ipt} KUBE- iptables lines, tideway nft table: {nft}")),
        }
    })
    .unwrap();
}

/// Waits up to `within` until every node of the lab runs `mode` and has synced.
pub(crate) fn wait_all_in_mode(lab: &TestLab, mode: &str, within: Duration) {
    eventually(within, || {
        let s = lab.status();
        let nodes = s["nodes"].as_array().unwrap();
        let all = nodes.iter().all(|n| n["mode"] == mode && n["synced"] == true);
        if all { Ok(()) } else { Err(format!("not all nodes in {mode}: {nodes:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// Node `node`'s row of `lab status`.
pub(crate) fn node_row(lab: &TestLab, node: &str) -> Value {
    let s = lab.status();
    let row = s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == node).cloned();
    row.unwrap_or_else(|| panic!("no node {node}: {s}"))
}

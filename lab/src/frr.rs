//! FRR in the lab's namespaces: every node runs zebra, bfdd and bgpd (as the chart's FRR
//! DaemonSet does) for its agent to drive, and every router runs them with the configuration
//! [`crate::router::frr_config`] renders, applied with FRR's own `frr-reload.py` (sessions stay
//! up across a change). Each namespace's daemons live under their own path space (`-N`, the
//! namespace's name), so `vtysh -N NAMESPACE` reaches them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// FRR's daemons, in start order.
pub const DAEMONS: [&str; 3] = ["zebra", "bfdd", "bgpd"];

/// Where FRR keeps the sockets and pid files of path space `ns`.
pub fn run_dir(ns: &str) -> PathBuf {
    PathBuf::from("/var/run/frr").join(ns)
}

/// Why FRR could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum FrrError {
    /// A file or a program.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A program said no.
    #[error("{program} failed: {output}")]
    Refused {
        /// The program.
        program: String,
        /// Its output.
        output: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FrrError {
    let what = what.into();
    move |source| FrrError::Io { what, source }
}

/// Makes `ns`'s run directory, owned by the `frr` user the daemons run as, with the empty
/// start-up configuration they are given (the agents and the lab give them the rest).
pub fn prepare(ns: &str) -> Result<(), FrrError> {
    let dir = run_dir(ns);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    std::fs::write(dir.join("empty.conf"), "").map_err(io("writing empty.conf"))?;
    let user = nix::unistd::User::from_name("frr").ok().flatten().ok_or_else(|| FrrError::Refused {
        program: "frr".into(),
        output: "no user frr: is FRR installed?".into(),
    })?;
    for path in [dir.clone(), dir.join("empty.conf")] {
        nix::unistd::chown(&path, Some(user.uid), Some(user.gid))
            .map_err(|e| io(format!("chown {}", path.display()))(e.into()))?;
    }
    Ok(())
}

/// The shell test `daemon` waits on before it starts in path space `ns`: FRR's daemons start in
/// order, as FRR's own init script starts them. bfdd waits for zebra's vty socket, which zebra
/// opens only once its API socket listens (a client that connects before that retries after
/// 10 s); bgpd waits until zebra lists bfdd among its clients, since bgpd's BFD sessions sent
/// before bfdd is registered are never installed (the router then keeps a cut-off node's routes
/// until BGP's hold time).
fn waits_for(ns: &str, daemon: &str) -> Option<String> {
    let dir = run_dir(ns);
    match daemon {
        "bfdd" => Some(format!("[ -S {} ]", dir.join("zebra.vty").display())),
        "bgpd" => Some(format!(
            "vtysh -N {ns} -d zebra -c 'show zebra client summary' 2>/dev/null | grep -q '^bfd '"
        )),
        _ => None,
    }
}

/// The command line of `daemon` in namespace `ns`, in the foreground (the lab supervises it),
/// logging to its standard output; it starts once the daemon before it is ready (at most 10 s).
pub fn daemon_argv(ns: &str, daemon: &str) -> Vec<String> {
    let dir = run_dir(ns);
    let path = |f: &str| dir.join(f).display().to_string();
    let program = format!(
        "exec /usr/lib/frr/{daemon} -N {ns} -f {} -i {} --log stdout",
        path("empty.conf"),
        path(&format!("{daemon}.pid"))
    );
    let script = match waits_for(ns, daemon) {
        Some(ready) => format!("for i in $(seq 100); do {ready} && break; sleep 0.1; done; {program}"),
        None => program,
    };
    ["ip", "netns", "exec", ns, "sh", "-c", &script].iter().map(|s| s.to_string()).collect()
}

/// Hands `config` to the daemons of path space `ns` with `frr-reload.py` (the file and its
/// temporary files under `dir`).
pub fn apply(ns: &str, dir: &std::path::Path, config: &str) -> Result<(), FrrError> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let file = dir.join("frr.conf");
    std::fs::write(&file, config).map_err(io(format!("writing {}", file.display())))?;
    let out = Command::new("/usr/lib/frr/frr-reload.py")
        .args(["--reload", "--stdout", "--pathspace", ns, "--rundir"])
        .arg(dir)
        .arg(&file)
        .output()
        .map_err(io("running frr-reload.py"))?;
    if !out.status.success() {
        let output =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let output = output.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(FrrError::Refused { program: "frr-reload.py".into(), output });
    }
    Ok(())
}

/// The BGP routes of namespace `ns`'s kernel: destination -> next hops (sorted).
pub fn bgp_routes(ns: &str) -> BTreeMap<String, Vec<String>> {
    let out = Command::new("ip").args(["-n", ns, "-j", "route", "show", "proto", "bgp"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    routes_of(&serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `ip -j route`'s answer as destination -> next hops.
fn routes_of(routes: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in routes.as_array().into_iter().flatten() {
        let Some(dst) = r["dst"].as_str() else { continue };
        let hops = out.entry(dst.trim_end_matches("/32").to_string()).or_default();
        match r["nexthops"].as_array() {
            Some(list) => hops.extend(list.iter().filter_map(|h| h["gateway"].as_str().map(String::from))),
            None => hops.extend(r["gateway"].as_str().map(String::from)),
        }
        hops.sort();
    }
    out
}

/// Removes the run directories of every path space starting with `prefix` (the daemons are
/// gone with their namespaces).
pub fn remove_run_dirs(prefix: &str) {
    let Ok(dir) = std::fs::read_dir("/var/run/frr") else { return };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn routes_read_single_and_multipath_answers() {
        let routes = json!([
            {"dst": "203.0.113.10", "protocol": "bgp", "nexthops": [
                {"gateway": "172.18.0.5", "dev": "eth0"}, {"gateway": "172.18.0.4", "dev": "eth0"}]},
            {"dst": "203.0.113.20", "gateway": "172.18.0.3", "dev": "eth0", "protocol": "bgp"},
            {"dst": "203.0.113.0/24", "gateway": "172.18.0.3"}
        ]);
        let got = routes_of(&routes);
        assert_eq!(got["203.0.113.10"], ["172.18.0.4", "172.18.0.5"]);
        assert_eq!(got["203.0.113.20"], ["172.18.0.3"]);
        assert_eq!(got["203.0.113.0/24"], ["172.18.0.3"]);
        assert!(routes_of(&Value::Null).is_empty());
    }

    #[test]
    fn daemons_run_in_their_namespace_under_its_path_space() {
        let argv = daemon_argv("tw-demo-r-tor", "bgpd");
        assert_eq!(argv[..6], ["ip", "netns", "exec", "tw-demo-r-tor", "sh", "-c"]);
        assert_eq!(
            argv[6],
            "for i in $(seq 100); do vtysh -N tw-demo-r-tor -d zebra -c 'show zebra client summary' \
             2>/dev/null | grep -q '^bfd ' && break; sleep 0.1; done; \
             exec /usr/lib/frr/bgpd -N tw-demo-r-tor -f /var/run/frr/tw-demo-r-tor/empty.conf -i /var/run/frr/tw-demo-r-tor/bgpd.pid --log stdout"
        );
        assert!(
            daemon_argv("tw-demo-r-tor", "zebra")[6].starts_with("exec /usr/lib/frr/zebra -N tw-demo-r-tor ")
        );
    }
}

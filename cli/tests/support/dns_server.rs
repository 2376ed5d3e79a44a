//! `tideway dns --source kubernetes` as a process of the test: started with a kubeconfig, asked
//! with `dig`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tideway_tests::netns::eventually;

use super::{free_port, patience};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tideway")
}

pub(crate) struct Dns {
    child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
}

impl Dns {
    /// `tideway dns --source kubernetes` on a free loopback port with `extra` flags, its log in
    /// `dir/NAME.log`.
    pub(crate) fn start(kubeconfig: &Path, dir: &Path, name: &str, extra: &[&str]) -> Dns {
        // A port free a moment ago may be taken by a test running beside this one before the
        // server binds it: then it exits at once, saying so, and starts again on another.
        for _ in 0..5 {
            let mut dns = Dns::spawn(kubeconfig, dir, name, extra);
            if !dns.lost_its_port() {
                return dns;
            }
        }
        panic!("tideway dns found no free port in five tries");
    }

    fn spawn(kubeconfig: &Path, dir: &Path, name: &str, extra: &[&str]) -> Dns {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin())
            .args(["dns", "--source", "kubernetes", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--listen", &addr.to_string(), "--upstream", "127.0.0.1:9"])
            .args(["--no-loop-probe", "--workers", "1", "--lameduck", "0s", "--api-listen", "none"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("tideway dns");
        Dns { child, addr, log }
    }

    /// True when the server exited because its listen address was taken (it binds first
    /// thing: listening on TCP within 5 s means it holds the port).
    fn lost_its_port(&mut self) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.log().contains("cannot listen on");
            }
            if std::net::TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Its process's id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `dig` for `name`, from source address `from` when given (a pod's address on loopback).
    pub(crate) fn dig(&self, from: Option<&str>, name: &str) -> String {
        let mut cmd = Command::new("dig");
        cmd.args([&format!("@{}", self.addr.ip()), "-p", &self.addr.port().to_string()]);
        if let Some(from) = from {
            cmd.args(["-b", from]);
        }
        let out = cmd.args(["+tries=1", "+time=2", name]).output().expect("dig (dnsutils) is installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Asks until the answer contains `want`, for at most `secs`.
    pub(crate) fn until(&self, from: Option<&str>, name: &str, want: &str, secs: f64) {
        eventually(patience(secs), || {
            let out = self.dig(from, name);
            if out.contains(want) { Ok(()) } else { Err(out) }
        })
        .unwrap_or_else(|e| panic!("{name}: no {want}: {e}\n{}", self.log()));
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code of `GET path` at `addr`.
pub(crate) fn http_code(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return (0, String::new());
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    (text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), text)
}

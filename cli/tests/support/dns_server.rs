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

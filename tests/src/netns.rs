//! Test clusters made of network namespaces: a LAN bridge, nodes with routed pod interfaces,
//! and an external client. Only addresses inside these namespaces are ever contacted.
//!
//! ```text
//!   client 192.168.0.100 ──┐
//!                          br0 (lan namespace, 192.168.0.1)
//!   node-a 192.168.0.10 ───┤        node-b 192.168.0.11 ──┘
//!     ├─ pod 10.244.1.x (veth, /32 routes)      ├─ pod 10.244.2.x
//! ```
//! Pod CIDR routes point at the owning node; the client routes Service, LB and external IPs
//! to a node of the test's choice.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// True when running as root (namespace tests need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// What a privileged test says when it cannot run: it fails, it never passes by skipping.
pub const NEEDS_ROOT: &str = "needs root (network namespaces, the kernel's rules); run the tests as \
     root, or leave every privileged test out explicitly with `TIDEWAY_SKIP_PRIVILEGED=1 make unit`";

/// Fails the calling test, naming `what`, unless it runs as root.
pub fn require_root(what: &str) {
    assert!(is_root(), "{what} {NEEDS_ROOT}");
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A network namespace, deleted (with its processes) on drop.
#[derive(Debug)]
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

fn check(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Netns {
    /// Creates a namespace with loopback up.
    pub fn create(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        check("ip netns add", Command::new("ip").args(["netns", "add", name]).output().expect("ip"));
        let ns = Netns { name: name.to_string() };
        ns.sh("ip link set lo up");
        ns
    }

    /// Runs a shell command inside; panics with its output on failure.
    pub fn sh(&self, cmd: &str) -> String {
        let out = check(&format!("[{}] {cmd}", self.name), self.try_sh(cmd));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a shell command inside.
    pub fn try_sh(&self, cmd: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", cmd])
            .output()
            .expect("ip netns exec")
    }

    /// Starts a program inside, with its output appended to `log`.
    pub fn spawn(&self, program: &Path, args: &[&str], log: &Path, env: &[(&str, &str)]) -> Child {
        let out = File::options().create(true).append(true).open(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn().expect("spawn in namespace")
    }

    /// Polls `done` inside this namespace every `every` until it returns what it waited for;
    /// panics with `what` after `within`.
    pub fn wait_for<T: Send + 'static>(
        &self,
        what: &'static str,
        (within, every): (Duration, Duration),
        done: impl Fn() -> Option<T> + Send + 'static,
    ) -> T {
        self.run(move || {
            let deadline = Instant::now() + within;
            loop {
                if let Some(t) = done() {
                    return t;
                }
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(every);
            }
        })
    }

    /// Runs `f` on a thread that entered this namespace (sockets it opens live here).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let fd = File::open(&path).expect("namespace file");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.name]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).output();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A pod: a namespace with one routed interface, running `tideway whoami`.
#[derive(Debug)]
pub struct Pod {
    /// Pod name (also what whoami answers).
    pub name: String,
    /// Its address.
    pub ip: IpAddr,
    /// Its namespace.
    pub ns: Netns,
}

/// A node namespace and its pods.
#[derive(Debug)]
pub struct Node {
    /// Node name (`node-a`).
    pub name: String,
    /// Node address on the LAN.
    pub ip: IpAddr,
    /// The first three octets of its pod range (`10.244.1`).
    pub pod_prefix: String,
    /// Its namespace.
    pub ns: Netns,
    /// Its pods.
    pub pods: Vec<Pod>,
}

/// A whole test cluster.
#[derive(Debug)]
pub struct Cluster {
    prefix: String,
    /// The external client.
    pub client: Netns,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Where logs and files go.
    pub dir: PathBuf,
    /// The `tideway` binary.
    pub bin: PathBuf,
    children: Vec<Child>,
    lan: Netns,
}

impl Cluster {
    /// Builds the LAN, the client and `nodes` (`(name, ip, pod prefix)`), all empty of pods.
    pub fn new(test: &str, bin: &Path, nodes: &[(&str, &str, &str)]) -> Cluster {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("tw{}-{n}-{}", std::process::id(), &test[..test.len().min(12)]);
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).expect("test dir");
        let lan = Netns::create(&format!("{prefix}-lan"));
        lan.sh("ip link add br0 type bridge && ip link set br0 up && ip addr add 192.168.0.1/24 dev br0");
        let client = Netns::create(&format!("{prefix}-client"));
        let mut cluster = Cluster {
            prefix,
            client,
            nodes: Vec::new(),
            dir,
            bin: bin.to_path_buf(),
            children: Vec::new(),
            lan,
        };
        cluster.attach(&cluster.client.name.clone(), "192.168.0.100", "cl");
        for (name, ip, pods) in nodes {
            let ns = Netns::create(&format!("{}-{name}", cluster.prefix));
            let short = format!("n{}", cluster.nodes.len());
            cluster.attach(&ns.name, ip, &short);
            // No ICMP rate limit: tests time rejects, and the kernel's default sends one
            // "port unreachable" per second per destination.
            ns.sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
                   net.ipv4.icmp_ratelimit=0");
            // Nodes forward unclaimed Service addresses back out to the LAN; an ICMP redirect
            // would then teach the client to bypass the node for that address.
            ns.sh("sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0");
            cluster.nodes.push(Node {
                name: name.to_string(),
                ip: ip.parse().expect("node ip"),
                pod_prefix: pods.to_string(),
                ns,
                pods: Vec::new(),
            });
        }
        // Every node routes the other nodes' pod ranges to them.
        for a in 0..cluster.nodes.len() {
            for b in 0..cluster.nodes.len() {
                if a != b {
                    let (pods, via) = (cluster.nodes[b].pod_prefix.clone(), cluster.nodes[b].ip);
                    cluster.nodes[a].ns.sh(&format!("ip route add {pods}.0/24 via {via}"));
                }
            }
        }
        cluster
    }

    fn attach(&self, ns: &str, ip: &str, short: &str) {
        let (outer, inner) = (format!("{short}-br"), "eth0");
        self.lan.sh(&format!(
            "ip link add {outer} type veth peer name {inner} netns {ns} && ip link set {outer} master br0 up"
        ));
        let cmd = format!(
            "ip addr add {ip}/24 dev eth0 && ip link set eth0 up && ip route add default via 192.168.0.1"
        );
        check(
            "attach",
            Command::new("ip").args(["netns", "exec", ns, "sh", "-c", &cmd]).output().expect("ip"),
        );
    }

    /// Adds a pod to node `node` with address `<prefix>.<host>`, running whoami on `port`.
    pub fn add_pod(&mut self, node: usize, name: &str, host: u8, port: u16) -> IpAddr {
        let (node_ns, prefix) = (self.nodes[node].ns.name.clone(), self.nodes[node].pod_prefix.clone());
        let ip: IpAddr = format!("{prefix}.{host}").parse().expect("pod ip");
        let ns = Netns::create(&format!("{}-{name}", self.prefix));
        let veth = format!("p{host}");
        self.nodes[node].ns.sh(&format!(
            "ip link add {veth} type veth peer name eth0 netns {} && ip link set {veth} up && \
             ip addr add {prefix}.1/32 dev {veth} && ip route add {ip}/32 dev {veth}",
            ns.name
        ));
        ns.sh(&format!(
            "ip addr add {ip}/32 dev eth0 && ip link set eth0 up && ip route add {prefix}.1 dev eth0 && \
             ip route add default via {prefix}.1"
        ));
        let _ = node_ns;
        let log = self.dir.join(format!("{name}.log"));
        let child = ns.spawn(
            &self.bin,
            &["whoami", "--name", name, "--listen", &format!("0.0.0.0:{port}")],
            &log,
            &[],
        );
        self.children.push(child);
        self.nodes[node].pods.push(Pod { name: name.to_string(), ip, ns });
        ip
    }

    /// Routes `dst` (an address or CIDR) from the client through node `node`.
    pub fn client_route(&self, dst: &str, node: usize) {
        self.client.sh(&format!("ip route replace {dst} via {}", self.nodes[node].ip));
    }

    /// Starts a process in node `node`'s namespace; it is killed with the cluster.
    pub fn spawn_on(&mut self, node: usize, args: &[&str], log: &str, env: &[(&str, &str)]) -> usize {
        let log = self.dir.join(log);
        let child = self.nodes[node].ns.spawn(&self.bin, args, &log, env);
        self.children.push(child);
        self.children.len() - 1
    }

    /// Stops a process started with [`Cluster::spawn_on`] (SIGTERM, then waits).
    pub fn stop(&mut self, id: usize) {
        let pid = nix::unistd::Pid::from_raw(self.children[id].id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.children[id].try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.children[id].kill();
    }

    /// A file in the test's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Reads a log file (for failure messages).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.nodes.clear();
    }
}

/// What a whoami server said: its name and the client address it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The pod that answered.
    pub name: String,
    /// The source address the pod saw.
    pub peer: SocketAddr,
}

fn parse_answer(line: &str) -> Option<Answer> {
    let mut w = line.split_whitespace();
    Some(Answer { name: w.next()?.to_string(), peer: w.next()?.parse().ok()? })
}

/// Opens a TCP connection from `ns`, sends one line, returns the answer or the error.
pub fn tcp(ns: &Netns, dst: SocketAddr) -> Result<Answer, String> {
    tcp_from(ns, None, dst)
}

/// Connects from `ns` (from source address `src` when given) with a 2 s timeout.
pub fn connect(ns: &Netns, src: Option<IpAddr>, dst: SocketAddr) -> Result<TcpStream, String> {
    ns.run(move || connect_here(src, dst))
}

fn connect_here(src: Option<IpAddr>, dst: SocketAddr) -> Result<TcpStream, String> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(dst), Type::STREAM, None).map_err(|e| e.to_string())?;
    if let Some(ip) = src {
        sock.bind(&SocketAddr::new(ip, 0).into()).map_err(|e| e.to_string())?;
    }
    sock.connect_timeout(&dst.into(), Duration::from_secs(2)).map_err(|e| e.to_string())?;
    Ok(sock.into())
}

/// Sends one line on an open connection and reads the answer line.
pub fn exchange(s: &mut TcpStream) -> Result<Answer, String> {
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    s.write_all(b"hi\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    let mut byte = [0u8; 1];
    while !line.ends_with('\n') {
        match std::io::Read::read(s, &mut byte).map_err(|e| e.to_string())? {
            0 => return Err("connection closed".into()),
            _ => line.push(byte[0] as char),
        }
    }
    parse_answer(&line).ok_or_else(|| format!("unexpected answer {line:?}"))
}

/// Like [`tcp`], from source address `src` when given.
pub fn tcp_from(ns: &Netns, src: Option<IpAddr>, dst: SocketAddr) -> Result<Answer, String> {
    ns.run(move || {
        let mut s = connect_here(src, dst)?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok();
        s.write_all(b"hi\n").map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
        parse_answer(&line).ok_or_else(|| format!("unexpected answer {line:?}"))
    })
}

/// Sends one UDP datagram from `ns` (from `sport`, 0 = any), returns the answer or the error.
pub fn udp(ns: &Netns, dst: SocketAddr, sport: u16) -> Result<Answer, String> {
    ns.run(move || {
        let bind: SocketAddr =
            if dst.is_ipv4() { ([0, 0, 0, 0], sport).into() } else { ([0u16; 8], sport).into() };
        let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_millis(1500))).ok();
        s.send_to(b"hi", dst).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        let (n, _) = s.recv_from(&mut buf).map_err(|e| e.to_string())?;
        parse_answer(&String::from_utf8_lossy(&buf[..n])).ok_or_else(|| "unexpected answer".to_string())
    })
}

/// Retries `f` until it returns `Ok` or `timeout` passes; returns the last result.
pub fn eventually<T>(timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

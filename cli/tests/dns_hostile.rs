//! `tideway dns` against hostile neighbours, fed from a file as in a pod: a flood of random
//! names in its zone inside a memory cgroup at the chart's limit, and a descriptor table held
//! full by idle TCP connections. Loopback only.
//!
//! The flood needs root (a cgroup v1 memory controller of its own: this kind of machine has no
//! systemd to ask for one); the descriptor test needs `prlimit` (util-linux). For
//! docs/benchmarks.md, `TIDEWAY_BIN` runs another build and `TIDEWAY_FLOOD_LIMIT_MIB` sets
//! another memory limit (to see how high a build that does not fit the chart's would go).

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use tideway_tests::netns::require_root;

/// The chart's DNS memory limit (helm/tideway/values.yaml: `dns.resources.limits.memory`).
const CHART_DNS_LIMIT: u64 = 170 << 20;

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch directory with a small cluster: Services `web` and `db` in namespace `demo`.
fn test_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tideway-dns-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let svc = |name: &str, ip: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: demo}}\n\
             spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n"
        )
    };
    let cluster = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: demo}}\n{}{}",
        svc("web", "10.96.0.20"),
        svc("db", "10.96.0.21")
    );
    std::fs::write(dir.join("cluster.yaml"), cluster).unwrap();
    std::fs::write(dir.join("resolv.conf"), "").unwrap();
    Scratch(dir)
}

/// A loopback port free for both UDP and TCP a moment ago.
fn free_dns_port() -> u16 {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free for both UDP and TCP in 50 tries");
}

/// The binary under test: `TIDEWAY_BIN` (to measure another build, e.g. a release one, for
/// docs/benchmarks.md), else this build's.
fn tideway_bin() -> String {
    std::env::var("TIDEWAY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tideway").to_string())
}

/// A `tideway dns` process, killed when dropped.
struct Dns {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dns {
    /// Starts `wrapper... tideway dns` on a free loopback port with `workers` UDP workers and
    /// `extra` flags, and waits until it answers from the cluster file.
    fn start(dir: &Path, wrapper: &[&str], workers: usize, extra: &[&str]) -> Dns {
        let port = free_dns_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = dir.join("dns.log");
        let out = std::fs::File::create(&log).unwrap();
        let (program, pre) = match wrapper.split_first() {
            Some((p, rest)) => (p.to_string(), rest.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            None => (tideway_bin(), Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(pre);
        if !wrapper.is_empty() {
            cmd.arg(tideway_bin());
        }
        cmd.args(["dns", "--source"])
            .arg(format!("file:{}", dir.join("cluster.yaml").display()))
            .args(["--listen", &addr.to_string(), "--workers", &workers.to_string()])
            .arg("--upstream-resolv-conf")
            .arg(dir.join("resolv.conf"))
            .args(["--health-listen", "none", "--ready-listen", "none", "--metrics-listen", "none"])
            .args(["--api-listen", "none", "--lameduck", "0s", "--no-loop-probe"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let child = cmd.spawn().expect("tideway dns starts");
        let dns = Dns { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while ask(addr, "web.demo.svc.cluster.local.", 1, Duration::from_millis(200)) != Some((0, 1)) {
            assert!(Instant::now() < deadline, "no answer within 60 s:\n{}", dns.log_text());
            dns.assert_alive("while starting");
        }
        dns
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_alive(&self, when: &str) {
        let status = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let state = status.rsplit_once(") ").map(|(_, rest)| rest.chars().next().unwrap_or('?'));
        assert!(
            matches!(state, Some(s) if s != 'Z' && s != 'X'),
            "the DNS server died {when}:\n{}",
            self.log_text()
        );
    }

    /// Resident memory, in bytes: now, at its highest, and of it now what is the process's
    /// own (`VmRSS`, `VmHWM`, `RssAnon`; the rest is the binary's pages, shared with the page
    /// cache, which the kernel takes back when the group needs them).
    fn rss(&self) -> (u64, u64, u64) {
        let kib = |field| tideway_tests::procfs::status_kib(self.pid(), field) * 1024;
        (kib("VmRSS"), kib("VmHWM"), kib("RssAnon"))
    }

    /// CPU time used so far (utime + stime), in seconds.
    fn cpu_seconds(&self) -> f64 {
        tideway_tests::procfs::cpu_seconds(self.pid(), false)
    }
}

/// An A (1) or other query for `name` with ID `id`, RD set, no EDNS.
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// One UDP query: the reply's (rcode, answer count), or `None` without a reply in `wait`.
fn ask(server: SocketAddr, name: &str, qtype: u16, wait: Duration) -> Option<(u8, u16)> {
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket.set_read_timeout(Some(wait)).ok()?;
    static IDS: AtomicU16 = AtomicU16::new(1);
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    socket.send_to(&query(id, name, qtype), server).ok()?;
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).ok()?;
        if n >= 12 && buf[..2] == id.to_be_bytes() {
            return Some((buf[3] & 0x0f, u16::from_be_bytes([buf[6], buf[7]])));
        }
    }
}

/// A cgroup v1 memory controller group, removed when dropped (its processes killed first).
struct MemoryCgroup {
    path: PathBuf,
}

impl MemoryCgroup {
    fn create(name: &str, limit: u64) -> MemoryCgroup {
        let root = Path::new("/sys/fs/cgroup/memory");
        assert!(
            root.join("memory.limit_in_bytes").exists(),
            "no cgroup v1 memory controller at {} (`mount | grep cgroup`)",
            root.display()
        );
        let path = root.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::create_dir(&path);
        let cg = MemoryCgroup { path };
        cg.write("memory.limit_in_bytes", &limit.to_string());
        cg
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.path.join(file), value)
            .unwrap_or_else(|e| panic!("writing {value} to {}/{file}: {e}", self.path.display()));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }

    /// A field of `memory.oom_control` (`oom_kill`, `under_oom`).
    fn oom_field(&self, field: &str) -> u64 {
        self.read("memory.oom_control")
            .lines()
            .find_map(|l| l.strip_prefix(field)?.trim().parse().ok())
            .unwrap_or(0)
    }

    fn procs(&self) -> Vec<String> {
        self.read("cgroup.procs").lines().map(str::to_string).collect()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for pid in self.procs() {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.path).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// xorshift64: random enough for names nobody asked before.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A random label of `len` letters and digits.
fn random_label(state: &mut u64, len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len).map(|_| CHARS[(next(state) % CHARS.len() as u64) as usize] as char).collect()
}

/// Sends random names in the zone (long ones, NXDOMAIN each) from `sockets` sockets for
/// `duration`, each name twice (so that a server keeping what it was asked twice keeps it),
/// reading what comes back. Returns (sent, answered).
fn flood(server: SocketAddr, duration: Duration, sockets: usize) -> (u64, u64) {
    let socks: Vec<UdpSocket> = (0..sockets)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let (mut sent, mut answered) = (0u64, 0u64);
    let mut buf = [0u8; 4096];
    let end = Instant::now() + duration;
    let mut id = 0u16;
    let mut state = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    while Instant::now() < end {
        for s in &socks {
            let name = format!(
                "{}.{}.{}.demo.svc.cluster.local.",
                random_label(&mut state, 60),
                random_label(&mut state, 60),
                random_label(&mut state, 40)
            );
            for _ in 0..2 {
                id = id.wrapping_add(1);
                if s.send_to(&query(id, &name, 1), server).is_ok() {
                    sent += 1;
                }
            }
            while s.recv(&mut buf).is_ok() {
                answered += 1;
            }
        }
    }
    (sent, answered)
}

#[test]
fn a_flood_of_random_names_in_the_zone_fits_the_charts_memory_limit_and_memory_comes_back() {
    require_root("the flood runs the DNS server in a memory cgroup of its own: it");
    let dir = test_dir("flood");
    let limit = std::env::var("TIDEWAY_FLOOD_LIMIT_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(CHART_DNS_LIMIT, |mib| mib << 20);
    let cg = MemoryCgroup::create("tideway-dns-flood", limit);
    // The shell joins the group and becomes the server, so that every byte it ever takes counts.
    let join = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.path.display());
    let dns = Dns::start(&dir.0, &["sh", "-c", &join, "sh"], 16, &[]);
    assert_eq!(cg.procs(), [dns.pid().to_string()], "the server alone is in the group");
    let (rss_before, _, anon_before) = dns.rss();
    let flooder = {
        let addr = dns.addr;
        std::thread::spawn(move || flood(addr, Duration::from_secs(50), 64))
    };
    let mut anon_peak = anon_before;
    while !flooder.is_finished() {
        dns.assert_alive("during the flood");
        anon_peak = anon_peak.max(dns.rss().2);
        std::thread::sleep(Duration::from_millis(250));
    }
    let (sent, answered) = flooder.join().unwrap();
    dns.assert_alive("after the flood");
    let (rss_end, peak, anon_end) = dns.rss();
    let anon_peak = anon_peak.max(anon_end);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "flood: {sent} queries sent, {answered} answered; RSS {:.1} MiB before, {:.1} MiB at the end, \
         peak {:.1} MiB; the process's own (RssAnon) {:.1} MiB before, peak {:.1}, {:.1} at the end",
        mib(rss_before),
        mib(rss_end),
        mib(peak),
        mib(anon_before),
        mib(anon_peak),
        mib(anon_end)
    );
    eprintln!(
        "memory cgroup: limit {:.0} MiB, usage peak {:.1} MiB (page cache included), {} times at the limit, {} OOM kills",
        mib(limit),
        mib(cg.read("memory.max_usage_in_bytes").trim().parse().unwrap_or(0)),
        cg.read("memory.failcnt").trim(),
        cg.oom_field("oom_kill")
    );
    assert_eq!(cg.oom_field("oom_kill"), 0, "the kernel killed in the group:\n{}", dns.log_text());
    assert!(answered > sent / 4, "the server kept answering: {answered} of {sent}");
    assert!(peak < limit, "peak RSS {:.1} MiB", mib(peak));
    // Memory comes back: within a few sweeps the copies are gone, and what they took is
    // the allocator's to return. Not all of the rise comes back: the allocator keeps some
    // pages in each worker thread's heap until the thread allocates again (an idle thread
    // does not), and the binary's pages the flood touched stay in the page cache.
    let given_back = |anon: u64| anon_peak.saturating_sub(anon);
    // Two sweeps (20 s) and some time for the allocator; read at the end, for the figures.
    std::thread::sleep(Duration::from_secs(25));
    dns.assert_alive("25 s after the flood");
    let (rss_after, _, anon_after) = dns.rss();
    eprintln!(
        "25 s after the flood: RSS {:.1} MiB, the process's own {:.1} MiB",
        mib(rss_after),
        mib(anon_after)
    );
    assert!(
        given_back(anon_after) >= 8 << 20,
        "the process's own memory: {:.1} MiB 25 s after the flood, {:.1} MiB at its peak, {:.1} MiB before it",
        mib(anon_after),
        mib(anon_peak),
        mib(anon_before)
    );
    assert_eq!(ask(dns.addr, "db.demo.svc.cluster.local.", 1, Duration::from_secs(2)), Some((0, 1)));
}

#[test]
fn a_full_descriptor_table_costs_the_server_little_cpu_and_udp_still_answers() {
    let dir = test_dir("emfile");
    assert!(Command::new("prlimit").arg("--version").output().is_ok(), "needs prlimit (util-linux)");
    let dns = Dns::start(&dir.0, &["prlimit", "--nofile=256:256", "--"], 16, &[]);
    // 300 connections that never send a query: the table fills (or the cap is reached) and the
    // rest wait in the listen backlog.
    let mut held = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect_timeout(&dns.addr, Duration::from_secs(2)) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connection {} refused: {e}", held.len()),
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    dns.assert_alive("with 300 connections held");
    let (cpu0, t0) = (dns.cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let share = (dns.cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64();
    eprintln!("CPU with 300 connections held at 256 descriptors: {:.1} % of a core", share * 100.0);
    assert_eq!(ask(dns.addr, "web.demo.svc.cluster.local.", 1, Duration::from_secs(2)), Some((0, 1)));
    assert!(share < 0.20, "the server used {:.0} % of a core", share * 100.0);
}

//! An ARP prober on the node network: from an outside host, a broadcast "who has ADDRESS"
//! every [`EVERY`] on a raw socket, and who answered each one. Two nodes answering one probe is
//! the split brain the failover figures bound.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// How often the prober asks.
pub(crate) const EVERY: Duration = Duration::from_millis(20);
/// The most a prober runs (it is stopped sooner; this bounds a forgotten one).
const AT_MOST: Duration = Duration::from_secs(40);
const ETH_P_ARP: u16 = 0x0806;

/// The MACs that answered each probe, in order, with when it was sent.
pub(crate) type Rounds = Vec<(Instant, Vec<[u8; 6]>)>;

/// A prober running in a thread of its own, in namespace `netns`, on its `eth0`.
pub(crate) struct Prober {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Rounds>,
}

impl Prober {
    /// Starts asking for `target` from `netns`, whose address is `own`.
    pub(crate) fn start(netns: &str, own: Ipv4Addr, target: Ipv4Addr) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = format!("/run/netns/{netns}");
        let thread = std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("the prober's namespace");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            probe(&open(), own, target, &flag)
        });
        Prober { stop, thread }
    }

    /// Stops it; the rounds it saw.
    pub(crate) fn stop(self) -> Rounds {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the prober")
    }
}

/// A raw ARP socket bound to `eth0`, and its MAC.
fn open() -> (Socket, [u8; 6]) {
    let link = nix::ifaddrs::getifaddrs()
        .expect("interfaces")
        .filter(|a| a.interface_name == "eth0")
        .find_map(|a| a.address.as_ref().and_then(|s| s.as_link_addr()).copied())
        .expect("eth0");
    let sock = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(i32::from(ETH_P_ARP.to_be()))))
        .expect("a raw socket (root)");
    nix::sys::socket::bind(sock.as_raw_fd(), &link).expect("bind to eth0");
    (sock, link.addr().expect("a MAC"))
}

fn request(mac: [u8; 6], own: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend(mac);
    f.extend(ETH_P_ARP.to_be_bytes());
    f.extend([0, 1, 8, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend(mac);
    f.extend(own.octets());
    f.extend([0; 6]);
    f.extend(target.octets());
    f
}

/// The answering MAC when `frame` is an ARP reply for `target`.
fn reply_from(frame: &[u8], target: Ipv4Addr) -> Option<[u8; 6]> {
    let is_reply = frame.len() >= 42 && frame[12..14] == ETH_P_ARP.to_be_bytes() && frame[20..22] == [0, 2];
    (is_reply && frame[28..32] == target.octets()).then(|| frame[22..28].try_into().expect("6 bytes"))
}

fn probe((sock, mac): &(Socket, [u8; 6]), own: Ipv4Addr, target: Ipv4Addr, stop: &AtomicBool) -> Rounds {
    let frame = request(*mac, own, target);
    let started = Instant::now();
    let mut rounds: Rounds = Vec::new();
    let mut buf = [0u8; 1600];
    while !stop.load(Ordering::Relaxed) && started.elapsed() < AT_MOST {
        let sent = Instant::now();
        sock.send(&frame).expect("send a probe");
        let mut answers = Vec::new();
        while let Some(left) = EVERY.checked_sub(sent.elapsed()).filter(|l| !l.is_zero()) {
            sock.set_read_timeout(Some(left)).expect("timeout");
            let Ok(n) = std::io::Read::read(&mut &*sock, &mut buf) else { continue };
            if let Some(from) = reply_from(&buf[..n], target)
                && !answers.contains(&from)
            {
                answers.push(from);
            }
        }
        rounds.push((sent, answers));
    }
    rounds
}

/// The longest run of consecutive probes that two or more nodes answered, as a time (the
/// probes' spacing included: one such probe counts as [`EVERY`]).
pub(crate) fn longest_dual_answer(rounds: &Rounds) -> Duration {
    longest_run(rounds, |answers| answers.len() >= 2)
}

/// The longest run of consecutive probes whose answers satisfy `which`, as a time (one probe
/// counts as the time to the next, or [`EVERY`] for the last).
pub(crate) fn longest_run(rounds: &Rounds, which: impl Fn(&[[u8; 6]]) -> bool) -> Duration {
    let (mut best, mut run_start): (Duration, Option<Instant>) = (Duration::ZERO, None);
    for (i, (sent, answers)) in rounds.iter().enumerate() {
        if which(answers) {
            let start = *run_start.get_or_insert(*sent);
            let end = rounds.get(i + 1).map_or(*sent + EVERY, |(next, _)| *next);
            best = best.max(end - start);
        } else {
            run_start = None;
        }
    }
    best
}

/// When the first probe went out that a MAC other than `old` answered.
pub(crate) fn first_answer_not_from(rounds: &Rounds, old: &str) -> Option<Instant> {
    rounds.iter().find(|(_, answers)| answers.iter().any(|m| fmt_mac(m) != old)).map(|(sent, _)| *sent)
}

/// The MACs that answered any probe.
pub(crate) fn answered(rounds: &Rounds) -> Vec<[u8; 6]> {
    let mut all: Vec<[u8; 6]> = rounds.iter().flat_map(|(_, a)| a.iter().copied()).collect();
    all.sort();
    all.dedup();
    all
}

/// `aa:bb:...`, as `/sys/class/net/*/address` writes it.
pub(crate) fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The MAC the calling thread's namespace's neighbour entry for `ip` holds, if complete.
pub(crate) fn neighbour(ip: Ipv4Addr) -> Option<String> {
    // Columns: address, hardware type, flags (0x0: incomplete or failed), MAC, mask, device.
    let table = std::fs::read_to_string("/proc/thread-self/net/arp").ok()?;
    let ip = ip.to_string();
    let row = table.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|f| f[0] == ip)?;
    (row.get(2) != Some(&"0x0")).then(|| row.get(3).map(|m| m.to_string()))?
}

/// From namespace `netns` (an outside host), the first curl of `ip` that succeeds while that
/// namespace's neighbour entry for `ip` holds a MAC other than `old` (any MAC without `old`),
/// before and after the curl: how long after `since` it came, within `patience`. Nothing is
/// sent while the entry points at `old`: the figure is the new announcer's gratuitous ARP's.
/// Also counts the curls (1 s limit each) that failed on the way.
pub(crate) fn first_curl_through_another(
    netns: &str,
    ip: Ipv4Addr,
    old: Option<String>,
    since: Instant,
    patience: Duration,
) -> std::thread::JoinHandle<(Option<Duration>, usize)> {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("the client's namespace");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let mut failed = 0;
        while since.elapsed() < patience {
            let before = neighbour(ip);
            if before.is_some() && before != old {
                // Spawned from this thread, curl runs in the client's namespace.
                let out = std::process::Command::new("curl")
                    .args(["-s", "--max-time", "1", &ip.to_string()])
                    .output();
                let served = out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Hostname:"));
                if served && neighbour(ip) == before {
                    return (Some(since.elapsed()), failed);
                }
                failed += usize::from(!served);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (None, failed)
    })
}

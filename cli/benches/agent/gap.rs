//! Forwarding during a big commit: does one full-sync transaction stall established flows?
//!
//! A pod behind the node echoes a TCP stream and a UDP ping sent through a ClusterIP, one
//! small message per millisecond each, while the agent does a full sync of all the Services:
//!
//! * **resync**: the rules are in place (the periodic full sync);
//! * **restart**: the agent's table was deleted while the flows' conntrack entries stayed (an
//!   agent restarted after a crash that took its rules), and a fresh agent's first sync
//!   writes everything.
//!
//! The agent runs pinned to CPU 0, the probes to CPU 1. The figure is the longest wait for an
//! echo while the sync runs (counted from its start), next to the longest in a quiet second
//! before it (the probes' own jitter). nftables only: iptables cannot program
//! 100,000 Services in a time worth measuring this way, and the host has no IPVS.

use std::net::UdpSocket;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use super::*;

/// One probe message every this long, per flow.
const EVERY: Duration = Duration::from_millis(1);
/// Probe message size.
const MSG: usize = 16;
/// The ClusterIP the probes go through, and its ports.
/// (Outside the synthetic Services' addresses, whose third octet stays below 250.)
const VIP: &str = "10.97.255.1";
const TCP_PORT: u16 = 80;
const UDP_PORT: u16 = 81;
const POD_TCP: u16 = 8080;
const POD_UDP: u16 = 8081;

/// Pins the calling thread (and the threads it creates afterwards) to `cpu`.
fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

/// Echo servers in the pod: every TCP connection and every UDP datagram gets its bytes back.
fn echo_servers(pod: &Netns) {
    let (tcp, udp) = pod.run(|| {
        let tcp = TcpListener::bind(("0.0.0.0", POD_TCP)).expect("bind tcp");
        let udp = UdpSocket::bind(("0.0.0.0", POD_UDP)).expect("bind udp");
        (tcp, udp)
    });
    std::thread::spawn(move || {
        pin(1);
        for mut s in tcp.incoming().flatten() {
            std::thread::spawn(move || {
                pin(1);
                let mut buf = [0u8; MSG];
                while s.read_exact(&mut buf).is_ok() && s.write_all(&buf).is_ok() {}
            });
        }
    });
    std::thread::spawn(move || {
        pin(1);
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(&buf[..n], from);
        }
    });
}

/// One flow's sender and receiver; the receiver records when each echo arrived.
struct Flow {
    name: &'static str,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Flow {
    /// Starts sending with `send` and receiving with `recv` (both pinned to CPU 1).
    fn start(
        name: &'static str,
        mut send: impl FnMut() -> bool + Send + 'static,
        mut recv: impl FnMut() -> bool + Send + 'static,
    ) -> Flow {
        let arrivals = Arc::new(Mutex::new(Vec::with_capacity(1 << 16)));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (Arc::clone(&arrivals), Arc::clone(&stop));
        let receiver = std::thread::spawn(move || {
            pin(1);
            while !st.load(Ordering::Relaxed) {
                if recv() {
                    a.lock().expect("arrivals").push(Instant::now());
                }
            }
        });
        let st = Arc::clone(&stop);
        let sender = std::thread::spawn(move || {
            pin(1);
            let mut next = Instant::now();
            while !st.load(Ordering::Relaxed) && send() {
                next += EVERY;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        Flow { name, arrivals, stop, threads: vec![receiver, sender] }
    }

    /// The longest wait for an echo within `from..to`, counted from `from`: a flow that
    /// received nothing after `from` counts until `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let arrivals = self.arrivals.lock().expect("arrivals");
        let (mut longest, mut last) = (Duration::ZERO, from);
        for &t in arrivals.iter().filter(|t| **t >= from) {
            longest = longest.max(t - last);
            last = t;
            if t > to {
                return longest;
            }
        }
        longest.max(to.saturating_duration_since(last))
    }

    /// How long after `at` the first echo arrived (`None`: none has yet).
    fn first_after(&self, at: Instant) -> Option<Duration> {
        self.arrivals.lock().expect("arrivals").iter().find(|t| **t >= at).map(|t| *t - at)
    }

    /// Echoes that arrived within `from..to`.
    fn count(&self, from: Instant, to: Instant) -> usize {
        self.arrivals.lock().expect("arrivals").iter().filter(|t| (from..to).contains(*t)).count()
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The TCP stream and the UDP ping through the ClusterIP (call in the node's namespace).
fn flows() -> [Flow; 2] {
    let tcp = TcpStream::connect_timeout(
        &format!("{VIP}:{TCP_PORT}").parse().expect("addr"),
        Duration::from_secs(2),
    )
    .expect("TCP through the ClusterIP");
    tcp.set_nodelay(true).expect("nodelay");
    tcp.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let (mut w, mut r) = (tcp.try_clone().expect("clone"), tcp);
    let tcp = Flow::start(
        "TCP stream",
        move || w.write_all(&[7u8; MSG]).is_ok(),
        move || r.read_exact(&mut [0u8; MSG]).is_ok(),
    );
    let udp = UdpSocket::bind("0.0.0.0:0").expect("bind");
    udp.connect((VIP, UDP_PORT)).expect("connect");
    udp.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let (s, r) = (udp.try_clone().expect("clone"), udp);
    let udp =
        Flow::start("UDP ping", move || s.send(&[7u8; MSG]).is_ok(), move || r.recv(&mut [0u8; 64]).is_ok());
    [tcp, udp]
}

/// The cluster: `n - 1` synthetic Services and the probed one, a TCP and a UDP port on the pod.
fn probed_cluster(n: usize) -> ClusterState {
    let mut state = cluster(n.saturating_sub(1));
    state.apply(
        mk_service("zz-bench", "probe")
            .cluster_ip(VIP)
            .port("tcp", Protocol::Tcp, TCP_PORT)
            .port("udp", Protocol::Udp, UDP_PORT)
            .build(),
    );
    state.apply(
        mk_slice("zz-bench", "probe")
            .port("tcp", Protocol::Tcp, POD_TCP)
            .port("udp", Protocol::Udp, POD_UDP)
            .ready("10.244.1.2", NODE)
            .build(),
    );
    state.take_changes();
    state
}

/// One measured full sync: its time, and the longest waits for an echo in a quiet second
/// before it and while it ran (TCP, UDP).
struct Measured {
    sync: Duration,
    quiet: [Duration; 2],
    during: [Duration; 2],
    /// The first echo after the sync began, counted from its start.
    first: [Option<Duration>; 2],
    /// The first echo after the sync ended, counted from its end.
    resumed: [Option<Duration>; 2],
}

/// How long the quiet window before a sync lasts.
const QUIET: Duration = Duration::from_secs(1);

/// How long after a sync the first echoes are waited for (a stalled TCP flow waits for its
/// next retransmission).
const AFTER: Duration = Duration::from_secs(3);

fn measure(flows: &[Flow; 2], sync: impl FnOnce()) -> Measured {
    let quiet_from = Instant::now();
    std::thread::sleep(QUIET);
    let start = Instant::now();
    sync();
    let end = Instant::now();
    std::thread::sleep(AFTER);
    Measured {
        sync: end - start,
        quiet: [0, 1].map(|i| flows[i].longest_gap(quiet_from, start)),
        during: [0, 1].map(|i| flows[i].longest_gap(start, end)),
        first: [0, 1].map(|i| flows[i].first_after(start)),
        resumed: [0, 1].map(|i| flows[i].first_after(end)),
    }
}

/// Runs both scenarios and prints the longest gaps.
pub(crate) fn forwarding_gap(mode: ProxyMode, n: usize) {
    if mode != ProxyMode::Nftables {
        println!("forwarding gap: nftables only (skipping {mode})");
        return;
    }
    let (node, pod) = pod_behind_node("gap");
    echo_servers(&pod);
    let results = node.run(move || {
        pin(0);
        let (rt, mut first, shared) = agent(probed_cluster(n), mode);
        rt.block_on(first.sync(true)).expect("first sync");
        let flows = flows();
        let resync = measure(&flows, || rt.block_on(first.sync(true)).expect("resync"));
        drop((first, shared, rt));
        let (rt, mut restarted, _shared) = agent(probed_cluster(n), mode);
        // The table goes; the flows' conntrack entries stay.
        let deleted = Instant::now();
        let out = Command::new("nft").args(["delete", "table", "ip", "tideway"]).output().expect("nft");
        assert!(out.status.success(), "nft delete table: {}", String::from_utf8_lossy(&out.stderr));
        let restart =
            measure(&flows, || rt.block_on(restarted.sync(true)).expect("first sync after restart"));
        let alive = flows.each_ref().map(|f| f.count(deleted, deleted + QUIET));
        let names = flows.each_ref().map(|f| f.name);
        flows.into_iter().for_each(Flow::stop);
        (names, resync, restart, alive)
    });
    let (names, resync, restart, alive) = results;
    let scenarios = [("resync, rules in place", resync), ("restart, table deleted, conntrack kept", restart)];
    for (label, m) in scenarios {
        println!(
            "forwarding during a full sync, {mode}, {n} services, {label}: sync {}; longest wait for an echo: {} {}, {} {} (in the quiet second before: {}, {}); first echo after the sync began: {}, {}; after it ended: {}, {} (one message per {} per flow)",
            ms(m.sync),
            names[0],
            ms(m.during[0]),
            names[1],
            ms(m.during[1]),
            ms(m.quiet[0]),
            ms(m.quiet[1]),
            m.first[0].map_or_else(|| "none".to_string(), ms),
            m.first[1].map_or_else(|| "none".to_string(), ms),
            m.resumed[0].map_or_else(|| format!("none within {}", ms(AFTER)), ms),
            m.resumed[1].map_or_else(|| format!("none within {}", ms(AFTER)), ms),
            ms(EVERY),
        );
    }
    println!(
        "  echoes in the second between the table's deletion and the new agent's sync: {} {}, {} {} (of about {})",
        names[0],
        alive[0],
        names[1],
        alive[1],
        QUIET.as_millis() / EVERY.as_millis()
    );
    drop((node, pod));
}

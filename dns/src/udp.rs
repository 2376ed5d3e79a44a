//! The UDP workers.
//!
//! hickory-server's own UDP path spawns a task per datagram and sends replies through a
//! channel to a sender task; for a cluster DNS server, where nearly every query is answered
//! synchronously from memory, that bookkeeping costs more than the answer. Instead, each UDP
//! socket gets a dedicated thread (as Knot's and NSD's UDP workers do) that answers in place
//! through the same request path ([`wire::handle_bytes`]: hickory's `Request` parsing,
//! [`Core::decide`], hickory's `MessageResponse` encoding). Only queries that need the network
//! (forwarding, ExternalName chasing) go to the async runtime as tasks.
//!
//! Datagrams are read and answered in bursts: a blocking `recvmmsg` that returns as soon as
//! one datagram is there (with whatever else is queued), then one `sendmmsg` for the replies.
//! Under load that is one system call per burst instead of two per query; when idle, the
//! thread sleeps in the kernel instead of cycling through an event loop. Several sockets share
//! the port with `SO_REUSEPORT`, so the kernel spreads clients over the workers.
//!
//! Each worker keeps its own copies of the zone's replies ([`Replay`]), within one budget for
//! all workers ([`ReplayBudget`]): a query it answered before is answered again by copying
//! bytes, without parsing or encoding. A burst's copies
//! are looked up together before any is answered ([`Replay::arrived`]), so that their reads from
//! memory overlap instead of each answer waiting for its own.
//!
//! A worker that panics is started again on its thread, after a pause that grows while it
//! keeps panicking ([`supervise`]): until then its socket's share of the clients, which the
//! kernel picks by the hash of their address and port, gets no answer, so `/ready` fails
//! meanwhile ([`Readiness::worker_down`]).
//!
//! [`Answering::Floor`] answers every query with one fixed address record, with nothing in
//! between but copying the ID and the question: the floor of this socket code, which
//! benchmarks measure the server against.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg, sendto};

use crate::handler::Core;
use crate::handler::replay::{Replay, ReplayBudget};
use crate::handler::wire::Handled;
use crate::ops::Readiness;

/// Datagrams per burst.
const BATCH: usize = 32;
/// Room for one query (queries are small; a larger one arrives cut and gets FORMERR).
const QUERY_BUF: usize = 4096;
/// How often a worker blocked in `recvmmsg` checks for shutdown.
const WAKE_EVERY: Duration = Duration::from_millis(100);
/// The pause before a worker that panicked starts again; it doubles, up to
/// [`RESTART_PAUSE_MAX`], while the worker keeps panicking.
const RESTART_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause before a restart.
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(5);
/// A worker that ran this long before it panicked starts again after the shortest pause.
const STEADY: Duration = Duration::from_secs(60);

/// How a worker answers.
#[derive(Clone, Copy)]
pub(crate) enum Answering {
    /// Through the server ([`Replay`], then the full request path).
    Server,
    /// With the query's ID and question and one canned record (the benchmark floor).
    #[cfg(feature = "bench")]
    Floor,
}

#[cfg(feature = "bench")]
/// The floor's reply header after the ID: a response, AA, NOERROR, one question, one answer.
const FLOOR_HEADER: [u8; 10] = [0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0];
#[cfg(feature = "bench")]
/// The floor's answer: the question's name (a pointer to it), A, IN, TTL 5, 10.96.0.1.
const FLOOR_ANSWER: [u8; 16] = [0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 96, 0, 1];

/// A running UDP worker.
pub(crate) struct Worker {
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
}

/// What a worker's thread is told from outside.
#[derive(Debug, Default)]
struct Control {
    /// Stop serving.
    stop: AtomicBool,
    /// Panic at the next turn of the loop (tests: a worker that fails).
    fail: AtomicBool,
}

/// What a worker's thread serves with, kept across restarts.
struct Job {
    socket: Arc<UdpSocket>,
    core: Arc<Core>,
    runtime: tokio::runtime::Handle,
    control: Arc<Control>,
    answering: Answering,
    budget: Arc<ReplayBudget>,
    readiness: Arc<Readiness>,
    index: usize,
}

impl Worker {
    /// Starts a worker thread serving `socket`; async work goes to `runtime`. While it is
    /// down after a panic, `readiness` says so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        socket: UdpSocket,
        core: Arc<Core>,
        runtime: tokio::runtime::Handle,
        index: usize,
        answering: Answering,
        budget: Arc<ReplayBudget>,
        readiness: Arc<Readiness>,
    ) -> io::Result<Worker> {
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(WAKE_EVERY))?;
        let control = Arc::new(Control::default());
        let job = Job {
            socket: Arc::new(socket),
            core,
            runtime,
            control: Arc::clone(&control),
            answering,
            budget,
            readiness,
            index,
        };
        let thread =
            std::thread::Builder::new().name(format!("dns-udp-{index}")).spawn(move || supervise(&job))?;
        Ok(Worker { control, thread: Some(thread) })
    }

    /// Asks the worker to stop; it notices within [`WAKE_EVERY`].
    pub(crate) fn stop(&self) {
        self.control.stop.store(true, Ordering::Relaxed);
    }

    /// Makes the worker panic at its next turn, and keep doing so while `on` (tests).
    pub(crate) fn fail(&self, on: bool) {
        self.control.fail.store(on, Ordering::Relaxed);
    }

    /// Waits for the thread to end.
    pub(crate) fn join(mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pause before the restart that follows `panics` panics in a row.
fn restart_pause(panics: u32) -> Duration {
    RESTART_PAUSE.saturating_mul(1 << panics.saturating_sub(1).min(10)).min(RESTART_PAUSE_MAX)
}

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("")
}

/// Serves `job` until told to stop, starting it again when it panics. Its copies went with
/// the panic (their budget too): the restart begins with none.
fn supervise(job: &Job) {
    let mut panics = 0u32;
    loop {
        let started = Instant::now();
        let served = std::panic::catch_unwind(AssertUnwindSafe(|| {
            serve(&job.socket, &job.core, &job.runtime, &job.control, job.answering, Arc::clone(&job.budget));
        }));
        let Err(panic) = served else { return };
        job.core.metrics().panics.inc();
        panics = if started.elapsed() >= STEADY { 1 } else { panics.saturating_add(1) };
        let pause = restart_pause(panics);
        job.readiness.worker_down();
        tracing::error!(
            worker = job.index,
            panic = panic_message(panic.as_ref()),
            ?pause,
            "a UDP worker panicked; it starts again after a pause"
        );
        let until = Instant::now() + pause;
        while !job.control.stop.load(Ordering::Relaxed) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(WAKE_EVERY));
        }
        job.readiness.worker_up();
        if job.control.stop.load(Ordering::Relaxed) {
            return;
        }
    }
}

fn serve(
    socket: &Arc<UdpSocket>,
    core: &Arc<Core>,
    runtime: &tokio::runtime::Handle,
    control: &Control,
    answering: Answering,
    budget: Arc<ReplayBudget>,
) {
    let fd = socket.as_raw_fd();
    let mut replay = Replay::new(budget);
    let mut bufs = vec![0u8; BATCH * QUERY_BUF];
    let mut recv_headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut send_headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut received: Vec<(usize, SocketAddr)> = Vec::with_capacity(BATCH);
    let mut replies: Vec<(Vec<u8>, SocketAddr)> = Vec::with_capacity(BATCH);
    while !control.stop.load(Ordering::Relaxed) {
        assert!(!control.fail.load(Ordering::Relaxed), "a failure of the UDP worker, asked for by a test");
        received.clear();
        match receive(fd, &mut recv_headers, &mut bufs, &mut received) {
            Ok(()) => {}
            // The read timeout (time to check `stop`, and to sweep the copies of a worker
            // nobody asks), a signal, or an ICMP error from an earlier send to some other peer.
            Err(Errno::EAGAIN) => {
                replay.tick(Instant::now());
                continue;
            }
            Err(Errno::EINTR | Errno::ECONNREFUSED) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "UDP receive failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        if matches!(answering, Answering::Server) {
            replay.arrived(received.iter().enumerate().map(|(i, &(n, _))| datagram(&bufs, i, n)));
        }
        for (i, &(n, src)) in received.iter().enumerate() {
            if src.port() == 0 || src.ip().is_unspecified() {
                continue;
            }
            let query = datagram(&bufs, i, n);
            let handled = match answering {
                Answering::Server => replay.handle(core, query, src),
                #[cfg(feature = "bench")]
                Answering::Floor => floor(query),
            };
            match handled {
                Handled::Respond(bytes) => replies.push((bytes, src)),
                Handled::Later(pending) => {
                    let (socket, core) = (Arc::clone(socket), Arc::clone(core));
                    runtime.spawn(async move {
                        if let Some(bytes) = pending.finish(&core).await {
                            // Never block the runtime: a full socket buffer drops the reply
                            // and the client retries, as with any lost datagram.
                            let _ = sendto(
                                socket.as_raw_fd(),
                                &bytes,
                                &SockaddrStorage::from(src),
                                MsgFlags::MSG_DONTWAIT,
                            );
                        }
                    });
                }
                Handled::Drop => {}
            }
        }
        send_all(fd, &mut send_headers, &replies);
        replies.clear();
    }
}

/// The `i`th datagram of a burst, `n` bytes long, in the receive buffers.
fn datagram(bufs: &[u8], i: usize, n: usize) -> &[u8] {
    &bufs[i * QUERY_BUF..i * QUERY_BUF + n]
}

/// The floor's reply to `query`; nothing for a query without a plain question.
#[cfg(feature = "bench")]
fn floor(query: &[u8]) -> Handled {
    let Some(end) = question_end(query) else { return Handled::Drop };
    let mut out = Vec::with_capacity(end + FLOOR_ANSWER.len());
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&FLOOR_HEADER);
    out.extend_from_slice(&query[12..end]);
    out.extend_from_slice(&FLOOR_ANSWER);
    Handled::Respond(out)
}

/// The end of the only question of `msg` (name, type, class), or `None` when there is not
/// exactly one or its name has a compression pointer.
#[cfg(feature = "bench")]
fn question_end(msg: &[u8]) -> Option<usize> {
    if msg.get(4..6)? != [0, 1] || msg.len() < 12 {
        return None;
    }
    let mut at = 12;
    loop {
        match *msg.get(at)? {
            0 => break,
            l if l & 0xc0 != 0 => return None,
            l => at += 1 + usize::from(l),
        }
    }
    let end = at + 1 + 4;
    (end <= msg.len()).then_some(end)
}

/// One blocking `recvmmsg` (returns once a datagram is there, with whatever else is queued):
/// fills `received` with (length, source) of the datagrams now in `bufs`.
fn receive(
    fd: RawFd,
    headers: &mut MultiHeaders<SockaddrStorage>,
    bufs: &mut [u8],
    received: &mut Vec<(usize, SocketAddr)>,
) -> Result<(), Errno> {
    let mut slices: Vec<[IoSliceMut<'_>; 1]> =
        bufs.chunks_mut(QUERY_BUF).map(|b| [IoSliceMut::new(b)]).collect();
    let msgs = recvmmsg(fd, headers, slices.iter_mut(), MsgFlags::MSG_WAITFORONE, None)?;
    for msg in msgs {
        let addr = msg.address.as_ref().and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from(*v4))
                .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6)))
        });
        if let Some(addr) = addr {
            received.push((msg.bytes.min(QUERY_BUF), addr));
        }
    }
    Ok(())
}

/// Sends `replies` with as few `sendmmsg` calls as the socket buffer allows.
fn send_all(fd: RawFd, headers: &mut MultiHeaders<SockaddrStorage>, replies: &[(Vec<u8>, SocketAddr)]) {
    let mut sent = 0;
    while sent < replies.len() {
        let chunk = &replies[sent..replies.len().min(sent + BATCH)];
        let slices: Vec<[IoSlice<'_>; 1]> = chunk.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
        let addrs: Vec<Option<SockaddrStorage>> =
            chunk.iter().map(|(_, to)| Some(SockaddrStorage::from(*to))).collect();
        match sendmmsg(fd, headers, &slices, addrs, [], MsgFlags::empty()) {
            Ok(results) => match results.count() {
                0 => return,
                n => sent += n,
            },
            Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::debug!(error = %e, "UDP send failed");
                // Skip the datagram at fault (for example an unreachable address).
                sent += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    #[test]
    fn a_worker_that_keeps_panicking_waits_longer_each_time() {
        let pauses: Vec<u128> = (1..=8).map(|n| restart_pause(n).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(restart_pause(u32::MAX), RESTART_PAUSE_MAX);
        let text: Box<dyn std::any::Any + Send> = Box::new("boom");
        let formatted: Box<dyn std::any::Any + Send> = Box::new(format!("boom {}", 2));
        assert_eq!((panic_message(text.as_ref()), panic_message(formatted.as_ref())), ("boom", "boom 2"));
    }

    #[test]
    fn the_floor_answers_any_question_with_one_address() {
        let mut q = Message::new(0xabcd, MessageType::Query, OpCode::Query);
        q.add_query(Query::query(
            Name::from_ascii("Svc-5.ns-7.svc.cluster.local.").unwrap(),
            RecordType::SRV,
        ));
        let Handled::Respond(bytes) = floor(&q.to_vec().unwrap()) else { panic!("no reply") };
        let reply = Message::from_vec(&bytes).unwrap();
        assert_eq!(reply.metadata.id, 0xabcd);
        assert_eq!(reply.metadata.message_type, MessageType::Response);
        assert_eq!(reply.queries, q.queries, "the question echoed");
        assert_eq!(reply.answers.len(), 1);
        assert_eq!(reply.answers[0].name, *q.queries[0].name());
        assert!(matches!(floor(&bytes[..11]), Handled::Drop), "no header, no reply");
    }

    #[test]
    fn a_plain_question_is_one_uncompressed_name() {
        let plain = {
            let mut m = Message::new(1, MessageType::Query, OpCode::Query);
            m.add_query(Query::query(Name::from_ascii("a.b.").unwrap(), RecordType::A));
            m.to_vec().unwrap()
        };
        assert_eq!(question_end(&plain), Some(12 + 5 + 4));
        let mut two = plain.clone();
        two[5] = 2;
        assert_eq!(question_end(&two), None, "two questions");
        let mut pointer = plain[..12].to_vec();
        pointer.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(question_end(&pointer), None, "a compressed name");
        assert_eq!(question_end(&plain[..15]), None, "cut short");
    }
}

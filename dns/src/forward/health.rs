//! Upstream health, as CoreDNS's `forward` tracks it: an upstream that leaves a query
//! unanswered for one health-check interval is checked (`. IN NS`, any reply will do) every
//! interval until it answers; after `max_fails` failed checks in a row it is down and gets no
//! queries until a check succeeds. When every upstream is down, they are all tried anyway
//! (the checks themselves may be what is broken).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::net::UdpSocket;

use crate::metrics::{Metrics, ToLabels};

/// How one upstream is doing.
#[derive(Debug)]
pub struct Health {
    /// The upstream.
    pub addr: SocketAddr,
    fails: AtomicU32,
    checking: AtomicBool,
    /// Whether the upstream echoes the question's case (0x20); false once it was seen not to.
    keeps_case: AtomicBool,
}

/// How the checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Between checks, and how long a query waits before its upstream is checked.
    pub interval: Duration,
    /// Failed checks in a row before an upstream is down; 0: never down, never checked.
    pub max_fails: u32,
}

/// How long a check waits for its reply.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

impl Health {
    /// A healthy upstream at `addr`.
    pub fn new(addr: SocketAddr) -> Arc<Health> {
        Arc::new(Health {
            addr,
            fails: AtomicU32::new(0),
            checking: AtomicBool::new(false),
            keeps_case: AtomicBool::new(true),
        })
    }

    /// True when `max_fails` checks in a row failed.
    pub fn is_down(&self, max_fails: u32) -> bool {
        max_fails > 0 && self.fails.load(Ordering::Relaxed) >= max_fails
    }

    /// Failed checks in a row.
    pub fn fails(&self) -> u32 {
        self.fails.load(Ordering::Relaxed)
    }

    /// Whether queries to it may randomize the case of their question.
    pub fn keeps_case(&self) -> bool {
        self.keeps_case.load(Ordering::Relaxed)
    }

    /// Notes that it answered with the question in another case than asked.
    pub fn lost_case(&self) -> bool {
        self.keeps_case.swap(false, Ordering::Relaxed)
    }

    /// A query to it went unanswered for a while: starts checking it, unless already.
    pub fn suspect(self: &Arc<Self>, checks: Checks, metrics: &Arc<Metrics>) {
        if checks.max_fails == 0 || self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (health, metrics) = (Arc::downgrade(self), Arc::clone(metrics));
        tokio::spawn(check_until_healthy(health, checks, metrics));
    }
}

/// Checks `health` every interval until its upstream answers, or until it is no longer in use
/// (settings replaced it).
async fn check_until_healthy(health: Weak<Health>, checks: Checks, metrics: Arc<Metrics>) {
    loop {
        let Some(h) = health.upgrade() else { return };
        let addr = h.addr;
        drop(h);
        let answered = check(addr, CHECK_TIMEOUT.max(checks.interval)).await;
        let Some(h) = health.upgrade() else { return };
        if answered {
            if h.fails.swap(0, Ordering::Relaxed) >= checks.max_fails {
                tracing::info!(upstream = %addr, "upstream answers again");
            }
            h.checking.store(false, Ordering::Release);
            return;
        }
        metrics.forward_healthcheck_failures.get_or_create(&ToLabels { to: addr.to_string() }).inc();
        if h.fails.fetch_add(1, Ordering::Relaxed) + 1 == checks.max_fails {
            tracing::warn!(upstream = %addr, fails = checks.max_fails, "upstream is down; no queries go to it until it answers a check");
        }
        drop(h);
        tokio::time::sleep(checks.interval).await;
    }
}

/// One check: `. IN NS` to `addr`; true on any reply to it.
pub async fn check(addr: SocketAddr, timeout: Duration) -> bool {
    let id: u16 = rand::random();
    let mut msg = Message::new(id, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(Name::root(), RecordType::NS));
    let Ok(bytes) = msg.to_vec() else { return false };
    let exchange = async {
        let socket = UdpSocket::bind(super::exchange::unspecified(addr)).await?;
        socket.connect(addr).await?;
        socket.send(&bytes).await?;
        let mut buf = [0u8; 512];
        loop {
            let n = socket.recv(&mut buf).await?;
            if n >= 12 && buf[..2] == id.to_be_bytes() && buf[2] & 0x80 != 0 {
                return std::io::Result::Ok(());
            }
        }
    };
    matches!(tokio::time::timeout(timeout, exchange).await, Ok(Ok(())))
}

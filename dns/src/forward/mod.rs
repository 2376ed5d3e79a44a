//! Forwarding to upstream servers (CoreDNS's `forward . /etc/resolv.conf`) and the response
//! cache in front of it.
//!
//! Each query goes to the upstreams in random order until one answers: UDP from a fresh
//! ephemeral port (so the kernel's port randomization and a random ID protect against
//! spoofing), retried over TCP when the answer is truncated. Concurrency is capped
//! (`max_concurrent`, REFUSED above it) so a dead upstream cannot pile up tasks.

pub mod cache;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::metrics::{Metrics, ToLabels, ToRcodeLabels, rcode_label};

/// At most this many upstreams are read from a resolv.conf (CoreDNS's limit).
pub const MAX_UPSTREAMS: usize = 15;
/// The UDP payload size advertised upstream and to clients (DNS flag day 2020).
pub const EDNS_PAYLOAD: u16 = 1232;

/// Reads `nameserver` lines of resolv.conf text (port 53; at most [`MAX_UPSTREAMS`]).
pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            // Link-local IPv6 may carry a zone (`fe80::1%eth0`); the zone is not kept.
            let addr = words.next()?.split('%').next()?;
            addr.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
        })
        .take(MAX_UPSTREAMS)
        .collect()
}

/// Why a query could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No upstream is configured.
    #[error("no upstream servers configured")]
    NoUpstreams,
    /// Too many queries are already in flight.
    #[error("too many concurrent upstream queries")]
    Overloaded,
    /// Every upstream failed or timed out.
    #[error("no upstream answered: {0}")]
    Failed(String),
}

/// Forwarder settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardSettings {
    /// Upstream servers.
    pub upstreams: Vec<SocketAddr>,
    /// Per-upstream read timeout (CoreDNS: 2 s).
    pub timeout: Duration,
    /// Queries in flight before new ones are refused (CoreDNS's `max_concurrent`).
    pub max_concurrent: usize,
}

impl Default for ForwardSettings {
    fn default() -> Self {
        ForwardSettings { upstreams: Vec::new(), timeout: Duration::from_secs(2), max_concurrent: 1000 }
    }
}

/// Sends queries upstream.
pub struct Forwarder {
    settings: ArcSwap<ForwardSettings>,
    inflight: AtomicUsize,
    metrics: Arc<Metrics>,
}

/// Decrements the in-flight count when a query ends, however it ends.
struct Inflight<'a>(&'a AtomicUsize);

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Forwarder {
    /// A forwarder with `settings`.
    pub fn new(settings: ForwardSettings, metrics: Arc<Metrics>) -> Self {
        Forwarder { settings: ArcSwap::from_pointee(settings), inflight: AtomicUsize::new(0), metrics }
    }

    /// Replaces the settings (reload); queries in flight finish with the old ones.
    pub fn set_settings(&self, settings: ForwardSettings) {
        self.settings.store(Arc::new(settings));
    }

    /// The current upstreams.
    pub fn upstreams(&self) -> Vec<SocketAddr> {
        self.settings.load().upstreams.clone()
    }

    /// Resolves `name`/`qtype` upstream, trying the upstreams in random order.
    pub async fn resolve(
        &self,
        name: &Name,
        qtype: RecordType,
        qclass: DNSClass,
        dnssec_ok: bool,
    ) -> Result<Message, ForwardError> {
        let settings = self.settings.load_full();
        if settings.upstreams.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        if self.inflight.fetch_add(1, Ordering::Relaxed) >= settings.max_concurrent {
            self.inflight.fetch_sub(1, Ordering::Relaxed);
            self.metrics.forward_max_concurrent_rejects.inc();
            return Err(ForwardError::Overloaded);
        }
        let _guard = Inflight(&self.inflight);
        let mut order = settings.upstreams.clone();
        rand::seq::SliceRandom::shuffle(&mut order[..], &mut rand::rng());
        let mut errors = Vec::new();
        for upstream in order {
            let to = ToLabels { to: upstream.to_string() };
            self.metrics.forward_requests.get_or_create(&to).inc();
            let started = Instant::now();
            match exchange(upstream, name, qtype, qclass, dnssec_ok, settings.timeout).await {
                Ok(response) => {
                    let labels =
                        ToRcodeLabels { to: to.to, rcode: rcode_label(response.metadata.response_code) };
                    self.metrics.forward_responses.get_or_create(&labels).inc();
                    self.metrics
                        .forward_durations
                        .get_or_create(&labels)
                        .observe(started.elapsed().as_secs_f64());
                    return Ok(response);
                }
                Err(e) => {
                    tracing::debug!(%upstream, error = %e, "upstream query failed");
                    errors.push(format!("{upstream}: {e}"));
                }
            }
        }
        self.metrics.forward_healthcheck_broken.inc();
        Err(ForwardError::Failed(errors.join("; ")))
    }
}

fn query_message(id: u16, name: &Name, qtype: RecordType, qclass: DNSClass, dnssec_ok: bool) -> Message {
    let mut msg = Message::new(id, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    let mut q = Query::query(name.clone(), qtype);
    q.set_query_class(qclass);
    msg.add_query(q);
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    edns.set_dnssec_ok(dnssec_ok);
    msg.set_edns(edns);
    msg
}

/// True when `response` answers the query we sent (ID and question match).
fn matches(response: &Message, id: u16, name: &Name, qtype: RecordType) -> bool {
    response.metadata.id == id
        && response.metadata.message_type == MessageType::Response
        && response.queries.first().is_some_and(|q| q.query_type() == qtype && q.name().eq_ignore_root(name))
}

/// One query to one upstream: UDP, then TCP if the answer was truncated.
async fn exchange(
    upstream: SocketAddr,
    name: &Name,
    qtype: RecordType,
    qclass: DNSClass,
    dnssec_ok: bool,
    timeout: Duration,
) -> std::io::Result<Message> {
    let id: u16 = rand::random();
    let bytes = query_message(id, name, qtype, qclass, dnssec_ok).to_vec().map_err(std::io::Error::other)?;
    let response = tokio::time::timeout(timeout, exchange_udp(upstream, &bytes, id, name, qtype))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))??;
    if !response.metadata.truncation {
        return Ok(response);
    }
    tokio::time::timeout(timeout, exchange_tcp(upstream, &bytes, id, name, qtype))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out over TCP"))?
}

async fn exchange_udp(
    upstream: SocketAddr,
    query: &[u8],
    id: u16,
    name: &Name,
    qtype: RecordType,
) -> std::io::Result<Message> {
    let local: SocketAddr = match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Anything that is not the answer (stray or forged datagrams) is ignored.
        if let Ok(msg) = Message::from_vec(&buf[..n])
            && matches(&msg, id, name, qtype)
        {
            return Ok(msg);
        }
    }
}

async fn exchange_tcp(
    upstream: SocketAddr,
    query: &[u8],
    id: u16,
    name: &Name,
    qtype: RecordType,
) -> std::io::Result<Message> {
    let mut stream = TcpStream::connect(upstream).await?;
    let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await?;
    let msg = Message::from_vec(&buf).map_err(std::io::Error::other)?;
    if matches(&msg, id, name, qtype) { Ok(msg) } else { Err(std::io::Error::other("mismatched TCP answer")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# generated\nsearch ns.svc.cluster.local svc.cluster.local\nnameserver 10.0.0.2\n\
                    nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:5\nnameserver 2001:db8::53\n";
        let got: Vec<String> = parse_resolv_conf(text).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.0.0.2:53", "[fe80::1]:53", "[2001:db8::53]:53"]);
        let many: String = (0..20).map(|i| format!("nameserver 10.0.0.{i}\n")).collect();
        assert_eq!(parse_resolv_conf(&many).len(), MAX_UPSTREAMS);
    }
}

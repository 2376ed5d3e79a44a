//! One query to one upstream: UDP from a fresh ephemeral port with a random ID, the question's
//! case randomized (DNS 0x20) when asked, then TCP when the answer is truncated.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::question::Question;

/// The UDP payload size advertised upstream and to clients (DNS flag day 2020).
pub const EDNS_PAYLOAD: u16 = 1232;

/// `name` with each letter's case chosen at random.
pub fn randomize_case(name: &Name) -> Name {
    let labels = name.iter().map(|label| {
        label
            .iter()
            .map(|&b| if b.is_ascii_alphabetic() && rand::random::<bool>() { b ^ 0x20 } else { b })
            .collect::<Vec<u8>>()
    });
    let mut out = Name::from_labels(labels).unwrap_or_else(|_| name.clone());
    out.set_fqdn(name.is_fqdn());
    out
}

/// An answer in another case than asked, the exchange's only answer before it timed out.
#[derive(Debug)]
struct CaseLost;

impl std::fmt::Display for CaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("answered only with the question in another case")
    }
}

impl std::error::Error for CaseLost {}

pub(super) fn is_case_lost(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<CaseLost>())
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

/// How a received message answers the query sent with `id`, `name` (in the case sent) and
/// `qtype`.
#[derive(Debug, PartialEq, Eq)]
enum Match {
    /// It is the answer.
    Yes,
    /// It would be, but its question is in another case.
    OtherCase,
    /// It is not.
    No,
}

fn matches(response: &Message, id: u16, name: &Name, qtype: RecordType) -> Match {
    let Some(q) = response.queries.first() else { return Match::No };
    if response.metadata.id != id
        || response.metadata.message_type != MessageType::Response
        || q.query_type() != qtype
        || !q.name().eq_ignore_root(name)
    {
        return Match::No;
    }
    if q.name().eq_ignore_root_case(name) { Match::Yes } else { Match::OtherCase }
}

/// The unspecified address of `upstream`'s family, port 0.
pub(super) fn unspecified(upstream: SocketAddr) -> SocketAddr {
    match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// One query to one upstream: UDP, then TCP if the answer was truncated.
pub(super) async fn exchange(
    upstream: SocketAddr,
    question: &Question,
    randomize: bool,
    timeout: Duration,
) -> std::io::Result<Message> {
    let id: u16 = rand::random();
    let name = if randomize { randomize_case(&question.name) } else { question.name.clone() };
    let bytes = query_message(id, &name, question.qtype, question.qclass, question.dnssec_ok)
        .to_vec()
        .map_err(std::io::Error::other)?;
    let other_case = AtomicBool::new(false);
    let udp = exchange_udp(upstream, &bytes, (id, &name, question.qtype), randomize, &other_case);
    let response = match tokio::time::timeout(timeout, udp).await {
        Ok(r) => r?,
        Err(_) if other_case.load(Ordering::Relaxed) => return Err(std::io::Error::other(CaseLost)),
        Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
    };
    if !response.metadata.truncation {
        return Ok(response);
    }
    tokio::time::timeout(timeout, exchange_tcp(upstream, &bytes, (id, &name, question.qtype), randomize))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out over TCP"))?
}

/// What an answer must match: the ID, the question's name (in the case sent) and type.
type Sent<'a> = (u16, &'a Name, RecordType);

/// One UDP exchange: the answer to `query`, its question in the case sent when `exact`;
/// notes in `other_case` an answer that was only in another case.
async fn exchange_udp(
    upstream: SocketAddr,
    query: &[u8],
    (id, name, qtype): Sent<'_>,
    exact: bool,
    other_case: &AtomicBool,
) -> std::io::Result<Message> {
    let socket = UdpSocket::bind(unspecified(upstream)).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Anything that is not the answer (stray or forged datagrams) is ignored.
        let Ok(msg) = Message::from_vec(&buf[..n]) else { continue };
        match matches(&msg, id, name, qtype) {
            Match::Yes => return Ok(msg),
            Match::OtherCase if !exact => return Ok(msg),
            Match::OtherCase => other_case.store(true, Ordering::Relaxed),
            Match::No => {}
        }
    }
}

async fn exchange_tcp(
    upstream: SocketAddr,
    query: &[u8],
    (id, name, qtype): Sent<'_>,
    exact: bool,
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
    match matches(&msg, id, name, qtype) {
        Match::Yes => Ok(msg),
        Match::OtherCase if !exact => Ok(msg),
        Match::OtherCase => Err(std::io::Error::other(CaseLost)),
        Match::No => Err(std::io::Error::other("mismatched TCP answer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_randomized_name_is_the_same_name_in_another_case() {
        let name = Name::from_ascii("www.Example-1.test.").unwrap();
        let spellings: std::collections::BTreeSet<String> =
            (0..20).map(|_| randomize_case(&name).to_string()).collect();
        assert!(spellings.len() > 10, "{spellings:?}");
        for s in &spellings {
            assert!(s.eq_ignore_ascii_case("www.example-1.test."), "{s}");
        }
        assert!(randomize_case(&name).is_fqdn());
    }

    #[test]
    fn an_answer_matches_its_id_type_and_name_and_says_when_only_the_case_differs() {
        let sent = Name::from_ascii("wWw.ExAmple.test.").unwrap();
        let answer = |id: u16, name: &str, qtype: RecordType| {
            let mut m = Message::new(id, MessageType::Response, OpCode::Query);
            m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
            m
        };
        assert_eq!(
            matches(&answer(7, "wWw.ExAmple.test.", RecordType::A), 7, &sent, RecordType::A),
            Match::Yes
        );
        let lowered = answer(7, "www.example.test.", RecordType::A);
        assert_eq!(matches(&lowered, 7, &sent, RecordType::A), Match::OtherCase);
        assert_eq!(
            matches(&answer(8, "wWw.ExAmple.test.", RecordType::A), 7, &sent, RecordType::A),
            Match::No
        );
        assert_eq!(
            matches(&answer(7, "wWw.ExAmple.test.", RecordType::AAAA), 7, &sent, RecordType::A),
            Match::No
        );
        assert_eq!(matches(&answer(7, "other.test.", RecordType::A), 7, &sent, RecordType::A), Match::No);
        let mut query = answer(7, "wWw.ExAmple.test.", RecordType::A);
        query.metadata.message_type = MessageType::Query;
        assert_eq!(matches(&query, 7, &sent, RecordType::A), Match::No, "not an answer");
    }
}

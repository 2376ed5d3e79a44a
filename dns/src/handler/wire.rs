//! Bytes in, bytes out: parsing requests, encoding replies, UDP truncation.
//!
//! [`handle_bytes`] is the whole synchronous query path on raw bytes; the UDP loop and the
//! fuzz target call it. Parsing errors follow hickory-server: fewer than 12 bytes (no header)
//! are dropped, anything else unparsable gets FORMERR. A reply larger than the client's UDP
//! size keeps the whole records that fit (answers, then authorities, then additionals) and
//! sets TC whenever any is left out, as CoreDNS does, so the client may retry over TCP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Header, Message, MessageType, Metadata, ResponseCode};
use hickory_proto::rr::RecordType;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use hickory_server::zone_handler::{MessageResponseBuilder, Queries};

use tracing::Instrument;

use super::core::Core;
use super::reply::{Reply, Step};
use crate::forward::EDNS_PAYLOAD;
use crate::metrics::{Proto, Source};

/// The largest UDP response for `request`: the client's EDNS size clamped to
/// 512..=[`EDNS_PAYLOAD`], or 512 without EDNS.
pub fn udp_limit(request: &Request) -> u16 {
    request.edns.as_ref().map_or(512, |e| e.max_payload().clamp(512, EDNS_PAYLOAD))
}

/// Our OPT record for a response to a query that carried `theirs`.
pub fn response_edns(theirs: &Edns) -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    // RFC 3225: the DO bit is copied into the response.
    edns.set_dnssec_ok(theirs.flags().dnssec_ok);
    edns
}

/// The response header for `reply`.
pub fn response_metadata(request: &Request, reply: &Reply) -> Metadata {
    let mut meta = Metadata::response_from_request(&request.metadata);
    meta.authoritative = reply.authoritative;
    meta.recursion_available = true;
    meta.response_code = reply.rcode;
    meta
}

/// True when the wire-format question `bytes` contains a compression pointer.
fn has_pointer(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&len) = bytes.get(i) {
        match len {
            0 => return false,
            l if l & 0xc0 != 0 => return true,
            l => i += 1 + usize::from(l),
        }
    }
    false
}

/// The question section a reply echoes, when the request's own bytes cannot be echoed:
/// none for a request without exactly one question, and a fresh encoding when the question
/// uses a compression pointer (it points into the request, whose header is not the reply's).
pub fn reply_question(request: &Request) -> Option<Queries> {
    let queries = request.queries.queries();
    let rebuild = match queries {
        [q] if has_pointer(request.queries.as_bytes()) => Some(q),
        [_] => return None,
        _ => None,
    };
    // A single name has nothing earlier to point to: its fresh encoding has no pointers.
    let mut bytes = Vec::new();
    if let Some(q) = rebuild {
        q.original().emit(&mut BinEncoder::new(&mut bytes)).ok()?;
    }
    let count = usize::from(rebuild.is_some());
    Queries::read(&mut BinDecoder::new(&bytes), count).ok()
}

/// A reply as sent: its bytes, the records that fit, and whether any record had to be left
/// out (TC set).
#[derive(Debug)]
pub struct Fitted {
    /// The wire message.
    pub bytes: Vec<u8>,
    /// The records in it.
    pub reply: Reply,
    /// TC: some record did not fit.
    pub truncated: bool,
}

/// `reply` cut to its first `keep` records, counting the answer section first, then the
/// authority section, then the additional section: the order in which CoreDNS (miekg/dns
/// `Msg.Truncate`) fills a reply that does not fit.
fn first_records(reply: &Reply, keep: usize) -> Reply {
    let answers = keep.min(reply.answers.len());
    let authorities = (keep - answers).min(reply.authorities.len());
    let additionals = (keep - answers - authorities).min(reply.additionals.len());
    Reply {
        answers: reply.answers[..answers].to_vec(),
        authorities: reply.authorities[..authorities].to_vec(),
        additionals: reply.additionals[..additionals].to_vec(),
        ..reply.clone()
    }
}

/// `reply` to `request` in wire format with TC as given, or `None` over `max_size` bytes.
fn emit(
    request: &Request,
    reply: &Reply,
    truncated: bool,
    max_size: u16,
) -> Result<Option<Vec<u8>>, ProtoError> {
    let rebuilt = reply_question(request);
    let queries = rebuilt.as_ref().unwrap_or(&request.queries);
    let edns = request.edns.as_ref().map(response_edns);
    let mut meta = response_metadata(request, reply);
    meta.truncation = truncated;
    let mut buf = Vec::with_capacity(512);
    let response = MessageResponseBuilder::new(queries, edns.as_ref()).build(
        meta,
        reply.answers.iter(),
        reply.authorities.iter(),
        std::iter::empty(),
        reply.additionals.iter(),
    );
    let mut encoder = BinEncoder::new(&mut buf);
    encoder.set_max_size(max_size);
    let counts = response.destructive_emit(&mut encoder)?.counts();
    // hickory stops at the size limit, counting what it wrote: every record went in, or not.
    let fits = usize::from(counts.answers) == reply.answers.len()
        && usize::from(counts.authorities) == reply.authorities.len()
        && usize::from(counts.additionals) == reply.additionals.len() + usize::from(edns.is_some());
    Ok(fits.then_some(buf))
}

/// Encodes `reply` to `request` in at most `max_size` bytes. A reply that does not fit keeps
/// as many whole records as fit — answers first, then authorities, then additionals — and
/// sets TC whenever any record is left out, additional ones included, as CoreDNS does. So a
/// client that never retries over TCP (musl before 1.2.4) still gets the records that fit,
/// and one that does (glibc, dig) is told there is more.
pub fn encode(request: &Request, reply: &Reply, max_size: u16) -> Result<Fitted, ProtoError> {
    if let Some(bytes) = emit(request, reply, false, max_size)? {
        return Ok(Fitted { bytes, reply: reply.clone(), truncated: false });
    }
    // Adding a record never makes a message shorter: the longest prefix that fits is found
    // by bisection (a few encodings, even for thousands of records).
    let total = reply.answers.len() + reply.authorities.len() + reply.additionals.len();
    let (mut fits, mut too_many) = (0, total);
    let mut best = None;
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        let smaller = first_records(reply, mid);
        match emit(request, &smaller, true, max_size)? {
            Some(bytes) => (fits, best) = (mid, Some((bytes, smaller))),
            None => too_many = mid,
        }
    }
    let best = match best {
        Some(b) => Some(b),
        None => {
            let empty = first_records(reply, 0);
            emit(request, &empty, true, max_size)?.map(|bytes| (bytes, empty))
        }
    };
    if let Some((bytes, reply)) = best {
        return Ok(Fitted { bytes, reply, truncated: true });
    }
    // Not even the question fits (cannot happen within 512 bytes); say so.
    let empty = first_records(reply, 0);
    let bytes = emit(request, &empty, true, u16::MAX)?.unwrap_or_default();
    Ok(Fitted { bytes, reply: empty, truncated: true })
}

/// What [`handle_bytes`] decided.
pub enum Handled {
    /// Send these bytes back.
    Respond(Vec<u8>),
    /// Finish asynchronously with [`Pending::finish`].
    Later(Box<Pending>),
    /// Send nothing (no header, or a response message).
    Drop,
}

/// A request waiting for the network.
pub struct Pending {
    request: Request,
    step: Step,
    proto: Proto,
    started: Instant,
    span: tracing::Span,
}

impl Pending {
    /// Completes the request; `None` if the reply could not be encoded.
    pub async fn finish(self, core: &Arc<Core>) -> Option<Vec<u8>> {
        let reply = core.complete(self.step).instrument(self.span.clone()).await;
        record_reply(&self.span, &reply);
        respond(core, &self.request, &reply, self.proto, self.started)
    }
}

/// A `dns.query` span for a sampled query (name, type, transport; the reply's code and
/// source recorded when known), else a disabled span that costs nothing.
pub(crate) fn query_span(request: &Request, proto: Proto) -> tracing::Span {
    if !tideway_telemetry::sampled() {
        return tracing::Span::none();
    }
    let name = request.queries.queries().first().map(|q| q.name().to_string()).unwrap_or_default();
    tracing::info_span!(
        "dns.query",
        name = %name,
        qtype = %qtype_of(request),
        transport = ?proto,
        rcode = tracing::field::Empty,
        source = tracing::field::Empty,
        answers = tracing::field::Empty
    )
}

/// Records `reply` in a query span.
pub(crate) fn record_reply(span: &tracing::Span, reply: &Reply) {
    span.record("rcode", reply.rcode.to_string());
    span.record("source", format!("{:?}", reply.source));
    span.record("answers", reply.answers.len());
}

fn qtype_of(request: &Request) -> RecordType {
    request.queries.queries().first().map_or(RecordType::NULL, |q| q.query_type())
}

/// Encodes a reply and records the response metrics.
fn respond(core: &Core, request: &Request, reply: &Reply, proto: Proto, started: Instant) -> Option<Vec<u8>> {
    let limit = match proto {
        Proto::Udp => udp_limit(request),
        Proto::Tcp => u16::MAX,
    };
    let bytes = match encode(request, reply, limit) {
        Ok(fitted) => fitted.bytes,
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode a reply; sending SERVFAIL");
            encode(request, &Reply::error(ResponseCode::ServFail), limit).ok()?.bytes
        }
    };
    core.metrics().response(
        proto,
        qtype_of(request),
        reply.rcode,
        reply.source,
        bytes.len(),
        started.elapsed().as_secs_f64(),
    );
    Some(bytes)
}

/// The synchronous query path on raw bytes from `src`.
pub fn handle_bytes(core: &Core, bytes: &[u8], src: SocketAddr, proto: Proto) -> Handled {
    handle(core, bytes, src, proto).0
}

/// A reply that the cluster zone alone decided, whatever the client's address: the same
/// query bytes get the same reply until the index or the options change. What
/// [`super::replay`] needs to count a replayed copy in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided {
    /// The question's type.
    pub qtype: RecordType,
    /// The reply's code.
    pub rcode: ResponseCode,
    /// The query's DO bit.
    pub dnssec_ok: bool,
}

/// [`handle_bytes`], also saying whether the reply was [`Decided`] by the zone alone.
pub(crate) fn handle(core: &Core, bytes: &[u8], src: SocketAddr, proto: Proto) -> (Handled, Option<Decided>) {
    let started = Instant::now();
    let Ok(header) = Header::read(&mut BinDecoder::new(bytes)) else {
        return (Handled::Drop, None);
    };
    if header.metadata.message_type == MessageType::Response {
        return (Handled::Drop, None);
    }
    let protocol = match proto {
        Proto::Udp => Protocol::Udp,
        Proto::Tcp => Protocol::Tcp,
    };
    let request = match Request::from_bytes(bytes.to_vec(), src, protocol) {
        Ok(r) => r,
        Err(_) => {
            // Unparsable after a valid header: FORMERR with no question, as hickory-server does.
            let mut msg =
                Message::error_msg(header.metadata.id, header.metadata.op_code, ResponseCode::FormErr);
            msg.metadata.recursion_desired = header.metadata.recursion_desired;
            core.metrics().response(
                proto,
                RecordType::NULL,
                ResponseCode::FormErr,
                Source::Server,
                12,
                started.elapsed().as_secs_f64(),
            );
            return (msg.to_vec().map_or(Handled::Drop, Handled::Respond), None);
        }
    };
    record_request(core, &request, proto, bytes.len());
    let span = query_span(&request, proto);
    match span.in_scope(|| core.decide(&request)) {
        Step::Reply(reply) => {
            record_reply(&span, &reply);
            let decided =
                (reply.source == Source::Kubernetes && !core.answers_depend_on_client()).then(|| Decided {
                    qtype: qtype_of(&request),
                    rcode: reply.rcode,
                    dnssec_ok: request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok),
                });
            let handled =
                respond(core, &request, &reply, proto, started).map_or(Handled::Drop, Handled::Respond);
            (handled, decided)
        }
        step => (Handled::Later(Box::new(Pending { request, step, proto, started, span })), None),
    }
}

/// Records the request metrics.
pub(crate) fn record_request(core: &Core, request: &Request, proto: Proto, size: usize) {
    let dnssec_ok = request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
    core.metrics().request(proto, request.src().is_ipv6(), qtype_of(request), size, dnssec_ok);
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::rdata::{A, CNAME};
    use hickory_proto::rr::{Name, RData, Record};

    use super::*;

    fn a(name: &str, last: u8) -> Record {
        Record::from_rdata(Name::from_ascii(name).unwrap(), 5, RData::A(A::new(10, 0, 0, last)))
    }

    /// A parsed A query for `name`, with an EDNS size when given.
    fn request(name: &str, edns: Option<u16>) -> Request {
        use hickory_proto::op::{MessageType, OpCode, Query};
        let mut m = Message::new(0x4242, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        if let Some(size) = edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            m.set_edns(e);
        }
        let src: SocketAddr = "127.0.0.1:5353".parse().unwrap();
        Request::from_bytes(m.to_vec().unwrap(), src, Protocol::Udp).unwrap()
    }

    fn many(name: &str, n: u8) -> Vec<Record> {
        (1..=n).map(|i| a(name, i)).collect()
    }

    #[test]
    fn a_reply_that_does_not_fit_keeps_the_whole_records_that_do_with_tc() {
        let name = "big.ns1.svc.cluster.local.";
        let reply = Reply { answers: many(name, 120), ..Reply::error(ResponseCode::NoError) };
        for (edns, limit) in [(None, 512), (Some(1232), 1232)] {
            let req = request(name, edns);
            let f = encode(&req, &reply, udp_limit(&req)).unwrap();
            let n = f.reply.answers.len();
            assert!(f.truncated && n > 0 && n < 120, "{edns:?}: {n} records");
            assert!(f.bytes.len() <= limit, "{} bytes", f.bytes.len());
            assert_eq!(f.reply.answers, reply.answers[..n], "a prefix, in order");
            // One more record would not have fitted.
            let more = Reply { answers: reply.answers[..=n].to_vec(), ..Reply::error(ResponseCode::NoError) };
            assert!(emit(&req, &more, true, limit as u16).unwrap().is_none(), "{edns:?}: {n} is the most");
            let msg = Message::from_vec(&f.bytes).unwrap();
            assert!(msg.metadata.truncation && msg.answers.len() == n, "the wire says TC and {n} answers");
        }
    }

    #[test]
    fn tc_is_set_whenever_a_record_is_left_out_additional_ones_included() {
        let name = "srv.ns1.svc.cluster.local.";
        let answers = many(name, 6);
        let additionals = many("target.ns1.svc.cluster.local.", 40);
        let reply = Reply { answers: answers.clone(), additionals, ..Reply::error(ResponseCode::NoError) };
        let req = request(name, None);
        let f = encode(&req, &reply, 512).unwrap();
        assert!(f.truncated, "an additional record left out sets TC");
        assert_eq!(f.reply.answers, answers, "every answer fits and is kept");
        assert!(!f.reply.additionals.is_empty() && f.reply.additionals.len() < 40);
        // A reply that fits whole goes out unchanged, without TC.
        let small = Reply { answers: answers.clone(), ..Reply::error(ResponseCode::NoError) };
        let f = encode(&req, &small, 512).unwrap();
        assert!(!f.truncated && f.reply.answers == answers);
        // Authorities come before additionals: an SOA is kept before any additional.
        let cname = Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            5,
            RData::CNAME(CNAME(Name::from_ascii("y.").unwrap())),
        );
        let cut =
            first_records(&Reply { answers: vec![cname.clone()], authorities: vec![a("s.", 1)], ..reply }, 2);
        assert_eq!((cut.answers, cut.authorities.len(), cut.additionals.len()), (vec![cname], 1, 0));
    }
}

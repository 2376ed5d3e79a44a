//! Bytes in, bytes out: parsing requests, encoding replies, UDP truncation.
//!
//! [`handle_bytes`] is the whole synchronous query path on raw bytes; the UDP loop and the
//! fuzz target call it. Parsing errors follow hickory-server: fewer than 12 bytes (no header)
//! are dropped, anything else unparsable gets FORMERR. A reply larger than the client's UDP
//! size loses its additional section first; only when its answer section does not fit is TC
//! set (with the whole RRsets that fit), so the client retries over TCP.

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

use super::{Core, Reply, Step};
use crate::forward::EDNS_PAYLOAD;
use crate::metrics::Proto;

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

/// A reply as sent: its bytes, the records that fit, and whether the answer section had to
/// be cut (TC set).
#[derive(Debug)]
pub struct Fitted {
    /// The wire message.
    pub bytes: Vec<u8>,
    /// The records in it.
    pub reply: Reply,
    /// TC: the answer section did not fit whole.
    pub truncated: bool,
}

/// The ways to shrink `reply`, best first, as RFC 2181 §9 and CoreDNS do it: the additional
/// section goes first without TC (it is only a help); only when the answer section itself
/// does not fit is TC set, keeping as many whole RRsets as fit (leading CNAMEs first).
pub fn shrink(reply: &Reply) -> impl Iterator<Item = (Reply, bool)> + '_ {
    let without_additionals =
        (!reply.additionals.is_empty()).then(|| (Reply { additionals: Vec::new(), ..reply.clone() }, false));
    let mut ends: Vec<usize> = Vec::new();
    for (i, r) in reply.answers.iter().enumerate() {
        let next = reply.answers.get(i + 1);
        if next.is_none_or(|n| n.name != r.name || n.record_type() != r.record_type()) {
            ends.push(i + 1);
        }
    }
    ends.pop();
    let cut = ends.into_iter().rev().chain([0]).map(|keep| {
        let answers = reply.answers[..keep].to_vec();
        (Reply { answers, authorities: Vec::new(), additionals: Vec::new(), ..reply.clone() }, true)
    });
    without_additionals.into_iter().chain(cut)
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

/// Encodes `reply` to `request` in at most `max_size` bytes, shrunk by [`shrink`] when it
/// does not fit whole.
pub fn encode(request: &Request, reply: &Reply, max_size: u16) -> Result<Fitted, ProtoError> {
    if let Some(bytes) = emit(request, reply, false, max_size)? {
        return Ok(Fitted { bytes, reply: reply.clone(), truncated: false });
    }
    for (smaller, truncated) in shrink(reply) {
        if let Some(bytes) = emit(request, &smaller, truncated, max_size)? {
            return Ok(Fitted { bytes, reply: smaller, truncated });
        }
    }
    // Not even the question fits (cannot happen within 512 bytes); say so.
    let empty =
        Reply { answers: Vec::new(), authorities: Vec::new(), additionals: Vec::new(), ..reply.clone() };
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
    core.metrics.response(
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
    let started = Instant::now();
    let Ok(header) = Header::read(&mut BinDecoder::new(bytes)) else {
        return Handled::Drop;
    };
    if header.metadata.message_type == MessageType::Response {
        return Handled::Drop;
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
            core.metrics.response(
                proto,
                RecordType::NULL,
                ResponseCode::FormErr,
                crate::metrics::Source::Server,
                12,
                started.elapsed().as_secs_f64(),
            );
            return msg.to_vec().map_or(Handled::Drop, Handled::Respond);
        }
    };
    record_request(core, &request, proto, bytes.len());
    let span = query_span(&request, proto);
    match span.in_scope(|| core.decide(&request)) {
        Step::Reply(reply) => {
            record_reply(&span, &reply);
            respond(core, &request, &reply, proto, started).map_or(Handled::Drop, Handled::Respond)
        }
        step => Handled::Later(Box::new(Pending { request, step, proto, started, span })),
    }
}

/// Records the request metrics.
pub(crate) fn record_request(core: &Core, request: &Request, proto: Proto, size: usize) {
    let dnssec_ok = request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
    core.metrics.request(proto, request.src().is_ipv6(), qtype_of(request), size, dnssec_ok);
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::rdata::{A, CNAME};
    use hickory_proto::rr::{Name, RData, Record};

    use super::*;

    fn a(name: &str, last: u8) -> Record {
        Record::from_rdata(Name::from_ascii(name).unwrap(), 5, RData::A(A::new(10, 0, 0, last)))
    }

    #[test]
    fn additionals_go_first_then_whole_rrsets_with_tc() {
        let cname = Record::from_rdata(
            Name::from_ascii("x.").unwrap(),
            5,
            RData::CNAME(CNAME(Name::from_ascii("y.").unwrap())),
        );
        let reply = Reply {
            answers: vec![cname.clone(), a("y.", 1), a("y.", 2), a("z.", 3)],
            additionals: vec![a("t.", 9)],
            ..Reply::error(ResponseCode::NoError)
        };
        let steps: Vec<(Vec<Record>, usize, bool)> =
            shrink(&reply).map(|(r, tc)| (r.answers, r.additionals.len(), tc)).collect();
        assert_eq!(
            steps,
            vec![
                (reply.answers.clone(), 0, false),
                (vec![cname.clone(), a("y.", 1), a("y.", 2)], 0, true),
                (vec![cname], 0, true),
                (Vec::new(), 0, true),
            ]
        );
        // Nothing to drop from the additional section: straight to cutting RRsets.
        let bare = Reply { answers: vec![a("y.", 1), a("y.", 2)], ..Reply::error(ResponseCode::NoError) };
        assert_eq!(shrink(&bare).map(|(r, tc)| (r.answers.len(), tc)).collect::<Vec<_>>(), vec![(0, true)]);
    }
}

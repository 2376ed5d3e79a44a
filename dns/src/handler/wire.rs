//! Bytes in, bytes out: parsing requests, encoding replies, UDP truncation.
//!
//! [`handle_bytes`] is the whole synchronous query path on raw bytes; the UDP loop and the
//! fuzz target call it. Parsing errors follow hickory-server: fewer than 12 bytes (no header)
//! are dropped, anything else unparsable gets FORMERR. A reply larger than the client's UDP
//! size is replaced by an empty one with TC set, so the client retries over TCP.

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

/// Encodes `reply` to `request` in at most `max_size` bytes. Returns the bytes and whether
/// the reply had to be truncated (then it is sent empty, with TC).
pub fn encode(request: &Request, reply: &Reply, max_size: u16) -> Result<(Vec<u8>, bool), ProtoError> {
    let rebuilt = reply_question(request);
    let queries = rebuilt.as_ref().unwrap_or(&request.queries);
    let edns = request.edns.as_ref().map(response_edns);
    let meta = response_metadata(request, reply);
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
    let info = response.destructive_emit(&mut encoder)?;
    if !info.truncation {
        return Ok((buf, false));
    }
    buf.clear();
    let mut meta = meta;
    meta.truncation = true;
    let response = MessageResponseBuilder::new(queries, edns.as_ref()).build_no_records(meta);
    let mut encoder = BinEncoder::new(&mut buf);
    encoder.set_max_size(max_size);
    response.destructive_emit(&mut encoder)?;
    Ok((buf, true))
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
}

impl Pending {
    /// Completes the request; `None` if the reply could not be encoded.
    pub async fn finish(self, core: &Arc<Core>) -> Option<Vec<u8>> {
        let reply = core.complete(self.step).await;
        respond(core, &self.request, &reply, self.proto, self.started)
    }
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
        Ok((bytes, _)) => bytes,
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode a reply; sending SERVFAIL");
            encode(request, &Reply::error(ResponseCode::ServFail), limit).ok()?.0
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
    match core.decide(&request) {
        Step::Reply(reply) => {
            respond(core, &request, &reply, proto, started).map_or(Handled::Drop, Handled::Respond)
        }
        step => Handled::Later(Box::new(Pending { request, step, proto, started })),
    }
}

/// Records the request metrics.
pub(crate) fn record_request(core: &Core, request: &Request, proto: Proto, size: usize) {
    let dnssec_ok = request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
    core.metrics.request(proto, request.src().is_ipv6(), qtype_of(request), size, dnssec_ok);
}

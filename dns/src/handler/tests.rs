//! Bad input on the wire: every malformed, oversized or unsupported request gets FORMERR,
//! REFUSED, NOTIMP or BADVERS (or is dropped when it has no header), and nothing panics.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use prometheus_client::registry::Registry;

use super::wire::{Handled, handle_bytes};
use super::{Core, Options};
use crate::forward::cache::{Cache, CacheSettings};
use crate::forward::{ForwardSettings, Forwarder};
use crate::metrics::{Metrics, Proto};
use crate::records::{IndexSettings, RecordIndex};

fn core() -> Core {
    let metrics = Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut Registry::default()));
    let index = RecordIndex::build(
        &crate::answer::tests::fixture(),
        &IndexSettings::new("cluster.local").unwrap(),
        1,
    );
    Core::new(
        index,
        Forwarder::new(ForwardSettings::default(), Arc::clone(&metrics)),
        Cache::new(CacheSettings::default(), Arc::clone(&metrics)),
        Options::default(),
        metrics,
    )
}

const SRC: &str = "192.0.2.7:5353";

/// Handles `bytes`; `None` when dropped or deferred, else the decoded response.
fn ask(core: &Core, bytes: &[u8]) -> Option<Message> {
    let src: SocketAddr = SRC.parse().unwrap();
    match handle_bytes(core, bytes, src, Proto::Udp) {
        Handled::Respond(b) => {
            assert!(b.len() <= 512 || bytes.len() > 12, "UDP answers without EDNS fit 512 bytes");
            Some(Message::from_vec(&b).expect("our responses always parse"))
        }
        Handled::Later(_) | Handled::Drop => None,
    }
}

fn query(name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(0x1234, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m
}

fn rcode_of(core: &Core, bytes: &[u8]) -> ResponseCode {
    let r = ask(core, bytes).expect("a response");
    assert_eq!(r.metadata.id, 0x1234);
    assert_eq!(r.metadata.message_type, MessageType::Response);
    r.metadata.response_code
}

#[test]
fn unsupported_requests_get_the_right_code() {
    let core = core();
    let good = query("svc1.testns.svc.cluster.local.", RecordType::A);
    assert_eq!(rcode_of(&core, &good.to_vec().unwrap()), ResponseCode::NoError);

    for op in [OpCode::Status, OpCode::Notify, OpCode::Update, OpCode::Unknown(9)] {
        let mut m = good.clone();
        m.metadata.op_code = op;
        assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::NotImp, "{op:?}");
    }
    for class in [DNSClass::CH, DNSClass::HS, DNSClass::Unknown(0x1234)] {
        let mut m = Message::new(0x1234, MessageType::Query, OpCode::Query);
        let mut q = Query::query(Name::from_ascii("svc1.testns.svc.cluster.local.").unwrap(), RecordType::A);
        q.set_query_class(class);
        m.add_query(q);
        assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::Refused, "{class:?}");
    }
    for qtype in [RecordType::AXFR, RecordType::IXFR, RecordType::ANY] {
        let m = query("cluster.local.", qtype);
        assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::Refused, "{qtype:?}");
    }
    let m = query("svc1.testns.svc.cluster.local.", RecordType::Unknown(253));
    assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::NotImp, "MAILB");

    // No question, two questions.
    let m = Message::new(0x1234, MessageType::Query, OpCode::Query);
    assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::FormErr);
    let mut m = good.clone();
    m.add_query(Query::query(Name::from_ascii("svc6.testns.svc.cluster.local.").unwrap(), RecordType::A));
    assert_eq!(rcode_of(&core, &m.to_vec().unwrap()), ResponseCode::FormErr);

    // EDNS version 1: BADVERS, which needs an OPT record to carry its high bits.
    let mut m = good.clone();
    let mut edns = Edns::new();
    edns.set_version(1);
    m.set_edns(edns);
    let r = ask(&core, &m.to_vec().unwrap()).unwrap();
    // 16 decodes as BADSIG (same code, TSIG context); BADVERS is what was sent.
    assert_eq!(u16::from(r.metadata.response_code), 16);
    assert!(r.edns.is_some());

    // Responses are never answered (no reflection).
    let mut m = good.clone();
    m.metadata.message_type = MessageType::Response;
    assert!(ask(&core, &m.to_vec().unwrap()).is_none());
}

/// The question section of a query for `labels` written by hand (no validation).
fn raw_query(qname: &[u8], qtype: u16, qclass: u16) -> Vec<u8> {
    let mut b = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    b.extend_from_slice(qname);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&qclass.to_be_bytes());
    b
}

#[test]
fn malformed_requests_get_formerr_or_are_dropped() {
    let core = core();
    // Fewer than 12 bytes: no header, nothing to answer.
    for n in 0..12 {
        assert!(ask(&core, &vec![0x12; n]).is_none(), "{n} bytes");
    }
    // A valid query cut anywhere after the header.
    let full = query("svc1.testns.svc.cluster.local.", RecordType::A).to_vec().unwrap();
    for n in 12..full.len() {
        assert_eq!(rcode_of(&core, &full[..n]), ResponseCode::FormErr, "cut at {n}");
    }
    // A name longer than 255 bytes.
    let mut long = Vec::new();
    for _ in 0..5 {
        long.push(60);
        long.extend_from_slice(&[b'a'; 60]);
    }
    long.push(0);
    assert_eq!(rcode_of(&core, &raw_query(&long, 1, 1)), ResponseCode::FormErr, "oversized name");
    // A label length with the reserved 0b01 prefix, and a compression pointer to itself.
    assert_eq!(rcode_of(&core, &raw_query(&[0x41, b'a', 0], 1, 1)), ResponseCode::FormErr);
    assert_eq!(rcode_of(&core, &raw_query(&[0xc0, 12], 1, 1)), ResponseCode::FormErr, "pointer loop");
    // Trailing garbage after a complete message is tolerated, a bogus record count is not.
    let mut b = raw_query(&[4, b't', b'e', b's', b't', 0], 1, 1);
    b[11] = 3; // ARCOUNT 3 with no records
    assert_eq!(rcode_of(&core, &b), ResponseCode::FormErr);
}

#[test]
fn questions_with_compression_pointers_are_not_echoed_verbatim() {
    let core = core();
    // Found by fuzzing: two questions, the first a pointer into the request's header. Echoed
    // as-is it would point into the reply's (different) header and the reply would not parse.
    let input = [1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 192, 0, 21, 0, 0, 0, 0, 0, 35, 0, 0, 1, 1];
    let reply = ask(&core, &input).expect("a reply that parses");
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
    // One question `x.` whose root label is a pointer to byte 3 of the header (zero in the
    // request, RA + rcode in the reply): the reply carries a fresh encoding of the question.
    let q = [0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'x', 0xc0, 3, 0, 255, 0, 1];
    let reply = ask(&core, &q).expect("a reply that parses");
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
    assert_eq!(reply.queries[0].name().to_string(), "x.");
}

#[test]
fn random_bytes_never_panic() {
    let core = core();
    // xorshift64*: deterministic, no dependency.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let base = query("_http._tcp.hdls1.testns.svc.cluster.local.", RecordType::SRV).to_vec().unwrap();
    let mut answered = 0;
    for i in 0..20_000 {
        let bytes: Vec<u8> = if i % 2 == 0 {
            let len = (next() % 300) as usize;
            (0..len).map(|_| next() as u8).collect()
        } else {
            // Mutate a valid query: flips, truncation, extension.
            let mut b = base.clone();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            if next() % 3 == 0 {
                b.truncate((next() as usize) % b.len());
            }
            b
        };
        if let Some(r) = ask(&core, &bytes) {
            answered += 1;
            assert_eq!(r.metadata.message_type, MessageType::Response);
        }
    }
    assert!(answered > 1000, "most inputs with a header get an answer ({answered})");
}

/// A sampled query is a `dns.query` span with its name, type, code and source; with nothing
/// sampled, no span is made.
#[test]
fn sampled_queries_are_traced() {
    let capture = tideway_telemetry::testing::Capture::new();
    let _guard = capture.install();
    let core = core();
    let bytes = query("svc1.testns.svc.cluster.local.", RecordType::A).to_vec().unwrap();
    assert_eq!(rcode_of(&core, &bytes), ResponseCode::NoError);
    let missing = query("nope.testns.svc.cluster.local.", RecordType::AAAA).to_vec().unwrap();
    assert_eq!(rcode_of(&core, &missing), ResponseCode::NXDomain);
    let spans = capture.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let a = &spans[0].attributes;
    assert_eq!(spans[0].name, "dns.query");
    assert_eq!(
        (a["name"].as_str(), a["qtype"].as_str(), a["rcode"].as_str(), a["source"].as_str()),
        ("svc1.testns.svc.cluster.local.", "A", "No Error", "Kubernetes"),
        "{a:?}"
    );
    assert_eq!(a["transport"], "Udp");
    assert_eq!(spans[1].attributes["rcode"], "Non-Existent Domain");
    tideway_telemetry::set_sample_every(0);
    assert_eq!(rcode_of(&core, &bytes), ResponseCode::NoError);
    assert_eq!(capture.spans().len(), 2, "unsampled queries make no span");
}

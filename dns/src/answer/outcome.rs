//! What a query gets from the answer rules: an authoritative [`Answer`], or an [`Outcome`]
//! that sends it upstream.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, Record};

/// A complete authoritative answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// NOERROR (with or without records), NXDOMAIN, or SERVFAIL before the first sync.
    pub rcode: ResponseCode,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of negative answers).
    pub authority: Vec<Record>,
    /// Additional section (SRV targets, NS addresses).
    pub additionals: Vec<Record>,
}

/// What to do with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Send this authoritative answer.
    Answer(Answer),
    /// An ExternalName: send `answer` (ending in a CNAME to `target`) completed with `target`'s
    /// records of the query type, looked up upstream.
    Chase {
        /// The CNAME chain so far.
        answer: Answer,
        /// The name to look up upstream.
        target: Name,
    },
    /// Not the cluster's to answer: forward it.
    Forward,
}

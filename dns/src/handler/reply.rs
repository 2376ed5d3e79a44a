//! What the request path hands back: a [`Reply`] ready to be encoded, or the [`Step`] that
//! still needs the network.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::Record;

use crate::answer::Answer;
use crate::forward::Question;
use crate::metrics::Source;

/// A reply ready to be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Response code.
    pub rcode: ResponseCode,
    /// AA bit.
    pub authoritative: bool,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section.
    pub authorities: Vec<Record>,
    /// Additional section.
    pub additionals: Vec<Record>,
    /// Who wrote it (the `plugin` metrics label).
    pub source: Source,
}

impl Reply {
    /// An empty reply with `rcode`, written by the server itself.
    pub fn error(rcode: ResponseCode) -> Self {
        Reply {
            rcode,
            authoritative: false,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
            source: Source::Server,
        }
    }

    pub(super) fn authoritative(a: Answer) -> Self {
        Reply {
            rcode: a.rcode,
            authoritative: true,
            answers: a.answers,
            authorities: a.authority,
            additionals: a.additionals,
            source: Source::Kubernetes,
        }
    }
}

/// The next step for a request.
#[derive(Debug)]
pub enum Step {
    /// Reply now.
    Reply(Reply),
    /// Not the cluster's: answer from the cache or upstream.
    Forward(Upstream),
    /// An ExternalName: `answer` holds the CNAME, the target's records come from upstream.
    Chase {
        /// The CNAME chain.
        answer: Answer,
        /// What to look up upstream.
        target: Upstream,
    },
}

/// A name to look up upstream, and who asks.
pub type Upstream = Question;

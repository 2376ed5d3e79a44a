//! [`Core`]: everything the request path reads, and the decisions it makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use hickory_proto::op::{LowerQuery, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use hickory_server::server::Request;

use super::loadbalance::shuffle_addresses;
use super::probe::LoopProbe;
use super::reply::{Reply, Step, Upstream};
use crate::answer::{self, Gate, Outcome};
use crate::forward::cache::{Cache, Hit};
use crate::forward::{ForwardError, Forwarder, respell_records};
use crate::metrics::{Metrics, Source};
use crate::records::RecordIndex;

/// Query-path options that can change on reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Randomize the order of A/AAAA/MX answers (CoreDNS's `loadbalance`).
    pub shuffle: bool,
    /// Answer ANY queries with REFUSED (no amplification).
    pub refuse_any: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { shuffle: true, refuse_any: true }
    }
}

/// Everything the request path reads; swapped pieces (index, cache, options) change on
/// cluster changes and reloads without stopping the server.
pub struct Core {
    index: ArcSwap<RecordIndex>,
    forwarder: Forwarder,
    cache: ArcSwap<Cache>,
    options: ArcSwap<Options>,
    metrics: Arc<Metrics>,
    probe: LoopProbe,
    /// Bumped after every change of what an answer depends on (index, options), so copies
    /// of earlier answers ([`super::replay`]) are known to be stale.
    generation: AtomicU64,
}

impl Core {
    /// A core answering from `index`, forwarding through `forwarder` and `cache`.
    pub fn new(
        index: RecordIndex,
        forwarder: Forwarder,
        cache: Cache,
        options: Options,
        metrics: Arc<Metrics>,
    ) -> Self {
        Core {
            index: ArcSwap::from_pointee(index),
            forwarder,
            cache: ArcSwap::from_pointee(cache),
            options: ArcSwap::from_pointee(options),
            metrics,
            probe: LoopProbe::new(),
            generation: AtomicU64::new(0),
        }
    }

    /// The index in use.
    pub fn index(&self) -> Arc<RecordIndex> {
        self.index.load_full()
    }

    /// Swaps in a new index; queries in flight finish with the old one.
    pub fn set_index(&self, index: RecordIndex) {
        self.index.store(Arc::new(index));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes with every new index or options: answers decided under an earlier value may
    /// be out of date.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// True when an answer may depend on who asks (`--require-programmed`): such answers are
    /// never replayed to another client.
    pub(super) fn answers_depend_on_client(&self) -> bool {
        self.index.load().programmed.is_some()
    }

    /// The forwarder.
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }

    /// Replaces the cache (its settings changed).
    pub fn set_cache(&self, cache: Cache) {
        self.cache.store(Arc::new(cache));
    }

    /// The cache in use.
    pub fn cache(&self) -> Arc<Cache> {
        self.cache.load_full()
    }

    /// Replaces the options.
    pub fn set_options(&self, options: Options) {
        self.options.store(Arc::new(options));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The options in use.
    pub fn options(&self) -> Arc<Options> {
        self.options.load_full()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The loop probe.
    pub fn probe(&self) -> &LoopProbe {
        &self.probe
    }

    /// Decides what to do with `request` without touching the network.
    pub fn decide(&self, request: &Request) -> Step {
        let meta = &request.metadata;
        if meta.op_code != OpCode::Query {
            return Step::Reply(Reply::error(ResponseCode::NotImp));
        }
        if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            return Step::Reply(Reply::error(ResponseCode::BADVERS));
        }
        let [query] = request.queries.queries() else {
            return Step::Reply(Reply::error(ResponseCode::FormErr));
        };
        match query.query_class() {
            DNSClass::IN => {}
            DNSClass::NONE | DNSClass::ANY | DNSClass::OPT(_) => {
                return Step::Reply(Reply::error(ResponseCode::FormErr));
            }
            _ => return Step::Reply(Reply::error(ResponseCode::Refused)),
        }
        let qtype = query.query_type();
        match qtype {
            RecordType::AXFR | RecordType::IXFR => return Step::Reply(Reply::error(ResponseCode::Refused)),
            RecordType::ANY if self.options.load().refuse_any => {
                return Step::Reply(Reply::error(ResponseCode::Refused));
            }
            RecordType::OPT => return Step::Reply(Reply::error(ResponseCode::FormErr)),
            RecordType::Unknown(t) if (128..=255).contains(&t) => {
                // Meta-types (MAILA, MAILB, ...) are not implemented.
                return Step::Reply(Reply::error(ResponseCode::NotImp));
            }
            _ => {}
        }
        if *query.name() == self.probe.name {
            let hits = self.probe.hits.fetch_add(1, Ordering::Relaxed) + 1;
            if hits > 2 {
                if !self.probe.detected.swap(true, Ordering::Relaxed) {
                    self.probe.notify.notify_waiters();
                }
                return Step::Reply(Reply::error(ResponseCode::ServFail));
            }
        }
        let dnssec_ok = request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
        let client = request.src().ip();
        let upstream = |name: Name| Upstream { name, qtype, qclass: query.query_class(), dnssec_ok, client };
        let index = self.index.load();
        if answer::gate(&index, query, request.src().ip()) == Gate::NotProgrammed {
            self.metrics.not_programmed.inc();
            return Step::Reply(Reply::error(ResponseCode::ServFail));
        }
        match answer::answer(&index, query) {
            Outcome::Answer(a) => Step::Reply(self.finish(Reply::authoritative(a))),
            Outcome::Chase { answer, target } => Step::Chase { answer, target: upstream(target) },
            Outcome::Forward => Step::Forward(upstream(original_name(query))),
        }
    }

    /// Finishes a step that needs the network.
    pub async fn complete(self: &Arc<Self>, step: Step) -> Reply {
        let reply = match step {
            Step::Reply(reply) => return reply,
            Step::Forward(up) => match self.lookup(&up).await {
                Ok(reply) => reply,
                Err(ForwardError::Overloaded) => Reply::error(ResponseCode::Refused),
                Err(e) => {
                    tracing::debug!(name = %up.name, error = %e, "forwarding failed");
                    Reply::error(ResponseCode::ServFail)
                }
            },
            Step::Chase { answer, target } => {
                let mut reply = Reply::authoritative(answer);
                match self.lookup(&target).await {
                    Ok(up) => {
                        reply.answers.extend(up.answers);
                        // The code is the last name's (RFC 6604): NXDOMAIN if the target is.
                        if up.rcode == ResponseCode::NXDomain {
                            reply.rcode = ResponseCode::NXDomain;
                            reply.authorities = up.authorities;
                        }
                    }
                    // The CNAME alone still lets the client chase the target itself.
                    Err(e) => tracing::debug!(target = %target.name, error = %e, "ExternalName chase failed"),
                }
                reply
            }
        };
        self.finish(reply)
    }

    /// The cache, then upstream; when no upstream answers, what the cache kept of an expired
    /// answer. Names the question owns are spelled as the asker spelled them.
    async fn lookup(self: &Arc<Self>, up: &Upstream) -> Result<Reply, ForwardError> {
        let key = up.key();
        let cache = self.cache.load_full();
        if let Some(hit) = cache.get(&key, Instant::now()) {
            if hit.prefetch {
                let core = Arc::clone(self);
                let up = up.clone();
                tokio::spawn(async move {
                    if let Ok(response) = core.forwarder.resolve(&up).await {
                        core.cache.load().insert(up.key(), &response, Instant::now());
                    }
                });
            }
            return Ok(cached(hit, up));
        }
        let response = match self.forwarder.resolve(up).await {
            Ok(response) => response,
            Err(e @ (ForwardError::Failed(_) | ForwardError::Overloaded)) => {
                return cache.stale(&key, Instant::now()).map(|hit| cached(hit, up)).ok_or(e);
            }
            Err(e) => return Err(e),
        };
        cache.insert(key, &response, Instant::now());
        Ok(Reply {
            rcode: response.metadata.response_code,
            authoritative: response.metadata.authoritative,
            answers: response.answers,
            authorities: response.authorities,
            additionals: response.additionals,
            source: Source::Forward,
        })
    }

    /// Last touches on every reply: address shuffling.
    fn finish(&self, mut reply: Reply) -> Reply {
        if reply.answers.len() > 1 && self.options.load().shuffle {
            shuffle_addresses(&mut reply.answers);
        }
        reply
    }
}

/// A reply from the cache to `up`, whose names are spelled as `up` asked.
fn cached(hit: Hit, up: &Upstream) -> Reply {
    let mut reply = Reply {
        rcode: hit.rcode,
        authoritative: false,
        answers: hit.answers,
        authorities: hit.authorities,
        additionals: hit.additionals,
        source: Source::Cache,
    };
    for records in [&mut reply.answers, &mut reply.authorities, &mut reply.additionals] {
        respell_records(records, &up.name);
    }
    reply
}

fn original_name(query: &LowerQuery) -> Name {
    query.original().name().clone()
}

//! Forwarding to upstream servers (CoreDNS's `forward . /etc/resolv.conf`) and the response
//! cache in front of it.
//!
//! A query goes to the upstreams that are not down ([`health`]), in random order, until one
//! answers: UDP from a fresh ephemeral port, retried over TCP when the answer is truncated.
//! Against spoofed answers: the kernel's port randomization, a random ID, and the question's
//! case randomized (DNS 0x20, as Unbound's `use-caps-for-id`): only an answer whose question
//! has exactly the case sent is taken, and the asker's case is written back. An upstream seen
//! to answer in another case (some forwarders lower it) is asked in the asker's case from then on.
//!
//! Queries in flight are limited in all (`max_concurrent`, REFUSED above it, as CoreDNS) and
//! per client ([`limits`]); identical ones share one exchange ([`coalesce`]), loop probes
//! (HINFO) aside.

pub mod cache;
pub mod coalesce;
mod error;
mod exchange;
pub mod health;
pub mod limits;
mod question;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::Message;
use hickory_proto::rr::{Name, Record, RecordType};

use self::coalesce::Coalescer;
pub use self::error::ForwardError;
pub use self::exchange::{EDNS_PAYLOAD, randomize_case};
use self::exchange::{exchange, is_case_lost};
use self::health::{Checks, Health};
use self::limits::{Limits, Refused};
pub use self::question::Question;
use crate::metrics::{Metrics, ToLabels, ToRcodeLabels, rcode_label};

/// At most this many upstreams are read from a resolv.conf (CoreDNS's limit).
pub const MAX_UPSTREAMS: usize = 15;

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

/// Forwarder settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardSettings {
    /// Upstream servers.
    pub upstreams: Vec<SocketAddr>,
    /// Per-upstream read timeout (CoreDNS: 2 s).
    pub timeout: Duration,
    /// Queries in flight before new ones are refused (CoreDNS's `max_concurrent`).
    pub max_concurrent: usize,
    /// Queries in flight from one client address before its new ones are refused (0: no
    /// limit of its own).
    pub max_concurrent_per_client: usize,
    /// Between health checks of an upstream that left a query unanswered, and how long a
    /// query waits before its upstream is checked (CoreDNS's `health_check`).
    pub health_check: Duration,
    /// Failed checks in a row before an upstream gets no more queries (CoreDNS's
    /// `max_fails`; 0: never).
    pub max_fails: u32,
    /// Randomize the case of forwarded questions (DNS 0x20).
    pub randomize_case: bool,
}

impl Default for ForwardSettings {
    fn default() -> Self {
        ForwardSettings {
            upstreams: Vec::new(),
            timeout: Duration::from_secs(2),
            max_concurrent: 1000,
            max_concurrent_per_client: 100,
            health_check: Duration::from_millis(500),
            max_fails: 2,
            randomize_case: true,
        }
    }
}

/// The upstreams of one version of the settings, with their health.
struct Pool {
    settings: ForwardSettings,
    upstreams: Vec<Arc<Health>>,
}

impl Pool {
    fn new(settings: ForwardSettings) -> Self {
        let upstreams = settings.upstreams.iter().map(|&a| Health::new(a)).collect();
        Pool { settings, upstreams }
    }

    fn checks(&self) -> Checks {
        Checks { interval: self.settings.health_check, max_fails: self.settings.max_fails }
    }
}

/// Sends queries upstream.
pub struct Forwarder {
    pool: ArcSwap<Pool>,
    limits: Limits,
    coalescer: Coalescer,
    metrics: Arc<Metrics>,
}

impl Forwarder {
    /// A forwarder with `settings`.
    pub fn new(settings: ForwardSettings, metrics: Arc<Metrics>) -> Self {
        Forwarder {
            pool: ArcSwap::from_pointee(Pool::new(settings)),
            limits: Limits::default(),
            coalescer: Coalescer::default(),
            metrics,
        }
    }

    /// Replaces the settings (reload); queries in flight finish with the old ones. An
    /// upstream kept keeps its health.
    pub fn set_settings(&self, settings: ForwardSettings) {
        let old = self.pool.load();
        let mut pool = Pool::new(settings);
        for up in &mut pool.upstreams {
            if let Some(same) = old.upstreams.iter().find(|o| o.addr == up.addr) {
                *up = Arc::clone(same);
            }
        }
        self.pool.store(Arc::new(pool));
    }

    /// The current upstreams.
    pub fn upstreams(&self) -> Vec<SocketAddr> {
        self.pool.load().settings.upstreams.clone()
    }

    /// The upstreams' health: each with its failed checks in a row and whether it is down.
    pub fn health(&self) -> Vec<(SocketAddr, u32, bool)> {
        let pool = self.pool.load();
        let max_fails = pool.settings.max_fails;
        pool.upstreams.iter().map(|h| (h.addr, h.fails(), h.is_down(max_fails))).collect()
    }

    /// Queries in flight, in all and from `client`.
    pub fn in_flight(&self, client: IpAddr) -> (usize, usize) {
        self.limits.in_flight(client)
    }

    /// Resolves `question` upstream; the answer's names that are the question's are in the
    /// asker's case.
    pub async fn resolve(&self, question: &Question) -> Result<Message, ForwardError> {
        let pool = self.pool.load_full();
        let s = &pool.settings;
        if s.upstreams.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        let _slot = self
            .limits
            .enter(question.client, s.max_concurrent, s.max_concurrent_per_client)
            .map_err(|why| {
                match why {
                    Refused::Total => self.metrics.forward_max_concurrent_rejects.inc(),
                    Refused::Client => self.metrics.forward_client_rejects.inc(),
                };
                ForwardError::Overloaded
            })?;
        // A loop probe (HINFO for a random name, CoreDNS's and ours) must go round a loop
        // every time: met again on its way, it would wait for itself instead.
        let (answer, shared) = if question.qtype == RecordType::HINFO {
            (self.ask_upstreams(&pool, question).await, false)
        } else {
            self.coalescer.run(&question.key(), self.ask_upstreams(&pool, question)).await
        };
        if shared {
            self.metrics.forward_coalesced.inc();
        }
        let mut answer = answer?;
        respell(&mut answer, &question.name);
        Ok(answer)
    }

    /// Asks the upstreams that are not down, in random order, until one answers.
    async fn ask_upstreams(&self, pool: &Pool, question: &Question) -> Result<Message, ForwardError> {
        let max_fails = pool.settings.max_fails;
        let mut order: Vec<&Arc<Health>> = pool.upstreams.iter().filter(|h| !h.is_down(max_fails)).collect();
        if order.is_empty() {
            // Every upstream is down: the checks may be what is broken, so try them all.
            self.metrics.forward_healthcheck_broken.inc();
            order = pool.upstreams.iter().collect();
        }
        rand::seq::SliceRandom::shuffle(&mut order[..], &mut rand::rng());
        let mut errors = Vec::new();
        for upstream in order {
            let to = ToLabels { to: upstream.addr.to_string() };
            self.metrics.forward_requests.get_or_create(&to).inc();
            let started = Instant::now();
            match self.ask(upstream, pool, question).await {
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
                    tracing::debug!(upstream = %upstream.addr, error = %e, "upstream query failed");
                    errors.push(format!("{}: {e}", upstream.addr));
                }
            }
        }
        Err(ForwardError::Failed(errors.join("; ")))
    }

    /// One upstream's answer. A query it leaves unanswered for a health-check interval, or
    /// that fails, has it checked; one it answers in another case is asked again in the
    /// asker's case.
    async fn ask(
        &self,
        upstream: &Arc<Health>,
        pool: &Pool,
        question: &Question,
    ) -> std::io::Result<Message> {
        let (s, checks) = (&pool.settings, pool.checks());
        let randomize = s.randomize_case && upstream.keeps_case();
        let attempt = exchange(upstream.addr, question, randomize, s.timeout);
        tokio::pin!(attempt);
        let slow = tokio::time::sleep(checks.interval);
        let result = tokio::select! {
            r = &mut attempt => r,
            () = slow => {
                upstream.suspect(checks, &self.metrics);
                attempt.await
            }
        };
        match result {
            Err(e) if is_case_lost(&e) => {
                if upstream.lost_case() {
                    tracing::warn!(upstream = %upstream.addr, "the upstream does not keep the question's case; its questions are sent in the asker's case from now on");
                }
                exchange(upstream.addr, question, false, s.timeout).await
            }
            Err(e) => {
                upstream.suspect(checks, &self.metrics);
                Err(e)
            }
            ok => ok,
        }
    }
}

/// Writes `name`'s spelling into the question and the records owned by it.
pub fn respell(msg: &mut Message, name: &Name) {
    for q in &mut msg.queries {
        if q.name().eq_ignore_root(name) && !q.name().eq_case(name) {
            q.set_name(name.clone());
        }
    }
    respell_records(&mut msg.answers, name);
    respell_records(&mut msg.authorities, name);
    respell_records(&mut msg.additionals, name);
}

/// Writes `name`'s spelling into `records` owned by it.
pub fn respell_records(records: &mut [Record], name: &Name) {
    for r in records {
        if r.name.eq_ignore_root(name) && !r.name.eq_case(name) {
            r.name = name.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{MessageType, OpCode, Query};
    use hickory_proto::rr::RData;
    use hickory_proto::rr::rdata::{A, CNAME};

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

    #[test]
    fn the_askers_spelling_goes_into_the_question_and_the_records_it_owns() {
        let name = |s: &str| Name::from_ascii(s).unwrap();
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        m.add_query(Query::query(name("wWW.examPLE.test."), RecordType::A));
        m.add_answer(Record::from_rdata(
            name("www.example.test."),
            5,
            RData::CNAME(CNAME(name("Cdn.Test."))),
        ));
        m.add_answer(Record::from_rdata(name("Cdn.Test."), 5, RData::A(A::new(192, 0, 2, 1))));
        respell(&mut m, &name("Www.Example.Test."));
        assert_eq!(m.queries[0].name().to_string(), "Www.Example.Test.");
        assert_eq!(m.answers[0].name.to_string(), "Www.Example.Test.");
        assert_eq!(m.answers[1].name.to_string(), "Cdn.Test.", "another name keeps its spelling");
    }
}

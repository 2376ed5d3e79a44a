//! Questions the REST API asks the running agent, answered between syncs from what it last
//! programmed (no copy of the plan is kept for them): the ruleset as text, the path of a
//! packet through it, and one Service's frontends and endpoints on this node.

use tideway_core::config::ProxyMode;
use tideway_core::model::ServiceName;
use tideway_core::net::IpFamily;
use tideway_core::plan::ServicePortPlan;
use tideway_core::program::Dialect;
use tideway_core::render::{self, iptables, ipvs, nftables};
use tideway_core::trace::{Packet, TraceEnv, TracePath, render_trace, trace};
use tokio::sync::{mpsc, oneshot};

use super::Agent;

/// A question and where its answer goes (`None`: nothing is programmed yet).
#[derive(Debug)]
pub enum Query {
    /// The rules of one family, as the mode's own tool would print them.
    Ruleset(IpFamily, oneshot::Sender<Option<Programmed<String>>>),
    /// Where a packet goes, and why.
    Trace(Packet, oneshot::Sender<Option<Programmed<Traced>>>),
    /// A Service's ports: frontends and endpoints on this node.
    Service(ServiceName, oneshot::Sender<Option<Programmed<Vec<ServicePortPlan>>>>),
}

/// An answer with the node and mode it is about.
#[derive(Debug, Clone)]
pub struct Programmed<T> {
    /// This node.
    pub node: String,
    /// The mode programmed.
    pub mode: ProxyMode,
    /// The answer.
    pub answer: T,
}

impl<T> Programmed<T> {
    fn new(node: &str, mode: ProxyMode, answer: T) -> Programmed<T> {
        Programmed { node: node.to_string(), mode, answer }
    }
}

/// A traced packet.
#[derive(Debug, Clone)]
pub struct Traced {
    /// The summary over every path (`DNAT to ...`, `rejected`, ...).
    pub verdict: String,
    /// Every path, one per random choice: the rules matched and the outcome.
    pub paths: Vec<TracePath>,
    /// The same as the CLI prints it.
    pub text: String,
}

/// The channel the REST API asks on.
pub fn channel() -> (mpsc::Sender<Query>, mpsc::Receiver<Query>) {
    mpsc::channel(64)
}

/// The next question, or never when nobody asks.
pub(super) async fn next(queries: &mut Option<mpsc::Receiver<Query>>) -> Option<Query> {
    match queries {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Agent {
    /// Takes questions from `queries` (the REST API's channel).
    pub fn answering(mut self, queries: mpsc::Receiver<Query>) -> Agent {
        self.queries = Some(queries);
        self
    }

    /// Answers `q` from what was last programmed.
    pub(super) fn answer(&self, q: Query) {
        let Some(planned) = self.planned.as_ref() else {
            match q {
                Query::Ruleset(_, reply) => _ = reply.send(None),
                Query::Trace(_, reply) => _ = reply.send(None),
                Query::Service(_, reply) => _ = reply.send(None),
            }
            return;
        };
        let mode = planned.node.settings.mode;
        let node = &self.opts.node;
        // Rendered for the question (the agent keeps plans, not programs).
        let program = |f: IpFamily| render::lower(mode, &planned.ruleset, f);
        match q {
            Query::Ruleset(family, reply) => {
                let p = &program(family);
                let text = match p.dialect {
                    Dialect::Nftables => nftables::text::program(p),
                    Dialect::Iptables => iptables::text::program(p, &[]),
                    Dialect::Ipvs => format!("{}{}", iptables::text::program(p, &[]), ipvs::text::program(p)),
                };
                let _ = reply.send(Some(Programmed::new(node, mode, text)));
            }
            Query::Trace(packet, reply) => {
                let family = IpFamily::of(&packet.dst);
                let t = trace(&program(family), &packet, &TraceEnv::for_node(planned.ruleset.family(family)));
                let traced =
                    Traced { verdict: t.verdict().to_string(), text: render_trace(&t), paths: t.paths };
                let _ = reply.send(Some(Programmed::new(node, mode, traced)));
            }
            Query::Service(name, reply) => {
                let ports: Vec<ServicePortPlan> =
                    planned.ruleset.services.values().filter(|p| p.name.service == name).cloned().collect();
                let _ = reply.send(Some(Programmed::new(node, mode, ports)));
            }
        }
    }
}

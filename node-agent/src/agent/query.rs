//! What the REST API answers from: after each successful sync the agent publishes the plan it
//! programmed ([`Published`], shared, never copied for a question), and the API's handlers
//! answer from the last one published, off the sync loop: a question waits for no sync, and
//! a sync waits for no question. The programs a question needs are lowered from the plan on
//! the first question about them and kept with it.
//!
//! ```text
//!  sync loop --programmed--> watch::Sender<Option<Arc<Published>>>
//!  REST handler --borrow--> Arc<Published> --blocking thread--> ruleset text | trace | Service
//! ```

use std::sync::{Arc, OnceLock};

use tideway_core::config::ProxyMode;
use tideway_core::model::ServiceName;
use tideway_core::net::IpFamily;
use tideway_core::plan::{Ruleset, ServicePortPlan};
use tideway_core::program::Program;
use tideway_core::render::{self, iptables, ipvs, nftables};
use tideway_core::trace::{Packet, TraceEnv, TracePath, render_trace, trace};
use tokio::sync::watch;

/// The plan last programmed on this node, with the programs lowered from it on demand.
#[derive(Debug)]
pub struct Published {
    /// This node.
    pub node: String,
    /// The mode programmed.
    pub mode: ProxyMode,
    /// The plan.
    pub ruleset: Arc<Ruleset>,
    /// The program of each family ([`IpFamily::ALL`] order), once a question needed it.
    programs: [OnceLock<Program>; 2],
}

/// Where the agent publishes, and where the REST API reads.
pub type Publisher = watch::Sender<Option<Arc<Published>>>;
/// What the REST API reads: the last plan programmed (`None` before the first sync).
pub type Programmed = watch::Receiver<Option<Arc<Published>>>;

/// A publisher and its reader.
pub fn channel() -> (Publisher, Programmed) {
    watch::channel(None)
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

impl Published {
    /// What `node` programmed in `mode` from `ruleset`.
    pub fn new(node: &str, mode: ProxyMode, ruleset: Arc<Ruleset>) -> Published {
        Published { node: node.to_string(), mode, ruleset, programs: Default::default() }
    }

    fn program(&self, family: IpFamily) -> &Program {
        let slot = IpFamily::ALL.iter().position(|f| *f == family).unwrap_or(0);
        self.programs[slot].get_or_init(|| render::Renderer::new(self.mode, &self.ruleset).lower(family))
    }

    /// The rules of one family, as the mode's own tool would print them.
    pub fn ruleset_text(&self, family: IpFamily) -> String {
        let p = self.program(family);
        match p.mode {
            ProxyMode::Nftables => nftables::text::program(p),
            ProxyMode::Iptables => iptables::text::program(p, &[]),
            ProxyMode::Ipvs => format!("{}{}", iptables::text::program(p, &[]), ipvs::text::program(p)),
        }
    }

    /// Where a packet goes, and why.
    pub fn trace(&self, packet: &Packet) -> Traced {
        let family = IpFamily::of(&packet.dst);
        let t = trace(self.program(family), packet, &TraceEnv::for_node(self.ruleset.family(family)));
        Traced { verdict: t.verdict().to_string(), text: render_trace(&t), paths: t.paths }
    }

    /// A Service's ports: frontends and endpoints on this node.
    pub fn service(&self, name: &ServiceName) -> Vec<ServicePortPlan> {
        self.ruleset.services.values().filter(|p| &p.name.service == name).cloned().collect()
    }
}

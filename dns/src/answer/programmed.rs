//! `--require-programmed` (beyond CoreDNS): a pod asking for a Service's ClusterIP (its A,
//! AAAA or SRV records, on the bare name or a `_port._proto` name) gets it only once the agent
//! on the pod's node has reported that Service programmed at its current generation (its
//! programmed `resourceVersion` reaches the one at which the generation last changed); until
//! then the answer is SERVFAIL, which resolvers retry. Everything else is answered as usual:
//! headless and ExternalName Services (no proxy rules behind them), endpoint names, clients
//! that are not pods, pods on nodes whose agent reports nothing, and names that do not exist.

use std::net::IpAddr;

use hickory_proto::op::LowerQuery;
use hickory_proto::rr::RecordType;

use crate::records::{Kind, RecordIndex};

/// Whether to answer a query now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Answer it.
    Answer,
    /// The asking pod's node has not programmed the Service yet: SERVFAIL.
    NotProgrammed,
}

/// The gate for `query` from `client`.
pub fn gate(ix: &RecordIndex, query: &LowerQuery, client: IpAddr) -> Gate {
    let Some(programmed) = &ix.programmed else { return Gate::Answer };
    if !matches!(query.query_type(), RecordType::A | RecordType::AAAA | RecordType::SRV) {
        return Gate::Answer;
    }
    let name = query.name();
    let Some(zone_labels) = ix.cluster_zone_labels(name) else {
        return Gate::Answer;
    };
    // `<svc>.<ns>.svc` or `_<port>._<proto>.<svc>.<ns>.svc`, leaf first.
    let rel: Vec<&[u8]> = name.iter().take(name.num_labels() as usize - zone_labels).collect();
    let (svc, ns) = match rel.as_slice() {
        [svc, ns, b"svc"] | [_, _, svc, ns, b"svc"] => (*svc, *ns),
        _ => return Gate::Answer,
    };
    let Some(report) = programmed.report_for(client) else { return Gate::Answer };
    let Some(svc) = ix.namespace(ns).and_then(|_| ix.service(ns, svc)) else {
        return Gate::Answer;
    };
    if svc.kind() != Kind::ClusterIp || report.has(svc.spec_version()) {
        Gate::Answer
    } else {
        Gate::NotProgrammed
    }
}

//! The kinds components write for each other (agents' reports, the operator's announcements):
//! the same event-shaped API as the other kinds.

use super::registry::stored_kind;
use super::state::ClusterState;
use super::store::{ChangedKey, service_names};
use crate::model::{L2Announcement, NodeProxyState, ServiceName};

stored_kind!(NodeProxyState, "NodeProxyState", namespaced: false, node_states, node_states, |s: &mut ClusterState, keys: Vec<ChangedKey>| {
    s.changes.node_states.extend(keys.into_iter().map(|(_, node)| node))
});
stored_kind!(L2Announcement, "L2Announcement", namespaced: true, announcements, announcements, |s: &mut ClusterState, keys| {
    s.changes.announcements.extend(service_names(keys));
    s.announcements_version += 1;
});

impl ClusterState {
    /// The report of `node`.
    pub fn node_state(&self, node: &str) -> Option<&NodeProxyState> {
        self.node_states.get(&("", node))
    }

    /// Every node report.
    pub fn node_states(&self) -> impl Iterator<Item = &NodeProxyState> {
        self.node_states.values()
    }

    /// The announcement for `svc`.
    pub fn announcement(&self, svc: &ServiceName) -> Option<&L2Announcement> {
        self.announcements.get(svc)
    }

    /// A number that grows whenever an announcement changes: a reader that does not take
    /// the changes (the agent's layer-2 speaker) tells from it whether to look again.
    pub fn announcements_version(&self) -> u64 {
        self.announcements_version
    }

    /// Every announcement.
    pub fn announcements(&self) -> impl Iterator<Item = &L2Announcement> {
        self.announcements.values()
    }
}

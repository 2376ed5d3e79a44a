//! The kinds components write for each other (agents' reports, the operator's announcements):
//! the same event-shaped API as the other kinds.

use super::ClusterState;
use super::store::service_names;
use crate::model::{L2Announcement, NodeProxyState, ServiceName};

impl ClusterState {
    /// Inserts or updates a node's report.
    pub fn apply_node_state(&mut self, state: NodeProxyState) -> bool {
        let node = state.node.clone();
        let changed = self.node_states.apply(state);
        if changed {
            self.changes.node_states.insert(node);
        }
        changed
    }

    /// Removes a node's report.
    pub fn delete_node_state(&mut self, node: &str) -> bool {
        let removed = self.node_states.delete(&("", node)).is_some();
        if removed {
            self.changes.node_states.insert(node.to_string());
        }
        removed
    }

    /// Replaces every node report (after a relist).
    pub fn replace_node_states(&mut self, states: Vec<NodeProxyState>) {
        let changed = self.node_states.replace(states);
        self.changes.node_states.extend(changed.into_iter().map(|(_, node)| node));
    }

    /// The report of `node`.
    pub fn node_state(&self, node: &str) -> Option<&NodeProxyState> {
        self.node_states.get(&("", node))
    }

    /// Every node report.
    pub fn node_states(&self) -> impl Iterator<Item = &NodeProxyState> {
        self.node_states.values()
    }

    /// Inserts or updates an announcement decision.
    pub fn apply_announcement(&mut self, a: L2Announcement) -> bool {
        let svc = a.service.clone();
        let changed = self.announcements.apply(a);
        if changed {
            self.changes.announcements.insert(svc);
        }
        changed
    }

    /// Removes an announcement decision.
    pub fn delete_announcement(&mut self, svc: &ServiceName) -> bool {
        let removed = self.announcements.delete(svc).is_some();
        if removed {
            self.changes.announcements.insert(svc.clone());
        }
        removed
    }

    /// Replaces every announcement (after a relist).
    pub fn replace_announcements(&mut self, all: Vec<L2Announcement>) {
        let changed = self.announcements.replace(all);
        self.changes.announcements.extend(service_names(changed));
    }

    /// The announcement for `svc`.
    pub fn announcement(&self, svc: &ServiceName) -> Option<&L2Announcement> {
        self.announcements.get(svc)
    }

    /// Every announcement.
    pub fn announcements(&self) -> impl Iterator<Item = &L2Announcement> {
        self.announcements.values()
    }
}

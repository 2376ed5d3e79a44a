//! Agent liveness per node: learnt by the operator apart from the Kubernetes API (the agents'
//! failure detector), kept beside the Nodes so that the announcer choice reads both.
//!
//! A change marks the node in [`super::Changes::nodes`], so everything that follows a Node
//! change (the operator's announcers) follows its agent's liveness too. `Unknown` is not
//! stored: it is what a node without information reads as.

use super::state::ClusterState;
use crate::model::AgentLiveness;

impl ClusterState {
    /// Records whether `node`'s agent is alive; returns false when nothing changed (no-op
    /// changes are dropped, as for every kind). `Unknown` forgets what was known.
    pub fn set_agent_liveness(&mut self, node: &str, liveness: AgentLiveness) -> bool {
        let changed = match liveness {
            AgentLiveness::Unknown => self.liveness.remove(node).is_some(),
            known => self.liveness.insert(node.to_string(), known) != Some(known),
        };
        if changed {
            self.changes.nodes.insert(node.to_string());
        }
        changed
    }

    /// Whether `node`'s agent is alive (`Unknown` when nothing was recorded; it counts as alive).
    pub fn agent_liveness(&self, node: &str) -> AgentLiveness {
        self.liveness.get(node).copied().unwrap_or_default()
    }

    /// Every node whose agent's liveness is known, by name.
    pub fn agent_liveness_known(&self) -> impl Iterator<Item = (&str, AgentLiveness)> {
        self.liveness.iter().map(|(n, l)| (n.as_str(), *l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_changes_mark_the_node_and_no_ops_are_dropped() {
        let mut state = ClusterState::new();
        assert_eq!(state.agent_liveness("a"), AgentLiveness::Unknown);
        assert!(!state.set_agent_liveness("a", AgentLiveness::Unknown), "unknown is the default");
        assert!(state.take_changes().is_empty());
        assert!(state.set_agent_liveness("a", AgentLiveness::Alive));
        assert_eq!(state.take_changes().nodes, ["a".to_string()].into());
        assert!(!state.set_agent_liveness("a", AgentLiveness::Alive));
        assert!(state.take_changes().is_empty());
        assert!(state.set_agent_liveness("a", AgentLiveness::Dead));
        assert_eq!(state.agent_liveness("a"), AgentLiveness::Dead);
        assert_eq!(state.take_changes().nodes, ["a".to_string()].into());
        assert!(state.set_agent_liveness("b", AgentLiveness::Alive));
        let known: Vec<_> = state.agent_liveness_known().collect();
        assert_eq!(known, [("a", AgentLiveness::Dead), ("b", AgentLiveness::Alive)]);
        assert!(state.set_agent_liveness("a", AgentLiveness::Unknown));
        assert_eq!(state.agent_liveness("a"), AgentLiveness::Unknown);
        assert_eq!(state.take_changes().nodes, ["a".to_string(), "b".to_string()].into());
    }

    #[test]
    fn a_relist_keeps_liveness() {
        let mut state = ClusterState::new();
        state.set_agent_liveness("a", AgentLiveness::Dead);
        state.reset(Default::default());
        assert_eq!(state.agent_liveness("a"), AgentLiveness::Dead, "not the API's to forget");
    }
}

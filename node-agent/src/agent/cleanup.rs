//! The uninstall's clean-up (`helm uninstall`'s pre-delete hook, `tideway cleanup-nodes`):
//! once a ProxyConfig carries `tideway.io/cleanup`, the agent stops answering for addresses,
//! removes every object it programmed in every mode (its own backend, those retiring, and any
//! other mode's leftovers, without waiting for connections to drain), says so in its status
//! (`cleanedUp`, which its NodeProxyState reports), and programs nothing more until it exits.
//! A failed removal is retried every [`RETRY`].

use std::time::Duration;

use tideway_core::config::{ProxyMode, ProxySettings, cleanup_requested};

use super::{Agent, blocking};
use crate::dataplane::{Dataplane, Keep};

/// How long after a failed removal it is tried again.
const RETRY: Duration = Duration::from_secs(2);

impl Agent {
    /// The clean-up asked of every node, if any (see [`cleanup_requested`]).
    pub(super) fn cleanup_requested(&self) -> Option<String> {
        cleanup_requested(self.cluster.lock().proxy_configs()).map(str::to_string)
    }

    /// Cleans the node for `request`, retrying until it succeeds or `shutdown` resolves, then
    /// waits for `shutdown` without programming anything.
    pub(super) async fn clean_up_and_stay(
        &mut self,
        request: &str,
        mut shutdown: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) {
        tracing::warn!(node = %self.opts.node, request, "an uninstall asks this node to be cleaned: removing every rule");
        while let Err(errors) = self.clean_up(request) {
            tracing::warn!(node = %self.opts.node, ?errors, "cleaning the node failed; will retry");
            tokio::select! {
                _ = tokio::time::sleep(RETRY) => {}
                _ = &mut shutdown => return,
            }
        }
        tracing::info!(node = %self.opts.node, request, "the node is clean; nothing more is programmed");
        shutdown.await;
    }

    /// One attempt: every backend that holds objects removes them all; what failed is kept
    /// for the next attempt and named.
    fn clean_up(&mut self, request: &str) -> Result<(), Vec<String>> {
        let mut backends: Vec<Box<dyn Dataplane>> = self.dataplane.take().into_iter().collect();
        backends.extend(self.retiring.drain(..).map(|(dp, _)| dp));
        for mode in [ProxyMode::Nftables, ProxyMode::Iptables, ProxyMode::Ipvs] {
            if backends.iter().all(|dp| dp.mode() != mode) {
                backends.push((self.factory)(&ProxySettings { mode, ..Default::default() }));
            }
        }
        let mut errors = Vec::new();
        for mut dp in backends {
            let result = blocking(|| match dp.present() {
                Ok(false) => Ok(()),
                Ok(true) => dp.remove_all(),
                Err(e) => Err(e),
            });
            if let Err(e) = result {
                errors.push(format!("{}: {e}", dp.mode()));
                self.retiring.push((dp, Keep::default()));
            }
        }
        self.planned = None;
        let error = (!errors.is_empty()).then(|| format!("cleaning the node: {}", errors.join("; ")));
        let done = errors.is_empty().then(|| request.to_string());
        self.set_status(|s| {
            s.cleaned_up = done;
            s.last_error = error;
            s.mode = None;
            s.announcing.clear();
            s.service_ports = 0;
            s.endpoints = 0;
            s.rules = 0;
        });
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

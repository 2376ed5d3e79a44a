//! A dataplane in memory, for tests of the sync loop without root: one shared
//! [`MemoryKernel`] holds what each mode has programmed (core's [`KernelState`] model, which
//! refuses what the kernel would), records every call, fails on demand and can be tampered
//! with to make drift.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tideway_core::config::{ProxyMode, ProxySettings};
use tideway_core::program::KernelState;

use super::backend::{Dataplane, DataplaneError, Drift, Retired, Update};
use super::desired::Desired;
use super::keep::Keep;
use crate::exec::{CommandError, CommandStatus};
use tideway_core::drift::DriftKind;

/// One call a dataplane received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `apply`, wholesale or with change sets.
    Apply {
        /// The backend.
        mode: ProxyMode,
        /// Wholesale.
        full: bool,
    },
    /// `verify`.
    Verify(ProxyMode),
    /// `cleanup`.
    Cleanup(ProxyMode),
    /// `present`.
    Present(ProxyMode),
}

/// What every mode holds ([IPv4, IPv6] each), the calls so far, and the failures to inject.
#[derive(Debug, Default)]
pub struct MemoryKernel {
    /// Programmed state per mode; a mode is present while it has an entry.
    pub state: BTreeMap<ProxyMode, [KernelState; 2]>,
    /// Every call, in order.
    pub calls: Vec<Call>,
    /// While set, `apply` fails with this message and changes nothing.
    pub fail_apply: Option<String>,
}

/// A handle on a [`MemoryKernel`] that dataplanes of any mode share, like a real kernel.
#[derive(Debug, Clone, Default)]
pub struct SharedKernel(Arc<Mutex<MemoryKernel>>);

impl SharedKernel {
    /// The kernel, locked.
    pub fn lock(&self) -> MutexGuard<'_, MemoryKernel> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A dataplane for `settings.mode` on this kernel (the agent's dataplane factory).
    pub fn dataplane(&self, settings: &ProxySettings) -> Box<dyn Dataplane> {
        Box::new(MemoryDataplane { mode: settings.mode, kernel: self.clone() })
    }

    /// The calls so far, forgotten.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().calls)
    }
}

/// One mode's backend on a [`SharedKernel`].
#[derive(Debug)]
pub struct MemoryDataplane {
    mode: ProxyMode,
    kernel: SharedKernel,
}

fn injected(message: &str) -> DataplaneError {
    DataplaneError::Command(CommandError {
        command: "memory".into(),
        status: CommandStatus::Exited(1),
        stderr: message.to_string(),
        lines: Vec::new(),
    })
}

impl Dataplane for MemoryDataplane {
    fn mode(&self) -> ProxyMode {
        self.mode
    }

    fn apply(&mut self, desired: &Desired<'_>, update: Update<'_>) -> Result<(), DataplaneError> {
        let mut k = self.kernel.lock();
        k.calls.push(Call::Apply { mode: self.mode, full: matches!(update, Update::Full) });
        if let Some(message) = k.fail_apply.clone() {
            return Err(injected(&message));
        }
        let next = match update {
            Update::Full => desired.programs().map(KernelState::of),
            Update::Changes(sets) => {
                // A kernel model checks what the change sets do; the whole programs only
                // serve full change sets.
                let mut next = k.state.get(&self.mode).cloned().unwrap_or_default();
                for (i, state) in next.iter_mut().enumerate() {
                    let p = if sets[i].full { desired.programs()[i] } else { desired.skeletons()[i] };
                    state.apply(sets[i], p).map_err(|e| injected(&e.to_string()))?;
                }
                next
            }
        };
        k.state.insert(self.mode, next);
        Ok(())
    }

    fn verify(&mut self, desired: &Desired<'_>, _deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let mut k = self.kernel.lock();
        k.calls.push(Call::Verify(self.mode));
        let have = k.state.get(&self.mode).cloned().unwrap_or_default();
        let drift = desired
            .programs()
            .iter()
            .zip(&have)
            .zip(["IPv4", "IPv6"])
            .filter_map(|((want, have), family)| {
                let want = KernelState::of(want);
                (want.canonical() != have.canonical()).then(|| Drift {
                    kind: DriftKind::ChainRules,
                    object: format!("{} {family}", self.mode),
                    detail: have.describe_difference(&want),
                })
            })
            .collect();
        Ok(drift)
    }

    fn cleanup(&mut self, _keep: &Keep) -> Result<Retired, DataplaneError> {
        let mut k = self.kernel.lock();
        k.calls.push(Call::Cleanup(self.mode));
        k.state.remove(&self.mode);
        Ok(Retired::Done)
    }

    fn present(&mut self) -> Result<bool, DataplaneError> {
        let mut k = self.kernel.lock();
        k.calls.push(Call::Present(self.mode));
        Ok(k.state.contains_key(&self.mode))
    }
}

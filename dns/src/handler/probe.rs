//! Start-up loop detection (CoreDNS's `loop` plugin).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use hickory_proto::rr::{LowerName, Name};
use tokio::sync::Notify;

/// Start-up loop detection (CoreDNS's `loop` plugin): a random name is sent upstream; if it
/// comes back to us more than twice, the upstreams forward to us.
pub struct LoopProbe {
    pub(super) name: LowerName,
    pub(super) hits: AtomicU32,
    pub(super) detected: AtomicBool,
    /// Woken when a loop is detected.
    pub notify: Notify,
}

impl LoopProbe {
    pub(super) fn new() -> Self {
        let name = format!("{}.{}.", rand::random::<u32>(), rand::random::<u32>());
        LoopProbe {
            name: LowerName::from(Name::from_ascii(&name).unwrap_or_else(|_| Name::root())),
            hits: AtomicU32::new(0),
            detected: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    /// The probe name.
    pub fn name(&self) -> Name {
        Name::from(self.name.clone())
    }

    /// True once a loop was seen.
    pub fn detected(&self) -> bool {
        self.detected.load(Ordering::Relaxed)
    }
}

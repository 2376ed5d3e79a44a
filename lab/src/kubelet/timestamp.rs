//! Now, as Kubernetes writes times (conditions' heartbeat and transition times, a container's
//! startedAt).

/// Now, as Kubernetes writes times.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

//! Watch errors: what caused them (for logs and metrics), logged once per cause.

use kube::runtime::watcher;

/// Why a watch or list failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCause {
    /// Short machine-readable cause: `gone`, `forbidden`, `unauthorized`, `not_found`,
    /// `api_error`, `connection`, `decode`, `protocol`.
    pub reason: &'static str,
    /// The HTTP status, when the API server answered.
    pub code: Option<u16>,
}

impl ErrorCause {
    /// What a user should do about it, when there is something to say.
    pub fn hint(&self) -> &'static str {
        match self.reason {
            "forbidden" | "unauthorized" => {
                "check the ServiceAccount's RBAC (the Helm chart's ClusterRole lists what each component needs)"
            }
            "not_found" => {
                "is the CustomResourceDefinition installed? (helm install, or kubectl apply -f helm/tideway/crds)"
            }
            "gone" => "the resource version expired; relisting (the state keeps serving meanwhile)",
            "connection" => "cannot reach the API server; retrying with backoff",
            _ => "retrying with backoff",
        }
    }
}

impl ErrorCause {
    /// True when the API server was not reached or could not serve: no answer (refused, reset,
    /// timed out) or a 5xx. Any other answer (403, 404, 410...) came from a working server.
    /// This is what self-fencing counts as the API server being unreachable.
    pub fn unreachable(&self) -> bool {
        self.reason == "connection" || self.code.is_some_and(|c| c >= 500)
    }
}

/// Classifies a request's error (a list, a get, a write).
pub fn classify_request(e: &kube::Error) -> ErrorCause {
    from_client(e)
}

fn from_client(e: &kube::Error) -> ErrorCause {
    match e {
        kube::Error::Api(status) => from_status(status.code),
        kube::Error::SerdeError(_) => ErrorCause { reason: "decode", code: None },
        _ => ErrorCause { reason: "connection", code: None },
    }
}

fn from_status(code: u16) -> ErrorCause {
    let reason = match code {
        410 => "gone",
        403 => "forbidden",
        401 => "unauthorized",
        404 => "not_found",
        _ => "api_error",
    };
    ErrorCause { reason, code: Some(code) }
}

/// Classifies a watcher error.
pub fn classify(e: &watcher::Error) -> ErrorCause {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => from_client(e),
        watcher::Error::WatchError(status) => from_status(status.code),
        watcher::Error::NoResourceVersion => ErrorCause { reason: "protocol", code: None },
    }
}

/// Remembers the last cause per watch so a persisting error is logged once, and its end too.
#[derive(Debug, Default)]
pub struct ErrorLog {
    last: Option<ErrorCause>,
}

impl ErrorLog {
    /// Records an error; true when its cause differs from the previous one (log it).
    pub fn failed(&mut self, cause: &ErrorCause) -> bool {
        let new = self.last.as_ref() != Some(cause);
        self.last = Some(cause.clone());
        new
    }

    /// Records a success; the cause that just ended, if any (log the recovery).
    pub fn recovered(&mut self) -> Option<ErrorCause> {
        self.last.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_persisting_cause_is_logged_once_and_its_end_once() {
        let mut log = ErrorLog::default();
        let forbidden = from_status(403);
        assert!(log.failed(&forbidden));
        assert!(!log.failed(&forbidden));
        assert!(log.failed(&from_status(410)), "a new cause is logged");
        assert_eq!(log.recovered(), Some(from_status(410)));
        assert_eq!(log.recovered(), None);
        assert_eq!(forbidden, ErrorCause { reason: "forbidden", code: Some(403) });
    }

    #[test]
    fn only_no_answer_or_a_server_error_means_unreachable() {
        let connection = ErrorCause { reason: "connection", code: None };
        let cases = [(connection, true), (from_status(503), true), (from_status(500), true)];
        let answered = [from_status(410), from_status(403), from_status(404), from_status(429)];
        for (cause, unreachable) in cases.into_iter().chain(answered.map(|c| (c, false))) {
            assert_eq!(cause.unreachable(), unreachable, "{cause:?}");
        }
        assert!(!ErrorCause { reason: "decode", code: None }.unreachable(), "an answer we could not read");
    }
}

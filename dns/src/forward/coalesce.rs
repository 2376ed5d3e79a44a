//! Identical queries in flight share one upstream exchange, as Unbound and dnsmasq do: the
//! first asks, the others wait for its answer. A burst of pods asking for the same name at
//! once (a Deployment starting, an entry expiring in the cache) costs the upstream one query.

use std::collections::HashMap;
use std::sync::Mutex;

use hickory_proto::op::Message;
use tokio::sync::watch;

use super::cache::CacheKey;
use super::error::ForwardError;

/// What the waiting queries receive: the answer, or why there is none.
type Outcome = Option<Result<Message, String>>;

/// The exchanges in flight, by question.
#[derive(Debug, Default)]
pub struct Coalescer {
    /// Keyed with the standard library's seeded hash: the names are the clients'.
    in_flight: Mutex<HashMap<CacheKey, watch::Receiver<Outcome>>>,
}

/// Takes an exchange out of the map when its first asker is done, however it ends.
struct Done<'a> {
    coalescer: &'a Coalescer,
    key: &'a CacheKey,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.coalescer.lock().remove(self.key);
    }
}

impl Coalescer {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, watch::Receiver<Outcome>>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `ask`'s answer, or the answer of the same question already in flight (and then `ask`
    /// is not run). The second of the pair is true when the answer was another query's.
    pub async fn run(
        &self,
        key: &CacheKey,
        ask: impl Future<Output = Result<Message, ForwardError>>,
    ) -> (Result<Message, ForwardError>, bool) {
        let waiting = {
            let mut in_flight = self.lock();
            match in_flight.get(key) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    in_flight.insert(key.clone(), rx);
                    Ok(tx)
                }
            }
        };
        match waiting {
            Ok(tx) => {
                let _done = Done { coalescer: self, key };
                let answer = ask.await;
                tx.send_replace(Some(answer.as_ref().map(Clone::clone).map_err(ToString::to_string)));
                (answer, false)
            }
            Err(mut rx) => {
                let answer = match rx.wait_for(Option::is_some).await {
                    Ok(outcome) => match outcome.as_ref() {
                        Some(Ok(msg)) => Ok(msg.clone()),
                        Some(Err(e)) => Err(ForwardError::Failed(e.clone())),
                        None => Err(ForwardError::Failed("no answer".into())),
                    },
                    Err(_) => Err(ForwardError::Failed("the query it waited for was cancelled".into())),
                };
                (answer, true)
            }
        }
    }

    /// Exchanges in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when none is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

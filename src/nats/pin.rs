//! The pin of a pinned priority group (ADR-42, nats-server 2.11+), and the pull requests
//! that carry it.
//!
//! Every instance sharing a `pinned_client` consumer pulls in the same group. The server
//! picks one waiting pull without an `id` when no client is pinned, delivers to it, and
//! stamps every message it delivers to that client with a `Nats-Pin-Id` header. The pinned
//! client then sends that id in every pull; a pull without one waits (a standby), and a
//! pull with another id is answered `423` (the pin moved: the client drops its id and
//! pulls as a standby). The server moves the pin when the pinned client has not pulled
//! with its id for the consumer's priority timeout.
//!
//! The pin id is state shared by the pull tasks of one sink; the request body is pure.

use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, PriorityPolicy};
use serde::Serialize;

use crate::config::PinnedConfig;

/// The header the server stamps on each message it delivers to the pinned client.
pub const PIN_HEADER: &str = "Nats-Pin-Id";

/// What a delivery or a status said about the pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinChange {
    /// Nothing changed.
    Same,
    /// This instance now holds the pin (the first message with a new id).
    Gained,
    /// This instance no longer holds the pin (a 423 answered a pull with its id).
    Lost,
}

/// This instance's place in one priority group: the pin id it holds, if any.
#[derive(Debug)]
pub struct Pin {
    group: String,
    id: Mutex<Option<String>>,
}

impl Pin {
    /// Not pinned yet, in `group`.
    pub fn new(group: &str) -> Pin {
        Pin {
            group: group.to_string(),
            id: Mutex::new(None),
        }
    }

    /// The priority group.
    pub fn group(&self) -> &str {
        &self.group
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding the lock leaves an id or none: still usable.
        self.id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pin id to send, while this instance holds the pin.
    pub fn id(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Whether this instance holds the pin, as far as it has been told.
    pub fn held(&self) -> bool {
        self.lock().is_some()
    }

    /// A delivered message carried `id` in its `Nats-Pin-Id` header.
    pub fn delivered(&self, id: &str) -> PinChange {
        let mut held = self.lock();
        if held.as_deref() == Some(id) {
            return PinChange::Same;
        }
        *held = Some(id.to_string());
        PinChange::Gained
    }

    /// The server answered `423`: the id this instance sent is not the current pin.
    pub fn lost(&self) -> PinChange {
        match self.lock().take() {
            Some(_) => PinChange::Lost,
            None => PinChange::Same,
        }
    }
}

/// The body of a `$JS.API.CONSUMER.MSG.NEXT` request (field names as nats-server reads
/// them), with a priority group and the pin id when pinned.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PullRequest<'a> {
    /// Most messages.
    pub batch: usize,
    /// Most payload bytes; 0 for no limit.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_bytes: usize,
    /// Answer at once (404 when nothing is ready) instead of waiting.
    #[serde(skip_serializing_if = "is_false")]
    pub no_wait: bool,
    /// How long the server keeps the pull, in nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    /// The priority group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'a str>,
    /// The pin id, while pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl<'a> PullRequest<'a> {
    /// A pull of `batch` messages and `max_bytes` bytes (0: no limit), waiting `wait` in the
    /// server or, with `None`, answered at once; in `pin`'s group with its id when held.
    pub fn new(
        batch: usize,
        max_bytes: usize,
        wait: Option<Duration>,
        pin: Option<&'a Pin>,
    ) -> PullRequest<'a> {
        PullRequest {
            batch,
            max_bytes,
            no_wait: wait.is_none(),
            expires: wait.map(|w| u64::try_from(w.as_nanos()).unwrap_or(u64::MAX)),
            group: pin.map(Pin::group),
            id: pin.and_then(Pin::id),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        // A struct of numbers, booleans and strings always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The consumer's priority policy, groups and timeout for `pinned` (none without it).
pub fn consumer_priority(pinned: Option<&PinnedConfig>) -> (PriorityPolicy, Vec<String>, Duration) {
    match pinned {
        Some(p) => (
            PriorityPolicy::PinnedClient,
            vec![p.group.clone()],
            Duration::from_millis(p.timeout_ms),
        ),
        None => (PriorityPolicy::None, Vec::new(), Duration::ZERO),
    }
}

/// How an existing consumer's priority settings differ from what `pinned` asks, in a way
/// the server cannot update (its policy, its groups): (field, its value, what the config
/// wants). The priority timeout is a tunable, updated instead.
pub fn drift(
    pinned: Option<&PinnedConfig>,
    existing: &consumer::Config,
) -> Option<(&'static str, String, String)> {
    let group = pinned.map(|p| p.group.as_str());
    let existing_pinned = existing.priority_policy == PriorityPolicy::PinnedClient;
    if existing.priority_policy != PriorityPolicy::None && !existing_pinned {
        return Some((
            "priority_policy",
            format!("{:?}", existing.priority_policy).to_lowercase(),
            group.map_or("none".into(), |_| "pinned_client".into()),
        ));
    }
    match (existing_pinned, group) {
        (false, Some(g)) => Some((
            "priority_policy",
            "none".into(),
            format!("pinned_client with group {g} (source.pinned); a consumer cannot be switched to it, so delete it and let jetsink create it"),
        )),
        (true, None) => Some((
            "priority_policy",
            format!("pinned_client (groups {})", existing.priority_groups.join(", ")),
            "none (no source.pinned); a consumer cannot be switched out of it".into(),
        )),
        (true, Some(g)) if existing.priority_groups != [g] => Some((
            "priority_groups",
            existing.priority_groups.join(", "),
            g.to_string(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn body(r: &PullRequest<'_>) -> serde_json::Value {
        serde_json::from_slice(&r.body()).unwrap()
    }

    #[test]
    fn an_unpinned_pull_carries_neither_group_nor_id() {
        let r = PullRequest::new(500, 1024, None, None);
        assert_eq!(
            body(&r),
            json!({"batch": 500, "max_bytes": 1024, "no_wait": true})
        );
        let r = PullRequest::new(1, 0, Some(Duration::from_millis(1500)), None);
        assert_eq!(body(&r), json!({"batch": 1, "expires": 1_500_000_000u64}));
    }

    #[test]
    fn a_standby_sends_its_group_and_the_pinned_one_its_id_too() {
        let pin = Pin::new("jetsink");
        let r = PullRequest::new(1, 0, Some(Duration::from_secs(1)), Some(&pin));
        assert_eq!(
            body(&r),
            json!({"batch": 1, "expires": 1_000_000_000u64, "group": "jetsink"})
        );
        assert_eq!(pin.delivered("P1"), PinChange::Gained);
        let r = PullRequest::new(10, 64, None, Some(&pin));
        assert_eq!(
            body(&r),
            json!({"batch": 10, "max_bytes": 64, "no_wait": true, "group": "jetsink", "id": "P1"})
        );
    }

    #[test]
    fn the_pin_is_gained_once_per_id_and_lost_on_a_mismatch() {
        let pin = Pin::new("g");
        assert!(!pin.held());
        assert_eq!(pin.lost(), PinChange::Same, "nothing to lose");
        assert_eq!(pin.delivered("A"), PinChange::Gained);
        assert_eq!(pin.delivered("A"), PinChange::Same);
        assert!(pin.held());
        assert_eq!(pin.lost(), PinChange::Lost);
        assert_eq!(pin.id(), None);
        assert_eq!(pin.delivered("B"), PinChange::Gained);
        assert_eq!(
            pin.delivered("C"),
            PinChange::Gained,
            "a new pin id replaces the old"
        );
        assert_eq!(pin.id().as_deref(), Some("C"));
    }

    proptest! {
        #[test]
        fn the_id_sent_is_the_last_one_delivered_until_lost(ids in proptest::collection::vec("[A-Za-z0-9]{1,22}", 1..10)) {
            let pin = Pin::new("g");
            for id in &ids {
                pin.delivered(id);
                let r = PullRequest::new(1, 0, None, Some(&pin));
                prop_assert_eq!(r.id.as_deref(), Some(id.as_str()));
            }
            pin.lost();
            prop_assert_eq!(PullRequest::new(1, 0, None, Some(&pin)).id, None);
        }
    }
}

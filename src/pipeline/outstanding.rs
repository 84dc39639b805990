//! The consumer's outstanding count as the server reports it: delivered and not yet
//! acknowledged (consumer info `num_ack_pending`), which holds every instance's delayed
//! messages and batches in hand. The backlog watcher feeds it from the consumer info it
//! already reads; the randomizer with `adaptive_source: "server"` reads it before each
//! batch. The server's answer is the one count that sees instances sharing a consumer: each
//! instance's own window sees only its own delays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::consumer::Info;

/// The latest outstanding count of each of a sink's consumers.
#[derive(Clone, Default)]
pub struct Outstanding {
    by_consumer: Arc<Mutex<HashMap<String, u64>>>,
}

impl Outstanding {
    /// Records one consumer info answer.
    pub fn observe(&self, info: &Info) {
        let mut map = self.by_consumer.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(info.name.clone(), info.num_ack_pending as u64);
    }

    /// The sum over the sink's consumers, or `None` before any answer.
    pub fn total(&self) -> Option<u64> {
        let map = self.by_consumer.lock().unwrap_or_else(|e| e.into_inner());
        (!map.is_empty()).then(|| map.values().fold(0u64, |a, n| a.saturating_add(*n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, ack_pending: u64) -> Info {
        serde_json::from_value(serde_json::json!({
            "stream_name": "S", "name": name, "created": "2026-01-01T00:00:00Z",
            "config": {"durable_name": name, "ack_policy": "explicit", "deliver_policy": "all", "replay_policy": "instant"},
            "delivered": {"consumer_seq": 0, "stream_seq": 0},
            "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
            "num_ack_pending": ack_pending, "num_redelivered": 0, "num_waiting": 0, "num_pending": 0
        }))
        .unwrap()
    }

    #[test]
    fn the_total_is_the_latest_answer_of_each_consumer_summed() {
        let o = Outstanding::default();
        assert_eq!(o.total(), None);
        o.observe(&info("a", 5));
        o.observe(&info("b", 7));
        assert_eq!(o.total(), Some(12));
        o.observe(&info("a", 1));
        assert_eq!(o.clone().total(), Some(8));
    }
}

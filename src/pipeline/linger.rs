//! The linger a sink's pulls use (`delivery.linger_ms`, the wait itself is
//! [`crate::nats::linger`]): the configured value, or a default that depends on what the
//! sink does with a batch.
//!
//! The default lingers only where a batch is written as pulled and nobody waits on it.
//! Job-queue mode (`results`) does not linger: a client waits on each job's result, and a
//! job queue's throughput is its workers', not the per-batch cost. Nor does a sink that
//! already collects messages across pulls (the shuffler's buffer, a destination's
//! rollover): its writes are large whatever the pulls carry, and a linger would only add
//! a second wait in front of the first. A sink pulling several consumers (random subject
//! buckets, lane consumers) never lingers, configured or not: it asks each consumer
//! without waiting, and a wait on one would hold back what is ready in the others.

use std::time::Duration;

use crate::config::SinkSpec;

/// Default linger of a sink that writes each batch as pulled, in milliseconds: it adds at
/// most this to a message's publish→commit latency (p99 40–45 ms measured at 1,000 to
/// 20,000 msg/s, under the 50 ms the steady-load target allows), and at 5,000 msg/s it
/// gathers about 210 messages per batch (see docs/benchmarks.md, "Steady load"; 20 ms
/// left jetsink's CPU per message at 2.4–2.6 times a backlog's, 30 ms at 1.8–2.7 times).
pub const DEFAULT_LINGER_MS: u64 = 40;

/// The linger of `spec`'s pulls; `single`: the sink reads one consumer.
pub fn for_sink(spec: &SinkSpec, single: bool) -> Duration {
    if !single {
        return Duration::ZERO;
    }
    Duration::from_millis(spec.delivery.linger_ms.unwrap_or_else(|| default_ms(spec)))
}

/// The default of `delivery.linger_ms` for `spec` (the module's doc says why).
pub fn default_ms(spec: &SinkSpec) -> u64 {
    let collects = spec.delivery.shuffle.is_some() || spec.accumulate().is_some();
    match spec.results.is_some() || collects {
        true => 0,
        false => DEFAULT_LINGER_MS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sink: serde_json::Value) -> SinkSpec {
        let cfg = serde_json::json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"a": sink}
        });
        let mut c = crate::config::Config::from_json_str(&cfg.to_string()).expect("valid config");
        c.sinks.remove(0)
    }

    fn file_sink(delivery: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "source": {"stream": "S", "consumer": "c"},
            "delivery": delivery,
            "destination": {"type": "file", "directory": "/tmp/x"}
        })
    }

    #[test]
    fn a_sink_writing_each_batch_lingers_by_default_and_a_configured_value_wins() {
        let plain = spec(file_sink(serde_json::json!({})));
        assert_eq!(
            for_sink(&plain, true),
            Duration::from_millis(DEFAULT_LINGER_MS)
        );
        let set = spec(file_sink(serde_json::json!({"linger_ms": 7})));
        assert_eq!(for_sink(&set, true), Duration::from_millis(7));
        let off = spec(file_sink(serde_json::json!({"linger_ms": 0})));
        assert_eq!(for_sink(&off, true), Duration::ZERO);
    }

    #[test]
    fn job_queue_mode_does_not_linger_by_default_but_may_be_told_to() {
        let job = |delivery: serde_json::Value| {
            let mut sink = file_sink(delivery);
            sink["results"] = serde_json::json!({"subject_prefix": "jobs.results"});
            spec(sink)
        };
        assert_eq!(for_sink(&job(serde_json::json!({})), true), Duration::ZERO);
        assert_eq!(
            for_sink(&job(serde_json::json!({"linger_ms": 5})), true),
            Duration::from_millis(5)
        );
    }

    #[test]
    fn several_consumers_never_linger_even_when_configured() {
        let set = spec(file_sink(serde_json::json!({"linger_ms": 7})));
        assert_eq!(for_sink(&set, false), Duration::ZERO);
    }

    #[test]
    fn the_shuffler_and_a_rollover_collect_already_so_they_do_not_linger_by_default() {
        let shuffled = spec(file_sink(
            serde_json::json!({"shuffle": {"buffer": 2000, "flush_ms": 1000}}),
        ));
        assert_eq!(default_ms(&shuffled), 0);
        let parquet = spec(serde_json::json!({
            "source": {"stream": "S", "consumer": "c", "max_ack_pending": 20000},
            "destination": {"type": "file", "format": "parquet", "directory": "/tmp/x"}
        }));
        assert!(parquet.accumulate().is_some(), "default rollover");
        assert_eq!(default_ms(&parquet), 0);
    }
}

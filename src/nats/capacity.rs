//! What a live consumer must carry beyond its own settings, as the server has them: the
//! randomizer's window of delayed messages, and the buffer of pulled batches a shuffler or
//! an s3 `rollover` holds unacknowledged. Pure comparisons of a sink's config with a
//! consumer's live config, run by `jetsink run` at start-up (a refusal is exit 78) and by
//! `jetsink validate --online` (a refusal is a FAIL line), so both refuse the same
//! consumers with the same words.

use async_nats::jetstream::consumer;

use crate::config::SinkSpec;

/// What the checks found for one consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Why the sink cannot run on this consumer (exit 78 at start-up).
    pub refusals: Vec<String>,
    /// What the operator let through (`delivery.randomizer.skip_startup_checks`): logged.
    pub warnings: Vec<String>,
}

/// Checks consumer `consumer` of sink `spec`, whose live config is `live`.
pub fn capacity(spec: &SinkSpec, consumer: &str, live: &consumer::Config) -> Capacity {
    let mut out = Capacity::default();
    randomizer(spec, consumer, live, &mut out);
    buffer(spec, consumer, live, &mut out);
    out
}

/// The randomizer's window: MaxAckPending, MaxDeliver and AckWait must leave room for it.
fn randomizer(spec: &SinkSpec, consumer: &str, live: &consumer::Config, out: &mut Capacity) {
    let r = &spec.delivery.randomizer;
    if !r.enabled {
        return;
    }
    let problems = crate::config::randomizer::check_consumer(
        r,
        spec.delivery.batch_size,
        live.max_ack_pending,
        live.max_deliver,
        live.ack_wait.as_millis() as u64,
        spec.delivery.batch_timeout_ms,
    );
    if problems.is_empty() {
        return;
    }
    let skip = format!("{}.randomizer.skip_startup_checks", delivery_path(spec));
    if r.skip_startup_checks {
        out.warnings.extend(
            problems
                .iter()
                .map(|p| format!("randomizer start-up check skipped ({skip}): {p}")),
        );
    } else {
        out.refusals.push(format!(
            "sink {}: consumer {consumer} cannot carry the randomizer: {} (set {skip} to run anyway)",
            spec.name,
            problems.join("; ")
        ));
    }
}

/// A buffer of pulled batches and the batch pulled ahead must fit in MaxAckPending. Only
/// a buffer the config names is checked: a default rollover is sized to the configured
/// MaxAckPending, which binding gives the consumer.
fn buffer(spec: &SinkSpec, consumer: &str, live: &consumer::Config, out: &mut Capacity) {
    let delivery = delivery_path(spec);
    let (setting, size) = match (&spec.delivery.shuffle, spec.destination.accumulate()) {
        (Some(cfg), _) => (format!("{delivery}.shuffle.buffer"), cfg.buffer),
        (None, Some(a)) => (
            format!("{}.{}.{}", destination_path(spec), a.key, a.messages_key),
            a.messages,
        ),
        (None, None) => return,
    };
    let batch_size = spec.delivery.batch_size;
    if let Some(problem) =
        crate::config::shuffle::check_consumer(size, &setting, batch_size, live.max_ack_pending)
    {
        out.refusals.push(format!(
            "{setting}: sink {}: consumer {consumer} cannot carry the buffer: {problem} (the \
             consumer's {}.max_ack_pending, as the server has it)",
            spec.name,
            source_path(spec)
        ));
    }
}

fn delivery_path(spec: &SinkSpec) -> &str {
    or(&spec.paths.delivery, "delivery")
}

fn destination_path(spec: &SinkSpec) -> &str {
    or(&spec.paths.destination, "destination")
}

fn source_path(spec: &SinkSpec) -> &str {
    or(&spec.paths.source, "source")
}

/// `path`, or `default` for a sink built outside a config file (the bench's).
fn or<'a>(path: &'a str, default: &'a str) -> &'a str {
    if path.is_empty() {
        default
    } else {
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;

    fn spec(delivery: serde_json::Value) -> SinkSpec {
        let cfg = json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"a": {
                "source": {"stream": "S", "consumer": "c", "max_ack_pending": 100000},
                "delivery": delivery,
                "destination": {"type": "file", "directory": "out"}
            }}
        });
        let mut c = Config::from_json_str(&cfg.to_string()).expect("valid");
        c.sinks.remove(0)
    }

    fn live(max_ack_pending: i64) -> consumer::Config {
        consumer::Config {
            max_ack_pending,
            ack_wait: std::time::Duration::from_secs(30),
            max_deliver: -1,
            ..Default::default()
        }
    }

    #[test]
    fn a_live_consumer_too_small_for_the_shuffle_buffer_is_refused_naming_both_settings() {
        let s = spec(json!({"batch_size": 100, "shuffle": {"buffer": 5000, "flush_ms": 1000}}));
        assert_eq!(capacity(&s, "c", &live(-1)), Capacity::default());
        assert_eq!(capacity(&s, "c", &live(5100)), Capacity::default());
        let got = capacity(&s, "c", &live(1000));
        assert_eq!(got.refusals.len(), 1, "{got:?}");
        let r = &got.refusals[0];
        assert!(
            r.starts_with("sinks.a.delivery.shuffle.buffer: sink a: consumer c"),
            "{r}"
        );
        assert!(r.contains("sinks.a.source.max_ack_pending"), "{r}");
    }

    #[test]
    fn the_randomizer_check_refuses_or_only_warns_when_skipped() {
        let r = |skip: bool| {
            spec(json!({"batch_size": 100, "randomizer": {
                "enabled": true, "max_window": 5000, "skip_startup_checks": skip
            }}))
        };
        let refused = capacity(&r(false), "c", &live(1000));
        assert_eq!(refused.refusals.len(), 1, "{refused:?}");
        assert!(refused.refusals[0].contains("sinks.a.delivery.randomizer.skip_startup_checks"));
        let warned = capacity(&r(true), "c", &live(1000));
        assert!(
            warned.refusals.is_empty() && !warned.warnings.is_empty(),
            "{warned:?}"
        );
        assert_eq!(capacity(&r(false), "c", &live(-1)), Capacity::default());
    }
}

//! The sink's `destination`: its `type` read through the registry, then the destination's
//! own checks, each reported under the destination's path.

use serde_json::Value;

use super::paths::SinkPaths;
use crate::config::destination::{self, DestinationConfig};
use crate::shared::issue::Issues;

/// Reads and checks the destination; `None` when it could not be read at all.
/// `batch_size` is the sink's `delivery.batch_size`, which an atomic republish bounds.
pub(crate) fn check(
    value: Value,
    batch_size: usize,
    p: &SinkPaths,
    issues: &mut Issues,
) -> Option<DestinationConfig> {
    match destination::parse(&p.destination, value) {
        Ok(d) => {
            issues.extend_under(&p.destination, d.problems());
            check_atomic(&d, batch_size, p, issues);
            Some(d)
        }
        Err(issue) => {
            issues.0.push(issue);
            None
        }
    }
}

/// A destination with a limit on one write's messages (an atomic republish: nats-server
/// refuses larger atomic batches) could never commit a larger `delivery.batch_size`.
fn check_atomic(d: &DestinationConfig, batch_size: usize, p: &SinkPaths, issues: &mut Issues) {
    if let Some(limit) = d.largest_batch() {
        if batch_size > limit.messages {
            issues.push(
                format!("{}.batch_size", p.delivery),
                format!(
                    "{}.{} {}, limited to {} messages; got batch_size {batch_size}",
                    p.destination, limit.key, limit.why, limit.messages
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(atomic: bool, batch_size: usize) -> Vec<String> {
        let mut issues = Issues::default();
        let value = json!({"type": "nats", "servers": ["nats://127.0.0.1:4222"],
                           "stream": "T", "subject": "t.{subject}", "atomic": atomic});
        check(value, batch_size, &SinkPaths::multi("sinks.a"), &mut issues).expect("read");
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn an_atomic_republish_refuses_batches_above_the_servers_limit_naming_both_paths() {
        assert!(problems(true, 1000).is_empty());
        assert!(problems(false, 5000).is_empty());
        let got = problems(true, 1001);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].contains("sinks.a.delivery.batch_size"), "{got:?}");
        assert!(got[0].contains("sinks.a.destination.atomic"), "{got:?}");
        assert!(got[0].contains("1000"), "{got:?}");
    }
}

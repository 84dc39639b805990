//! After a pass: did the destination receive exactly the messages of the stream, and did
//! the consumer end with nothing pending? A benchmark that lost or left a message fails
//! instead of reporting a rate. The destination is counted through its own
//! [`crate::sinks::Sink::stored_keys`], so the check reads exactly where the pass wrote,
//! whatever the destination.

use std::time::Duration;

use async_nats::jetstream;

use super::error::BenchError;
use crate::config::{DestinationConfig, SinkSpec};
use crate::sinks;

/// Checks the destination and the consumer; returns a one-line description on success.
pub async fn run(
    js: &jetstream::Context,
    stream: &str,
    spec: &SinkSpec,
    destination: Option<&DestinationConfig>,
    expected: u64,
) -> Result<String, BenchError> {
    let mut state = (u64::MAX, usize::MAX);
    // ACKs are asynchronous: give the server a moment to apply the last ones.
    for _ in 0..50 {
        let info = js
            .get_stream(stream)
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?
            .consumer_info(&spec.source.consumer)
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?;
        state = (info.num_pending, info.num_ack_pending);
        if state == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if state != (0, 0) {
        return Err(BenchError::Lost(format!(
            "consumer {} ended with {} pending and {} ack-pending",
            spec.source.consumer, state.0, state.1
        )));
    }
    match destination {
        None => Ok("consumer 0 pending / 0 ack-pending (nothing stored)".into()),
        Some(d) => {
            let stored = stored(d, stream, expected).await?;
            Ok(format!("{stored}, consumer 0 pending / 0 ack-pending"))
        }
    }
}

/// Counts the distinct keys of `stream` the destination holds, through the destination's
/// own code (its connection, TLS, the table or directory it writes), and fails unless they
/// are `expected`; says so when the destination cannot tell.
pub async fn stored(
    destination: &DestinationConfig,
    stream: &str,
    expected: u64,
) -> Result<String, BenchError> {
    let mut sink = sinks::build(destination);
    let fail = |e: sinks::SinkError| {
        BenchError::Destination(format!(
            "counting the keys of stream {stream} in the {} destination: {e}",
            destination.kind()
        ))
    };
    sink.open().await.map_err(fail)?;
    match sink.stored_keys(stream).await.map_err(fail)? {
        Some(keys) if keys == expected => Ok(format!("{keys} distinct keys stored")),
        Some(keys) => Err(BenchError::Lost(format!(
            "destination holds {keys} distinct idempotency keys of stream {stream}, expected {expected}"
        ))),
        None => Ok(format!(
            "the {} destination was not counted: it cannot read its keys back (or its column mapping stores no idempotency_key or no stream)",
            destination.kind()
        )),
    }
}

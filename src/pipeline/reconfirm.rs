//! Re-confirms the ACKs of recently committed batches after the connection dropped.
//!
//! An ACK is a fire-and-forget publish. When the server jetsink is connected to dies, the
//! ACKs it had received but not yet passed on — the batch just committed, and the
//! background ACK batches — die with it, and after AckWait the new leader delivers those
//! messages again, to be written a second time (absorbed by the destination's key, but
//! written). The same happens when the consumer's leader dies with ACKs it had not yet
//! replicated. So the runner remembers the reply subjects of its last few committed
//! batches, and after every drop (once the client is connected again) and every leader
//! election of its consumers (the server's advisory), it ACKs each of them
//! again as a request the consumer answers (the server's "ack of the ack"), retrying until
//! the consumer — possibly a new leader — confirms it or AckWait has passed. An ACK for a
//! message already acknowledged is ignored by the server, so re-sending is always safe.
//!
//! Private to the pipeline: only the runner acknowledges.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::Subject;
use bytes::Bytes;
use futures::StreamExt;
use prometheus::IntCounter;
use tokio::time::Instant;

use crate::nats::Drops;

/// Committed batches whose ACKs are remembered: the one just committed and the two the
/// background ACK tasks may still be sending, plus one.
const REMEMBERED_BATCHES: usize = 4;
/// Confirmation requests in flight at once.
const IN_FLIGHT: usize = 64;
/// How long one confirmation request waits for the consumer's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// Pause before asking again when no consumer answered (a leader election under way).
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// The reply subjects of the last few committed batches, each batch copied into one byte
/// buffer: remembering a batch is a few memory copies, not a clone (and, for a subject the
/// client parsed, an allocation) per message; the buffers of forgotten batches are reused.
#[derive(Default)]
pub(super) struct Recent(Mutex<VecDeque<Remembered>>);

/// One batch's reply subjects, back to back, with where each ends.
#[derive(Default)]
struct Remembered {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Recent {
    /// Remembers a committed batch's reply subjects, forgetting the oldest batch.
    pub(super) fn remember(&self, replies: &[Subject]) {
        if let Ok(mut r) = self.0.lock() {
            let mut slot = if r.len() >= REMEMBERED_BATCHES {
                r.pop_front().unwrap_or_default()
            } else {
                Remembered::default()
            };
            slot.bytes.clear();
            slot.ends.clear();
            slot.ends.reserve(replies.len());
            for reply in replies {
                slot.bytes.extend_from_slice(reply.as_bytes());
                slot.ends.push(slot.bytes.len());
            }
            r.push_back(slot);
        }
    }

    fn snapshot(&self) -> Vec<Subject> {
        let Ok(r) = self.0.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for batch in r.iter() {
            let mut start = 0;
            for &end in &batch.ends {
                // Copied from subjects, so always UTF-8; anything else is skipped.
                if let Some(s) = batch
                    .bytes
                    .get(start..end)
                    .and_then(|b| std::str::from_utf8(b).ok())
                {
                    out.push(Subject::from(s));
                }
                start = end;
            }
        }
        out
    }
}

/// The advisory a consumer's new leader announces itself with: the ACKs the old leader
/// had received but not replicated are gone with it.
fn leader_elected(stream: &str, consumer: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.{stream}.{consumer}")
}

/// Watches `drops` and the leader elections of `consumers` (stream, consumer); after
/// each, waits for the connection and re-confirms every remembered ACK within `ack_wait`.
/// Runs until the runner aborts it.
pub(super) async fn watch(
    sink: Arc<str>,
    client: async_nats::Client,
    drops: Drops,
    consumers: Vec<(String, String)>,
    recent: Arc<Recent>,
    confirmed: IntCounter,
    ack_wait: Duration,
) {
    let mut rx = drops.watch();
    let mut elections = Vec::new();
    for (stream, consumer) in &consumers {
        match client.subscribe(leader_elected(stream, consumer)).await {
            Ok(sub) => elections.push(sub),
            Err(e) => {
                tracing::debug!(sink = %sink, error = %e, "cannot watch consumer leader elections")
            }
        }
    }
    let mut elected = futures::stream::select_all(elections);
    loop {
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            Some(_) = elected.next() => {}
        }
        let replies = recent.snapshot();
        if replies.is_empty() {
            continue;
        }
        let until = Instant::now() + ack_wait;
        while client.connection_state() != State::Connected {
            if Instant::now() >= until {
                break;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let total = replies.len();
        let done = futures::stream::iter(replies)
            .map(|reply| confirm(&client, reply, until))
            .buffer_unordered(IN_FLIGHT)
            .filter(|ok| futures::future::ready(*ok))
            .count()
            .await;
        confirmed.inc_by(done as u64);
        tracing::info!(sink = %sink, confirmed = done, remembered = total, "ACKs of the last committed batches confirmed again after a connection drop or a consumer leader change");
    }
}

/// ACKs `reply` as a request until the consumer answers or `until` passes.
async fn confirm(client: &async_nats::Client, reply: Subject, until: Instant) -> bool {
    loop {
        let ask = client.request(reply.clone(), Bytes::from_static(b"+ACK"));
        if let Ok(Ok(_)) = tokio::time::timeout(ANSWER_WAIT, ask).await {
            return true;
        }
        if Instant::now() + RETRY_PAUSE >= until {
            return false;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_few_committed_batches_are_remembered() {
        let recent = Recent::default();
        for b in 0..6u32 {
            let batch: Vec<Subject> = (0..3)
                .map(|i| Subject::from(format!("r.{b}.{i}")))
                .collect();
            recent.remember(&batch);
        }
        let all = recent.snapshot();
        assert_eq!(all.len(), REMEMBERED_BATCHES * 3);
        assert_eq!(
            all[0].as_str(),
            "r.2.0",
            "the two oldest batches are forgotten"
        );
        assert_eq!(all.last().map(Subject::as_str), Some("r.5.2"));
    }
}

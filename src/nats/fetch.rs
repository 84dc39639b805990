//! Pulls one bounded batch from a durable consumer.
//!
//! A pull is always bounded: message count, bytes, and a local timeout around it. A pull
//! that waits carries an `expires` the server honours, so a lost pull can never hold a
//! message until AckWait; a no-wait pull carries none, because the server never stores it.
//! No heartbeat is requested (it stalls `fetch` on nats-server 2.9).
//!
//! Strategy: first a no-wait pull returns whatever is ready at once (full batches under
//! load, no added latency). When nothing is ready, a long poll for a single message waits
//! up to the batch timeout; as soon as one arrives, a second no-wait pull takes whatever
//! followed it. An idle sink therefore sleeps in the server, and a message arriving on an
//! idle stream is written within milliseconds instead of waiting for a batch to fill. The
//! long poll carries no byte limit, so a single message larger than `max_batch_bytes` is
//! still delivered on its own.
//!
//! With a linger (`delivery.linger_ms`, see `linger.rs`), a batch that is not full after
//! either step waits out what is left of the linger before the no-wait pull that takes
//! the rest: at a steady rate batches fill instead of carrying a handful each, and a full
//! pull (a backlog) never waits. After a partial pull (the [`Cadence`] the caller keeps)
//! the wait comes first and one no-wait pull takes the batch: a steady rate then costs one
//! pull per batch, not a no-wait pull that finds nothing, a long poll and a no-wait pull.
//!
//! The no-wait pull is sent and read here rather than through the client's `fetch`: when
//! a pull's message count fills with bytes to spare, nats-server 2.14 answers `409 Batch
//! Completed`, and for a replicated (R3) consumer it sends that status at once while the
//! messages themselves wait for their delivery to be replicated. The client's `fetch` takes
//! the early 409 for an error and drops the messages behind it, so an R3 consumer with a
//! backlog never got a batch (each pull failed, its messages came back only after AckWait).
//! Here that 409 is read as "the full count is on its way".
//!
//! With a pinned priority group (`source.pinned`), every pull is sent here, carrying the
//! group and the pin id (see `pin.rs`): the client refuses its own pulls on such a
//! consumer because they cannot carry the id.
//!
//! A pull also ends the moment its connection drops (the client drops it when it cannot
//! read a delivered message's headers, for one): what it received before is returned, and
//! the error says the connection dropped, which is how a caller tells a pull cut short
//! from one that timed out.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use async_nats::Message;
use tokio::time::Instant;

use super::connect::Drops;
use super::pin::{Pin, PullRequest};
use super::pull::{pull, Pulls};

/// Bounds of one batch.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// Most messages.
    pub max_messages: usize,
    /// Most payload bytes (a single larger message still comes alone).
    pub max_bytes: usize,
    /// Longest wait when nothing is ready.
    pub wait: Duration,
    /// How long a pull that found fewer than a full batch waits for more (`delivery.
    /// linger_ms`, see [`super::linger`]); zero takes what is ready at once.
    pub linger: Duration,
}

impl FetchLimits {
    /// Whether a pull that returned messages of these payload sizes took all it could:
    /// `max_messages` of them, or so many bytes that one more of the largest would not have
    /// fit. A pull that took less found the consumer with nothing more to deliver.
    pub fn filled_by(&self, sizes: impl Iterator<Item = usize>) -> bool {
        let (mut count, mut bytes, mut largest) = (0usize, 0usize, 0usize);
        for size in sizes {
            count += 1;
            bytes = bytes.saturating_add(size);
            largest = largest.max(size);
        }
        count > 0 && (count >= self.max_messages || bytes.saturating_add(largest) > self.max_bytes)
    }
}

/// Extra time past a pull's `expires` before the local timeout gives up on it.
const GRACE: Duration = Duration::from_millis(2_000);
/// Local bound of a no-wait pull. Such a pull carries no `expires`: the server answers it
/// at once and never stores it. (With an `expires`, nats-server 2.9 instead holds a
/// no-wait pull on a consumer with nothing deliverable until it expires, measured here
/// as a 5 s stall per empty bucket.)
pub const NO_WAIT_LIMIT: Duration = Duration::from_millis(3_000);

/// Pulls up to `limits` messages. An empty result means the stream had nothing for this
/// consumer during `limits.wait`.
///
/// With `pin` (a pinned priority group), every pull carries the group, and the pin id
/// while this instance holds the pin; a standby (no pin id) skips the no-wait pull, which
/// the server would only hold, and waits in the long poll until the server pins it.
///
/// `pulls`: what the previous pulls of this consumer left — how the last came back, which
/// decides how this one lingers ([`super::linger::Cadence::plan`]), and their reply inbox.
pub async fn fetch_batch(
    js: &Context,
    consumer: &PullConsumer,
    limits: FetchLimits,
    drops: &Drops,
    pin: Option<&Pin>,
    pulls: &mut Pulls,
) -> Result<Vec<Message>, async_nats::Error> {
    if pin.is_none_or(Pin::held) {
        let plan = pulls.cadence.plan(limits.linger, Instant::now());
        if let Some(wait) = plan.wait_first {
            tokio::time::sleep(wait).await;
        }
        let started = Instant::now();
        let (ready, err) = no_wait(
            js,
            consumer,
            limits.max_messages,
            limits.max_bytes,
            drops,
            pin,
            Some(&mut *pulls),
        )
        .await?;
        if !ready.is_empty() {
            // Without a linger, after waiting it out first, or behind a full pull, what
            // was ready is the batch: its messages have waited as long as they may.
            return Ok(match plan.fill {
                false => ready,
                true => fill(js, consumer, limits, drops, pin, pulls, (ready, started)).await,
            });
        }
        if let Some(e) = err {
            if !is_size_limit(&e) {
                return Err(e);
            }
        }
    }
    // The long poll is sent and read here too, not through the client's `batch()`: both
    // fetch paths then hand over exactly the same messages (see [`pull_reply`]), which is
    // what the scan for unreadable messages relies on. The client also refuses `batch()`
    // on a pinned consumer (it cannot carry the pin id).
    let request = PullRequest::new(1, 0, Some(limits.wait), pin);
    let limit = limits.wait + GRACE;
    let (first, err) = pull(js, consumer, request, limit, drops, pin, Some(pulls)).await?;
    if let Some(e) = err {
        if first.is_empty() {
            return Err(e);
        }
    }
    if first.is_empty() {
        return Ok(first);
    }
    // The linger counts from the first message's arrival, as its latency does.
    let begun = (first, Instant::now());
    Ok(fill(js, consumer, limits, drops, pin, pulls, begun).await)
}

/// Completes `begun`, a batch begun at its instant with its messages: while it is not full, it waits out what
/// is left of the linger, then a no-wait pull takes whatever came meanwhile (without a
/// linger, at once). Whatever fails here is only "no more right now": what was got is kept.
///
/// The wait is a local sleep, not a pull the server holds with `expires`: nats-server 2.9
/// drops an expired pull without its `408` when a message arrives just after the deadline,
/// so such a pull ended only at the local bound, seconds later (measured: 2 of 13 lingering
/// pulls at 1,000 msg/s). Messages arriving during the sleep stay in the stream, not
/// delivered, so nothing waits on a pull nobody reads.
async fn fill(
    js: &Context,
    consumer: &PullConsumer,
    limits: FetchLimits,
    drops: &Drops,
    pin: Option<&Pin>,
    pulls: &mut Pulls,
    begun: (Vec<Message>, Instant),
) -> Vec<Message> {
    let (mut got, started) = begun;
    let used: usize = got.iter().map(|m| m.payload.len()).sum();
    if got.len() >= limits.max_messages || used >= limits.max_bytes {
        return got;
    }
    let filled = limits.filled_by(got.iter().map(|m| m.payload.len()));
    if let Some(wait) = super::linger::wait_more(limits.linger, started, Instant::now(), filled) {
        tokio::time::sleep(wait).await;
    }
    let (count, bytes) = (limits.max_messages - got.len(), limits.max_bytes - used);
    if let Ok((rest, _)) = no_wait(js, consumer, count, bytes, drops, pin, Some(pulls)).await {
        got.extend(rest);
    }
    got
}

pub(super) async fn no_wait(
    js: &Context,
    consumer: &PullConsumer,
    max_messages: usize,
    max_bytes: usize,
    drops: &Drops,
    pin: Option<&Pin>,
    pulls: Option<&mut Pulls>,
) -> Result<(Vec<Message>, Option<async_nats::Error>), async_nats::Error> {
    let request = PullRequest::new(max_messages, max_bytes, None, pin);
    pull(js, consumer, request, NO_WAIT_LIMIT, drops, pin, pulls).await
}

/// A no-wait pull of up to a full batch from one of several consumers: no pin (a pinned
/// sink reads one consumer) and an inbox of its own (only a single consumer's pulls keep
/// one, [`Pulls`]).
pub(super) async fn ready(
    js: &Context,
    consumer: &PullConsumer,
    limits: FetchLimits,
    drops: &Drops,
) -> Result<(Vec<Message>, Option<async_nats::Error>), async_nats::Error> {
    let (messages, bytes) = (limits.max_messages, limits.max_bytes);
    no_wait(js, consumer, messages, bytes, drops, None, None).await
}

/// The server ends a byte-bounded pull with a 409 when the next message does not fit.
pub(super) fn is_size_limit(e: &async_nats::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    text.contains("maxbytes") || text.contains("max bytes")
}

/// Shortest long poll of an idle round over several consumers.
const IDLE_ROUND_MIN: Duration = Duration::from_millis(100);

/// Pulls from several consumers (random subject buckets): a no-wait pull from each in
/// `order` until one has messages, so buckets are read at independent rates and each
/// stays FIFO; when all are empty, a short long-poll on the first, so an idle sink still
/// sleeps in the server. `order` is a random permutation chosen by the caller.
pub async fn fetch_any(
    js: &Context,
    consumers: &[PullConsumer],
    order: &[usize],
    limits: FetchLimits,
    drops: &Drops,
) -> Result<Vec<Message>, async_nats::Error> {
    first_ready(js, consumers, order, 0, limits, drops, None).await
}

/// [`fetch_any`] over `order` from its `skip`-th consumer on, those before it asked
/// already (`last_err`: one of them failed); the idle round still polls `order`'s first.
pub(super) async fn first_ready(
    js: &Context,
    consumers: &[PullConsumer],
    order: &[usize],
    skip: usize,
    limits: FetchLimits,
    drops: &Drops,
    mut last_err: Option<async_nats::Error>,
) -> Result<Vec<Message>, async_nats::Error> {
    for &i in order.iter().skip(skip) {
        let Some(c) = consumers.get(i) else { continue };
        let started = Instant::now();
        let res = ready(js, c, limits, drops).await;
        tracing::debug!(bucket = i, elapsed_ms = started.elapsed().as_millis() as u64, ok = res.is_ok(), messages = res.as_ref().map(|r| r.0.len()).unwrap_or(0), err = ?res.as_ref().ok().and_then(|r| r.1.as_ref().map(|e| e.to_string())), "bucket pull");
        match res {
            Ok((m, _)) if !m.is_empty() => return Ok(m),
            Ok(_) => {}
            Err(e) => last_err = Some(e),
        }
    }
    idle_round(js, consumers, order, limits, drops, last_err).await
}

/// When every bucket answered empty: a short long poll on the first of `order`, so an idle
/// sink sleeps in the server. `last_err`, a bucket's failed pull, is reported in place of
/// this poll's own failure.
pub(super) async fn idle_round(
    js: &Context,
    consumers: &[PullConsumer],
    order: &[usize],
    limits: FetchLimits,
    drops: &Drops,
    last_err: Option<async_nats::Error>,
) -> Result<Vec<Message>, async_nats::Error> {
    let Some(first) = order.first().and_then(|i| consumers.get(*i)) else {
        return Ok(Vec::new());
    };
    // Each idle round polls one bucket; keep it short so a message arriving in another
    // bucket waits a fraction of the batch timeout, not all of it, but not shorter than
    // IDLE_ROUND_MIN: with 64 buckets a 15 ms round cost 3,240 pulls/s on an idle sink.
    let wait = (limits.wait / consumers.len().max(1) as u32)
        .max(IDLE_ROUND_MIN)
        .min(limits.wait);
    // No linger: a wait on one bucket would hold back messages ready in the others.
    let limits = FetchLimits {
        wait,
        linger: Duration::ZERO,
        ..limits
    };
    fetch_batch(js, first, limits, drops, None, &mut Pulls::default())
        .await
        .map_err(|e| last_err.unwrap_or(e))
}

#[cfg(test)]
mod limits_tests {
    use super::*;

    #[test]
    fn a_pull_is_full_at_its_message_count_or_when_one_more_message_would_not_fit() {
        let limits = FetchLimits {
            max_messages: 3,
            max_bytes: 1_000,
            wait: Duration::from_secs(1),
            linger: Duration::ZERO,
        };
        assert!(!limits.filled_by([].into_iter()), "nothing");
        assert!(!limits.filled_by([10, 10].into_iter()));
        assert!(limits.filled_by([10, 10, 10].into_iter()), "three messages");
        assert!(
            !limits.filled_by([400, 100].into_iter()),
            "another 400 fits"
        );
        assert!(
            limits.filled_by([400, 400].into_iter()),
            "another 400 does not"
        );
        assert!(
            limits.filled_by([5_000].into_iter()),
            "larger than max_bytes alone"
        );
    }
}

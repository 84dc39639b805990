//! Pulls from every random subject bucket at once (`source.buckets.pull: "concurrent"`),
//! one reading of the seed's consumers "processed concurrently". One round sends a no-wait
//! pull to each bucket consumer together, each for its share of the batch ([`shares`]), so
//! a batch holds messages of many buckets. Each bucket's messages come back in its own
//! order (FIFO); the caller interleaves them. Equal shares keep the buckets in step, so the
//! disorder is local to a batch (measured in docs/randomization.md).
//!
//! A bucket whose next message does not fit its share of the bytes is pulled again for
//! that one message with no byte limit, in the same round, so a large message is never
//! starved behind the other buckets (the batch can then exceed `max_batch_bytes` by that
//! message, as a single-consumer batch of one large message does). When every bucket is
//! empty the round ends with a short long poll on the first, as [`super::fetch_any`] does,
//! so an idle sink sleeps in the server.

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use async_nats::Message;
use futures::future::join_all;

use super::connect::Drops;
use super::fetch::{idle_round, is_size_limit, no_wait, FetchLimits};

/// How many messages and bytes each of `n` buckets is asked for out of `limits`: the
/// batch split as evenly as it goes, the first buckets of the round taking the remainder,
/// so the shares never add up to more than the batch. A share of 0 messages is not pulled
/// this round (with fewer messages per batch than buckets, the round's random order picks
/// which buckets are asked).
pub fn shares(max_messages: usize, max_bytes: usize, n: usize) -> Vec<(usize, usize)> {
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (max_messages / n, max_messages % n);
    (0..n)
        .map(|i| {
            let messages = base + usize::from(i < extra);
            // Bytes in proportion to messages; 0 means "no limit" to the server, so a
            // share of messages always gets at least one byte of limit. A share of no
            // messages (every share, for a batch of 0) is not pulled and needs no bytes.
            if max_bytes == 0 || messages == 0 {
                return (messages, 0);
            }
            let bytes = ((max_bytes as u128 * messages as u128) / max_messages as u128) as usize;
            (messages, bytes.max(usize::from(messages > 0)))
        })
        .collect()
}

/// One concurrent round over `consumers` in `order` (a random permutation chosen by the
/// caller): each bucket's messages, in its own order, in the round's order. Fails only
/// when every pulled bucket failed and nothing came.
pub async fn fetch_each(
    js: &Context,
    consumers: &[PullConsumer],
    order: &[usize],
    limits: FetchLimits,
    drops: &Drops,
) -> Result<Vec<Vec<Message>>, async_nats::Error> {
    let asked: Vec<(usize, (usize, usize))> = order
        .iter()
        .copied()
        .zip(shares(limits.max_messages, limits.max_bytes, order.len()))
        .filter(|(i, (m, _))| *m > 0 && *i < consumers.len())
        .collect();
    let pulls = asked.iter().map(|&(i, (messages, bytes))| async move {
        let c = &consumers[i];
        match no_wait(js, c, messages, bytes, drops, None, None).await {
            Ok((m, Some(e))) if m.is_empty() && is_size_limit(&e) => {
                no_wait(js, c, 1, 0, drops, None, None)
                    .await
                    .map(|(m, _)| m)
            }
            Ok((m, Some(e))) if m.is_empty() => Err(e),
            Ok((m, _)) => Ok(m),
            Err(e) => Err(e),
        }
    });
    let mut groups = Vec::with_capacity(asked.len());
    let mut last_err = None;
    for (&(i, _), result) in asked.iter().zip(join_all(pulls).await) {
        match result {
            Ok(m) if !m.is_empty() => groups.push(m),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(bucket = i, error = %e, "bucket pull failed");
                last_err = Some(e);
            }
        }
    }
    if !groups.is_empty() {
        return Ok(groups);
    }
    let m = idle_round(js, consumers, order, limits, drops, last_err).await?;
    Ok(if m.is_empty() { Vec::new() } else { vec![m] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_batch_is_split_evenly_with_the_remainder_first() {
        assert_eq!(
            shares(10, 1000, 4),
            vec![(3, 300), (3, 300), (2, 200), (2, 200)]
        );
        assert_eq!(shares(2, 100, 4), vec![(1, 50), (1, 50), (0, 0), (0, 0)]);
        assert!(shares(10, 100, 0).is_empty());
        // A byte limit too small to split still limits each share (0 would be none).
        assert_eq!(shares(3, 1, 3), vec![(1, 1), (1, 1), (1, 1)]);
        // No byte limit stays none.
        assert_eq!(shares(4, 0, 2), vec![(2, 0), (2, 0)]);
        // A batch of no messages (the edge the property test once drew and divided by).
        assert_eq!(shares(0, 1000, 3), vec![(0, 0), (0, 0), (0, 0)]);
    }

    proptest! {
        #[test]
        fn shares_never_exceed_the_batch(
            max_messages in 0usize..20_000,
            max_bytes in 0usize..(64 << 20),
            n in 1usize..300,
        ) {
            let s = shares(max_messages, max_bytes, n);
            prop_assert_eq!(s.len(), n);
            prop_assert_eq!(s.iter().map(|x| x.0).sum::<usize>(), max_messages);
            let bytes: usize = s.iter().map(|x| x.1).sum();
            prop_assert!(bytes <= max_bytes.max(max_messages.min(n)));
            let (lo, hi) = (s.iter().map(|x| x.0).min().unwrap(), s.iter().map(|x| x.0).max().unwrap());
            prop_assert!(hi - lo <= 1);
            for (m, b) in s {
                prop_assert!(m > 0 || b == 0);
                prop_assert!(max_bytes == 0 || m == 0 || b > 0);
            }
        }
    }
}

//! The delay stage: applies the delayed-NAK randomizer to a prepared batch and keeps the
//! window of delayed messages between batches.
//!
//! Pure, like the randomizer itself: the rng and the clock (milliseconds from an origin
//! the runner picks) are passed in, and the messages to delay come out as a NAK list that
//! the runner sends. Nothing here talks to the server, so the stage's guarantees (every
//! message either kept or NAKed, a redelivery never delayed again, the window bounded)
//! are tested without one.

use std::time::Duration;

use async_nats::Subject;
use rand::Rng;

use super::batch::Batch;
use super::randomizer::{Randomizer, Window};
use crate::envelope::Envelope;

/// The randomizer and its window of one sink.
pub(super) struct DelayStage {
    randomizer: Randomizer,
    window: Window,
    /// With `adaptive_source: "server"`, what of the server's outstanding count this
    /// instance may hold in hand (two batches): the rest is delayed messages, its own and
    /// other instances'. `None`: the own window alone.
    server_allowance: Option<usize>,
}

/// The window the randomizer decides by: the own one, or, given the server's outstanding
/// count for the consumer, the larger of that and the count beyond `allowance` (the batches
/// in hand), which holds the delays of every instance on the consumer. Never below the own
/// window, so a stale or missing server answer cannot let this instance delay more than it
/// would alone.
pub(super) fn effective_window(own: usize, outstanding: Option<u64>, allowance: usize) -> usize {
    let beyond = outstanding
        .map(|n| {
            usize::try_from(n)
                .unwrap_or(usize::MAX)
                .saturating_sub(allowance)
        })
        .unwrap_or(0);
    own.max(beyond)
}

/// What the stage took out of a batch.
#[derive(Debug, Default)]
pub(super) struct Delayed {
    /// The messages to NAK, each with its delay.
    pub(super) naks: Vec<(Subject, Duration)>,
    /// Delayed messages seen again in this batch (`jetsink_randomizer_redelivered_total`).
    pub(super) returned: u64,
    /// The window after the batch (`jetsink_randomizer_window`).
    pub(super) window: usize,
}

impl DelayStage {
    /// A stage with an empty window whose entries expire `grace` after they are due (the
    /// source's AckWait, see [`Window`]).
    pub(super) fn new(randomizer: Randomizer, grace: Duration) -> DelayStage {
        DelayStage {
            randomizer,
            window: Window::new(grace),
            server_allowance: None,
        }
    }

    /// Decides by the server's outstanding count too ([`effective_window`]), allowing
    /// `allowance` of it for the messages this instance holds in hand.
    pub(super) fn fed_by_server(mut self, allowance: usize) -> DelayStage {
        self.server_allowance = Some(allowance);
        self
    }

    /// Whether [`DelayStage::apply`] wants the server's outstanding count.
    pub(super) fn wants_server_count(&self) -> bool {
        self.server_allowance.is_some()
    }

    /// Splits a batch at `now_ms`: the kept messages in their order, and the first
    /// deliveries picked for a delayed NAK, recorded in the window. `outstanding` is the
    /// server's latest count of the consumer's unacknowledged messages, when known; it is
    /// used only when the stage is [`DelayStage::fed_by_server`].
    pub(super) fn apply(
        &mut self,
        batch: Batch,
        now_ms: u64,
        outstanding: Option<u64>,
        rng: &mut impl Rng,
    ) -> (Batch, Delayed) {
        self.window.expire(now_ms);
        let mut returned = 0;
        for e in &batch.envelopes {
            if self.window.observe(e.stream_sequence, e.delivered) {
                returned += 1;
            }
        }
        let items: Vec<(Envelope, Subject)> =
            batch.envelopes.into_iter().zip(batch.replies).collect();
        let window = match self.server_allowance {
            Some(allowance) => effective_window(self.window.len(), outstanding, allowance),
            None => self.window.len(),
        };
        let (kept, delayed) = self
            .randomizer
            .split(items, |(e, _)| e.delivered, window, rng);
        let mut naks = Vec::with_capacity(delayed.len());
        for ((e, reply), delay) in delayed {
            self.window.delayed(e.stream_sequence, now_ms, delay);
            naks.push((reply, delay));
        }
        let (envelopes, replies) = kept.into_iter().unzip();
        let delayed = Delayed {
            naks,
            returned,
            window: self.window.len(),
        };
        (Batch { envelopes, replies }, delayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::randomizer::RandomizerConfig;
    use crate::pipeline::testing::batch_of;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// A stage delaying first deliveries with probability 1 − `p` (`p` = `f64::MIN_POSITIVE`
    /// delays every one).
    fn stage(p: f64, max_window: usize) -> DelayStage {
        let cfg = RandomizerConfig {
            enabled: true,
            process_immediately_probability: p,
            min_delay_ms: 100,
            max_delay_ms: 200,
            max_window,
            adaptive: false,
            ..RandomizerConfig::default()
        };
        let r = Randomizer::new(&cfg);
        DelayStage::new(r, Duration::from_secs(30))
    }

    #[test]
    fn delays_first_deliveries_only_and_counts_them_back() {
        let mut s = stage(f64::MIN_POSITIVE, 100);
        let mut rng = StdRng::seed_from_u64(1);
        let (kept, out) = s.apply(batch_of(&[(1, 1), (2, 2), (3, 1)]), 0, None, &mut rng);
        assert_eq!(kept.envelopes.len(), 1);
        assert_eq!(kept.envelopes[0].stream_sequence, 2);
        assert_eq!(out.naks.len(), 2);
        assert_eq!(out.window, 2);
        assert_eq!(out.returned, 0);
        for (_, d) in &out.naks {
            assert!((100..=200).contains(&(d.as_millis() as u64)));
        }
        // Both come back as redeliveries: kept, counted, out of the window.
        let (kept, out) = s.apply(batch_of(&[(1, 2), (3, 2)]), 300, None, &mut rng);
        assert_eq!(kept.envelopes.len(), 2);
        assert_eq!(out.returned, 2);
        assert_eq!(out.window, 0);
        assert!(out.naks.is_empty());
    }

    #[test]
    fn a_lost_delay_expires_after_the_grace() {
        let mut s = stage(f64::MIN_POSITIVE, 100);
        let mut rng = StdRng::seed_from_u64(2);
        let (_, out) = s.apply(batch_of(&[(1, 1)]), 0, None, &mut rng);
        assert_eq!(out.window, 1);
        let (_, out) = s.apply(Batch::default(), 200 + 30_000, None, &mut rng);
        assert_eq!(out.window, 0);
    }

    #[test]
    fn a_server_count_beyond_the_allowance_stops_delays_and_one_within_it_changes_nothing() {
        let mut rng = StdRng::seed_from_u64(3);
        let first = [(1, 1), (2, 1), (3, 1)];
        // Other instances hold 10 delayed messages (12 outstanding less 2 in hand): the
        // consumer's window is full, nothing is delayed.
        let mut s = stage(f64::MIN_POSITIVE, 10).fed_by_server(2);
        let (kept, out) = s.apply(batch_of(&first), 0, Some(12), &mut rng);
        assert_eq!((kept.envelopes.len(), out.naks.len()), (3, 0));
        // Only what this instance holds in hand: as with its own window alone.
        let mut s = stage(f64::MIN_POSITIVE, 10).fed_by_server(2);
        let (kept, out) = s.apply(batch_of(&first), 0, Some(2), &mut rng);
        assert_eq!((kept.envelopes.len(), out.naks.len()), (0, 3));
        // Not fed by the server: the count is ignored.
        let mut s = stage(f64::MIN_POSITIVE, 10);
        let (_, out) = s.apply(batch_of(&first), 0, Some(1_000), &mut rng);
        assert_eq!(out.naks.len(), 3);
        // Room for 2 more: the window stops at the consumer's max_window.
        let mut s = stage(f64::MIN_POSITIVE, 10).fed_by_server(2);
        let (_, out) = s.apply(batch_of(&first), 0, Some(10), &mut rng);
        assert_eq!(out.naks.len(), 2);
    }

    #[test]
    fn the_effective_window_is_never_below_the_own_one() {
        assert_eq!(effective_window(5, None, 100), 5);
        assert_eq!(effective_window(5, Some(50), 100), 5);
        assert_eq!(effective_window(5, Some(130), 100), 30);
        assert_eq!(effective_window(0, Some(u64::MAX), 0), usize::MAX);
    }

    proptest! {
        #[test]
        fn a_server_fed_window_is_bounded_by_what_the_server_leaves(
            delivered in proptest::collection::vec(1u64..3, 0..60),
            outstanding in proptest::option::of(0u64..40),
            allowance in 0usize..10,
            max_window in 1usize..20,
            seed in any::<u64>(),
        ) {
            let mut s = stage(f64::MIN_POSITIVE, max_window).fed_by_server(allowance);
            let mut rng = StdRng::seed_from_u64(seed);
            let pairs: Vec<(u64, u64)> =
                delivered.iter().enumerate().map(|(i, d)| (i as u64 + 1, *d)).collect();
            let (kept, out) = s.apply(batch_of(&pairs), 0, outstanding, &mut rng);
            prop_assert_eq!(kept.envelopes.len() + out.naks.len(), pairs.len());
            let start = effective_window(0, outstanding, allowance);
            // Delays only fill what the consumer's window leaves.
            prop_assert!(out.naks.len() <= max_window.saturating_sub(start));
        }

        #[test]
        fn every_message_is_kept_or_naked_and_the_window_stays_bounded(
            delivered in proptest::collection::vec(1u64..4, 0..60),
            p in f64::MIN_POSITIVE..=1.0,
            max_window in 1usize..20,
            seed in any::<u64>(),
        ) {
            let mut s = stage(p, max_window);
            let mut rng = StdRng::seed_from_u64(seed);
            let pairs: Vec<(u64, u64)> =
                delivered.iter().enumerate().map(|(i, d)| (i as u64 + 1, *d)).collect();
            let (kept, out) = s.apply(batch_of(&pairs), 0, None, &mut rng);
            prop_assert_eq!(kept.envelopes.len() + out.naks.len(), pairs.len());
            prop_assert_eq!(kept.envelopes.len(), kept.replies.len());
            prop_assert!(out.window <= max_window);
            let kept_redeliveries = kept.envelopes.iter().filter(|e| e.delivered > 1).count();
            prop_assert_eq!(kept_redeliveries, delivered.iter().filter(|d| **d > 1).count());
            // Kept messages keep their order.
            let seqs: Vec<u64> = kept.envelopes.iter().map(|e| e.stream_sequence).collect();
            let mut sorted = seqs.clone();
            sorted.sort_unstable();
            prop_assert_eq!(seqs, sorted);
        }
    }
}

//! Capped exponential backoff with jitter, as a pure function of the attempt and an rng;
//! and the bound on holding a batch for an error nobody recognised.
//!
//! Used while a destination fails transiently: the batch is held and retried after these
//! delays, never NAKed into a tight loop. A known outage is held without bound (it must
//! never dead-letter data), but an `unclassified` error is held only for
//! `delivery.retry.max_held_ms` ([`HeldBound`]); a message refused that way is remembered
//! ([`Suspects`]) so that when it comes back its new batch is split at its first
//! unclassified failure instead of being held for the whole bound again.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::config::{Jitter, RetryConfig};
use crate::envelope::Envelope;

/// The delay before retry number `attempt` (0 = the first retry).
pub fn backoff(cfg: &RetryConfig, attempt: u32, rng: &mut impl Rng) -> Duration {
    let base = cfg.initial_backoff_ms as f64 * cfg.multiplier.powi(attempt.min(64) as i32);
    let capped = base.min(cfg.max_backoff_ms as f64).max(0.0);
    let ms = match cfg.jitter {
        Jitter::None => capped,
        Jitter::Full => rng.random_range(0.0..=capped),
        Jitter::Equal => capped / 2.0 + rng.random_range(0.0..=capped / 2.0),
    };
    Duration::from_millis(ms.round() as u64)
}

/// The clock of one part's unclassified failures. Pure: the caller passes the time.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeldBound {
    limit: Duration,
    first: Option<Instant>,
}

impl HeldBound {
    /// A bound of `limit` from the first unclassified failure.
    pub(super) fn new(limit: Duration) -> HeldBound {
        HeldBound { limit, first: None }
    }

    /// Records an unclassified failure at `now`; whether the part has now been failing
    /// that way for the whole bound (counted from the first such failure, whatever came
    /// between: an outage in the middle does not restart it, and does not end it either,
    /// since only an unclassified failure is ever checked).
    pub(super) fn failed_at(&mut self, now: Instant) -> bool {
        let first = *self.first.get_or_insert(now);
        now.saturating_duration_since(first) >= self.limit
    }
}

/// Messages recently refused as unclassified, by stream and sequence, at most `cap` of
/// them (the oldest forgotten first), so the memory stays bounded whatever the traffic.
#[derive(Debug)]
pub(super) struct Suspects {
    order: VecDeque<(String, u64)>,
    set: HashSet<(String, u64)>,
    cap: usize,
}

impl Suspects {
    /// An empty memory of at most `cap` messages.
    pub(super) fn new(cap: usize) -> Suspects {
        Suspects {
            order: VecDeque::new(),
            set: HashSet::new(),
            cap: cap.max(1),
        }
    }

    /// Remembers `e`.
    pub(super) fn remember(&mut self, e: &Envelope) {
        let key = (e.stream.clone(), e.stream_sequence);
        if !self.set.insert(key.clone()) {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    /// Whether `part` holds a remembered message.
    pub(super) fn any_in(&self, part: &[Envelope]) -> bool {
        !self.set.is_empty()
            && part
                .iter()
                .any(|e| self.set.contains(&(e.stream.clone(), e.stream_sequence)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn cfg(jitter: Jitter) -> RetryConfig {
        RetryConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 5_000,
            multiplier: 2.0,
            jitter,
            max_held_ms: 600_000,
            refused_delay_ms: None,
        }
    }

    #[test]
    fn the_hold_bound_counts_from_the_first_unclassified_failure() {
        let t0 = Instant::now();
        let mut b = HeldBound::new(Duration::from_secs(600));
        assert!(!b.failed_at(t0 + Duration::from_secs(5)));
        assert!(!b.failed_at(t0 + Duration::from_secs(604)));
        assert!(b.failed_at(t0 + Duration::from_secs(605)));
        assert!(b.failed_at(t0 + Duration::from_secs(9_000)));
    }

    #[test]
    fn suspects_are_found_in_a_part_and_the_oldest_are_forgotten() {
        let e = |seq: u64| {
            crate::envelope::normalize(
                "s",
                crate::envelope::Delivery {
                    stream: "S",
                    consumer: "c",
                    stream_sequence: seq,
                    consumer_sequence: seq,
                    delivered: 1,
                    published: time::OffsetDateTime::UNIX_EPOCH,
                },
                Vec::<(&str, &str)>::new(),
                bytes::Bytes::new(),
                crate::config::IdempotencyKey::StreamSequence,
            )
        };
        let mut s = Suspects::new(2);
        assert!(!s.any_in(&[e(1)]));
        s.remember(&e(1));
        s.remember(&e(1));
        s.remember(&e(2));
        assert!(s.any_in(&[e(7), e(1)]));
        s.remember(&e(3));
        assert!(!s.any_in(&[e(1)]), "the oldest is forgotten beyond the cap");
        assert!(s.any_in(&[e(2)]) && s.any_in(&[e(3)]));
    }

    #[test]
    fn without_jitter_delays_double_until_the_cap() {
        let mut rng = StdRng::seed_from_u64(1);
        let got: Vec<u64> = (0..8)
            .map(|a| backoff(&cfg(Jitter::None), a, &mut rng).as_millis() as u64)
            .collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn huge_attempt_numbers_stay_at_the_cap() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            backoff(&cfg(Jitter::None), u32::MAX, &mut rng),
            Duration::from_secs(5)
        );
    }

    proptest! {
        #[test]
        fn jittered_delays_stay_within_their_bounds(attempt in 0u32..100, seed in any::<u64>()) {
            let mut rng = StdRng::seed_from_u64(seed);
            let cap = backoff(&cfg(Jitter::None), attempt, &mut rng);
            let full = backoff(&cfg(Jitter::Full), attempt, &mut rng);
            let equal = backoff(&cfg(Jitter::Equal), attempt, &mut rng);
            prop_assert!(full <= cap);
            prop_assert!(equal <= cap);
            prop_assert!(equal + Duration::from_millis(1) >= cap / 2);
        }
    }
}

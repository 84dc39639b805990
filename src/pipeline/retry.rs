//! Capped exponential backoff with jitter, as a pure function of the attempt and an rng.
//!
//! Used while a destination fails transiently: the batch is held and retried after these
//! delays, never NAKed into a tight loop.

use std::time::Duration;

use rand::Rng;

use crate::config::{Jitter, RetryConfig};

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
        }
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

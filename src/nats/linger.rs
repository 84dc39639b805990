//! When a pull that found fewer messages than a full batch waits for more (the linger).
//!
//! At a steady rate below the maximum a pull finds a handful of messages ready, and every
//! per-batch cost — the pull round trips, a transaction or an fsync, a file, the ACK
//! flush — is then paid per handful: at 5,000 msg/s that made a message cost an order of
//! magnitude more CPU than in a backlog drain. Waiting a few milliseconds for the batch to
//! fill trades a bounded latency for those costs. A pull that came back full (a backlog)
//! never waits, so a drain is exactly as fast as without the linger.
//!
//! The wait itself is a sleep before the no-wait pull that takes the rest (`fetch.rs` says
//! why not a pull the server holds), so lingering costs no round trip beyond the one a
//! batch always had. This is the pure decision, with the clock passed in.

use std::time::Duration;

use tokio::time::Instant;

/// Shortest wait worth taking: below it, the timer costs more than the messages that could
/// still arrive.
pub const MIN_WAIT: Duration = Duration::from_millis(1);

/// How much longer a batch begun at `started` waits for more messages at `now`: `None`
/// when it is `filled` (a full pull: a backlog drains without waiting), when `linger` is
/// zero, or when less than [`MIN_WAIT`] of it is left.
pub fn wait_more(
    linger: Duration,
    started: Instant,
    now: Instant,
    filled: bool,
) -> Option<Duration> {
    if filled {
        return None;
    }
    let left = linger.checked_sub(now.saturating_duration_since(started))?;
    (left >= MIN_WAIT).then_some(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_partial_batch_waits_out_what_is_left_of_the_linger() {
        let t0 = Instant::now();
        let linger = Duration::from_millis(20);
        assert_eq!(wait_more(linger, t0, t0, false), Some(linger));
        assert_eq!(
            wait_more(linger, t0, t0 + Duration::from_millis(15), false),
            Some(Duration::from_millis(5))
        );
        assert_eq!(wait_more(linger, t0, t0 + linger, false), None);
        assert_eq!(
            wait_more(linger, t0, t0 + Duration::from_secs(1), false),
            None
        );
    }

    #[test]
    fn a_full_pull_or_no_linger_never_waits() {
        let t0 = Instant::now();
        assert_eq!(wait_more(Duration::from_millis(20), t0, t0, true), None);
        assert_eq!(wait_more(Duration::ZERO, t0, t0, false), None);
        assert_eq!(
            wait_more(Duration::from_micros(999), t0, t0, false),
            None,
            "shorter than a round trip is worth"
        );
    }

    #[test]
    fn a_clock_read_before_the_start_counts_as_no_time_passed() {
        let t0 = Instant::now() + Duration::from_millis(5);
        let linger = Duration::from_millis(20);
        assert_eq!(
            wait_more(linger, t0, t0 - Duration::from_millis(5), false),
            Some(linger)
        );
    }

    proptest! {
        #[test]
        fn the_wait_never_passes_the_linger_deadline_and_only_shrinks(
            linger_us in 0u64..200_000,
            at_us in 0u64..400_000,
            later_us in 0u64..400_000,
            filled: bool,
        ) {
            let t0 = Instant::now();
            let linger = Duration::from_micros(linger_us);
            let now = t0 + Duration::from_micros(at_us);
            let later = now + Duration::from_micros(later_us);
            let first = wait_more(linger, t0, now, filled);
            if let Some(w) = first {
                prop_assert!(!filled);
                prop_assert!(w >= MIN_WAIT);
                prop_assert!(now + w <= t0 + linger, "waits past the deadline");
            }
            let second = wait_more(linger, t0, later, filled);
            prop_assert!(second <= first, "a later clock reading waits longer");
        }
    }
}

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
//! batch always had. Once a pull has come back partial (a steady rate), the next one waits
//! first and then asks once ([`Cadence::plan`]): one pull per batch instead of three. This is
//! the pure decision, with the clock passed in.

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

/// Fewest messages a partial pull must have taken for their rate to shorten the next
/// wait: below it, a couple of messages over a short interval say little about the rate.
pub const RATE_SAMPLE: usize = 8;

/// What the previous pull of a consumer came back as, which decides how the next one
/// lingers ([`Cadence::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cadence {
    /// Nothing known: the first pull, or the one before came back empty or failed.
    #[default]
    Unknown,
    /// It came back with fewer than a full batch: a steady rate.
    Partial {
        /// When it ended.
        end: Instant,
        /// How long a full batch takes to arrive at the rate it saw, when it saw enough
        /// messages over a known interval to say.
        fills_in: Option<Duration>,
    },
    /// It came back full, at `end`: a backlog, or more arrived during a linger than a
    /// batch holds.
    Full {
        /// When it ended.
        end: Instant,
    },
}

/// How one pull lingers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Wait this long before asking at all.
    pub wait_first: Option<Duration>,
    /// A pull that finds a partial batch ready waits out the rest of the linger and asks
    /// again for the rest ([`wait_more`]); otherwise what is ready is the batch.
    pub fill: bool,
}

impl Cadence {
    /// What a pull that ended at `now` with `count` messages came back as, the pull before
    /// it having come back as `before`; `filled`: it took all it could, `batch` messages
    /// being a full batch.
    ///
    /// The messages of a pull that followed a partial or full one arrived after that one
    /// ended, so their count over the time since says the rate, and from it how long a
    /// batch of `batch` takes to fill.
    pub fn after(
        before: Cadence,
        count: usize,
        filled: bool,
        batch: usize,
        now: Instant,
    ) -> Cadence {
        if count == 0 {
            return Cadence::Unknown;
        }
        if filled {
            return Cadence::Full { end: now };
        }
        let since = match before {
            Cadence::Partial { end, .. } | Cadence::Full { end } => Some(end),
            Cadence::Unknown => None,
        };
        let fills_in = since.filter(|_| count >= RATE_SAMPLE).map(|since| {
            let window = now.saturating_duration_since(since).as_nanos();
            let nanos = window * batch.max(count) as u128 / count as u128;
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        });
        Cadence::Partial { end: now, fills_in }
    }

    /// How the next pull lingers at `now`.
    ///
    /// After a partial pull it waits until that pull's end plus the linger — or less, when
    /// at the rate that pull saw a full batch arrives sooner — and then asks once:
    /// everything it will take arrived after that pull, so no message waits longer than
    /// the linger, and a steady rate costs one pull per batch instead of a no-wait pull that
    /// finds little, a long poll and a second no-wait pull. After a full pull it takes what
    /// is ready at once: a backlog drains without waiting, and messages left over from a
    /// full pull have waited already (lingering from here could hold them for nearly twice
    /// the linger). With nothing known, a partial batch waits out the linger from its first
    /// pull ([`wait_more`]).
    pub fn plan(self, linger: Duration, now: Instant) -> Plan {
        match self {
            Cadence::Unknown => Plan {
                wait_first: None,
                fill: !linger.is_zero(),
            },
            Cadence::Partial { end, fills_in } => Plan {
                wait_first: wait_more(fills_in.map_or(linger, |f| f.min(linger)), end, now, false),
                fill: false,
            },
            Cadence::Full { .. } => Plan {
                wait_first: None,
                fill: false,
            },
        }
    }
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

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_pull_after_a_partial_one_waits_out_the_linger_from_that_pulls_end_and_asks_once() {
        let t0 = Instant::now();
        let linger = 20 * MS;
        let steady = Cadence::after(Cadence::Unknown, 40, false, 500, t0);
        assert_eq!(
            steady,
            Cadence::Partial {
                end: t0,
                fills_in: None
            }
        );
        assert_eq!(
            steady.plan(linger, t0),
            Plan {
                wait_first: Some(linger),
                fill: false
            }
        );
        assert_eq!(steady.plan(linger, t0 + 12 * MS).wait_first, Some(8 * MS));
        assert_eq!(
            steady.plan(linger, t0 + 30 * MS).wait_first,
            None,
            "the batch in hand took longer than the linger to write"
        );
        assert_eq!(steady.plan(Duration::ZERO, t0).wait_first, None);
    }

    #[test]
    fn at_a_rate_that_fills_a_batch_before_the_linger_ends_the_wait_is_the_fill_time() {
        let t0 = Instant::now();
        let linger = 30 * MS;
        // 400 messages in the 20 ms since the pull before: 20,000 msg/s, a batch of 500
        // in 25 ms.
        let before = Cadence::Partial {
            end: t0,
            fills_in: None,
        };
        let fast = Cadence::after(before, 400, false, 500, t0 + 20 * MS);
        assert_eq!(
            fast,
            Cadence::Partial {
                end: t0 + 20 * MS,
                fills_in: Some(25 * MS)
            }
        );
        assert_eq!(fast.plan(linger, t0 + 20 * MS).wait_first, Some(25 * MS));
        // 50 in 20 ms: a batch would take 200 ms, so the linger decides.
        let slow = Cadence::after(before, 50, false, 500, t0 + 20 * MS);
        assert_eq!(slow.plan(linger, t0 + 20 * MS).wait_first, Some(linger));
        // Too few messages to tell a rate: the linger.
        let few = Cadence::after(before, RATE_SAMPLE - 1, false, 500, t0 + MS);
        assert_eq!(
            few,
            Cadence::Partial {
                end: t0 + MS,
                fills_in: None
            }
        );
        // The leftovers of a full pull, taken at once, tell the rate too.
        let after_full = Cadence::after(Cadence::Full { end: t0 }, 40, false, 500, t0 + 2 * MS);
        assert_eq!(
            after_full,
            Cadence::Partial {
                end: t0 + 2 * MS,
                fills_in: Some(25 * MS)
            }
        );
    }

    #[test]
    fn after_a_full_pull_what_is_ready_is_taken_at_once() {
        let t0 = Instant::now();
        let full = Cadence::after(Cadence::Unknown, 500, true, 500, t0);
        assert_eq!(full, Cadence::Full { end: t0 });
        assert_eq!(
            full.plan(20 * MS, t0),
            Plan {
                wait_first: None,
                fill: false
            }
        );
    }

    #[test]
    fn with_nothing_known_a_partial_batch_fills_and_without_a_linger_it_never_does() {
        let t0 = Instant::now();
        let steady = Cadence::Partial {
            end: t0,
            fills_in: None,
        };
        assert_eq!(Cadence::after(steady, 0, false, 500, t0), Cadence::Unknown);
        assert_eq!(
            Cadence::after(steady, 0, true, 500, t0),
            Cadence::Unknown,
            "an empty pull"
        );
        assert_eq!(
            Cadence::Unknown.plan(20 * MS, t0),
            Plan {
                wait_first: None,
                fill: true
            }
        );
        assert!(!Cadence::Unknown.plan(Duration::ZERO, t0).fill);
    }

    proptest! {
        #[test]
        fn no_plan_holds_a_message_past_the_linger_or_waits_twice(
            linger_us in 0u64..200_000,
            before_us in 0u64..200_000,
            at_us in 0u64..400_000,
            count in 0usize..1_000,
            batch in 1usize..1_000,
            filled: bool,
            before_full: bool,
        ) {
            let t0 = Instant::now();
            let linger = Duration::from_micros(linger_us);
            let end = t0 + Duration::from_micros(before_us);
            let now = end + Duration::from_micros(at_us);
            let before = match before_full {
                true => Cadence::Full { end: t0 },
                false => Cadence::Partial { end: t0, fills_in: None },
            };
            let cadence = Cadence::after(before, count, filled, batch, end);
            let plan = cadence.plan(linger, now);
            if let Some(w) = plan.wait_first {
                let waited_after_partial = matches!(cadence, Cadence::Partial { end: e, .. } if e == end);
                prop_assert!(waited_after_partial, "only a partial pull makes the next wait first");
                prop_assert!(w >= MIN_WAIT);
                prop_assert!(now + w <= end + linger, "waits past the deadline");
                prop_assert!(!plan.fill, "a pull that waited first waits no more");
            }
            if let Cadence::Partial { fills_in: Some(f), .. } = cadence {
                prop_assert!(count >= RATE_SAMPLE);
                prop_assert!(f >= end - t0, "a batch fills no sooner than these messages came");
            }
            prop_assert!(!plan.fill || !linger.is_zero());
            if matches!(cadence, Cadence::Full { .. }) {
                prop_assert_eq!(plan, Plan { wait_first: None, fill: false }, "a backlog never waits");
            }
        }

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

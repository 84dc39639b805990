//! An endpoint's answer → what it means for the messages sent: committed, held (transient),
//! refused (permanent), or a setup mistake. Pure: the status code and header text in, a
//! decision out; the clock for an HTTP-date `Retry-After` is passed in.
//!
//! The rule of every destination applies: only an answer about a message's content is
//! permanent. So besides 408/425/429/5xx, the 4xx answers that say the endpoint or the
//! credentials are wrong — 401, 403, 404, 405, 407 — hold the batch as `misconfigured`
//! instead of dead-lettering every message while a token is expired or a route is missing.
//! A 3xx is not followed (a POST redirected to GET would lose the body) and is a setup
//! mistake too.

use std::time::{Duration, SystemTime};

/// What an HTTP status means for the messages of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: the endpoint accepted them.
    Committed,
    /// Busy or down (408, 425, 429, 5xx): hold and retry.
    Transient,
    /// The endpoint refused this content (any other 4xx).
    Permanent,
    /// The URL, method or credentials are wrong (3xx, 401, 403, 404, 405, 407): hold, counted
    /// as misconfigured, until someone fixes the setup.
    Misconfigured,
    /// Not a status HTTP defines (below 200 or from 600): held, bounded by
    /// `delivery.retry.max_held_ms`.
    Unclassified,
}

/// The verdict of `status`.
pub fn classify(status: u16) -> Verdict {
    match status {
        200..=299 => Verdict::Committed,
        408 | 425 | 429 | 500..=599 => Verdict::Transient,
        401 | 403 | 404 | 405 | 407 => Verdict::Misconfigured,
        300..=399 => Verdict::Misconfigured,
        400..=499 => Verdict::Permanent,
        _ => Verdict::Unclassified,
    }
}

/// How long a `Retry-After` value asks to wait: delay-seconds, or an HTTP date (a past
/// date is no wait). `None` for anything else, which is then ignored. Capped at `max`.
pub fn retry_after(value: &str, now: SystemTime, max: Duration) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_statuses() {
        for (status, verdict) in [
            (200, Verdict::Committed),
            (201, Verdict::Committed),
            (204, Verdict::Committed),
            (400, Verdict::Permanent),
            (409, Verdict::Permanent),
            (413, Verdict::Permanent),
            (422, Verdict::Permanent),
            (408, Verdict::Transient),
            (425, Verdict::Transient),
            (429, Verdict::Transient),
            (500, Verdict::Transient),
            (503, Verdict::Transient),
            (401, Verdict::Misconfigured),
            (404, Verdict::Misconfigured),
            (301, Verdict::Misconfigured),
            (101, Verdict::Unclassified),
            (600, Verdict::Unclassified),
        ] {
            assert_eq!(classify(status), verdict, "status {status}");
        }
    }

    proptest! {
        #[test]
        fn every_status_has_the_class_its_range_gives(status in 0u16..=1000) {
            let v = classify(status);
            match status {
                200..=299 => prop_assert_eq!(v, Verdict::Committed),
                408 | 425 | 429 | 500..=599 => prop_assert_eq!(v, Verdict::Transient),
                401 | 403 | 404 | 405 | 407 | 300..=399 => prop_assert_eq!(v, Verdict::Misconfigured),
                400..=499 => prop_assert_eq!(v, Verdict::Permanent),
                _ => prop_assert_eq!(v, Verdict::Unclassified),
            }
            // Only a 2xx ever commits; only a content 4xx ever refuses.
            prop_assert_eq!(v == Verdict::Committed, (200..300).contains(&status));
            if v == Verdict::Permanent {
                prop_assert!((400..500).contains(&status));
            }
        }

        #[test]
        fn retry_after_never_panics_and_never_exceeds_the_cap(value in any::<String>(), max_s in 0u64..1000) {
            let max = Duration::from_secs(max_s);
            if let Some(d) = retry_after(&value, SystemTime::UNIX_EPOCH, max) {
                prop_assert!(d <= max);
            }
        }

        #[test]
        fn retry_after_seconds_are_read(secs in 0u64..100_000) {
            let got = retry_after(&secs.to_string(), SystemTime::UNIX_EPOCH, Duration::from_secs(50_000));
            prop_assert_eq!(got, Some(Duration::from_secs(secs.min(50_000))));
        }
    }

    #[test]
    fn retry_after_dates_count_from_now() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let cap = Duration::from_secs(600);
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now, cap),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now, cap),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after("Mon, 07 Nov 1994 08:49:37 GMT", now, cap),
            Some(cap)
        );
        assert_eq!(retry_after("soon", now, cap), None);
        assert_eq!(retry_after("", now, cap), None);
        assert_eq!(retry_after("-5", now, cap), None);
        assert_eq!(retry_after("99999999999999999999999", now, cap), Some(cap));
    }
}

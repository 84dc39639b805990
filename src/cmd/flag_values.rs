//! Values operators type into flags: an RFC 3339 time (`replay --since`, `pause --until`)
//! and a duration (`pause --for 10m`). One parser each, so two commands never read the
//! same kind of value differently; each command wraps the message into its own usage
//! error naming the flag. Pure, so every rule is unit- and property-tested.

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// An RFC 3339 time, such as `2026-03-01T12:00:00Z` or `2026-03-01T13:00:00+01:00`; the
/// message says what is wrong and shows the form.
pub fn rfc3339(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-03-01T12:00:00Z ({e})"))
}

/// A positive duration written as one or more `<number><unit>` parts, units `ms`, `s`,
/// `m`, `h` and `d`: `90s`, `10m`, `2h`, `1h30m`, `500ms`. No spaces inside, no fractions,
/// no part without a unit; the parts add up (`1h30m` is 90 minutes).
pub fn duration(text: &str) -> Result<Duration, String> {
    let wrong =
        |why: &str| format!("{text:?} is not a duration such as 90s, 10m, 2h or 1h30m ({why})");
    let t = text.trim();
    if t.is_empty() {
        return Err(wrong("it is empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || (letters == 0 && rest.len() > digits) {
            return Err(wrong(
                "each part is a whole number and a unit, without fractions, signs or spaces",
            ));
        }
        let (number, unit) = (&rest[..digits], &rest[digits..digits + letters]);
        let n: u64 = number.parse().map_err(|_| wrong("a number is too large"))?;
        let part = match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3_600).map(Duration::from_secs),
            "d" => n.checked_mul(86_400).map(Duration::from_secs),
            "" => return Err(wrong(&format!("{number} has no unit: ms, s, m, h or d"))),
            other => return Err(wrong(&format!("unknown unit {other:?}: ms, s, m, h or d"))),
        };
        total = part
            .and_then(|p| total.checked_add(p))
            .ok_or_else(|| wrong("it is too long"))?;
        rest = &rest[digits + letters..];
    }
    if total.is_zero() {
        return Err(wrong("it must be longer than zero"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_usual_forms_read_as_they_say() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration(" 5m "), Ok(Duration::from_secs(300)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn wrong_durations_say_why() {
        for (text, why) in [
            ("", "it is empty"),
            ("10", "10 has no unit"),
            ("10x", "unknown unit \"x\""),
            ("m", "each part is a whole number"),
            ("1.5h", "each part is a whole number"),
            ("-5m", "each part is a whole number"),
            ("0s", "longer than zero"),
            ("1 h", "without fractions, signs or spaces"),
            ("99999999999999999999s", "too large"),
            ("999999999999999999d", "too long"),
        ] {
            let e = duration(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.contains("such as 90s"), "{e}");
        }
    }

    #[test]
    fn times_are_rfc_3339_with_an_offset() {
        let t = rfc3339("2026-03-01T12:00:00Z").unwrap();
        assert_eq!(t.unix_timestamp(), 1_772_366_400);
        let t = rfc3339("2026-03-01T13:00:00+01:00").unwrap();
        assert_eq!(t.unix_timestamp(), 1_772_366_400);
        let e = rfc3339("yesterday").unwrap_err();
        assert!(
            e.starts_with("\"yesterday\" is not an RFC 3339 time"),
            "{e}"
        );
        assert!(rfc3339("2026-03-01 12:00:00").is_err());
    }

    proptest! {
        /// Whatever is typed is read or refused with a reason, never a panic, and what
        /// is read is longer than zero.
        #[test]
        fn any_text_is_a_positive_duration_or_refused(text in ".{0,24}|[0-9]{1,22}(ms|s|m|h|d|x|)") {
            match duration(&text) {
                Ok(d) => prop_assert!(!d.is_zero()),
                Err(e) => prop_assert!(e.contains("is not a duration"), "{}", e),
            }
        }

        /// Parts written in any order and combination add up to their sum.
        #[test]
        fn written_parts_read_back_as_their_sum(
            d in 0u64..400, h in 0u64..1000, m in 0u64..10_000,
            s in 0u64..100_000, ms in 0u64..100_000, order in 0usize..5
        ) {
            let parts = [(d, "d"), (h, "h"), (m, "m"), (s, "s"), (ms, "ms")];
            let mut written: Vec<String> = parts
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, u)| format!("{n}{u}"))
                .collect();
            let turn = order % written.len().max(1);
            written.rotate_left(turn);
            let want = Duration::from_secs(d * 86_400 + h * 3_600 + m * 60 + s)
                + Duration::from_millis(ms);
            match duration(&written.concat()) {
                Ok(got) => prop_assert_eq!(got, want),
                Err(_) => prop_assert!(want.is_zero()),
            }
        }
    }
}

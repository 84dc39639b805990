//! The pure part of `jetsink pause`: the deadline its flags ask for. `--until TIME` (RFC
//! 3339, later than now), `--for DURATION` (from now), or neither: until resumed, which
//! the server knows only as a far deadline ([`until_resumed`]). The clock is passed in.

use time::OffsetDateTime;

use super::error::PauseError;
use crate::cmd::flag_values;
use crate::nats::pause::until_resumed;

/// The deadline of `--until` / `--for` (clap lets at most one through) at `now`. Pure.
pub fn deadline(
    until: Option<&str>,
    for_: Option<&str>,
    now: OffsetDateTime,
) -> Result<OffsetDateTime, PauseError> {
    let usage = |flag, message| PauseError::Usage { flag, message };
    let far = until_resumed();
    let at = match (until, for_) {
        (Some(t), _) => {
            let at = flag_values::rfc3339(t).map_err(|m| usage("--until", m))?;
            if at <= now {
                return Err(usage(
                    "--until",
                    format!("{t} is not in the future; to resume now, run `jetsink resume`"),
                ));
            }
            at
        }
        (None, Some(d)) => {
            let d = flag_values::duration(d).map_err(|m| usage("--for", m))?;
            time::Duration::try_from(d)
                .ok()
                .and_then(|d| now.checked_add(d))
                .filter(|at| *at < far)
                .ok_or_else(|| {
                    usage(
                        "--for",
                        "is too long; to pause until resumed, give neither --for nor --until"
                            .into(),
                    )
                })?
        }
        (None, None) => far,
    };
    Ok(at.min(far))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_772_366_400).unwrap()
    }

    #[test]
    fn each_flag_and_none_give_their_deadline() {
        let t = deadline(Some("2026-03-01T12:10:00Z"), None, now()).unwrap();
        assert_eq!(t - now(), time::Duration::minutes(10));
        let t = deadline(None, Some("90s"), now()).unwrap();
        assert_eq!(t - now(), time::Duration::seconds(90));
        assert_eq!(deadline(None, None, now()).unwrap(), until_resumed());
    }

    #[test]
    fn wrong_values_name_their_flag() {
        let e = deadline(Some("2026-03-01T12:00:00Z"), None, now()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--until: 2026-03-01T12:00:00Z is not in the future; to resume now, run `jetsink resume`"
        );
        assert_eq!(e.exit_code(), crate::exit::USAGE);
        let e = deadline(Some("soon"), None, now()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--until: \"soon\" is not an RFC 3339 time"),
            "{e}"
        );
        let e = deadline(None, Some("0s"), now()).unwrap_err();
        assert!(
            e.to_string().starts_with("--for: \"0s\" is not a duration"),
            "{e}"
        );
        let e = deadline(None, Some("4000000d"), now()).unwrap_err();
        assert!(e.to_string().starts_with("--for: is too long"), "{e}");
    }

    #[test]
    fn a_time_past_the_far_deadline_is_the_far_deadline() {
        let t = deadline(Some("9999-12-31T23:59:59.5Z"), None, now()).unwrap();
        assert_eq!(t, until_resumed());
    }

    proptest! {
        /// Whatever is typed gives a deadline after now and no later than the far one,
        /// or a usage error naming the flag; never a panic.
        #[test]
        fn any_flags_give_a_future_deadline_or_a_usage_error(
            until in proptest::option::of(".{0,24}|20[2-9][0-9]-0[1-9]-1[0-9]T0[0-9]:00:00Z"),
            for_ in proptest::option::of(".{0,12}|[0-9]{1,8}(ms|s|m|h|d)"),
            secs in 0i64..4_000_000_000,
        ) {
            let now = OffsetDateTime::from_unix_timestamp(secs).unwrap();
            match deadline(until.as_deref(), for_.as_deref(), now) {
                Ok(t) => prop_assert!(t > now && t <= until_resumed()),
                Err(PauseError::Usage { flag, .. }) => {
                    prop_assert!(flag == "--until" || flag == "--for");
                }
                Err(e) => prop_assert!(false, "not a usage error: {}", e),
            }
        }
    }
}

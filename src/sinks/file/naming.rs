//! File names that sort in creation order, and parsing them back. Pure: the time is an
//! argument.
//!
//! A name is `<prefix>-<yyyymmddTHHMMSS.nnnnnnnnnZ>-<counter>.jsonl`, the time in UTC and
//! the counter six digits. Every part has a fixed width, so sorting names as strings sorts
//! files by creation. The counter separates files created within one clock reading, and
//! [`FileStamp::next`] never goes below the newest existing name, even when the clock
//! steps back, so the newest file is always the last name.

use std::time::{SystemTime, UNIX_EPOCH};

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// The extension of every file, with its dot.
pub const EXTENSION: &str = ".jsonl";

/// The largest counter a name can carry (six digits).
pub const MAX_COUNTER: u32 = 999_999;

/// Length of `yyyymmddTHHMMSS.nnnnnnnnnZ`.
const STAMP_LEN: usize = 26;
/// Length of the counter.
const COUNTER_LEN: usize = 6;

/// What a file name says about its file: when it was created, and the tie-breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileStamp {
    /// Creation time in UTC, to the nanosecond.
    pub created: OffsetDateTime,
    /// Position among files named with the same time, `0..=MAX_COUNTER`.
    pub counter: u32,
}

impl FileStamp {
    /// The stamp of a new file created at `now`, after the newest existing file `newest`.
    ///
    /// Normally `now` with counter 0. If the clock has not moved past `newest` (same
    /// reading, or stepped back), it keeps `newest`'s time and counts up, so the new name
    /// still sorts last.
    pub fn next(now: OffsetDateTime, newest: Option<FileStamp>) -> FileStamp {
        match newest {
            Some(last) if now <= last.created => {
                if last.counter < MAX_COUNTER {
                    FileStamp {
                        created: last.created,
                        counter: last.counter + 1,
                    }
                } else {
                    match last.created.checked_add(time::Duration::nanoseconds(1)) {
                        Some(created) => FileStamp {
                            created,
                            counter: 0,
                        },
                        // Year 9999 with a million files in one nanosecond: the name is
                        // taken, and creating it fails cleanly instead of sorting wrong.
                        None => last,
                    }
                }
            }
            _ => FileStamp {
                created: now,
                counter: 0,
            },
        }
    }

    /// The file name for this stamp with `prefix`.
    pub fn file_name(&self, prefix: &str) -> String {
        let t = self.created.to_offset(UtcOffset::UTC);
        format!(
            "{prefix}-{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z-{:06}{EXTENSION}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.nanosecond(),
            self.counter.min(MAX_COUNTER),
        )
    }

    /// Reads the stamp back from a file name made with the same `prefix`. Any other name
    /// (another prefix, another extension, a malformed or impossible time) is `None`.
    pub fn parse(prefix: &str, name: &str) -> Option<FileStamp> {
        let rest = name
            .strip_prefix(prefix)?
            .strip_prefix('-')?
            .strip_suffix(EXTENSION)?;
        // ASCII first: the slicing below is by byte and must not split a character.
        if !rest.is_ascii() || rest.len() != STAMP_LEN + 1 + COUNTER_LEN {
            return None;
        }
        let (stamp, counter) = rest.split_at(STAMP_LEN);
        let counter = digits(counter.strip_prefix('-')?)?;
        let b = stamp.as_bytes();
        if b[8] != b'T' || b[15] != b'.' || b[25] != b'Z' {
            return None;
        }
        let year = i32::try_from(digits(&stamp[0..4])?).ok()?;
        let month = Month::try_from(u8::try_from(digits(&stamp[4..6])?).ok()?).ok()?;
        let day = u8::try_from(digits(&stamp[6..8])?).ok()?;
        let hour = u8::try_from(digits(&stamp[9..11])?).ok()?;
        let minute = u8::try_from(digits(&stamp[11..13])?).ok()?;
        let second = u8::try_from(digits(&stamp[13..15])?).ok()?;
        let nanos = digits(&stamp[16..25])?;
        let date = Date::from_calendar_date(year, month, day).ok()?;
        let time = Time::from_hms_nano(hour, minute, second, nanos).ok()?;
        Some(FileStamp {
            created: PrimitiveDateTime::new(date, time).assume_utc(),
            counter,
        })
    }
}

/// A clock reading as a UTC date-time, clamped to 1970..=9999 so names keep their width.
pub fn utc(t: SystemTime) -> OffsetDateTime {
    let nanos = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(_) => 0,
    };
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or_else(|_| PrimitiveDateTime::new(Date::MAX, Time::MIDNIGHT).assume_utc())
}

/// Parses a run of ASCII digits (no sign, no spaces).
fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

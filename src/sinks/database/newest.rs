//! Which message of a key is the newest, for an ordered upsert: the order value of one
//! message read as the databases will compare it, and the choice, within one batch, of
//! the row each key keeps.
//!
//! An ordered upsert replaces a stored row only with a message whose order is greater
//! (`WHERE stored.order < new.order` in PostgreSQL, every assignment guarded the same way
//! in MySQL), so replays, redeliveries and reordering cannot roll a row back. Within one
//! batch the same rule must choose among messages of one key: PostgreSQL cannot touch a
//! row twice in one statement, so the batch keeps one message per key, and it must be
//! the one the guard would have kept had the messages come one at a time. That is what
//! [`newest_of_each_key`] computes, and its property test checks it against exactly that
//! sequential replay of the guard. The order value is read here once, in one form both
//! databases compare the same way (a whole number, or a time to the microsecond), and is
//! written in that form, so the database's comparison and this one cannot disagree.

use std::collections::HashMap;
use std::hash::Hash;

use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::cells::Cell;
use super::columns::Family;

/// An order value as the databases compare it: all of one column's are of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OrderKey {
    /// A whole number from 0 to `i64::MAX` (a version, `$stream_sequence`, an epoch).
    Number(u64),
    /// A point in time, to the microsecond (what both databases store).
    Time(OffsetDateTime),
}

/// Why a message's order value cannot be read: what is wrong, never the value (the caller
/// names the column and the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OrderValueError {
    /// The source is absent or JSON `null`.
    #[error("the message has no order value (its source is absent or null)")]
    Missing,
    /// Not a whole number the column can hold.
    #[error("the order value is not a whole number from 0 to 9223372036854775807")]
    NotANumber,
    /// Not a time with its offset.
    #[error(
        "the order value is not an RFC 3339 time with an offset (such as 2024-05-01T12:00:00Z)"
    )]
    NotATime,
}

/// Reads `cell` as the order value of a column of `family` (an integer or a timestamp
/// column; the plan refuses others): the cell to write in its place, and the key to
/// compare. A number may come as a JSON number, a `$stream_sequence` or a string of
/// digits (a header); a time as `$published_at` or an RFC 3339 string with its offset.
pub fn order_value(
    cell: Cell<'_>,
    family: Family,
) -> Result<(Cell<'_>, OrderKey), OrderValueError> {
    if matches!(cell, Cell::Null) {
        return Err(OrderValueError::Missing);
    }
    match family {
        Family::Timestamp => {
            let t = match &cell {
                Cell::Timestamp(t) => Some(*t),
                Cell::Text(s) => parse_time(s),
                Cell::Value(Value::String(s)) => parse_time(s),
                _ => None,
            }
            .ok_or(OrderValueError::NotATime)?;
            let t = t
                .replace_nanosecond(t.nanosecond() / 1_000 * 1_000)
                .unwrap_or(t);
            Ok((Cell::Timestamp(t), OrderKey::Time(t)))
        }
        _ => {
            let n = match &cell {
                Cell::UInt(n) => Some(*n),
                Cell::Text(s) => parse_number(s),
                Cell::Value(Value::String(s)) => parse_number(s),
                Cell::Value(Value::Number(n)) => n.as_u64(),
                _ => None,
            }
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or(OrderValueError::NotANumber)?;
            Ok((Cell::UInt(n), OrderKey::Number(n)))
        }
    }
}

/// Digits only, in `u64`.
fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// The rows a batch writes, in batch order, when each key keeps one: for every key, the
/// row of greatest `rank`, and of several with the greatest, the first. This is the row
/// the stored one would be after writing the rows one at a time through the guard "replace
/// only by a greater rank". An unordered (arrival) upsert passes the position as the rank,
/// so the last row of a key wins.
pub fn newest_of_each_key<K: Hash + Eq, R: Ord>(rows: Vec<(K, R)>) -> Vec<usize> {
    let mut best: HashMap<K, (R, usize)> = HashMap::with_capacity(rows.len());
    for (i, (key, rank)) in rows.into_iter().enumerate() {
        match best.get_mut(&key) {
            Some(held) if held.0 >= rank => {}
            Some(held) => *held = (rank, i),
            None => {
                best.insert(key, (rank, i));
            }
        }
    }
    let mut keep: Vec<usize> = best.into_values().map(|(_, i)| i).collect();
    keep.sort_unstable();
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::borrow::Cow;

    fn at(s: &str) -> OffsetDateTime {
        OffsetDateTime::parse(s, &Rfc3339).unwrap()
    }

    #[test]
    fn numbers_are_read_from_every_source_and_written_as_integers() {
        let n = |c: Cell<'static>| order_value(c, Family::Integer).map(|(_, k)| k);
        let json = serde_json::json!([7, "8", -1, 1.5, true, "+9", " 9", ""]);
        let v = |i: usize| Cell::Value(&json[i]);
        assert_eq!(n(Cell::UInt(3)), Ok(OrderKey::Number(3)));
        assert_eq!(n(Cell::Text(Cow::Borrowed("42"))), Ok(OrderKey::Number(42)));
        assert_eq!(
            order_value(v(0), Family::Integer).unwrap().1,
            OrderKey::Number(7)
        );
        assert_eq!(
            order_value(v(1), Family::Integer).unwrap(),
            (Cell::UInt(8), OrderKey::Number(8))
        );
        for i in 2..8 {
            assert_eq!(
                order_value(v(i), Family::Integer),
                Err(OrderValueError::NotANumber),
                "{}",
                json[i]
            );
        }
        assert_eq!(n(Cell::UInt(u64::MAX)), Err(OrderValueError::NotANumber));
        assert_eq!(
            n(Cell::UInt(i64::MAX as u64)),
            Ok(OrderKey::Number(i64::MAX as u64))
        );
        assert_eq!(n(Cell::Null), Err(OrderValueError::Missing));
    }

    #[test]
    fn times_need_an_offset_and_compare_to_the_microsecond() {
        let t = |s: &'static str| order_value(Cell::Text(Cow::Borrowed(s)), Family::Timestamp);
        let (cell, key) = t("2024-05-01T12:00:00.123456789+02:00").unwrap();
        let want = at("2024-05-01T10:00:00.123456Z");
        assert_eq!((cell, key), (Cell::Timestamp(want), OrderKey::Time(want)));
        assert_eq!(t("2024-05-01 12:00:00"), Err(OrderValueError::NotATime));
        assert_eq!(t("2024-05-01T12:00:00"), Err(OrderValueError::NotATime));
        let json = serde_json::json!(1714557600);
        assert_eq!(
            order_value(Cell::Value(&json), Family::Timestamp),
            Err(OrderValueError::NotATime)
        );
        assert_eq!(
            order_value(Cell::Timestamp(want), Family::Timestamp)
                .unwrap()
                .1,
            OrderKey::Time(want)
        );
        assert!(at("2024-05-01T10:00:00Z") < at("2024-05-01T11:00:00+00:30"));
        assert_eq!(
            order_value(Cell::Null, Family::Timestamp),
            Err(OrderValueError::Missing)
        );
    }

    #[test]
    fn each_key_keeps_its_greatest_rank_and_the_first_of_equals() {
        let rows = vec![("a", 3), ("b", 1), ("a", 5), ("b", 1), ("a", 4), ("c", 0)];
        assert_eq!(newest_of_each_key(rows), [1, 2, 5]);
        // The position as rank: the last row of each key.
        let rows = vec![("a", 0), ("b", 1), ("a", 2)];
        assert_eq!(newest_of_each_key(rows), [1, 2]);
        assert!(newest_of_each_key(Vec::<(u8, u8)>::new()).is_empty());
    }

    /// Writing `rows` one at a time through the guard "replace only by a greater rank":
    /// the position each key's row ends with.
    fn one_at_a_time(rows: &[(u8, u8)]) -> Vec<usize> {
        let mut stored: HashMap<u8, (u8, usize)> = HashMap::new();
        for (i, (key, rank)) in rows.iter().enumerate() {
            let older = stored.get(key).is_none_or(|(held, _)| held < rank);
            if older {
                stored.insert(*key, (*rank, i));
            }
        }
        let mut out: Vec<usize> = stored.into_values().map(|(_, i)| i).collect();
        out.sort_unstable();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn the_choice_in_a_batch_is_what_the_guard_leaves_row_by_row(
            // Few keys and ranks, so keys repeat and ranks tie.
            rows in prop::collection::vec((0u8..6, 0u8..5), 0..60),
        ) {
            let got = newest_of_each_key(rows.clone());
            prop_assert_eq!(&got, &one_at_a_time(&rows));
            // One row per key, every key kept, each of the greatest rank.
            let keys: std::collections::HashSet<u8> = rows.iter().map(|r| r.0).collect();
            prop_assert_eq!(got.len(), keys.len());
            for &i in &got {
                let (k, r) = rows[i];
                prop_assert!(rows.iter().all(|(k2, r2)| *k2 != k || r2 <= &r));
                prop_assert!(rows[..i].iter().all(|(k2, r2)| *k2 != k || r2 < &r));
            }
        }

        #[test]
        fn any_json_value_is_an_order_value_or_refused_without_panic(
            n in any::<i64>(), s in ".{0,30}", f in any::<f64>()
        ) {
            for v in [serde_json::json!(n), serde_json::json!(s), serde_json::json!(f)] {
                for family in [Family::Integer, Family::Timestamp] {
                    if let Ok((cell, key)) = order_value(Cell::Value(&v), family) {
                        match (cell, key) {
                            (Cell::UInt(c), OrderKey::Number(k)) => prop_assert!(c == k && i64::try_from(k).is_ok()),
                            (Cell::Timestamp(c), OrderKey::Time(k)) => prop_assert!(c == k && k.nanosecond() % 1_000 == 0),
                            other => prop_assert!(false, "{:?}", other),
                        }
                    }
                }
            }
        }
    }
}

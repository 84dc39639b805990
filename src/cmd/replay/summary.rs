//! What a replay did and what a dry run would do, as printed (pure).
//!
//! "Already present" is only a number when it can be known: the destination counts its
//! stored keys before and after ([`crate::sinks::Sink::stored_keys`]), and nothing but the
//! replay wrote the sink meanwhile. Otherwise the summary says why it is not known rather
//! than guess.

use std::fmt;

/// How many of the written messages the destination already held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Present {
    /// This many: the destination kept its row (or record) and the write changed nothing.
    Known(u64),
    /// Not known, and why.
    NotKnown(&'static str),
}

impl fmt::Display for Present {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Present::Known(n) => write!(f, "{n}"),
            Present::NotKnown(why) => write!(f, "not known ({why})"),
        }
    }
}

/// Of `written` messages, how many the destination held already, from its distinct keys
/// of the stream `before` and `after` the replay; `quiet` says no other instance wrote
/// the sink meanwhile. Pure.
pub fn already_present(
    written: u64,
    before: Option<u64>,
    after: Option<u64>,
    quiet: bool,
) -> Present {
    let (Some(before), Some(after)) = (before, after) else {
        return Present::NotKnown("this destination cannot count its stored keys");
    };
    if !quiet {
        return Present::NotKnown("a running instance wrote this sink during the replay");
    }
    match after.checked_sub(before) {
        Some(added) if added <= written => Present::Known(written - added),
        _ => Present::NotKnown("the destination changed beside the replay"),
    }
}

/// The counts of a finished replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Sink name.
    pub sink: String,
    /// The range, as replayed: first and last stream sequence.
    pub first: u64,
    /// Last stream sequence of the range.
    pub last: u64,
    /// Deliveries of the range read from the stream (a redelivery counts again).
    pub read: u64,
    /// Messages the destination committed.
    pub written: u64,
    /// Of those, already in the destination before.
    pub present: Present,
    /// Messages dead-lettered (their copy stored, the original settled).
    pub dead_lettered: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first > self.last {
            return write!(
                f,
                "replayed sink {}: nothing to replay, the range starts at stream sequence {} past its end {}",
                self.sink, self.first, self.last
            );
        }
        write!(
            f,
            "replayed sink {} over stream sequences {}..={}: read {}, written {}, already present {}, dead-lettered {}",
            self.sink, self.first, self.last, self.read, self.written, self.present, self.dead_lettered
        )
    }
}

/// What a dry run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Sink name.
    pub sink: String,
    /// Its stream.
    pub stream: String,
    /// The destination, described.
    pub destination: String,
    /// First stream sequence of the range.
    pub first: u64,
    /// Last stream sequence of the range (the stop bound).
    pub last: u64,
    /// Messages of the sink's subjects in the range, when it could be counted exactly.
    pub messages: Option<u64>,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first > self.last {
            return write!(
                f,
                "dry run: nothing to replay for sink {}: stream {} holds no message in the range (first {}, last {})",
                self.sink, self.stream, self.first, self.last
            );
        }
        let count = match self.messages {
            Some(n) => n.to_string(),
            None => "an unknown number of (the stream grew while counting)".into(),
        };
        write!(
            f,
            "dry run: would replay {count} message(s) of sink {} from stream {} sequences {}..={} into {}; nothing written",
            self.sink, self.stream, self.first, self.last, self.destination
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn already_present_is_a_number_only_when_it_can_be_known() {
        assert_eq!(
            already_present(100, Some(0), Some(100), true),
            Present::Known(0)
        );
        assert_eq!(
            already_present(100, Some(100), Some(100), true),
            Present::Known(100)
        );
        assert_eq!(
            already_present(100, Some(60), Some(100), true),
            Present::Known(60)
        );
        assert!(
            matches!(already_present(100, None, None, true), Present::NotKnown(w) if w.contains("cannot count"))
        );
        assert!(
            matches!(already_present(100, Some(0), Some(100), false), Present::NotKnown(w) if w.contains("running instance"))
        );
        assert!(matches!(
            already_present(10, Some(0), Some(100), true),
            Present::NotKnown(_)
        ));
        assert!(matches!(
            already_present(10, Some(50), Some(40), true),
            Present::NotKnown(_)
        ));
    }

    #[test]
    fn the_summary_names_every_count() {
        let s = Summary {
            sink: "main".into(),
            first: 1,
            last: 10,
            read: 10,
            written: 10,
            present: Present::Known(10),
            dead_lettered: 0,
        };
        assert_eq!(
            s.to_string(),
            "replayed sink main over stream sequences 1..=10: read 10, written 10, already present 10, dead-lettered 0"
        );
        let none = Present::NotKnown("this destination cannot count its stored keys");
        assert_eq!(
            none.to_string(),
            "not known (this destination cannot count its stored keys)"
        );
    }

    #[test]
    fn a_plan_says_what_would_happen_or_that_nothing_would() {
        let mut p = Plan {
            sink: "main".into(),
            stream: "S".into(),
            destination: "sqlite x".into(),
            first: 3,
            last: 9,
            messages: Some(7),
        };
        assert!(p.to_string().contains("would replay 7 message(s)"), "{p}");
        p.first = 10;
        assert!(p.to_string().contains("nothing to replay"), "{p}");
    }
}

//! Pure: where a message stands for one consumer, from the consumer info's two marks.
//!
//! The server keeps, per consumer, the stream sequence of the last message it delivered
//! and the ack floor (every message of the consumer's subjects at or below it is ACKed);
//! what it does not keep in the info is the per-message state between the two, so a
//! message there is "delivered, not known ACKed": in flight, waiting for redelivery, or
//! ACKed out of order (after later messages were).

use serde::Serialize;

/// The marks of one consumer, as its info gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// Stream sequence of the last message delivered.
    pub delivered: u64,
    /// Stream sequence at and below which every message is ACKed.
    pub ack_floor: u64,
    /// The first sequence the consumer delivers from, when it was created at one.
    pub start: Option<u64>,
}

/// Where a message stands for one consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// The consumer's filter does not take the message's subject.
    NotThisConsumers,
    /// The consumer starts after it, so it never delivers it.
    BeforeStart,
    /// Not delivered yet.
    Pending,
    /// Delivered, and not known to be ACKed (in flight, waiting to be redelivered, or
    /// ACKed out of order).
    DeliveredNotKnownAcked,
    /// ACKed (or TERMed: the server counts both in the ack floor).
    Acked,
}

impl Position {
    /// The words for it.
    pub fn describe(self) -> &'static str {
        match self {
            Position::NotThisConsumers => "not this consumer's (its filter does not take the subject)",
            Position::BeforeStart => "before the consumer's start: never delivered by it",
            Position::Pending => "pending: not delivered yet",
            Position::DeliveredNotKnownAcked => "delivered, not known ACKed (in flight, waiting for redelivery, or ACKed out of order)",
            Position::Acked => "ACKed",
        }
    }
}

/// Whether a consumer filtering `filters` (none: every subject) takes `subject`.
pub fn takes(filters: &[String], subject: &str) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| crate::metadata::subject_matches(f, subject))
}

/// Where the message at `sequence` on `subject` stands for a consumer with `filters` and
/// `marks`.
pub fn position(sequence: u64, subject: &str, filters: &[String], marks: Marks) -> Position {
    if !takes(filters, subject) {
        Position::NotThisConsumers
    } else if marks.start.is_some_and(|s| sequence < s) {
        Position::BeforeStart
    } else if sequence <= marks.ack_floor {
        Position::Acked
    } else if sequence > marks.delivered {
        Position::Pending
    } else {
        Position::DeliveredNotKnownAcked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKS: Marks = Marks {
        delivered: 10,
        ack_floor: 6,
        start: None,
    };

    #[test]
    fn the_ack_floor_and_the_delivered_mark_split_the_stream_in_three() {
        let at = |seq| position(seq, "orders.new", &[], MARKS);
        assert_eq!(at(1), Position::Acked);
        assert_eq!(at(6), Position::Acked);
        assert_eq!(at(7), Position::DeliveredNotKnownAcked);
        assert_eq!(at(10), Position::DeliveredNotKnownAcked);
        assert_eq!(at(11), Position::Pending);
    }

    #[test]
    fn a_subject_outside_the_filter_is_not_the_consumers_whatever_the_marks() {
        let filters = vec!["orders.*".to_string(), "audit.>".to_string()];
        assert_eq!(position(1, "orders.new", &filters, MARKS), Position::Acked);
        assert_eq!(position(1, "audit.a.b", &filters, MARKS), Position::Acked);
        assert_eq!(
            position(1, "orders.new.x", &filters, MARKS),
            Position::NotThisConsumers
        );
        assert_eq!(
            position(11, "other", &filters, MARKS),
            Position::NotThisConsumers
        );
    }

    #[test]
    fn a_message_before_the_consumers_start_sequence_is_never_delivered_by_it() {
        let marks = Marks {
            delivered: 0,
            ack_floor: 4,
            start: Some(5),
        };
        assert_eq!(position(3, "a", &[], marks), Position::BeforeStart);
        assert_eq!(position(5, "a", &[], marks), Position::Pending);
    }
}

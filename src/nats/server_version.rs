//! The server version a connection reports in its INFO, and what it allows.
//!
//! nats-server 2.9 accepts a consumer config with `filter_subjects` or `metadata` and
//! silently drops what it does not know: a consumer meant to read two subjects would read
//! every subject of the stream. So features that need 2.10 are decided from the version the
//! server states, never by trying them; so are priority groups with a pinned client
//! (2.11), which 2.9 and 2.10 ignore the same way; and consumer pause (2.11), an API
//! older servers do not have. Pure.

use std::fmt;

/// `major.minor.patch` of a nats-server; pre-release and build suffixes are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion(pub u32, pub u32, pub u32);

impl ServerVersion {
    /// Reads `2.10.4`, `v2.14.0`, `2.11.0-RC.1`; `None` for anything else.
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let core = t.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let mut next = || -> Option<u32> {
            let p = parts.next()?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let v = ServerVersion(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }

    /// Whether a consumer may filter several subjects (`filter_subjects`) and carry
    /// `metadata`: nats-server 2.10 and later.
    pub fn has_consumer_filters_and_metadata(self) -> bool {
        self >= ServerVersion(2, 10, 0)
    }

    /// Whether a stream may accept atomic batch publishes whose messages carry
    /// `Nats-Msg-Id`: nats-server 2.12.1 and later (2.12.0 refuses that header in a
    /// batch, error 10177; earlier versions have no atomic publish).
    pub fn has_atomic_batches_with_message_ids(self) -> bool {
        self >= ServerVersion(2, 12, 1)
    }

    /// Whether a consumer may have priority groups with a pinned client
    /// (`priority_policy: pinned_client`): nats-server 2.11 and later. Older servers
    /// ignore the fields and would deliver to every instance.
    pub fn has_priority_groups(self) -> bool {
        self >= ServerVersion(2, 11, 0)
    }

    /// Whether a consumer can be paused until a deadline (`$JS.API.CONSUMER.PAUSE`,
    /// `pause_until`): nats-server 2.11 and later. Older servers have no such API, so
    /// `jetsink pause` refuses instead of sending a request nothing would answer.
    pub fn has_consumer_pause(self) -> bool {
        self >= ServerVersion(2, 11, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn released_and_pre_release_versions_are_read() {
        assert_eq!(
            ServerVersion::parse("2.9.10"),
            Some(ServerVersion(2, 9, 10))
        );
        assert_eq!(
            ServerVersion::parse("v2.14.0"),
            Some(ServerVersion(2, 14, 0))
        );
        assert_eq!(
            ServerVersion::parse("2.11.0-RC.1"),
            Some(ServerVersion(2, 11, 0))
        );
        assert_eq!(ServerVersion::parse("2.10"), None);
        assert_eq!(ServerVersion::parse("2.10.1.5"), None);
        assert_eq!(ServerVersion::parse("two.ten.one"), None);
        assert_eq!(ServerVersion::parse(""), None);
    }

    #[test]
    fn several_filters_and_metadata_start_at_2_10() {
        assert!(!ServerVersion(2, 9, 25).has_consumer_filters_and_metadata());
        assert!(ServerVersion(2, 10, 0).has_consumer_filters_and_metadata());
        assert!(ServerVersion(2, 14, 0).has_consumer_filters_and_metadata());
        assert!(ServerVersion(3, 0, 0).has_consumer_filters_and_metadata());
    }

    #[test]
    fn atomic_batches_with_message_ids_start_at_2_12_1() {
        assert!(!ServerVersion(2, 9, 10).has_atomic_batches_with_message_ids());
        assert!(!ServerVersion(2, 11, 9).has_atomic_batches_with_message_ids());
        assert!(!ServerVersion(2, 12, 0).has_atomic_batches_with_message_ids());
        assert!(ServerVersion(2, 12, 1).has_atomic_batches_with_message_ids());
        assert!(ServerVersion(2, 14, 0).has_atomic_batches_with_message_ids());
    }

    #[test]
    fn pinned_priority_groups_start_at_2_11() {
        assert!(!ServerVersion(2, 9, 10).has_priority_groups());
        assert!(!ServerVersion(2, 10, 29).has_priority_groups());
        assert!(ServerVersion(2, 11, 0).has_priority_groups());
        assert!(ServerVersion(2, 14, 0).has_priority_groups());
    }

    #[test]
    fn consumer_pause_starts_at_2_11() {
        assert!(!ServerVersion(2, 9, 10).has_consumer_pause());
        assert!(!ServerVersion(2, 10, 29).has_consumer_pause());
        assert!(ServerVersion(2, 11, 0).has_consumer_pause());
        assert!(ServerVersion(2, 14, 0).has_consumer_pause());
    }

    proptest! {
        #[test]
        fn a_printed_version_reads_back(a in 0u32..100, b in 0u32..100, c in 0u32..1000, pre in prop::option::of("-[A-Za-z0-9.]{1,8}")) {
            let text = format!("{a}.{b}.{c}{}", pre.unwrap_or_default());
            prop_assert_eq!(ServerVersion::parse(&text), Some(ServerVersion(a, b, c)));
        }

        #[test]
        fn any_text_is_answered_without_panicking(s in ".{0,30}") {
            let _ = ServerVersion::parse(&s);
        }
    }
}

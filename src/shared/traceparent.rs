//! The W3C Trace Context `traceparent` header, read from a message (pure).
//!
//! Producers that trace their work put `traceparent: 00-<trace-id>-<parent-id>-<flags>` on
//! what they publish. jetsink reads it for two things: the span of a message's write gets
//! the producer's span as its parent (`telemetry.otlp`), and destinations that keep a
//! message's metadata store its trace id, so a row leads back to the trace that made it.
//!
//! The rules are the recommendation's (<https://www.w3.org/TR/trace-context/#traceparent-header>):
//! lowercase hex only, an all-zero trace id or parent id is invalid, version `ff` is
//! invalid, and a version above `00` may carry more fields after a `-`, which are ignored.
//! An invalid header is treated as absent: the message is written as always and simply
//! has no parent (a malformed header is a producer's bug, never a reason to refuse data).

/// The header's name; NATS header names are matched without regard to case.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The vendor-specific companion header, passed on to the span as it came.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// A valid `traceparent`, borrowed from the header value it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent<'a> {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: &'a str,
    /// 16 lowercase hex digits, not all zero: the producer's span.
    pub parent_id: &'a str,
    /// The trace flags byte; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent<'_> {
    /// Whether the producer recorded its span (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as the 16 bytes OTLP carries.
    pub fn trace_id_bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        hex_into(self.trace_id, &mut out);
        out
    }

    /// The parent span id as the 8 bytes OTLP carries.
    pub fn parent_id_bytes(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        hex_into(self.parent_id, &mut out);
        out
    }
}

/// Reads a `traceparent` value; `None` for anything the recommendation calls invalid.
pub fn parse(value: &str) -> Option<TraceParent<'_>> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    let b = value.as_bytes();
    // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55.
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    // Every field is checked as bytes before any is sliced as text: a multi-byte
    // character must not land on a slice boundary.
    let hex_at = |r: std::ops::Range<usize>| b[r].iter().all(|&c| is_hex_digit(c));
    if !(hex_at(0..2) && hex_at(3..35) && hex_at(36..52) && hex_at(53..55)) {
        return None;
    }
    let (version, trace_id, parent_id, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    if version == "ff" {
        return None;
    }
    // Version 00 is exactly 55 characters; a later version may append "-<more>".
    match (version, b.get(55)) {
        ("00", Some(_)) => return None,
        (_, Some(&c)) if c != b'-' => return None,
        _ => {}
    }
    if all_zero(trace_id) || all_zero(parent_id) {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        flags: u8::from_str_radix(flags, 16).ok()?,
    })
}

/// The `traceparent` among a message's headers (the first value of the first name that
/// matches without regard to case), if it is valid.
pub fn find<'h>(headers: &'h [(String, Vec<String>)]) -> Option<TraceParent<'h>> {
    header(headers, TRACEPARENT_HEADER).and_then(parse)
}

/// The first value of the header `name` (matched without regard to case).
pub fn header<'h>(headers: &'h [(String, Vec<String>)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.first())
        .map(String::as_str)
}

fn is_hex_digit(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'a'..=b'f')
}

fn all_zero(s: &str) -> bool {
    s.bytes().all(|c| c == b'0')
}

/// Decodes lowercase hex already checked by [`is_hex_digit`] into `out`.
fn hex_into(hex: &str, out: &mut [u8]) {
    let digit = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'a' + 10,
    };
    for (slot, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        *slot = digit(pair[0]) << 4 | digit(pair[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_is_read_field_by_field() {
        let tp = parse(EXAMPLE).unwrap();
        assert_eq!(tp.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id, "00f067aa0ba902b7");
        assert!(tp.sampled());
        assert_eq!(tp.trace_id_bytes()[..2], [0x4b, 0xf9]);
        assert_eq!(
            tp.parent_id_bytes(),
            [0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
    }

    #[test]
    fn invalid_values_are_treated_as_absent() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-next";
        let tp = parse(later).unwrap();
        assert!(!tp.sampled());
    }

    #[test]
    fn the_header_is_found_without_regard_to_case() {
        let headers = vec![
            ("Nats-Msg-Id".to_string(), vec!["a".to_string()]),
            ("TraceParent".to_string(), vec![EXAMPLE.to_string()]),
        ];
        assert_eq!(
            find(&headers).map(|t| t.parent_id),
            Some("00f067aa0ba902b7")
        );
        assert_eq!(find(&headers[..1]), None);
    }

    proptest! {
        /// Whatever a producer sends, reading it never panics, and what is accepted
        /// is exactly the fields written back in the header's form.
        #[test]
        fn any_value_is_read_without_panicking_and_accepted_only_when_well_formed(
            s in "\\PC{0,80}|[0-9a-f-]{50,60}"
        ) {
            if let Some(tp) = parse(&s) {
                let canonical = format!("-{}-{}-{:02x}", tp.trace_id, tp.parent_id, tp.flags);
                prop_assert!(s.trim_matches(|c| c == ' ' || c == '\t')[2..].starts_with(&canonical));
            }
        }

        #[test]
        fn every_well_formed_value_round_trips(
            trace in "[0-9a-f]{32}", parent in "[0-9a-f]{16}", flags in any::<u8>()
        ) {
            prop_assume!(!all_zero(&trace) && !all_zero(&parent));
            let value = format!("00-{trace}-{parent}-{flags:02x}");
            let tp = parse(&value).unwrap();
            prop_assert_eq!((tp.trace_id, tp.parent_id, tp.flags), (&trace[..], &parent[..], flags));
            let bytes = tp.trace_id_bytes();
            let back: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(back, trace);
        }
    }
}

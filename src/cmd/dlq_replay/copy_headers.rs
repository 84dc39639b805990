//! What a dead-letter copy's headers decide about its replay: the stable `Nats-Msg-Id`
//! every replay of it carries, the headers it is republished with, whether it is refused as
//! stored, and what the original stream's answer to a republish means for it.

use async_nats::HeaderMap;

use crate::dlq::copy;
use crate::dlq::copy::PAYLOAD_OMITTED;

/// The first non-empty value of header `name`, its name matched case-insensitively.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| AsRef::<str>::as_ref(*n).eq_ignore_ascii_case(name))
        .flat_map(|(_, values)| values.iter())
        .map(|v| v.as_str())
        .find(|v| !v.is_empty())
}

/// The `Nats-Msg-Id` every replay of this copy carries, the same on each replay so the
/// original stream's duplicate window absorbs a second one: the original's own id when
/// it had one (so `message_id` idempotency keeps its key), else `<stream>:<sequence>` of
/// the original, which is the key the original would have had under either idempotency
/// mode. `None` for a copy without the headers to derive it from (not made by jetsink).
pub fn replay_msg_id(copy_headers: &HeaderMap) -> Option<String> {
    if let Some(id) = header(copy_headers, copy::ORIGINAL_MSG_ID) {
        return Some(id.to_string());
    }
    let stream = header(copy_headers, copy::ORIGINAL_STREAM)?;
    let sequence: u64 = header(copy_headers, copy::ORIGINAL_SEQUENCE)?
        .parse()
        .ok()?;
    Some(format!("{stream}:{sequence}"))
}

/// Why a copy is not replayed as it is — stored without its payload, or a message whose
/// header block the client could not read — or `None` when it can be, or the operator
/// forced the replay.
pub fn refusal(copy_headers: &HeaderMap, dlq_sequence: u64, force: bool) -> Option<String> {
    if force {
        return None;
    }
    if copy_headers.get(copy::ORIGINAL_HEADERS_BASE64).is_some() {
        return Some(format!(
            "refused (dlq seq {dlq_sequence} is a message the client could not read: its original header block, kept base64 in {}, cannot be republished; pass --force to replay its payload without those headers)",
            copy::ORIGINAL_HEADERS_BASE64
        ));
    }
    let why = copy_headers.get(PAYLOAD_OMITTED)?;
    Some(format!(
        "refused (dlq seq {dlq_sequence} was stored without its payload: {}; replaying it would write an empty message; pass --force to replay it anyway)",
        why.as_str()
    ))
}

/// The headers a replay republishes: the copy's, minus jetsink's context and server
/// directives, plus the [`replay_msg_id`] as `Nats-Msg-Id`. Metadata headers
/// (`Jetsink-Priority`, ...) are kept.
pub fn replay_headers(copy_headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, values) in copy_headers.iter() {
        let n: &str = name.as_ref();
        if copy::is_context(n)
            || copy::is_server_directive(n)
            || n.eq_ignore_ascii_case(PAYLOAD_OMITTED)
        {
            continue;
        }
        for v in values {
            out.append(n, v.as_str());
        }
    }
    if let Some(id) = replay_msg_id(copy_headers) {
        out.insert("Nats-Msg-Id", id.as_str());
    }
    out
}

/// What the original stream's answer to a republish means for the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// Stored as a new message: delete the copy.
    Stored,
    /// Dropped as a duplicate of a message other than the original itself: an earlier
    /// replay of this copy landed (and the run that made it stopped before deleting the
    /// copy). Delete the copy; the message is already back.
    AlreadyReplayed {
        /// The sequence the earlier replay got.
        sequence: u64,
    },
    /// Dropped because the original itself still holds its `Nats-Msg-Id` in the duplicate
    /// window: keep the copy and replay it later.
    OriginalInWindow,
}

/// Reads a PubAck (`stream`, `sequence`, `duplicate`) against the copy's headers. A
/// duplicate answer names the sequence that holds the id: the original's own sequence
/// means the original is still in the window, any other one an earlier replay.
pub fn landing(copy_headers: &HeaderMap, stream: &str, sequence: u64, duplicate: bool) -> Landing {
    if !duplicate {
        return Landing::Stored;
    }
    let original_stream = header(copy_headers, copy::ORIGINAL_STREAM);
    let original_sequence =
        header(copy_headers, copy::ORIGINAL_SEQUENCE).and_then(|s| s.parse::<u64>().ok());
    if original_stream == Some(stream) && original_sequence == Some(sequence) {
        Landing::OriginalInWindow
    } else if original_sequence.is_none() {
        // Without the original's sequence there is no telling; keep the copy.
        Landing::OriginalInWindow
    } else {
        Landing::AlreadyReplayed { sequence }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_drops_context_and_restores_the_original_id() {
        let mut h = HeaderMap::new();
        h.insert("X-Trace", "abc");
        h.insert("Jetsink-Priority", "urgent");
        h.insert(copy::ERROR, "boom");
        h.insert(copy::ORIGINAL_MSG_ID, "order-7");
        h.insert("Nats-Msg-Id", "ORDERS:42");
        let out = replay_headers(&h);
        assert_eq!(out.get("X-Trace").map(|v| v.as_str()), Some("abc"));
        assert!(out.get(copy::ERROR).is_none());
        assert_eq!(
            out.get("Jetsink-Priority").map(|v| v.as_str()),
            Some("urgent")
        );
        assert_eq!(out.get("Nats-Msg-Id").map(|v| v.as_str()), Some("order-7"));
        let mut plain = HeaderMap::new();
        plain.insert("Nats-Msg-Id", "ORDERS:1");
        assert!(replay_headers(&plain).get("Nats-Msg-Id").is_none());
    }

    fn copy_of(stream: &str, sequence: u64, msg_id: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(copy::SINK, "db");
        h.insert(copy::ORIGINAL_SUBJECT, "orders.eu");
        h.insert(copy::ORIGINAL_STREAM, stream);
        h.insert(copy::ORIGINAL_SEQUENCE, sequence.to_string().as_str());
        if let Some(id) = msg_id {
            h.insert(copy::ORIGINAL_MSG_ID, id);
        }
        h.insert("Nats-Msg-Id", format!("db:{stream}:{sequence}").as_str());
        h
    }

    #[test]
    fn a_copy_without_an_original_id_replays_with_the_originals_stream_and_sequence() {
        let h = copy_of("ORDERS", 42, None);
        assert_eq!(replay_msg_id(&h).as_deref(), Some("ORDERS:42"));
        let out = replay_headers(&h);
        assert_eq!(
            out.get("Nats-Msg-Id").map(|v| v.as_str()),
            Some("ORDERS:42"),
            "the copy's own dead-letter id is replaced by the stable replay id"
        );
        assert_eq!(replay_headers(&h), out, "the same id on every replay");
    }

    #[test]
    fn an_empty_original_id_counts_as_absent() {
        let h = copy_of("ORDERS", 42, Some(""));
        assert_eq!(replay_msg_id(&h).as_deref(), Some("ORDERS:42"));
    }

    #[test]
    fn a_copy_without_origin_headers_gets_no_replay_id() {
        let mut h = HeaderMap::new();
        h.insert(copy::ORIGINAL_STREAM, "ORDERS");
        h.insert(copy::ORIGINAL_SEQUENCE, "not a number");
        assert_eq!(replay_msg_id(&h), None);
        assert_eq!(replay_msg_id(&HeaderMap::new()), None);
    }

    #[test]
    fn a_copy_of_an_unreadable_message_is_refused_unless_forced_and_its_raw_headers_stay_behind() {
        let mut h = copy_of("ORDERS", 42, None);
        h.insert(
            copy::ORIGINAL_HEADERS_BASE64,
            "TkFUUy8xLjANCkJhZCBOYW1lOiB4DQoNCg==",
        );
        let why = refusal(&h, 9, false).expect("refused");
        assert!(
            why.contains("dlq seq 9") && why.contains("--force"),
            "{why}"
        );
        assert_eq!(refusal(&h, 9, true), None);
        assert!(replay_headers(&h)
            .get(copy::ORIGINAL_HEADERS_BASE64)
            .is_none());
    }

    #[test]
    fn a_copy_without_its_payload_is_refused_naming_its_sequence_and_the_flag() {
        let mut h = copy_of("ORDERS", 42, None);
        assert_eq!(
            refusal(&h, 7, false),
            None,
            "a copy with its payload replays"
        );
        h.insert(PAYLOAD_OMITTED, "include_payload is false");
        let why = refusal(&h, 7, false).expect("refused");
        assert!(why.starts_with("refused"), "{why}");
        assert!(why.contains("dlq seq 7"), "{why}");
        assert!(why.contains("--force"), "{why}");
        assert_eq!(refusal(&h, 7, true), None, "--force replays it");
        assert!(
            replay_headers(&h).get(PAYLOAD_OMITTED).is_none(),
            "the marker does not travel with a forced replay"
        );
    }

    #[test]
    fn a_duplicate_at_the_originals_own_sequence_keeps_the_copy() {
        let h = copy_of("ORDERS", 42, Some("order-7"));
        assert_eq!(landing(&h, "ORDERS", 42, true), Landing::OriginalInWindow);
    }

    #[test]
    fn a_duplicate_at_another_sequence_is_an_earlier_replay() {
        let h = copy_of("ORDERS", 42, None);
        assert_eq!(
            landing(&h, "ORDERS", 501, true),
            Landing::AlreadyReplayed { sequence: 501 }
        );
        let h = copy_of("ORDERS", 42, Some("order-7"));
        assert_eq!(
            landing(&h, "ORDERS", 501, true),
            Landing::AlreadyReplayed { sequence: 501 }
        );
        assert_eq!(landing(&h, "ORDERS", 501, false), Landing::Stored);
    }

    proptest::proptest! {
        #[test]
        fn the_replay_id_is_stable_and_never_the_dead_letter_copys_own(
            stream in "[A-Z_]{1,12}",
            sequence in 1u64..u64::MAX,
            id in proptest::option::of("[ -~]{0,40}"),
        ) {
            let h = copy_of(&stream, sequence, id.as_deref());
            let a = replay_msg_id(&h);
            proptest::prop_assert!(a.is_some());
            proptest::prop_assert_eq!(a.clone(), replay_msg_id(&h));
            let out = replay_headers(&h);
            proptest::prop_assert_eq!(out.get("Nats-Msg-Id").map(|v| v.as_str().to_string()), a);
        }
    }
}

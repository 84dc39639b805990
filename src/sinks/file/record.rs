//! One [`Envelope`] as one JSON Lines record. Pure: no I/O, no clock.
//!
//! The record is written field by field straight into the caller's reused buffer, so a
//! batch costs one growing `Vec<u8>` and no intermediate `serde_json::Value` per message.
//! Field names and order match the SQLite destination's columns ([`FIELDS`]).
//!
//! The payload is stored in the most readable form that loses nothing
//! ([`PayloadEncoding`]): valid JSON is embedded as a JSON value, other UTF-8 text as a
//! JSON string, anything else as standard padded base64; an encrypted payload as the
//! base64 of its sealed value, with `payload_encoding` `aes256gcm-v1`.

use std::io;

use base64::Engine as _;
use serde::de::IgnoredAny;

use crate::envelope::{rfc3339_bytes, Envelope};

/// The keys of every record, in the order they are written.
pub const FIELDS: [&str; 17] = [
    "idempotency_key",
    "stream",
    "stream_sequence",
    "consumer_sequence",
    "subject",
    "delivered",
    "published_at",
    "written_at",
    "message_id",
    "headers",
    "priority",
    "lane",
    "classification",
    "labels",
    "trace_id",
    "payload_encoding",
    "payload",
];

/// How a payload is stored in the `payload` field; its name is the `payload_encoding` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadEncoding {
    /// Valid UTF-8 JSON, embedded as a JSON value (line breaks between tokens become spaces).
    Json,
    /// UTF-8 text that is not JSON (or is empty), stored as a JSON string.
    Utf8,
    /// Anything else, stored as a standard, padded base64 string.
    Base64,
    /// A payload sealed by the encryption stage: the sealed value as standard, padded
    /// base64 (`aes256gcm-v1`).
    Encrypted,
}

impl PayloadEncoding {
    /// Chooses the encoding of `payload`.
    ///
    /// UTF-8 is checked before JSON: `serde_json` does not validate the bytes inside
    /// strings when it only checks syntax, and an embedded invalid sequence would make the
    /// whole line unreadable.
    pub fn of(payload: &[u8]) -> PayloadEncoding {
        if payload.is_empty() {
            return PayloadEncoding::Utf8;
        }
        if std::str::from_utf8(payload).is_err() {
            return PayloadEncoding::Base64;
        }
        if serde_json::from_slice::<IgnoredAny>(payload).is_ok() {
            PayloadEncoding::Json
        } else {
            PayloadEncoding::Utf8
        }
    }

    /// The value of the `payload_encoding` field.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadEncoding::Json => "json",
            PayloadEncoding::Utf8 => "utf8",
            PayloadEncoding::Base64 => "base64",
            PayloadEncoding::Encrypted => crate::envelope::ENCRYPTED_ENCODING,
        }
    }
}

/// Appends `envelope` to `out` as one JSON object followed by `\n`.
///
/// `written_at` is the batch's write time, already formatted with
/// [`crate::envelope::rfc3339`]. On error (which writing to memory does not produce in
/// practice) `out` is left as it was.
pub fn encode(envelope: &Envelope, written_at: &str, out: &mut Vec<u8>) -> io::Result<()> {
    let start = out.len();
    let result = encode_fields(envelope, written_at, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_fields(envelope: &Envelope, written_at: &str, out: &mut Vec<u8>) -> io::Result<()> {
    let encoding = match envelope.payload_encoding() {
        Some(_) => PayloadEncoding::Encrypted,
        None => PayloadEncoding::of(&envelope.payload),
    };

    out.extend_from_slice(b"{\"idempotency_key\":");
    string(out, &envelope.idempotency_key)?;
    out.extend_from_slice(b",\"stream\":");
    string(out, &envelope.stream)?;
    out.extend_from_slice(b",\"stream_sequence\":");
    integer(out, envelope.stream_sequence);
    out.extend_from_slice(b",\"consumer_sequence\":");
    integer(out, envelope.consumer_sequence);
    out.extend_from_slice(b",\"subject\":");
    string(out, &envelope.subject)?;
    out.extend_from_slice(b",\"delivered\":");
    integer(out, envelope.delivered);
    out.extend_from_slice(b",\"published_at\":\"");
    out.extend_from_slice(&rfc3339_bytes(envelope.published_at));
    out.push(b'"');
    out.extend_from_slice(b",\"written_at\":");
    string(out, written_at)?;
    out.extend_from_slice(b",\"message_id\":");
    match &envelope.message_id {
        Some(id) => string(out, id)?,
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"headers\":{");
    for (i, (name, values)) in envelope.headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, name)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, values)?;
    }
    out.extend_from_slice(b"},\"priority\":");
    optional(out, envelope.priority.as_deref())?;
    out.extend_from_slice(b",\"lane\":");
    optional(out, envelope.lane.as_deref())?;
    out.extend_from_slice(b",\"classification\":");
    optional(out, envelope.classification.as_deref())?;
    out.extend_from_slice(b",\"labels\":");
    serde_json::to_writer(&mut *out, &envelope.labels)?;
    // The producer's trace, so a record leads back to it; 32 hex digits, never escaped.
    out.extend_from_slice(b",\"trace_id\":");
    optional(out, envelope.trace_id())?;
    out.extend_from_slice(b",\"payload_encoding\":");
    string(out, encoding.as_str())?;
    out.extend_from_slice(b",\"payload\":");
    let payload = &envelope.payload[..];
    match encoding {
        PayloadEncoding::Json => raw_json_on_one_line(out, payload),
        PayloadEncoding::Utf8 => match std::str::from_utf8(payload) {
            Ok(text) => string(out, text)?,
            // `of` only chooses Utf8 for valid UTF-8: unreachable, refused rather than a panic.
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        },
        PayloadEncoding::Base64 | PayloadEncoding::Encrypted => {
            out.push(b'"');
            base64_into(out, payload)?;
            out.push(b'"');
        }
    }
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// Writes an integer without the formatting machinery (three per record).
fn integer(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Writes `s` as a JSON string, or `null`.
fn optional(out: &mut Vec<u8>, s: Option<&str>) -> io::Result<()> {
    match s {
        Some(s) => string(out, s),
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

/// Writes `s` as an escaped JSON string. Names, keys and subjects rarely need escaping:
/// those are copied after one scan, which costs a fraction of the general escaper's call.
fn string(out: &mut Vec<u8>, s: &str) -> io::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(&mut *out, s).map_err(io::Error::from)
}

/// Copies a valid JSON document verbatim, except that `\n` and `\r` become spaces. In valid
/// JSON those bytes can only be whitespace between tokens (strings carry them escaped), so
/// the value is unchanged and the record stays on one line.
fn raw_json_on_one_line(out: &mut Vec<u8>, json: &[u8]) {
    out.extend(json.iter().map(|&b| match b {
        b'\n' | b'\r' => b' ',
        other => other,
    }));
}

/// Appends standard padded base64 of `bytes` without an intermediate string.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true)
        .ok_or_else(|| io::Error::other("payload too large to encode as base64"))?;
    out.resize(start + len, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .map_err(io::Error::other)?;
    out.truncate(start + written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn strings_are_written_exactly_as_serde_json_writes_them(
            s in prop_oneof![any::<String>(), "[ -~]{0,40}", "[\"\\\\\\x00-\\x1f a-z]{0,20}"],
        ) {
            let mut ours = b"prefix".to_vec();
            string(&mut ours, &s).unwrap();
            let mut expected = b"prefix".to_vec();
            expected.extend(serde_json::to_vec(&s).unwrap());
            prop_assert_eq!(ours, expected);
        }
    }
}

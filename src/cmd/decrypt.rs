//! `jetsink decrypt`: turns stored records of an encrypted sink back into clear ones,
//! verifying that each sealed value belongs to the record it sits in.
//!
//! Input is a file or stdin holding one JSON record, a JSON array of records, or JSON
//! Lines — a file destination's records, or database rows exported as JSON with at least
//! `stream`, `stream_sequence`, `subject` and `payload` (base64, or PostgreSQL's `\x` hex
//! form of a bytea). Each record is printed as one JSON line with its payload in clear
//! (`payload_encoding` `json`, `utf8` or `base64`, as the file destination writes clear
//! payloads) and its sealed headers opened. A record that fails is reported on stderr with
//! its position, stream and sequence; the others are still printed. The input is read
//! with a bound ([`input`]): JSON Lines a line at a time, so a device, a FIFO, an endless
//! pipe or a huge file is refused, not read into memory.

use std::path::PathBuf;

use base64::Engine as _;
use serde_json::{Map, Value};

mod input;
mod parquet_input;

pub use input::records;

use super::emit;
use crate::config::Config;
use crate::crypto::sealed::{detect, Detected, MAGIC};
use crate::crypto::Encryption;
use crate::envelope::ENCRYPTED_ENCODING;
use crate::exit;
use crate::sinks::file::record::PayloadEncoding;

/// `jetsink decrypt`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The config file holding the sink's `encryption` section (its key ring).
    #[arg(long, short)]
    config: PathBuf,
    /// The sink whose records these are.
    #[arg(long)]
    sink: String,
    /// The records: a JSON or JSON Lines file; `-` or absent reads stdin.
    input: Option<PathBuf>,
}

/// Decrypts every record; exit 0, 1 when a record failed, 78 for a config without the
/// sink or its encryption.
pub fn execute(args: Args) -> u8 {
    let cfg = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::CONFIG;
        }
    };
    for w in &cfg.warnings {
        eprintln!("warning: {w}");
    }
    let Some(sink) = cfg.sinks.iter().find(|s| s.name == args.sink) else {
        eprintln!(
            "error: {} has no sink named {:?}",
            args.config.display(),
            args.sink
        );
        return exit::CONFIG;
    };
    let Some(enc) = &sink.encryption else {
        eprintln!(
            "error: sink {:?} in {} has no encryption section",
            args.sink,
            args.config.display()
        );
        return exit::CONFIG;
    };
    let mut failed = 0usize;
    let mut n = 0usize;
    let read = input::each_record(args.input.as_deref(), &mut |record| {
        n += 1;
        match record.and_then(|r| decrypt_record(enc, r)) {
            Ok(clear) => emit(&Value::Object(clear).to_string()),
            Err(e) => {
                failed += 1;
                eprintln!("error: record {n}: {e}");
            }
        }
    });
    if let Err(e) = read {
        eprintln!("error: {e}");
        return exit::FAILURE;
    }
    if failed > 0 {
        eprintln!("{failed} record(s) could not be decrypted");
        exit::FAILURE
    } else {
        exit::OK
    }
}

/// Opens one record's payload and sealed headers, checking the binding to its stream,
/// sequence and subject.
pub fn decrypt_record(
    enc: &Encryption,
    mut r: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let stream = text_field(&r, "stream")?;
    let subject = text_field(&r, "subject")?;
    let sequence = match r.get("stream_sequence") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .ok_or("field `stream_sequence` missing or not an unsigned integer")?;
    let at = format!("stream {stream} sequence {sequence} subject {subject}");
    let encoding = r.get("payload_encoding").and_then(Value::as_str);
    let stored = match r.get("payload") {
        Some(Value::String(s)) => stored_payload(s),
        _ => Stored::Other,
    };
    let binding = (stream.as_str(), sequence, subject.as_str());
    let clear = match (encoding, stored) {
        (Some(e), _) if e != ENCRYPTED_ENCODING => None,
        (Some(_), Stored::Bytes(bytes)) => Some(open(enc, &at, binding, &bytes)?),
        (Some(_), _) => {
            return Err(format!(
                "{at}: payload is not base64 or \\x hex text of a sealed value"
            ))
        }
        (None, Stored::Bytes(bytes)) => match detect(&bytes) {
            Detected::Clear => None,
            Detected::Sealed | Detected::Damaged(_) => Some(open(enc, &at, binding, &bytes)?),
        },
        (None, Stored::Damaged(why)) => return Err(format!("{at}: payload: {why}")),
        (None, Stored::Other) => None,
    };
    if let Some(clear) = clear {
        let (encoding, value) = clear_payload(&clear);
        r.insert("payload_encoding".into(), Value::from(encoding.as_str()));
        r.insert("payload".into(), value);
    }
    let headers = match r.get("headers") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
        Some(v) => Some(v.clone()),
        None => None,
    };
    if let Some(Value::Object(mut headers)) = headers {
        for (name, values) in headers.iter_mut() {
            let Value::Array(values) = values else {
                continue;
            };
            for (i, v) in values.iter_mut().enumerate() {
                let Some(stored) = v.as_str() else { continue };
                let opened = enc
                    .open_header((&stream, sequence, &subject), name, i, stored)
                    .map_err(|e| format!("{at}: header {name}: {e}"))?;
                if let Some(clear) = opened {
                    *v = Value::from(clear);
                }
            }
        }
        r.insert("headers".into(), Value::Object(headers));
    }
    Ok(r)
}

/// Opens a stored payload; the error names the record.
fn open(
    enc: &Encryption,
    at: &str,
    (stream, sequence, subject): (&str, u64, &str),
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    enc.open_payload(stream, sequence, subject, bytes)
        .map_err(|e| format!("{at}: payload: {e}"))
}

fn text_field(r: &Map<String, Value>, key: &str) -> Result<String, String> {
    r.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("field `{key}` missing or not a string"))
}

/// What a payload text holds.
#[derive(Debug, PartialEq, Eq)]
enum Stored {
    /// Bytes, from `\x` hex or base64 text.
    Bytes(Vec<u8>),
    /// Text that is neither whole, but whose readable start is a sealed value: one hex
    /// digit or base64 character cut, or altered. Never clear.
    Damaged(String),
    /// Neither, and nothing sealed in it: left as it is.
    Other,
}

/// Reads a payload text: its bytes, or whether what cannot be read was a sealed value.
/// Text that does not decode whole is a damaged sealed value when its longest start that
/// does decode begins with the magic: a clear payload's text always decodes, and a cut
/// or altered character shifts the bytes after it, so only the magic before it is sure.
fn stored_payload(s: &str) -> Stored {
    if let Some(b) = stored_bytes(s) {
        return Stored::Bytes(b);
    }
    let (start, form) = match s.strip_prefix("\\x") {
        Some(hex) => {
            let digits = hex.bytes().take_while(u8::is_ascii_hexdigit).count() & !1;
            (stored_bytes(&format!("\\x{}", &hex[..digits])), "\\x hex")
        }
        None => {
            let chars = s
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/'))
                .count()
                & !3;
            (stored_bytes(&s[..chars]), "base64")
        }
    };
    match start {
        Some(b) if b.starts_with(MAGIC) => Stored::Damaged(format!(
            "{form} text of an encrypted value that is cut or altered (a digit or character \
             missing or wrong), so it cannot be opened"
        )),
        _ => Stored::Other,
    }
}

/// The bytes of a stored payload text: PostgreSQL's `\x` hex form, else base64.
fn stored_bytes(s: &str) -> Option<Vec<u8>> {
    if let Some(hex) = s.strip_prefix("\\x") {
        if hex.len() % 2 != 0 {
            return None;
        }
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .ok()
}

/// The clear payload in the file destination's form.
fn clear_payload(bytes: &[u8]) -> (PayloadEncoding, Value) {
    let encoding = PayloadEncoding::of(bytes);
    let value = match encoding {
        PayloadEncoding::Json => serde_json::from_slice(bytes).unwrap_or(Value::Null),
        PayloadEncoding::Utf8 => Value::from(String::from_utf8_lossy(bytes).into_owned()),
        _ => Value::from(base64::engine::general_purpose::STANDARD.encode(bytes)),
    };
    (encoding, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stored_payload_text_is_base64_or_postgres_hex() {
        assert_eq!(stored_bytes("\\x4a5345"), Some(b"JSE".to_vec()));
        assert_eq!(stored_bytes("SlNF"), Some(b"JSE".to_vec()));
        assert_eq!(stored_bytes("\\x4"), None);
        assert_eq!(stored_bytes("\\xzz"), None);
    }

    fn stage() -> Encryption {
        let ring = crate::crypto::KeyRing::new([("k1".to_string(), [7u8; 32])], "k1").unwrap();
        Encryption::new(ring, Vec::new(), Vec::new())
    }

    /// The stored bytes of `clear` as the payload of ORDERS sequence 5, subject `o.x`.
    fn sealed(clear: &[u8]) -> Vec<u8> {
        let ring = crate::crypto::KeyRing::new([("k1".to_string(), [7u8; 32])], "k1").unwrap();
        let b = crate::crypto::binding::Binding {
            stream: "ORDERS",
            stream_sequence: 5,
            subject: "o.x",
            part: crate::crypto::binding::Part::Payload,
        };
        crate::crypto::cipher::seal(&ring, &crate::crypto::OsNonces::new(), &b, clear)
            .unwrap()
            .to_vec()
    }

    fn hex(bytes: &[u8]) -> String {
        let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("\\x{digits}")
    }

    fn record(payload: &str) -> Map<String, Value> {
        match serde_json::json!({"stream": "ORDERS", "stream_sequence": 5, "subject": "o.x", "payload": payload})
        {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_sealed_payload_opens_and_a_clear_one_passes_through() {
        let enc = stage();
        let opened = decrypt_record(&enc, record(&hex(&sealed(b"{\"a\":1}")))).unwrap();
        assert_eq!(opened["payload"], serde_json::json!({"a": 1}));
        let b64 = base64::engine::general_purpose::STANDARD.encode(sealed(b"hi"));
        assert_eq!(decrypt_record(&enc, record(&b64)).unwrap()["payload"], "hi");
        let clear = decrypt_record(&enc, record(&hex(b"JSE is clear text"))).unwrap();
        assert_eq!(
            clear["payload"],
            hex(b"JSE is clear text"),
            "left as stored"
        );
    }

    #[test]
    fn a_cut_digit_the_magic_alone_and_an_unknown_version_are_errors_not_clear_text() {
        let enc = stage();
        let h = hex(&sealed(b"{\"a\":1}"));
        let cut = format!("{}{}", &h[..20], &h[21..]);
        let e = decrypt_record(&enc, record(&cut)).unwrap_err();
        assert!(
            e.contains("\\x hex text of an encrypted value that is cut or altered"),
            "{e}"
        );
        for damaged in [&b"JSE"[..], b"JSE\x01", b"JSE\x02\x02k1rest-of-it"] {
            let e = decrypt_record(&enc, record(&hex(damaged))).unwrap_err();
            assert!(
                e.starts_with("stream ORDERS sequence 5 subject o.x: payload: "),
                "{e}"
            );
        }
        let e = decrypt_record(&enc, record(&hex(b"JSE\x02\x02k1rest"))).unwrap_err();
        assert!(e.contains("format version 2"), "{e}");
    }

    proptest! {
        /// Whatever damage a sealed payload takes after its magic — a hex digit or base64
        /// character cut, the value cut short, the version byte replaced, a bit flipped —
        /// the record fails: never printed as if the damaged value were clear text.
        #[test]
        fn a_damaged_sealed_payload_is_an_error_never_clear_text(
            clear in proptest::collection::vec(any::<u8>(), 0..64),
            how in 0u8..5,
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            as_hex in any::<bool>(),
        ) {
            let enc = stage();
            let mut bytes = sealed(&clear);
            let text = match how {
                // one character cut from the text, after the magic's
                0 => {
                    let t = if as_hex { hex(&bytes) } else {
                        base64::engine::general_purpose::STANDARD.encode(&bytes)
                    };
                    let skip = if as_hex { 2 + 6 } else { 4 };
                    let i = skip + at.index(t.len() - skip);
                    format!("{}{}", &t[..i], &t[i + 1..])
                }
                // the value cut short, the magic kept
                1 => {
                    bytes.truncate(3 + at.index(bytes.len() - 3));
                    hex(&bytes)
                }
                // another version byte
                2 => {
                    bytes[3] = if byte == 1 { 2 } else { byte };
                    hex(&bytes)
                }
                // a bit flipped after the magic
                3 => {
                    let i = 3 + at.index(bytes.len() - 3);
                    bytes[i] ^= 1 << (byte % 8);
                    hex(&bytes)
                }
                // a byte appended
                _ => {
                    bytes.push(byte);
                    base64::engine::general_purpose::STANDARD.encode(&bytes)
                }
            };
            // the version byte itself may have become a printable one
            let version_is_text = bytes.get(3).is_some_and(|b| (0x20..0x7f).contains(b));
            let out = decrypt_record(&enc, record(&text));
            if version_is_text {
                // `JSE` then a printable character is clear text by the format's own rule.
                prop_assert!(out.is_ok());
            } else {
                prop_assert!(out.is_err(), "{} decrypted: {:?}", text, out);
            }
        }

        #[test]
        fn odd_input_never_panics(text in any::<String>(), hex in "\\\\x[0-9a-fA-F]{0,9}") {
            let _ = records(&text);
            let _ = stored_bytes(&text);
            let _ = stored_bytes(&hex);
        }
    }
}

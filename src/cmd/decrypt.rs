//! `jetsink decrypt`: turns stored records of an encrypted sink back into clear ones,
//! verifying that each sealed value belongs to the record it sits in.
//!
//! Input is a file or stdin holding one JSON record, a JSON array of records, or JSON
//! Lines — a file destination's records, or database rows exported as JSON with at least
//! `stream`, `stream_sequence`, `subject` and `payload` (base64, or PostgreSQL's `\x` hex
//! form of a bytea). Each record is printed as one JSON line with its payload in clear
//! (`payload_encoding` `json`, `utf8` or `base64`, as the file destination writes clear
//! payloads) and its sealed headers opened. A record that fails is reported on stderr with
//! its position, stream and sequence; the others are still printed.

use std::io::Read as _;
use std::path::PathBuf;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::emit;
use crate::config::Config;
use crate::crypto::sealed::looks_sealed;
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
    let text = match read_input(args.input.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILURE;
        }
    };
    let mut failed = 0usize;
    for (n, record) in records(&text).into_iter().enumerate() {
        let result = record.and_then(|r| decrypt_record(enc, r));
        match result {
            Ok(clear) => emit(&Value::Object(clear).to_string()),
            Err(e) => {
                failed += 1;
                eprintln!("error: record {}: {e}", n + 1);
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} record(s) could not be decrypted");
        exit::FAILURE
    } else {
        exit::OK
    }
}

fn read_input(path: Option<&std::path::Path>) -> Result<String, String> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        }
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            Ok(s)
        }
    }
}

/// The records of the input: one JSON document (object or array of objects), else one
/// per non-empty line.
pub fn records(text: &str) -> Vec<Result<Map<String, Value>, String>> {
    let object = |v: Value| match v {
        Value::Object(m) => Ok(m),
        _ => Err("not a JSON object".to_string()),
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items.into_iter().map(object).collect(),
        Ok(v) => vec![object(v)],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<Value>(l)
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(object)
            })
            .collect(),
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
        Some(Value::String(s)) => stored_bytes(s),
        _ => None,
    };
    let clear = match (encoding, stored) {
        (Some(e), _) if e != ENCRYPTED_ENCODING => None,
        (_, Some(bytes)) if encoding.is_some() || looks_sealed(&bytes) => Some(
            enc.open_payload(&stream, sequence, &subject, &bytes)
                .map_err(|e| format!("{at}: payload: {e}"))?,
        ),
        (Some(_), None) => {
            return Err(format!(
                "{at}: payload is not base64 or \\x hex text of a sealed value"
            ))
        }
        _ => None,
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

fn text_field(r: &Map<String, Value>, key: &str) -> Result<String, String> {
    r.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("field `{key}` missing or not a string"))
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
    fn input_is_one_record_an_array_or_json_lines() {
        assert_eq!(records(r#"{"a":1}"#).len(), 1);
        assert_eq!(records(r#"[{"a":1},{"a":2}]"#).len(), 2);
        let lines = records("{\"a\":1}\n\n{\"a\":2}\nnot json\n");
        assert_eq!(lines.len(), 3);
        assert!(lines[2].is_err());
    }

    #[test]
    fn stored_payload_text_is_base64_or_postgres_hex() {
        assert_eq!(stored_bytes("\\x4a5345"), Some(b"JSE".to_vec()));
        assert_eq!(stored_bytes("SlNF"), Some(b"JSE".to_vec()));
        assert_eq!(stored_bytes("\\x4"), None);
        assert_eq!(stored_bytes("\\xzz"), None);
    }

    proptest! {
        #[test]
        fn odd_input_never_panics(text in any::<String>(), hex in "\\\\x[0-9a-fA-F]{0,9}") {
            let _ = records(&text);
            let _ = stored_bytes(&text);
            let _ = stored_bytes(&hex);
        }
    }
}

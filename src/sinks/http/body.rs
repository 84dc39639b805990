//! Request bodies and idempotency keys. Pure: envelopes and the write time in, bytes out.
//!
//! Each message is the same JSON record the file destination writes
//! ([`crate::sinks::file::record`]), so a receiver sees one shape whichever destination
//! delivered it: a batch body is those records one per line (`ndjson`) or as one JSON
//! array; a per-message body is one record.

use std::io;

use crate::envelope::Envelope;
use crate::sinks::file::record;

use super::config::BatchFormat;

/// The idempotency key of a batch request: `<stream>:<lowest>-<highest>:<count>` of its
/// stream sequences. The same messages sent again carry the same key, whatever order the
/// lanes gave them; a batch split after a refusal gets new keys for its parts, since they
/// hold other messages. Receivers that need exactly-once per message deduplicate on each
/// record's `idempotency_key` instead.
pub fn batch_key(batch: &[Envelope]) -> String {
    let stream = batch.first().map(|e| e.stream.as_str()).unwrap_or("");
    let low = batch.iter().map(|e| e.stream_sequence).min().unwrap_or(0);
    let high = batch.iter().map(|e| e.stream_sequence).max().unwrap_or(0);
    format!("{stream}:{low}-{high}:{}", batch.len())
}

/// The body of one batch request and its content type.
pub fn batch_body(
    batch: &[Envelope],
    format: BatchFormat,
    written_at: &str,
) -> io::Result<(Vec<u8>, &'static str)> {
    let mut out = Vec::with_capacity(batch.iter().map(|e| e.payload.len() + 400).sum());
    match format {
        BatchFormat::Ndjson => {
            for e in batch {
                record::encode(e, written_at, &mut out)?;
            }
            Ok((out, "application/x-ndjson"))
        }
        BatchFormat::JsonArray => {
            out.push(b'[');
            for (i, e) in batch.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                record::encode(e, written_at, &mut out)?;
                // The record ends its line; inside an array it is one element.
                out.pop();
            }
            out.push(b']');
            Ok((out, "application/json"))
        }
    }
}

/// The body of one per-message request (one record, no line break) and its content type.
pub fn message_body(e: &Envelope, written_at: &str) -> io::Result<(Vec<u8>, &'static str)> {
    let mut out = Vec::with_capacity(e.payload.len() + 400);
    record::encode(e, written_at, &mut out)?;
    out.pop();
    Ok((out, "application/json"))
}

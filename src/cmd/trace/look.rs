//! The lookups `jetsink trace` makes, one per source of truth: the message in the stream
//! (get by sequence), the sink's consumers (their info), the destination
//! ([`crate::sinks::Sink::locate`]) and the dead-letter stream (a headers-only scan).
//! Each reads only; the one consumer made here (the dead-letter scan's) is deleted before
//! returning and is ephemeral, so the server removes it anyway if the process dies.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use async_nats::jetstream::{self, message::StreamMessage};
use futures::StreamExt;

use super::error::TraceError;
use super::position::{position, Marks};
use super::report::{Consumer, DeadLetter, Destination};
use crate::config::dead_letter::DeadLetterConfig;
use crate::config::SinkSpec;
use crate::dlq::copy;
use crate::sinks::{self, Located, Wanted};

/// Most dead-letter copies one trace reads (headers only) looking for a message's copy;
/// past it the answer is "not found among the first N", said as such.
pub const DEAD_LETTER_SCAN_LIMIT: u64 = 100_000;

/// How far before the original's timestamp the dead-letter scan starts, for servers of a
/// cluster whose clocks differ (the copy is stored after the original, by the server
/// leading the dead-letter stream).
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The message at `sequence`, `None` when the stream does not hold it.
pub async fn message(stream: &Stream, sequence: u64) -> Result<Option<StreamMessage>, TraceError> {
    match stream.get_raw_message(sequence).await {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(TraceError::Unavailable(format!(
            "reading sequence {sequence} of stream {}: {e}",
            stream.cached_info().config.name
        ))),
    }
}

/// Each consumer of the sink and where the message on `subject` at `sequence` stands for
/// it (`subject` `None`: the message is not in the stream, so no position).
pub async fn consumers(
    stream: &Stream,
    spec: &SinkSpec,
    sequence: u64,
    subject: Option<&str>,
) -> Result<Vec<Consumer>, TraceError> {
    let mut out = Vec::new();
    for (source, _) in spec.consumer_bindings() {
        let name = source.consumer.clone();
        let info = match stream.consumer_info(&name).await {
            Ok(i) => i,
            Err(e) if e.to_string().to_ascii_lowercase().contains("not found") => {
                out.push(Consumer {
                    name,
                    exists: false,
                    position: None,
                    filters: source.subjects.clone(),
                    delivered: 0,
                    ack_floor: 0,
                    ack_pending: 0,
                    redelivered: 0,
                });
                continue;
            }
            Err(e) => {
                return Err(TraceError::Unavailable(format!(
                    "sink {}: reading consumer {name} of stream {}: {e}",
                    spec.name, spec.source.stream
                )))
            }
        };
        let mut filters = info.config.filter_subjects.clone();
        if !info.config.filter_subject.is_empty() {
            filters.push(info.config.filter_subject.clone());
        }
        let start = match info.config.deliver_policy {
            DeliverPolicy::ByStartSequence { start_sequence } => Some(start_sequence),
            _ => None,
        };
        let marks = Marks {
            delivered: info.delivered.stream_sequence,
            ack_floor: info.ack_floor.stream_sequence,
            start,
        };
        out.push(Consumer {
            name,
            exists: true,
            position: subject.map(|s| position(sequence, s, &filters, marks)),
            filters,
            delivered: marks.delivered,
            ack_floor: marks.ack_floor,
            ack_pending: info.num_ack_pending,
            redelivered: info.num_redelivered,
        });
    }
    Ok(out)
}

/// The sink's destination, told its sink and stream, not opened: `locate` reads through
/// connections of its own.
fn destination_of(spec: &SinkSpec) -> Box<dyn sinks::Sink> {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&sinks::Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
    sink
}

/// What the destination says about `wanted`, and the stream sequence it stored it under.
pub async fn destination(spec: &SinkSpec, wanted: Wanted<'_>) -> (Destination, Option<u64>) {
    let mut sink = destination_of(spec);
    let target = spec.destination.describe();
    let (state, detail, delivered, sequence) = match sink.locate(&spec.source.stream, wanted).await
    {
        Ok(Located::Stored {
            place,
            sequence,
            delivered,
        }) => ("stored", place, delivered, sequence),
        Ok(Located::Absent(looked)) => ("absent", looked, None, None),
        Ok(Located::CannotAsk(why)) => ("cannot_ask", why, None, None),
        Err(e) => ("error", e.to_string(), None, None),
    };
    let d = Destination {
        target,
        state,
        detail,
        delivered,
    };
    (d, sequence)
}

/// Which copy the dead-letter scan looks for.
pub enum CopyOf<'a> {
    /// The copy of this stream sequence: its `Nats-Msg-Id` is `<sink>:<stream>:<seq>`.
    Sequence(u64),
    /// A copy of this sink whose original carried this `Nats-Msg-Id`.
    MessageId(&'a str),
}

/// Searches the dead-letter stream for the sink's copy: on the copy's subject when the
/// original's is known (else every subject the sink's copies go to), from shortly before
/// the original was stored (else from the start), at most [`DEAD_LETTER_SCAN_LIMIT`]
/// copies, reading headers only.
pub async fn dead_letter(
    js: &jetstream::Context,
    spec: &SinkSpec,
    cfg: &DeadLetterConfig,
    wanted: CopyOf<'_>,
    original: Option<&StreamMessage>,
) -> DeadLetter {
    let subject = match original {
        Some(m) => cfg.subject_for(&spec.name, &m.subject),
        None => cfg.capture(&spec.name),
    };
    let mut found = DeadLetter {
        state: "not_found",
        stream: None,
        subject: subject.clone(),
        copy_sequence: None,
        headers: Vec::new(),
        detail: String::new(),
    };
    let start = original.map(|m| m.time - CLOCK_SKEW);
    match scan(js, spec, &subject, start, &wanted, &mut found).await {
        Ok(()) => {}
        Err(e) => {
            found.state = "error";
            found.detail = e;
        }
    }
    found
}

/// The scan of [`dead_letter`], filling `found`.
async fn scan(
    js: &jetstream::Context,
    spec: &SinkSpec,
    subject: &str,
    start: Option<time::OffsetDateTime>,
    wanted: &CopyOf<'_>,
    found: &mut DeadLetter,
) -> Result<(), String> {
    let name = js
        .stream_by_subject(subject.to_string())
        .await
        .map_err(|e| format!("no stream captures the dead-letter subject {subject}: {e}"))?;
    found.stream = Some(name.clone());
    let stream = js
        .get_stream(&name)
        .await
        .map_err(|e| format!("dead-letter stream {name}: {e}"))?;
    let deliver_policy = match start {
        Some(start_time) => DeliverPolicy::ByStartTime { start_time },
        None => DeliverPolicy::All,
    };
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy,
            filter_subject: subject.to_string(),
            headers_only: true,
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            memory_storage: true,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("reading dead-letter stream {name}: {e}"))?;
    let total = consumer
        .cached_info()
        .num_pending
        .min(DEAD_LETTER_SCAN_LIMIT);
    let consumer_name = consumer.cached_info().name.clone();
    let copy_id = match wanted {
        CopyOf::Sequence(seq) => Some(format!("{}:{}:{seq}", spec.name, spec.source.stream)),
        CopyOf::MessageId(_) => None,
    };
    let mut read = 0u64;
    let outcome = async {
        while read < total {
            let mut batch = consumer
                .batch()
                .max_messages((total - read).min(1000) as usize)
                .expires(Duration::from_secs(2))
                .messages()
                .await
                .map_err(|e| format!("reading dead-letter stream {name}: {e}"))?;
            let mut got = 0u64;
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| format!("reading dead-letter stream {name}: {e}"))?;
                got += 1;
                let Some(headers) = m.headers.as_ref() else {
                    continue;
                };
                let value = |n: &str| headers.get(n).map(|v| v.as_str().to_string());
                let hit = match (wanted, &copy_id) {
                    (CopyOf::Sequence(_), Some(id)) => value("Nats-Msg-Id").as_deref() == Some(id),
                    (CopyOf::MessageId(id), _) => {
                        value(copy::SINK).as_deref() == Some(spec.name.as_str())
                            && value(copy::ORIGINAL_MSG_ID).as_deref() == Some(id)
                    }
                    _ => false,
                };
                if hit {
                    found.state = "dead_lettered";
                    found.copy_sequence = m.info().ok().map(|i| i.stream_sequence);
                    found.headers = context_headers(headers);
                    return Ok(());
                }
            }
            if got == 0 {
                break;
            }
            read += got;
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(e) = stream.delete_consumer(&consumer_name).await {
        tracing::warn!(error = %e, "could not delete the trace's dead-letter scan consumer; the server removes it after 30 s idle");
    }
    outcome?;
    if found.state == "not_found" {
        let cut = if read >= DEAD_LETTER_SCAN_LIMIT {
            format!(" (the first {DEAD_LETTER_SCAN_LIMIT} only: the scan's bound)")
        } else {
            String::new()
        };
        let what = match &copy_id {
            Some(id) => format!("Nats-Msg-Id {id}"),
            None => "that Jetsink-Original-Msg-Id".to_string(),
        };
        let copies = if read == 1 { "copy" } else { "copies" };
        found.detail =
            format!("no copy with {what} among {read} {copies} on {subject} in stream {name}{cut}");
    }
    Ok(())
}

/// The copy's `Jetsink-*` headers, sorted by name: its context, never the original's.
fn context_headers(headers: &async_nats::HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| copy::is_context(n.as_ref()))
        .filter(|(n, _)| {
            !AsRef::<str>::as_ref(*n).eq_ignore_ascii_case(copy::ORIGINAL_HEADERS_BASE64)
        })
        .flat_map(|(n, vs)| {
            vs.iter()
                .map(move |v| (AsRef::<str>::as_ref(n).to_string(), v.as_str().to_string()))
        })
        .collect();
    out.sort();
    out
}

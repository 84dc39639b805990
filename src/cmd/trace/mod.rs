//! `jetsink trace`: where is this message? One answer per source of truth, each read
//! and never changed:
//!
//! - the **stream**: the message by sequence (subject, time, size, header names);
//! - each **consumer** of the sink (one, or one per bucket or lane): ACKed (at or below
//!   its ack floor), pending (past its last delivery), or delivered and not known ACKed
//!   (between the two), or not this consumer's (its filter does not take the subject);
//! - the **destination**: whether it stores the message's idempotency key, and where
//!   ([`crate::sinks::Sink::locate`]; destinations that hand messages on cannot be asked);
//! - the **dead-letter stream**: the sink's copy of it (`Nats-Msg-Id`
//!   `<sink>:<stream>:<seq>`) and its `Jetsink-*` reason headers.
//!
//! `--msg-id` is turned into a sequence first: a stream has no index by `Nats-Msg-Id`,
//! and scanning a large stream for it costs too much, so the id is looked up where it is
//! stored — the destination's `message_id`, else a dead-letter copy's
//! `Jetsink-Original-Msg-Id`. A message with an id that is neither stored nor
//! dead-lettered yet (pending, in flight) is traced by `--seq`.
//!
//! Payloads are never printed, nor header values other than jetsink's own `Jetsink-*`.

mod error;
mod look;
mod position;
mod report;

use std::path::{Path, PathBuf};

use async_nats::jetstream::{self, stream::Stream};

pub use error::TraceError;
pub use look::DEAD_LETTER_SCAN_LIMIT;
pub use position::{position, takes, Marks, Position};
pub use report::Report;

use crate::config::{Config, LogFormat, SinkSpec};
use crate::exit;
use crate::metrics::Metrics;
use crate::nats::Links;
use crate::shared::idempotency::{IdempotencyKey, MSG_ID_HEADER};
use crate::sinks::Wanted;
use look::CopyOf;

/// `jetsink trace`'s flags.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("message").required(true).args(["seq", "msg_id"])))]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink whose stream, consumers, destination and dead letters to ask.
    #[arg(long)]
    sink: String,
    /// The message's stream sequence (from 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    seq: Option<u64>,
    /// The message's Nats-Msg-Id, found through the destination's stored message ids or
    /// the dead-letter copies.
    #[arg(long, value_name = "ID")]
    msg_id: Option<String>,
    /// Print one JSON object instead of aligned lines.
    #[arg(long)]
    json: bool,
}

/// The config and its named sink.
fn load(path: &Path, sink: &str) -> Result<SinkAndConfig, TraceError> {
    let cfg = Config::load(path).map_err(|e| TraceError::Config(e.to_string()))?;
    let Some(spec) = cfg.sinks.iter().find(|s| s.name == sink).cloned() else {
        let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name.as_str()).collect();
        return Err(TraceError::Config(format!(
            "--sink: {}: no sink named {sink:?} (it has {})",
            path.display(),
            names.join(", ")
        )));
    };
    Ok((cfg, spec))
}

/// A config and one of its sinks.
type SinkAndConfig = (Config, SinkSpec);

/// Connects with the config's NATS settings; JetStream and the sink's stream.
async fn connect(
    cfg: &Config,
    spec: &SinkSpec,
) -> Result<(jetstream::Context, Stream), TraceError> {
    let metrics = Metrics::new();
    let links = Links::new(&metrics);
    let conn = crate::nats::connect(&cfg.nats, "trace", &links, &metrics)
        .await
        .map_err(|e| match e {
            crate::nats::ConnectError::Credentials { .. } => TraceError::Config(e.to_string()),
            _ => TraceError::Unavailable(e.to_string()),
        })?;
    // A one-shot command: the connection closes when it is done.
    links.closing();
    let js = jetstream::ContextBuilder::new()
        .timeout(std::time::Duration::from_millis(
            cfg.nats.request_timeout_ms,
        ))
        .build(conn.client.clone());
    let stream = js.get_stream(&spec.source.stream).await.map_err(|e| {
        TraceError::Unavailable(format!(
            "sink {}: looking up stream {}: {e}",
            spec.name, spec.source.stream
        ))
    })?;
    Ok((js, stream))
}

/// The stream sequence of the message with `id`: from the destination's stored row, else
/// from the sink's dead-letter copy.
async fn sequence_of(
    js: &jetstream::Context,
    spec: &SinkSpec,
    id: &str,
) -> Result<u64, TraceError> {
    let (destination, sequence) = look::destination(spec, Wanted::MessageId(id)).await;
    if let Some(seq) = sequence {
        return Ok(seq);
    }
    if destination.state == "error" {
        return Err(TraceError::Unavailable(format!(
            "sink {}: {}: {}",
            spec.name, destination.target, destination.detail
        )));
    }
    let dead = match spec.dead_letter.as_ref().filter(|d| d.enabled) {
        Some(cfg) => Some(look::dead_letter(js, spec, cfg, CopyOf::MessageId(id), None).await),
        None => None,
    };
    let from_copy = dead.as_ref().and_then(|d| {
        d.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(crate::dlq::copy::ORIGINAL_SEQUENCE))
            .and_then(|(_, v)| v.parse::<u64>().ok())
    });
    if let Some(seq) = from_copy {
        return Ok(seq);
    }
    match (destination.state, &dead) {
        ("cannot_ask", None) => Err(TraceError::Unsupported {
            sink: spec.name.clone(),
            why: format!("{}: {}", destination.target, destination.detail),
        }),
        (_, Some(d)) if d.state == "error" => Err(TraceError::Unavailable(format!(
            "sink {}: dead-letter stream: {}",
            spec.name, d.detail
        ))),
        _ => Err(TraceError::NotFound(format!(
            "sink {}: no message with that Nats-Msg-Id is stored ({}: {}) or dead-lettered{}; a message not written yet (pending, in flight) has no index by id: trace it by --seq",
            spec.name,
            destination.target,
            destination.detail,
            dead.map(|d| format!(" ({})", d.detail)).unwrap_or_default()
        ))),
    }
}

/// Asks every source about the message at `sequence`.
async fn report(
    js: &jetstream::Context,
    stream: &mut Stream,
    spec: &SinkSpec,
    sequence: u64,
) -> Result<Report, TraceError> {
    let state = stream
        .info()
        .await
        .map_err(|e| {
            TraceError::Unavailable(format!(
                "sink {}: reading stream {}: {e}",
                spec.name, spec.source.stream
            ))
        })?
        .state
        .clone();
    let original = look::message(stream, sequence).await?;
    let consumers = look::consumers(
        stream,
        spec,
        sequence,
        original.as_ref().map(|m| m.subject.as_str()),
    )
    .await?;
    let msg_id = original.as_ref().and_then(|m| {
        m.headers
            .get(MSG_ID_HEADER)
            .map(|v| v.as_str().to_string())
            .filter(|v| !v.is_empty())
    });
    let key = match (spec.delivery.idempotency_key, &msg_id) {
        (IdempotencyKey::MessageId, Some(id)) => id.clone(),
        _ => format!("{}:{sequence}", spec.source.stream),
    };
    // Without the message, the key is known only when it is `<stream>:<sequence>`.
    let key_known =
        original.is_some() || spec.delivery.idempotency_key == IdempotencyKey::StreamSequence;
    let destination = if key_known {
        look::destination(spec, Wanted::Key(&key)).await.0
    } else {
        report::Destination {
            target: spec.destination.describe(),
            state: "cannot_ask",
            detail:
                "the key is the message's Nats-Msg-Id, and the stream no longer holds the message"
                    .into(),
            delivered: None,
        }
    };
    let dead_letter = match spec.dead_letter.as_ref().filter(|d| d.enabled) {
        Some(cfg) => Some(
            look::dead_letter(js, spec, cfg, CopyOf::Sequence(sequence), original.as_ref()).await,
        ),
        None => None,
    };
    let message = original.map(|m| report::Message {
        subject: m.subject.to_string(),
        published: crate::envelope::rfc3339(m.time),
        payload_bytes: m.payload.len(),
        headers: header_names(&m.headers),
        trace_id: trace_id(&m.headers),
        idempotency_key: key,
    });
    Ok(Report {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
        sequence,
        message,
        stream_first: state.first_sequence,
        stream_last: state.last_sequence,
        consumers,
        destination,
        dead_letter,
    })
}

/// The trace id of a message's `traceparent` header (its first value; the name matched
/// without regard to case), when valid.
fn trace_id(headers: &async_nats::HeaderMap) -> Option<String> {
    use crate::shared::traceparent;
    headers
        .iter()
        .filter(|(n, _)| {
            n.to_string()
                .eq_ignore_ascii_case(traceparent::TRACEPARENT_HEADER)
        })
        .flat_map(|(_, values)| values.iter())
        .next()
        .and_then(|v| traceparent::parse(v.as_str()).map(|t| t.trace_id.to_string()))
}

/// The header names of a message, each once, in order.
fn header_names(headers: &async_nats::HeaderMap) -> Vec<String> {
    let mut names: Vec<String> = headers.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    names.dedup();
    names
}

/// Resolves the message and asks every source.
async fn trace(args: &Args) -> Result<Report, TraceError> {
    let (cfg, spec) = load(&args.config, &args.sink)?;
    let (js, mut stream) = connect(&cfg, &spec).await?;
    // clap requires one of the two.
    let sequence = match args.seq {
        Some(seq) => seq,
        None => sequence_of(&js, &spec, args.msg_id.as_deref().unwrap_or_default()).await?,
    };
    report(&js, &mut stream, &spec, sequence).await
}

/// `jetsink trace`: prints what every source says about the message; exit 0 when the
/// stream holds it, 65 when it does not (the sequence is past the stream's end or was
/// removed, or no stored row nor dead-letter copy carries the `--msg-id`: the report is
/// still printed for a sequence, since the destination or the dead letters may keep what
/// the stream lost), 2 for a wrong flag, 78 for a config problem or an unknown `--sink`
/// (and `--msg-id` where nothing stores ids), 69 when NATS or the stream is unavailable.
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    match trace(&args).await {
        Ok(report) => {
            let text = if args.json {
                serde_json::to_string_pretty(&report)
                    .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
            } else {
                report.human()
            };
            super::emit(&text);
            if report.message.is_some() {
                exit::OK
            } else {
                eprintln!(
                    "error: sink {}: stream {} holds no sequence {}",
                    report.sink, report.stream, report.sequence
                );
                exit::DATAERR
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

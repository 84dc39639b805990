//! `jetsink dlq replay`: puts dead-lettered messages back on their original subject once
//! the cause is fixed.
//!
//! Each copy is read by sequence (reading does not consume), republished without the
//! `Jetsink-*` context headers, and removed from the dead-letter stream only after the
//! original stream acknowledged the republish. A crash between the two leaves the copy in
//! place; replaying it again is absorbed by the sink's idempotent writes.

use std::path::PathBuf;

use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use async_nats::HeaderMap;

use crate::config::dead_letter::DeadLetterConfig;
use crate::config::{Config, LogFormat};
use crate::dlq::copy;
use crate::exit;
use crate::metrics::Metrics;

/// What to replay.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Stop after this many replays.
    pub limit: Option<u64>,
    /// List what would happen, change nothing.
    pub dry_run: bool,
    /// Only copies whose `Jetsink-Error-Class` equals this.
    pub error_class: Option<String>,
}

/// One copy examined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its sequence in the dead-letter stream.
    pub dlq_sequence: u64,
    /// The subject it goes back to.
    pub original_subject: String,
    /// Its error class.
    pub error_class: String,
    /// What happened: `replayed`, `would replay`, `skipped (...)`.
    pub outcome: String,
}

/// The headers a replay republishes: the copy's, minus jetsink's context and server
/// directives; the original `Nats-Msg-Id` is restored so `message_id` idempotency still
/// holds. Metadata headers (`Jetsink-Priority`, ...) are kept.
pub fn replay_headers(copy_headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, values) in copy_headers.iter() {
        let n: &str = name.as_ref();
        if copy::is_context(n) || copy::is_server_directive(n) {
            continue;
        }
        for v in values {
            out.append(n, v.as_str());
        }
    }
    if let Some(id) = copy_headers.get(copy::ORIGINAL_MSG_ID) {
        out.insert("Nats-Msg-Id", id.as_str());
    }
    out
}

/// Replays `sink`'s dead letters.
pub async fn run(
    js: &jetstream::Context,
    sink: &str,
    cfg: &DeadLetterConfig,
    opts: &Options,
) -> Result<Vec<Line>, String> {
    let capture = cfg.capture(sink);
    let stream_name = js
        .stream_by_subject(capture.clone())
        .await
        .map_err(|e| format!("no stream captures the dead-letter subject {capture}: {e}"))?;
    let stream = js
        .get_stream(&stream_name)
        .await
        .map_err(|e| format!("dead-letter stream {stream_name}: {e}"))?;
    let mut lines = Vec::new();
    let mut next = 1u64;
    let mut replayed = 0u64;
    loop {
        if opts.limit.is_some_and(|l| replayed >= l) {
            break;
        }
        let msg = match stream
            .raw_message_builder()
            .sequence(next)
            .next_by_subject(capture.clone())
            .send()
            .await
        {
            Ok(m) => m,
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => break,
            Err(e) => return Err(format!("reading {stream_name} at sequence {next}: {e}")),
        };
        next = msg.sequence + 1;
        let header = |n: &str| msg.headers.get(n).map(|v| v.as_str().to_string());
        let class = header(copy::ERROR_CLASS).unwrap_or_default();
        let original = header(copy::ORIGINAL_SUBJECT);
        if header(copy::SINK).as_deref() != Some(sink) {
            continue;
        }
        if opts.error_class.as_ref().is_some_and(|c| c != &class) {
            continue;
        }
        let Some(original) = original else {
            lines.push(Line {
                dlq_sequence: msg.sequence,
                original_subject: String::new(),
                error_class: class,
                outcome: "skipped (no Jetsink-Original-Subject header)".into(),
            });
            continue;
        };
        let outcome = if opts.dry_run {
            replayed += 1;
            "would replay".to_string()
        } else {
            let ack = js
                .publish_with_headers(
                    original.clone(),
                    replay_headers(&msg.headers),
                    msg.payload.clone(),
                )
                .await
                .map_err(|e| {
                    format!(
                        "republishing DLQ sequence {} to {original}: {e}",
                        msg.sequence
                    )
                })?
                .await
                .map_err(|e| {
                    format!(
                        "republishing DLQ sequence {} to {original}: {e}",
                        msg.sequence
                    )
                })?;
            if ack.duplicate {
                "skipped (the original stream still holds this Nats-Msg-Id in its duplicate window; retry later)".to_string()
            } else {
                stream.delete_message(msg.sequence).await.map_err(|e| {
                    format!(
                        "replayed DLQ sequence {} but could not remove it: {e}",
                        msg.sequence
                    )
                })?;
                replayed += 1;
                "replayed".to_string()
            }
        };
        lines.push(Line {
            dlq_sequence: msg.sequence,
            original_subject: original,
            error_class: class,
            outcome,
        });
    }
    Ok(lines)
}

/// `jetsink dlq replay`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink whose dead letters to replay.
    #[arg(long)]
    sink: String,
    /// Replay at most this many.
    #[arg(long)]
    limit: Option<u64>,
    /// List what would be replayed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only messages with this Jetsink-Error-Class (e.g. permanent).
    #[arg(long)]
    filter_error_class: Option<String>,
}

/// `jetsink dlq replay`: finds the sink's dead-letter settings in the config, replays,
/// and prints one line per copy examined and a total; a config problem is exit 78, NATS
/// trouble exit 69.
pub async fn execute(args: Args) -> u8 {
    let Args {
        config: path,
        sink,
        limit,
        dry_run,
        filter_error_class,
    } = args;
    let opts = Options {
        limit,
        dry_run,
        error_class: filter_error_class,
    };
    crate::logging::init("warn", LogFormat::Text);
    let cfg = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::CONFIG;
        }
    };
    let Some(spec) = cfg.sinks.iter().find(|s| s.name == sink) else {
        eprintln!("error: {}: no sink named {sink:?}", path.display());
        return exit::CONFIG;
    };
    let Some(dl) = spec.dead_letter.as_ref() else {
        eprintln!(
            "error: {}: sink {sink} has no dead_letter section",
            path.display()
        );
        return exit::CONFIG;
    };
    let metrics = Metrics::new();
    let links = crate::nats::Links::new(&metrics);
    let client = match crate::nats::connect(&cfg.nats, "dlq-replay", &links, &metrics).await {
        Ok(c) => c.client,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let js = jetstream::new(client.clone());
    match run(&js, &sink, dl, &opts).await {
        Ok(lines) => {
            for l in &lines {
                println!(
                    "dlq seq {:<8} {:<10} -> {:<40} {}",
                    l.dlq_sequence, l.error_class, l.original_subject, l.outcome
                );
            }
            let done = lines
                .iter()
                .filter(|l| l.outcome == "replayed" || l.outcome == "would replay")
                .count();
            println!(
                "{} {done} of {} dead letter(s) examined for sink {sink}",
                if opts.dry_run {
                    "would replay"
                } else {
                    "replayed"
                },
                lines.len()
            );
            let _ = client.flush().await;
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::UNAVAILABLE
        }
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
}

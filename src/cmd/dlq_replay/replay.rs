//! The replay run: walks the dead-letter stream by sequence, keeps the sink's copies that
//! pass the filters, and republishes each one, removing it only once the original stream
//! holds it.

use async_nats::jetstream::{self, stream::RawMessageErrorKind};

use super::copy_headers::{landing, refusal, replay_headers, replay_msg_id, Landing};
use crate::config::dead_letter::DeadLetterConfig;
use crate::dlq::copy;

/// What to replay.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Stop after this many replays.
    pub limit: Option<u64>,
    /// List what would happen, change nothing.
    pub dry_run: bool,
    /// Only copies whose `Jetsink-Error-Class` equals this.
    pub error_class: Option<String>,
    /// Also replay copies stored without their payload (`Jetsink-Payload-Omitted`).
    pub force: bool,
}

/// Outcome text of a copy that was replayed (or would be, in a dry run).
pub(super) const REPLAYED: &str = "replayed";
/// Outcome text of a dry run.
pub(super) const WOULD_REPLAY: &str = "would replay";

/// One copy examined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its sequence in the dead-letter stream.
    pub dlq_sequence: u64,
    /// The subject it goes back to.
    pub original_subject: String,
    /// Its error class.
    pub error_class: String,
    /// What happened: `replayed`, `would replay`, `already replayed (...)`,
    /// `refused (...)`, `skipped (...)`.
    pub outcome: String,
}

impl Line {
    /// Whether this copy was refused for lack of its payload (the run then fails).
    pub fn refused(&self) -> bool {
        self.outcome.starts_with("refused")
    }
}

/// Whether a failed removal of a copy means it is already gone: another `dlq replay` run
/// that read the same copy removed it first. That run's republish and this one's carry the
/// same `Nats-Msg-Id`, so the message is back once; nothing failed.
pub fn already_removed(e: &async_nats::jetstream::stream::DeleteMessageError) -> bool {
    use async_nats::jetstream::stream::DeleteMessageErrorKind;
    use async_nats::jetstream::ErrorCode;
    match e.kind() {
        DeleteMessageErrorKind::JetStream(err) => match err.error_code() {
            ErrorCode::NO_MESSAGE_FOUND | ErrorCode::SEQUENCE_NOT_FOUND => true,
            // "no message found", wrapped as a failed delete.
            ErrorCode::STREAM_MESSAGE_DELETE_FAILED => {
                err.to_string().to_ascii_lowercase().contains("not found")
                    || err
                        .to_string()
                        .to_ascii_lowercase()
                        .contains("no message found")
            }
            _ => false,
        },
        _ => false,
    }
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
        if let Some(why) = refusal(&msg.headers, msg.sequence, opts.force) {
            lines.push(Line {
                dlq_sequence: msg.sequence,
                original_subject: original,
                error_class: class,
                outcome: why,
            });
            continue;
        }
        if replay_msg_id(&msg.headers).is_none() {
            lines.push(Line {
                dlq_sequence: msg.sequence,
                original_subject: original,
                error_class: class,
                outcome: "skipped (no Jetsink-Original-Msg-Id nor Jetsink-Original-Stream and -Sequence headers to give the replay a stable Nats-Msg-Id)".into(),
            });
            continue;
        }
        let outcome = if opts.dry_run {
            replayed += 1;
            WOULD_REPLAY.to_string()
        } else {
            let (outcome, landed) = republish(js, &stream, &msg, &original).await?;
            replayed += u64::from(landed);
            outcome
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

/// Republishes one copy to its original subject and removes the copy once the original
/// stream stored it (or already held it); the outcome line, and whether it landed now.
async fn republish(
    js: &jetstream::Context,
    stream: &jetstream::stream::Stream,
    msg: &jetstream::message::StreamMessage,
    original: &str,
) -> Result<(String, bool), String> {
    let failed = |e: &dyn std::fmt::Display| {
        format!(
            "republishing DLQ sequence {} to {original}: {e}",
            msg.sequence
        )
    };
    let ack = js
        .publish_with_headers(
            original.to_string(),
            replay_headers(&msg.headers),
            msg.payload.clone(),
        )
        .await
        .map_err(|e| failed(&e))?
        .await
        .map_err(|e| failed(&e))?;
    let remove = || async {
        match stream.delete_message(msg.sequence).await {
            Ok(_) => Ok(()),
            // Another replay run removed it first: the copy is gone, as wanted.
            Err(e) if already_removed(&e) => Ok(()),
            Err(e) => Err(format!(
                "replayed DLQ sequence {} but could not remove it: {e}",
                msg.sequence
            )),
        }
    };
    Ok(match landing(&msg.headers, &ack.stream, ack.sequence, ack.duplicate) {
        Landing::Stored => {
            remove().await?;
            (REPLAYED.to_string(), true)
        }
        Landing::AlreadyReplayed { sequence } => {
            remove().await?;
            (format!("already replayed (stream {} sequence {sequence} holds it; copy removed)", ack.stream), false)
        }
        Landing::OriginalInWindow => ("skipped (the original stream still holds this Nats-Msg-Id in its duplicate window; retry later)".to_string(), false),
    })
}

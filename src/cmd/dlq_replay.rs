//! `jetsink dlq replay`: puts dead-lettered messages back on their original subject once
//! the cause is fixed.
//!
//! Each copy is read by sequence (reading does not consume), republished without the
//! `Jetsink-*` context headers, and removed from the dead-letter stream only after the
//! original stream acknowledged the republish. A crash between the two leaves the copy in
//! place, so every replay carries a `Nats-Msg-Id` that is the same each time the same copy
//! is replayed: the original's own id when it had one, else `<stream>:<sequence>` of the
//! original (what the default idempotency key of the original would have been). Within
//! the original stream's duplicate window a second replay is dropped by the server; the
//! duplicate answer names the sequence the first replay got, and the copy is then removed
//! as already replayed. After the window only `delivery.idempotency_key: message_id`
//! still dedupes it in the destination (see docs/dead-letter.md).
//!
//! A copy stored without its payload (`Jetsink-Payload-Omitted`) is not replayed unless
//! the operator passes `--force`: republishing it would hand the destination an empty
//! message in place of the original.

use std::path::PathBuf;

use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use async_nats::HeaderMap;

use crate::config::dead_letter::DeadLetterConfig;
use crate::config::{Config, LogFormat};
use crate::dlq::copy;
use crate::dlq::copy::PAYLOAD_OMITTED;
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
    /// Also replay copies stored without their payload (`Jetsink-Payload-Omitted`).
    pub force: bool,
}

/// Outcome text of a copy that was replayed (or would be, in a dry run).
const REPLAYED: &str = "replayed";
/// Outcome text of a dry run.
const WOULD_REPLAY: &str = "would replay";

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
    /// Only messages with this Jetsink-Error-Class.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(copy::ERROR_CLASSES))]
    filter_error_class: Option<String>,
    /// Also replay copies stored without their payload (header Jetsink-Payload-Omitted);
    /// they are republished with an empty payload.
    #[arg(long)]
    force: bool,
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
        force,
    } = args;
    let opts = Options {
        limit,
        dry_run,
        error_class: filter_error_class,
        force,
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
        Ok(c) => {
            // A one-shot command: the connection closes when it is done.
            links.closing();
            c.client
        }
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
                .filter(|l| l.outcome == REPLAYED || l.outcome == WOULD_REPLAY)
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
            let refused: Vec<String> = lines
                .iter()
                .filter(|l| l.refused())
                .map(|l| l.dlq_sequence.to_string())
                .collect();
            if refused.is_empty() || opts.dry_run {
                exit::OK
            } else {
                eprintln!(
                    "error: {} copy(ies) that cannot be replayed as stored (no payload, or a header block the client could not read) were not replayed (dlq seq {}); pass --force to replay them anyway",
                    refused.len(),
                    refused.join(", ")
                );
                exit::FAILURE
            }
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

    #[test]
    fn the_error_class_filter_accepts_only_classes_copies_carry() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |class: &str| {
            Cli::try_parse_from([
                "replay",
                "--config",
                "c.json",
                "--sink",
                "s",
                "--filter-error-class",
                class,
            ])
        };
        for class in copy::ERROR_CLASSES {
            assert!(parse(class).is_ok(), "{class}");
        }
        let err = parse("permanet").err().expect("a typo is refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(err.to_string().contains("malformed_message"), "{err}");
    }
}

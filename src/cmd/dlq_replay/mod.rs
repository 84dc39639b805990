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
//!
//! `copy_headers` holds those decisions about one copy (its replay id and headers, whether
//! it is refused, what a PubAck means for it), pure and tested alone; `replay` walks the
//! dead-letter stream and republishes; this file is the command: flags, config and output.

use std::path::PathBuf;

use async_nats::jetstream;

mod copy_headers;
mod replay;

pub use copy_headers::{landing, refusal, replay_headers, replay_msg_id, Landing};
pub use replay::{already_removed, run, Line, Options};
use replay::{REPLAYED, WOULD_REPLAY};

use crate::config::{Config, LogFormat};
use crate::dlq::copy;
use crate::exit;
use crate::metrics::Metrics;

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

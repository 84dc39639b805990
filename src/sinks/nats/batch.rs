//! Atomic batch publish (`atomic: true`, nats-server 2.12.1+): the headers that make one
//! batch, the server's replies, and what an attempt's replies mean for the batch (pure).
//!
//! Every message of an attempt carries `Nats-Batch-Id` (one fresh id per attempt) and
//! `Nats-Batch-Sequence` (1..n); the last one also `Nats-Batch-Commit: 1`. The server
//! stages the messages and stores all of them, or none, when the commit arrives; the
//! commit's PubAck names the batch and its `count`. A message it refuses before the commit
//! is answered on that message's own reply subject (jetsink asks for one per message), so
//! a refusal names its message; a refusal at the commit does not.
//!
//! The server refuses a whole atomic batch when one of its messages has a `Nats-Msg-Id`
//! the stream already holds (10201): a redelivered batch whose commit was stored but
//! whose ACK was lost. Such a batch is [`Verdict::Absorb`]ed: published again message by
//! message, where the duplicate window drops the copies already stored.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::HeaderMap;
use serde::Deserialize;

use super::classify::failure;
use crate::sinks::contract::SinkError;

/// The header naming the batch a message belongs to.
pub const BATCH_ID: &str = "Nats-Batch-Id";
/// The header with a message's position in its batch, from 1.
pub const BATCH_SEQUENCE: &str = "Nats-Batch-Sequence";
/// The header of the last message, which commits the batch.
pub const BATCH_COMMIT: &str = "Nats-Batch-Commit";
/// The most messages nats-server (2.12-2.14) accepts in one atomic batch.
pub const MAX_ATOMIC_BATCH: usize = 1000;

/// JetStream error codes of atomic batch publishing (server/errors.json).
pub mod code {
    /// The stream does not allow atomic publish (`allow_atomic`).
    pub const DISABLED: u64 = 10174;
    /// A message without `Nats-Batch-Sequence`.
    pub const MISSING_SEQUENCE: u64 = 10175;
    /// A message of the batch is missing (a gap), or the batch timed out on the server.
    pub const INCOMPLETE: u64 = 10176;
    /// A header the server does not allow in a batch (on 2.12.0 `Nats-Msg-Id` too).
    pub const UNSUPPORTED_HEADER: u64 = 10177;
    /// A batch id longer than 64 characters.
    pub const INVALID_ID: u64 = 10179;
    /// More messages than the server's maximum batch size.
    pub const TOO_LARGE_BATCH: u64 = 10199;
    /// A commit header other than `1` or `eob`.
    pub const INVALID_COMMIT: u64 = 10200;
    /// A message whose `Nats-Msg-Id` the stream (or the batch) already holds.
    pub const DUPLICATE: u64 = 10201;
    /// Too many batches in flight on the stream or the server.
    pub const TOO_MANY_INFLIGHT: u64 = 10210;
    /// A message with the same `Nats-Msg-Id` is being stored right now (clustered).
    pub const DUPLICATE_IN_PROCESS: u64 = 10158;
}

/// Sets the batch headers of message `seq` (from 1) of batch `id`; `last` commits.
pub fn mark(headers: &mut HeaderMap, id: &str, seq: usize, last: bool) {
    headers.insert(BATCH_ID, id);
    headers.insert(BATCH_SEQUENCE, itoa::Buffer::new().format(seq));
    if last {
        headers.insert(BATCH_COMMIT, "1");
    }
}

/// The server's answer to one message of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An empty message: staged, waiting for the commit.
    Staged,
    /// The commit's PubAck.
    Committed {
        /// The stream that stored the batch.
        stream: String,
        /// The batch id it names.
        batch: String,
        /// How many messages it stored.
        count: u64,
    },
    /// A JetStream error.
    Refused {
        /// The JetStream API error code.
        code: u64,
        /// The server's description (no payload in it).
        text: String,
    },
    /// No stream captures the subject (status 503).
    NoResponders,
    /// A reply jetsink cannot read.
    Unreadable,
}

#[derive(Deserialize)]
struct RawReply {
    #[serde(default)]
    stream: String,
    #[serde(default)]
    batch: Option<String>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    error: Option<RawError>,
}

#[derive(Deserialize)]
struct RawError {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    description: String,
}

/// Reads one reply: `no_responders` when its status was 503.
pub fn parse_reply(payload: &[u8], no_responders: bool) -> Reply {
    if no_responders {
        return Reply::NoResponders;
    }
    if payload.is_empty() {
        return Reply::Staged;
    }
    match serde_json::from_slice::<RawReply>(payload) {
        Ok(RawReply { error: Some(e), .. }) => Reply::Refused {
            code: e.err_code,
            text: e.description,
        },
        Ok(RawReply {
            stream,
            batch: Some(batch),
            count: Some(count),
            ..
        }) => Reply::Committed {
            stream,
            batch,
            count,
        },
        _ => Reply::Unreadable,
    }
}

/// What came back for one attempt of `n` messages.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attempt {
    /// The first message refused before the commit: its index (from 0) and reply.
    pub refused: Option<(usize, Reply)>,
    /// The commit's reply; `None` when none came in time.
    pub commit: Option<Reply>,
}

/// What to do with the batch after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every message is stored.
    Committed,
    /// Nothing is stored because a message is already in the stream: publish the batch
    /// message by message, where the duplicate window absorbs the copies already there.
    Absorb,
    /// Nothing is stored; the batch's error.
    Failed(SinkError),
}

/// The batch's verdict from the replies of an attempt of `n` messages with id `id` into
/// `target`. A refusal before the commit names its message; whatever the commit then
/// says (the batch is incomplete), that refusal is the reason.
pub fn verdict(attempt: &Attempt, n: usize, id: &str, target: &str) -> Verdict {
    if let Some((index, reply)) = &attempt.refused {
        return refused(reply, Some(*index));
    }
    match &attempt.commit {
        None => Verdict::Failed(SinkError::transient(
            "no PubAck for the atomic batch's commit within request_timeout_ms",
        )),
        Some(Reply::Committed {
            stream,
            batch,
            count,
        }) => {
            if stream != target {
                Verdict::Failed(SinkError::Permanent {
                    index: None,
                    message: format!(
                        "the atomic batch was stored in stream {stream}, not in {target}: another stream captures its subjects"
                    ),
                })
            } else if batch != id || *count != n as u64 {
                Verdict::Failed(SinkError::unclassified(format!(
                    "the commit's PubAck names batch {batch:?} of {count} messages, expected {id:?} of {n}"
                )))
            } else {
                Verdict::Committed
            }
        }
        Some(reply) => refused(reply, None),
    }
}

/// The verdict of a refusal, of message `index` when known.
fn refused(reply: &Reply, index: Option<usize>) -> Verdict {
    let at = match index {
        Some(i) => format!("message {i} of the atomic batch"),
        None => "the atomic batch's commit".to_string(),
    };
    let (code, text) = match reply {
        Reply::Refused { code, text } => (*code, text.as_str()),
        Reply::NoResponders => {
            return Verdict::Failed(SinkError::transient(format!(
                "{at}: no responders (no stream captures the subject)"
            )))
        }
        Reply::Unreadable => {
            return Verdict::Failed(SinkError::unclassified(format!(
                "{at}: a reply jetsink cannot read"
            )))
        }
        Reply::Staged | Reply::Committed { .. } => {
            return Verdict::Failed(SinkError::unclassified(format!(
                "{at}: an unexpected reply"
            )))
        }
    };
    let what = format!("{at}: {text} (JetStream error {code})");
    Verdict::Failed(match code {
        code::DUPLICATE => return Verdict::Absorb,
        code::DUPLICATE_IN_PROCESS | code::TOO_MANY_INFLIGHT => SinkError::transient(what),
        // A message lost on the way (a reconnect) or a batch the server timed out; a
        // refused message would have been answered on its own reply.
        code::INCOMPLETE => SinkError::transient(what),
        code::DISABLED => SinkError::Misconfigured {
            message: format!("{what}: the target stream no longer allows atomic publish"),
        },
        // The server's own batch limit is below the batch: smaller parts pass.
        code::TOO_LARGE_BATCH => SinkError::Permanent {
            index: None,
            message: what,
        },
        // jetsink's own headers: never expected, so not this batch's content either.
        code::MISSING_SEQUENCE
        | code::UNSUPPORTED_HEADER
        | code::INVALID_ID
        | code::INVALID_COMMIT => SinkError::unclassified(what),
        other => match index {
            Some(i) => failure(i, PublishErrorKind::Other, Some(other), &what),
            // The commit's checks cover every message without naming one: a size refusal
            // is some message's, found by splitting.
            None if super::classify::TOO_LARGE.contains(&other) => SinkError::Permanent {
                index: None,
                message: what,
            },
            None => failure(0, PublishErrorKind::Other, Some(other), &what),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn committed(stream: &str, batch: &str, count: u64) -> Reply {
        Reply::Committed {
            stream: stream.into(),
            batch: batch.into(),
            count,
        }
    }

    fn refusal(code: u64) -> Reply {
        Reply::Refused {
            code,
            text: "x".into(),
        }
    }

    fn class(v: Verdict) -> String {
        match v {
            Verdict::Committed => "committed".into(),
            Verdict::Absorb => "absorb".into(),
            Verdict::Failed(e) => match e {
                SinkError::Permanent { index, .. } => format!("permanent {index:?}"),
                other => other.class().into(),
            },
        }
    }

    #[test]
    fn replies_are_read() {
        assert_eq!(parse_reply(b"", false), Reply::Staged);
        assert_eq!(parse_reply(b"", true), Reply::NoResponders);
        assert_eq!(
            parse_reply(br#"{"stream":"T","seq":9,"batch":"b1","count":3}"#, false),
            committed("T", "b1", 3)
        );
        assert_eq!(
            parse_reply(
                br#"{"error":{"code":400,"err_code":10201,"description":"dup"},"stream":"T"}"#,
                false
            ),
            Reply::Refused {
                code: 10201,
                text: "dup".into()
            }
        );
        assert_eq!(
            parse_reply(br#"{"stream":"T","seq":9}"#, false),
            Reply::Unreadable
        );
        assert_eq!(parse_reply(b"not json", false), Reply::Unreadable);
    }

    #[test]
    fn the_commit_of_the_whole_batch_into_the_target_commits() {
        let a = Attempt {
            refused: None,
            commit: Some(committed("T", "id", 3)),
        };
        assert_eq!(verdict(&a, 3, "id", "T"), Verdict::Committed);
    }

    #[test]
    fn each_outcome_has_its_class() {
        let table: &[(Attempt, &str)] = &[
            (Attempt::default(), "transient"),
            (
                Attempt {
                    refused: None,
                    commit: Some(committed("OTHER", "id", 3)),
                },
                "permanent None",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(committed("T", "id", 2)),
                },
                "unclassified",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(committed("T", "other", 3)),
                },
                "unclassified",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::DUPLICATE)),
                },
                "absorb",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::INCOMPLETE)),
                },
                "transient",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::TOO_MANY_INFLIGHT)),
                },
                "transient",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(10077)),
                },
                "transient",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::DISABLED)),
                },
                "misconfigured",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::TOO_LARGE_BATCH)),
                },
                "permanent None",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(10054)),
                },
                "permanent None",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(10166)),
                },
                "unclassified",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(refusal(code::UNSUPPORTED_HEADER)),
                },
                "unclassified",
            ),
            (
                Attempt {
                    refused: None,
                    commit: Some(Reply::NoResponders),
                },
                "transient",
            ),
            (
                Attempt {
                    refused: Some((1, refusal(10054))),
                    commit: Some(refusal(code::INCOMPLETE)),
                },
                "permanent Some(1)",
            ),
            (
                Attempt {
                    refused: Some((1, refusal(10047))),
                    commit: Some(refusal(code::INCOMPLETE)),
                },
                "transient",
            ),
        ];
        for (attempt, want) in table {
            assert_eq!(class(verdict(attempt, 3, "id", "T")), *want, "{attempt:?}");
        }
    }

    #[test]
    fn the_headers_number_the_batch_and_the_last_commits() {
        let mut h = HeaderMap::new();
        mark(&mut h, "abc", 7, false);
        assert_eq!(h.get(BATCH_ID).map(|v| v.as_str()), Some("abc"));
        assert_eq!(h.get(BATCH_SEQUENCE).map(|v| v.as_str()), Some("7"));
        assert!(h.get(BATCH_COMMIT).is_none());
        mark(&mut h, "abc", 8, true);
        assert_eq!(h.get(BATCH_COMMIT).map(|v| v.as_str()), Some("1"));
    }

    proptest! {
        #[test]
        fn any_reply_is_read_without_panicking(b in prop::collection::vec(any::<u8>(), 0..200), nr in any::<bool>()) {
            let _ = parse_reply(&b, nr);
        }

        #[test]
        fn any_refusal_has_a_verdict_that_is_never_committed(code in 0u64..20_000, index in prop::option::of(0usize..1000)) {
            let attempt = Attempt { refused: index.map(|i| (i, refusal(code))), commit: Some(refusal(code)) };
            prop_assert_ne!(verdict(&attempt, 1000, "id", "T"), Verdict::Committed);
        }
    }
}

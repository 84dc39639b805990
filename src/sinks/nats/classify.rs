//! What the outcome of each publish of a batch means for the batch (pure).
//!
//! The rule of every destination holds: only an error about one message's content is
//! permanent. A copy too large for the target (the client's `max_payload` check, or the
//! stream's `max_msg_size` in the PubAck) and a copy stored in a stream other than the
//! target (its subject is captured elsewhere) are that message's; no responders, a
//! timeout, a broken connection, a full stream or an unavailable cluster are fixed
//! outside the process and hold the batch. A PubAck error code nobody listed is
//! unclassified, held for a bounded time and then split.

use async_nats::jetstream::context::PublishErrorKind;

use crate::sinks::contract::SinkError;

/// JetStream API error codes of a copy the target refuses for its own size: the message
/// (10054) or its headers (10097) exceed the stream's maximum.
pub const TOO_LARGE: &[u64] = &[10054, 10097];
/// JetStream API error codes that an operator or a recovering cluster fixes: account,
/// storage or memory resources exceeded (10002, 10023, 10047, 10028), cluster not
/// available or not leader (10008, 10009), stream store failed — also a full stream that
/// discards new messages (10077), stream offline (10118, 10194).
const TRANSIENT_CODES: &[u64] = &[
    10002, 10008, 10009, 10023, 10028, 10047, 10077, 10118, 10194,
];

/// What happened to one message's publish.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A PubAck from `stream` (a duplicate counts: the copy is already there).
    Stored {
        /// The stream that stored it.
        stream: String,
    },
    /// The subject template could not be filled from this message's subject.
    NoSubject {
        /// Why.
        reason: String,
    },
    /// Sending or the PubAck failed.
    Failed {
        /// The client's error kind.
        kind: PublishErrorKind,
        /// The JetStream API error code of a PubAck error, when there was one.
        code: Option<u64>,
        /// The client's text (no payload in it).
        text: String,
    },
}

/// The batch's result from each message's outcome, in batch order. A transient failure
/// anywhere wins over a permanent one (retrying the whole batch is safe, the duplicate
/// window absorbs the copies that were already stored); among permanent ones the first
/// names the message.
pub fn classify(outcomes: &[Outcome], target: &str) -> Result<(), SinkError> {
    let mut permanent: Option<SinkError> = None;
    let mut unclassified: Option<SinkError> = None;
    for (index, outcome) in outcomes.iter().enumerate() {
        let verdict = match outcome {
            Outcome::Stored { stream } if stream == target => continue,
            Outcome::Stored { stream } => SinkError::Permanent {
                index: Some(index),
                message: format!(
                    "message {index} was stored in stream {stream}, not in {target}: another stream captures its subject"
                ),
            },
            Outcome::NoSubject { reason } => SinkError::Permanent {
                index: Some(index),
                message: format!("message {index}: {reason}"),
            },
            Outcome::Failed { kind, code, text } => failure(index, *kind, *code, text),
        };
        match verdict {
            SinkError::Permanent { .. } => {
                permanent.get_or_insert(verdict);
            }
            SinkError::Unclassified { .. } => {
                unclassified.get_or_insert(verdict);
            }
            other => return Err(other),
        }
    }
    match unclassified.or(permanent) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

pub(super) fn failure(
    index: usize,
    kind: PublishErrorKind,
    code: Option<u64>,
    text: &str,
) -> SinkError {
    let what = format!("publish of message {index}: {text}");
    match kind {
        PublishErrorKind::MaxPayloadExceeded => SinkError::Permanent {
            index: Some(index),
            message: what,
        },
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::StreamNotFound
        | PublishErrorKind::MaxAckPending => SinkError::transient(what),
        // The server answered, or sending failed before the server saw it (the client's
        // channel closed while reconnecting).
        PublishErrorKind::Other => match code {
            Some(c) if TOO_LARGE.contains(&c) => SinkError::Permanent {
                index: Some(index),
                message: what,
            },
            Some(c) if TRANSIENT_CODES.contains(&c) => SinkError::transient(what),
            Some(c) => SinkError::unclassified(format!("{what} (JetStream error {c})")),
            None => SinkError::transient(what),
        },
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            // jetsink strips the expectation headers, so the server should never check
            // them: a refusal is this message's.
            SinkError::Permanent {
                index: Some(index),
                message: what,
            }
        }
        #[allow(unreachable_patterns)]
        _ => SinkError::unclassified(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(s: &str) -> Outcome {
        Outcome::Stored { stream: s.into() }
    }

    fn failed(kind: PublishErrorKind, code: Option<u64>) -> Outcome {
        Outcome::Failed {
            kind,
            code,
            text: "x".into(),
        }
    }

    #[test]
    fn each_failure_has_its_class() {
        use PublishErrorKind::*;
        let table: &[(Outcome, &str, Option<usize>)] = &[
            (failed(TimedOut, None), "transient", None),
            (failed(BrokenPipe, None), "transient", None),
            (failed(StreamNotFound, None), "transient", None),
            (failed(MaxAckPending, None), "transient", None),
            (failed(Other, None), "transient", None),
            (failed(Other, Some(10077)), "transient", None),
            (failed(Other, Some(10008)), "transient", None),
            (failed(MaxPayloadExceeded, None), "permanent", Some(1)),
            (failed(Other, Some(10054)), "permanent", Some(1)),
            (failed(WrongLastSequence, Some(10071)), "permanent", Some(1)),
            (failed(Other, Some(99_999)), "unclassified", None),
            (stored("ELSEWHERE"), "permanent", Some(1)),
            (
                Outcome::NoSubject {
                    reason: "no token 3".into(),
                },
                "permanent",
                Some(1),
            ),
        ];
        for (outcome, class, index) in table {
            let e =
                classify(&[stored("T"), outcome.clone(), stored("T")], "T").expect_err("an error");
            assert_eq!(e.class(), *class, "{outcome:?}");
            if let SinkError::Permanent { index: i, .. } = e {
                assert_eq!(i, *index, "{outcome:?}");
            }
        }
    }

    #[test]
    fn all_stored_in_the_target_commits() {
        assert_eq!(classify(&[stored("T"), stored("T")], "T"), Ok(()));
        assert_eq!(classify(&[], "T"), Ok(()));
    }

    #[test]
    fn a_transient_failure_outranks_a_refused_message() {
        let e = classify(
            &[
                failed(PublishErrorKind::MaxPayloadExceeded, None),
                failed(PublishErrorKind::TimedOut, None),
            ],
            "T",
        )
        .expect_err("error");
        assert_eq!(e.class(), "transient");
        let e = classify(
            &[
                stored("T"),
                failed(PublishErrorKind::Other, Some(10054)),
                failed(PublishErrorKind::MaxPayloadExceeded, None),
            ],
            "T",
        )
        .expect_err("error");
        assert!(
            matches!(e, SinkError::Permanent { index: Some(1), .. }),
            "{e:?}"
        );
    }
}

//! What one write attempt of a part means for each of its messages (pure).
//!
//! Every destination answers a write in one of two shapes ([`Written`]): one result for
//! the whole part, or one outcome per message. Both become the same thing here, a
//! [`Verdict`] per message — or, for a batch refused as a whole, a split — so the settle
//! loop has one rule per outcome whatever the destination: a batch destination is the
//! case where every message of the part shares one verdict.
//!
//! The unclassified rule is the same for both shapes: an error nobody recognised is held
//! like a transient one until the part has failed that way for
//! `delivery.retry.max_held_ms` (or holds a message refused that way before, or comes
//! from a part that was held out), and then refused — split first when several messages
//! share it, so only the culprits are refused.

use crate::sinks::{Outcome, Output, SinkError, Written};

/// The error class a refused message's dead-letter copy carries
/// (`Jetsink-Error-Class`), for refusals by the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusalClass {
    /// The destination refused this content (`SinkError::Permanent`).
    Permanent,
    /// An unrecognised error outlasted `delivery.retry.max_held_ms`.
    Unclassified,
}

impl RefusalClass {
    /// The header value and log text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RefusalClass::Permanent => "permanent",
            RefusalClass::Unclassified => "unclassified",
        }
    }
}

/// What one message of an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Durable: ACK it (after its result, in job-queue mode).
    Commit(Option<Output>),
    /// The job asked to run again later: hand it back.
    Later(String),
    /// Refused for good: the refusal path (dead letter or hand back, by policy).
    Refuse(RefusalClass, String),
    /// The destination could not take it now: hold it and try again after backoff.
    Hold(SinkError),
}

/// What an attempt of a part came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attempt {
    /// One verdict per message of the part, in order.
    Each(Vec<Verdict>),
    /// The part was refused as a whole and holds several messages: split it (around
    /// `index`, relative to the part, when the destination named one) and write the
    /// pieces again, so only the culprits are refused.
    Split {
        /// The offending message, when named.
        index: Option<usize>,
        /// Why the part was refused.
        message: String,
        /// The class its culprits will carry.
        class: RefusalClass,
        /// The part failed unclassified for the whole bound: its pieces are refused at
        /// their first unclassified failure.
        held_out: bool,
    },
}

/// Whether an attempt failed with an unrecognised error anywhere (the caller then asks
/// whether the part is out of patience: [`judge`]'s `out`).
pub(super) fn unclassified(written: &Written) -> bool {
    match written {
        Written::Batch(r) => matches!(r, Err(SinkError::Unclassified { .. })),
        Written::Each(outcomes) => outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Failed(SinkError::Unclassified { .. }))),
    }
}

/// What a failed write of the whole part said, for its trace span; `None` when it
/// committed, or when the destination answered message by message.
pub(super) fn batch_error(written: &Written) -> Option<String> {
    match written {
        Written::Batch(Err(e)) => Some(e.to_string()),
        _ => None,
    }
}

/// The verdicts of one attempt of a part of `len` messages. `out`: an unclassified
/// failure refuses now (the bound passed, or the part is a suspect); `held_out`: that is
/// because the bound passed (or the part descends from one that was held out), not
/// because it holds a message refused that way before.
pub(super) fn judge(written: Written, len: usize, out: bool, held_out: bool) -> Attempt {
    let refuse = |class, message: String| {
        if len == 1 {
            Attempt::Each(vec![Verdict::Refuse(class, message)])
        } else {
            Attempt::Split {
                index: None,
                message,
                class,
                held_out: false,
            }
        }
    };
    match written {
        Written::Batch(Ok(())) => Attempt::Each(vec![Verdict::Commit(None); len]),
        Written::Batch(Err(SinkError::Permanent { index, message })) => {
            match refuse(RefusalClass::Permanent, message) {
                Attempt::Split { message, class, .. } => Attempt::Split {
                    index: index.filter(|i| *i < len),
                    message,
                    class,
                    held_out: false,
                },
                each => each,
            }
        }
        Written::Batch(Err(SinkError::Unclassified { message })) if out => {
            match refuse(RefusalClass::Unclassified, message) {
                Attempt::Split { message, class, .. } => Attempt::Split {
                    index: None,
                    message,
                    class,
                    held_out,
                },
                each => each,
            }
        }
        Written::Batch(Err(e)) => Attempt::Each(vec![Verdict::Hold(e); len]),
        Written::Each(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            Attempt::Each(
                (0..len)
                    .map(|_| match outcomes.next() {
                        Some(o) => one(o, out),
                        None => Verdict::Hold(SinkError::transient(
                            "the destination returned fewer outcomes than messages",
                        )),
                    })
                    .collect(),
            )
        }
    }
}

fn one(o: Outcome, out: bool) -> Verdict {
    match o {
        Outcome::Committed { output } => Verdict::Commit(output),
        Outcome::AlreadyStored => Verdict::Commit(None),
        Outcome::Later { message } => Verdict::Later(message),
        Outcome::Failed(SinkError::Permanent { message, .. }) => {
            Verdict::Refuse(RefusalClass::Permanent, message)
        }
        Outcome::Failed(SinkError::Unclassified { message }) if out => {
            Verdict::Refuse(RefusalClass::Unclassified, message)
        }
        Outcome::Failed(e) => Verdict::Hold(e),
    }
}

/// Splits a refused part of `len` messages: around the offending position when the
/// destination named one, otherwise in halves. Positions are relative to the part.
pub(super) fn split(len: usize, index: Option<usize>) -> Vec<std::ops::Range<usize>> {
    match index {
        Some(i) if i < len => [0..i, i..i + 1, i + 1..len]
            .into_iter()
            .filter(|r| !r.is_empty())
            .collect(),
        _ => {
            let mid = len / 2;
            vec![0..mid, mid..len]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(index: Option<usize>) -> Written {
        Written::Batch(Err(SinkError::Permanent {
            index,
            message: "no".into(),
        }))
    }

    #[test]
    fn a_batch_result_is_every_messages_verdict() {
        assert_eq!(
            judge(Written::Batch(Ok(())), 2, false, false),
            Attempt::Each(vec![Verdict::Commit(None), Verdict::Commit(None)])
        );
        let down = SinkError::transient("down");
        assert_eq!(
            judge(Written::Batch(Err(down.clone())), 2, true, true),
            Attempt::Each(vec![Verdict::Hold(down.clone()), Verdict::Hold(down)])
        );
    }

    #[test]
    fn a_refused_batch_is_split_until_its_culprit_stands_alone() {
        assert_eq!(
            judge(perm(Some(3)), 5, false, false),
            Attempt::Split {
                index: Some(3),
                message: "no".into(),
                class: RefusalClass::Permanent,
                held_out: false
            }
        );
        assert!(matches!(
            judge(perm(Some(9)), 5, false, false),
            Attempt::Split { index: None, .. }
        ));
        assert_eq!(
            judge(perm(Some(0)), 1, false, false),
            Attempt::Each(vec![Verdict::Refuse(RefusalClass::Permanent, "no".into())])
        );
    }

    #[test]
    fn an_unclassified_failure_is_held_until_out_of_patience_whatever_the_shape() {
        let unk = SinkError::unclassified("E9");
        let batch = || Written::Batch(Err(unk.clone()));
        let each = || {
            Written::Each(vec![
                Outcome::Committed { output: None },
                Outcome::Failed(unk.clone()),
            ])
        };
        assert!(unclassified(&batch()) && unclassified(&each()));
        assert_eq!(
            judge(batch(), 1, false, false),
            Attempt::Each(vec![Verdict::Hold(unk.clone())])
        );
        assert_eq!(
            judge(each(), 2, false, false),
            Attempt::Each(vec![Verdict::Commit(None), Verdict::Hold(unk.clone())])
        );
        assert_eq!(
            judge(batch(), 1, true, true),
            Attempt::Each(vec![Verdict::Refuse(
                RefusalClass::Unclassified,
                "E9".into()
            )])
        );
        assert_eq!(
            judge(each(), 2, true, false),
            Attempt::Each(vec![
                Verdict::Commit(None),
                Verdict::Refuse(RefusalClass::Unclassified, "E9".into())
            ])
        );
        assert!(matches!(
            judge(batch(), 4, true, true),
            Attempt::Split {
                index: None,
                held_out: true,
                class: RefusalClass::Unclassified,
                ..
            }
        ));
    }

    #[test]
    fn per_message_outcomes_map_one_to_one_and_missing_ones_are_held() {
        let got = judge(
            Written::Each(vec![
                Outcome::Later {
                    message: "75".into(),
                },
                Outcome::Failed(SinkError::Permanent {
                    index: None,
                    message: "exit 2".into(),
                }),
            ]),
            3,
            false,
            false,
        );
        let Attempt::Each(v) = got else {
            panic!("{got:?}")
        };
        assert_eq!(v[0], Verdict::Later("75".into()));
        assert_eq!(
            v[1],
            Verdict::Refuse(RefusalClass::Permanent, "exit 2".into())
        );
        assert!(matches!(&v[2], Verdict::Hold(SinkError::Transient { .. })));
    }

    #[test]
    fn split_isolates_a_named_culprit_or_halves() {
        assert_eq!(split(6, Some(2)), vec![0..2, 2..3, 3..6]);
        assert_eq!(split(6, Some(0)), vec![0..1, 1..6]);
        assert_eq!(split(6, Some(5)), vec![0..5, 5..6]);
        assert_eq!(split(6, None), vec![0..3, 3..6]);
        assert_eq!(split(6, Some(6)), vec![0..3, 3..6]);
        assert_eq!(split(3, None), vec![0..1, 1..3]);
    }
}
